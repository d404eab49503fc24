"""How alike two texts are, for the loop governor's semantic tier and its convergence check.

- :func:`lexical_similarity` (the default, no dependency): the cosine of the texts' sets of
  character trigrams. It catches the same words spelled a little differently, not the
  same request in other words.
- A :class:`SignedSimilarity` signs a text once (an embedding, a set of trigrams) and
  compares signatures, so that the governor keeps each call's signature with the call
  instead of reading its text again at every check. ``EmbeddingSimilarity``
  (``statemachine._embedding``, the ``embeddings`` extra) is one.
- :func:`call_anchors`: the parts of a call that no similarity may blur (identifiers,
  amounts, numbers). Two calls whose anchors differ are never duplicates, however alike
  the rest of their text is.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterator
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from itertools import filterfalse
from typing import Any, Protocol, TypeVar, final, runtime_checkable

from ._errors import ConfigError
from ._grams import (
    GramMasks,
    _grams_of,
)

__all__ = [
    "SIMILARITY_VAR",
    "SignedSimilarity",
    "Similarity",
    "call_anchors",
    "configured_similarity",
    "similarity_named",
    "lexical_similarity",
    "trigram_similarity",
]

Signature = TypeVar("Signature")


class Similarity(Protocol):
    """How alike two texts are, from 0.0 (nothing shared) to 1.0 (the same)."""

    def __call__(self, first: str, second: str, /) -> float:
        """The similarity of ``first`` and ``second``."""
        ...


@runtime_checkable
class SignedSimilarity(Protocol[Signature]):
    """A similarity that signs each text once and compares the signatures.

    ``compare(signature(a), signature(b))`` must equal ``self(a, b)``. The governor signs
    a call when it first compares it and keeps the signature with the run's index, so a
    dear signature (an embedding) is made once per call.
    """

    def __call__(self, first: str, second: str, /) -> float:
        """The similarity of ``first`` and ``second``."""
        ...

    def signature(self, text: str, /) -> Signature:
        """What :meth:`compare` needs of ``text``."""
        ...

    def compare(self, first: Signature, second: Signature, /) -> float:
        """The similarity of the texts these signatures were made from."""
        ...


def _fold(text: str) -> str:
    """``text`` in lower case with runs of white space made one space."""
    return " ".join(text.lower().split())


def each_trigram(text: str) -> Iterator[str]:
    """The character trigrams of ``text`` with case and spacing folded (repeats included).

    ``folded[i : i + 3]`` for each ``i``, made in C (a text shorter than three characters
    is its own one trigram).
    """
    return _grams_of(_fold(text))


@lru_cache(maxsize=4096)
def trigrams(text: str) -> frozenset[str]:
    """The set of ``text``'s trigrams (see :func:`each_trigram`)."""
    return frozenset(each_trigram(text))


def lexical_similarity(first: str, second: str) -> float:
    """Cosine similarity of the texts' sets of character trigrams; case and spacing ignored.

    Dependency-free and good at "the same request, worded a little differently"; it
    knows nothing of meaning ("refund order 1042" and "give the customer their money back
    for purchase #1042" score 0.11): ``EmbeddingSimilarity`` knows more. Sets, not
    counts, so that the work is done by C set operations: a few microseconds.
    """
    if first == second:
        return 1.0
    return _trigram_cosine(trigrams(first), trigrams(second))


def _trigram_cosine(first: frozenset[str], second: frozenset[str]) -> float:
    if not first or not second:
        return 0.0
    return len(first & second) / math.sqrt(len(first) * len(second))


def trigram_similarity(first: str, second: str) -> float:
    """Deprecated: :func:`lexical_similarity`, under the name it had before 0.x (issue 22)."""
    warnings.warn(
        "trigram_similarity is now lexical_similarity (the same function); import that name",
        DeprecationWarning,
        stacklevel=2,
    )
    return lexical_similarity(first, second)


@final
class LexicalSigned:
    """:func:`lexical_similarity` as a :class:`SignedSimilarity` (signatures: trigram sets)."""

    __slots__ = ()

    def __call__(self, first: str, second: str) -> float:
        return lexical_similarity(first, second)

    def signature(self, text: str) -> frozenset[str]:
        return trigrams(text)

    def compare(self, first: frozenset[str], second: frozenset[str]) -> float:
        if first is second:
            return 1.0
        return _trigram_cosine(first, second)


LEXICAL = LexicalSigned()


@final
class MaskSigned:
    """:func:`lexical_similarity` as a :class:`SignedSimilarity` whose signatures are
    trigram bitmasks (and sizes) in a vocabulary of its own, which it never starts again
    (so a kept signature stays good): one per line of a run's states, for the semantic
    tier's failed calls and the calls compared with them. ``compare`` gives the float
    :func:`lexical_similarity` gives (the same counts, the same formula)."""

    __slots__ = ("_masks",)

    def __init__(self) -> None:
        self._masks = GramMasks()

    def __call__(self, first: str, second: str) -> float:
        return lexical_similarity(first, second)

    def signature(self, text: str) -> tuple[int, int]:
        return self._masks.mask(text, keep=False)

    def compare(self, first: tuple[int, int], second: tuple[int, int]) -> float:
        # |A & B| / sqrt(|A| |B|), as _trigram_cosine (a text has a trigram: no size is 0).
        return (first[0] & second[0]).bit_count() / math.sqrt(first[1] * second[1])


# -- the configured default ---------------------------------------------------------------

SIMILARITY_VAR = "STATEMACHINE_SIMILARITY"
_SHARED: dict[str, Similarity] = {}
_SHARED_LOCK = threading.Lock()


def configured_similarity() -> Similarity:
    """The semantic tier's similarity when a governor names none: ``STATEMACHINE_SIMILARITY``.

    ``lexical`` (or unset): :func:`lexical_similarity`; ``embedding``: one
    ``EmbeddingSimilarity`` shared by the process (the ``embeddings`` extra).
    """
    name = os.environ.get(SIMILARITY_VAR, "lexical") or "lexical"
    if name not in ("lexical", "embedding"):
        problem = (
            f"{SIMILARITY_VAR} must be 'lexical' or 'embedding', got {name!r}; unset it for "
            "the default (lexical)"
        )
        raise ConfigError((problem,), path=SIMILARITY_VAR)
    return similarity_named(name)


def similarity_named(name: str) -> Similarity:
    """The similarity configuration names: ``lexical``, or ``embedding`` (one per process)."""
    if name == "lexical":
        return lexical_similarity
    found = _SHARED.get(name)
    if found is None:
        with _SHARED_LOCK:
            found = _SHARED.get(name)
            if found is None:
                from ._embedding import EmbeddingSimilarity  # the extra: on first use

                found = _SHARED[name] = EmbeddingSimilarity()
    return found


def signer_of(similarity: Similarity) -> SignedSimilarity[Any] | None:
    """``similarity`` as one that signs texts once, or ``None`` if it cannot."""
    if similarity is lexical_similarity:
        return LEXICAL
    if isinstance(similarity, SignedSimilarity):
        return similarity
    return None


# -- anchors -------------------------------------------------------------------------------

# Keys whose string values name a thing (an order, a customer, an account): compared whole.
_IDENTIFIER_KEY = re.compile(
    r"(?:^|_)(?:id|ids|uuid|key|customer|user|account|email|order|sku|invoice|iban|phone"
    r"|reference|ref|number|code)(?:$|_)|(?<=[a-z])(?:Id|ID|Ids|Number|Code)$",
)
# Inside free text: a token with a digit in it (an order number, an amount, a date)
# or an @ (an address), without the punctuation around it.
_TOKEN = re.compile(r"[^\s,;:!?()\[\]{}\"'<>]*[\d@][^\s,;:!?()\[\]{}\"'<>]*")
_EDGES = "#$€£¥.,-+*/=%"


def _number(text: str) -> str:
    """A number's text made one spelling per amount (``25``, ``25.0`` and ``25.00`` alike)."""
    try:
        value = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return text
    if not value.is_finite():
        return text
    return format(value.normalize(), "f")


def _anchors_of(value: Any, key: str, found: set[str]) -> None:
    """The plain walk of :func:`call_anchors` (the reference its faster form is tested
    against: ``_walk``)."""
    if isinstance(value, bool) or value is None:
        found.add(f"{key}={value}")
    elif isinstance(value, int | float):
        found.add(f"{key}={_number(repr(value))}")
    elif isinstance(value, str):
        if _IDENTIFIER_KEY.search(key):
            found.add(f"{key}={value.strip(_EDGES).casefold()}")
        for token in _TOKEN.findall(value):
            token = token.strip(_EDGES)
            if token:
                found.add(_number(token).casefold())
    elif isinstance(value, dict):
        for name, inner in value.items():
            _anchors_of(inner, str(name), found)
    elif isinstance(value, list):
        for inner in value:
            _anchors_of(inner, key, found)


def plain_anchors(text: str) -> tuple[str, ...]:
    """:func:`call_anchors` as first written (regular expressions over every value)."""
    found: set[str] = set()
    _anchors_of(_arguments(text), "", found)
    return tuple(sorted(found))


def _arguments(text: str) -> Any:
    """The arguments of the call ``text`` (``tool({...})``), or ``text`` if it is not one."""
    opening = text.find("(")
    if opening > 0 and text.endswith(")"):
        try:
            return json.loads(text[opening + 1 : -1])
        except ValueError:
            return text
    return text


# JSON's own reader of one value at a position (the one json.loads uses, without the frames
# of json.loads, decode and raw_decode and their white-space matches): (value, end), or
# StopIteration when no value starts there.
_SCAN_ONCE: Callable[[str, int], tuple[Any, int]] = vars(json.JSONDecoder())["scan_once"]


def _call_arguments(text: str) -> Any:
    """``_arguments(text)``, read with ``_SCAN_ONCE`` when the arguments are one JSON value
    from the first character to the last (a call's canonical text: nearly always); any
    other text goes the plain way, which reads it as before (or finds it is not JSON)."""
    opening = text.find("(")
    if opening > 0 and text.endswith(")"):
        inner = text[opening + 1 : -1]
        try:
            value, end = _SCAN_ONCE(inner, 0)
        except Exception:  # not JSON from its first character: the plain way
            return _arguments(text)
        if end == len(inner):
            return value
    return _arguments(text)


# What separates tokens (``_TOKEN``'s separators); a run of other characters with a digit
# or an @ in it is one token, found whole: the look-behind starts a match only where a run
# starts, and the possessive repeats never step back.
_SEPARATORS = r"\s,;:!?()\[\]{}\"'<>"
_RUN_WITH = re.compile(rf"(?<![^{_SEPARATORS}])[^{_SEPARATORS}\d@]*+[\d@][^{_SEPARATORS}]*+")


@lru_cache(maxsize=256)
def _names_a_thing(key: str) -> bool:
    """Whether the values under ``key`` are identifiers (compared whole)."""
    return _IDENTIFIER_KEY.search(key) is not None


def _tokens(value: str, found: set[str]) -> None:
    """Add the anchors inside the free text ``value``: what ``_TOKEN.findall`` finds.

    A token is a whole run between separators (white space, as ``str.split`` splits, and
    the punctuation of ``_TOKEN``) with a digit or an @ in it, so a word of letters only
    (``str.isalpha``) holds none: the regular expression reads only the other words.
    """
    for word in filterfalse(str.isalpha, value.split()):
        if word.isascii() and word.isdigit():
            # A run of ASCII digits alone (an order number) is one token, whole, with no
            # edge to strip and nothing to fold.
            found.add(_token_number(word))
            continue
        for token in _RUN_WITH.findall(word):
            token = token.strip(_EDGES)
            if token:
                found.add(_token_number(token).casefold())


def _token_number(token: str) -> str:
    """``_number(token)``; a short token of ASCII digits alone (an order number) without
    Decimal: its integer's text is the one spelling ``_number`` gives it (no leading zero)."""
    if len(token) <= 18 and token.isascii() and token.isdigit():
        return str(int(token))
    return _number(token)


def _walk(value: Any, key: str, found: set[str]) -> None:
    """``_anchors_of``, the same anchors, by exact type first (JSON's own types)."""
    kind = type(value)
    if kind is str:
        if _names_a_thing(key):
            found.add(f"{key}={value.strip(_EDGES).casefold()}")
        _tokens(value, found)
    elif kind is dict:
        for name, inner in value.items():
            _walk(inner, str(name), found)
    elif kind is list:
        for inner in value:
            _walk(inner, key, found)
    else:  # a number, a boolean, null, or a subclass: the plain walk
        _anchors_of(value, key, found)


@lru_cache(maxsize=8192)
def call_anchors(text: str) -> tuple[str, ...]:
    """What of the call ``text`` (``tool({...canonical JSON...})``) is compared exactly.

    Every number, boolean and null (by key), every string under a key that names a thing
    (``order_id``, ``customer``, ``email``, ``sku``, ``account``, ...) whole, and inside
    every string each token with a digit or an ``@`` (``#1042``, ``C-881``, ``$25.00``,
    ``ada@example.com``), amounts written one way (``25`` = ``25.00``). A text that is not
    a call's is free text: its tokens with a digit or an ``@``.
    """
    found: set[str] = set()
    value = _call_arguments(text)
    if type(value) is dict:
        # A call's arguments: _walk's dict case, a string value's case in this frame.
        for name, inner in value.items():
            if type(inner) is str:
                if _names_a_thing(name):
                    found.add(f"{name}={inner.strip(_EDGES).casefold()}")
                _tokens(inner, found)
            else:
                _walk(inner, str(name), found)
    else:
        _walk(value, "", found)
    return tuple(sorted(found))
