"""JSON that keeps money exact.

``loads`` reads every JSON number with a fraction or exponent as ``Decimal``, so
``137.32`` from a model stays ``Decimal("137.32")``. ``dumps`` writes ``Decimal`` as
a plain JSON number (never a string, never through ``float``). ``canonical`` is the
form that approvals and idempotency keys hash: sorted keys, no spaces, numbers in
one spelling (``5``, ``5.0`` and ``5.00`` are the same number).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final, NamedTuple, TypeAlias

from pydantic import BaseModel

__all__ = ["JSON", "canonical", "canonical_hash", "dumps", "dumps_bytes", "loads", "to_plain"]

JSON: TypeAlias = dict[str, "JSON"] | list["JSON"] | str | int | Decimal | bool | None
"""What :func:`loads` returns: a number with a fraction or an exponent is a ``Decimal``.

Not ``Any``: a value read from JSON is narrowed (``isinstance``, or validated by a
pydantic model) before it is used as anything else.
"""

_encode_str = json.JSONEncoder(ensure_ascii=False).encode
# Beyond this many digits a number is written in exponent form (1E+5000), so that
# neither writing nor reading it expands thousands of zeros.
_PLAIN_DIGITS = 400


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number; send a finite number")


def _bounded_decimal(text: str) -> Decimal:
    value = Decimal(text)
    if abs(value.adjusted()) > _PLAIN_DIGITS:
        raise ValueError(f"the number {text[:40]} is too large or too small to be an argument")
    return value


def _bounded_int(text: str) -> int:
    if len(text) > _PLAIN_DIGITS:
        raise ValueError(f"the number {text[:40]}... has more than {_PLAIN_DIGITS} digits")
    return int(text)


def loads(text: str | bytes, *, bounded: bool = False) -> JSON:
    """Parse JSON, reading non-integer numbers as exact ``Decimal``.

    ``NaN`` and ``Infinity`` (which Python's ``json`` accepts) are refused with
    ``ValueError``. ``bounded=True``, for what a model sends, also refuses numbers
    of more than 400 digits or with an exponent beyond 400: no argument is that
    large, and turning one into an ``int`` would stall the process.
    """
    value: JSON
    if bounded:
        value = json.loads(
            text,
            parse_float=_bounded_decimal,
            parse_int=_bounded_int,
            parse_constant=_refuse_constant,
        )
    else:
        value = json.loads(text, parse_float=Decimal, parse_constant=_refuse_constant)
    return value


def to_plain(value: Any) -> Any:
    """Turn pydantic models into plain dicts, keeping ``Decimal`` as ``Decimal``."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="python")
    return value


def _number(value: Decimal, *, canonical: bool) -> str:
    """A finite ``Decimal`` as a JSON number, exactly.

    Canonical form drops trailing zeros by hand: ``Decimal.normalize`` would round
    to the context's 28 digits and make two different amounts spell the same.
    """
    if not value.is_finite():
        raise ValueError(f"{value} is not a JSON number; money and amounts must be finite")
    sign, digit_tuple, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite, so not 'n', 'N' or 'F'
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    if not digits:
        return "0" if canonical or exponent < -_PLAIN_DIGITS else format(value, "f")
    if canonical:
        stripped = digits.rstrip("0")
        exponent += len(digits) - len(stripped)
        digits = stripped
    minus = "-" if sign else ""
    point = len(digits) + exponent  # where the decimal point falls in ``digits``
    if exponent >= 0 and point <= _PLAIN_DIGITS:
        return minus + digits + "0" * exponent
    if exponent < 0 and point > 0:
        return minus + digits[:point] + "." + digits[point:]
    if exponent < 0 and -point <= _PLAIN_DIGITS:
        return minus + "0." + "0" * -point + digits
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{minus}{mantissa}E{point - 1:+d}"


def number_text(value: Decimal) -> str:
    """How :func:`dumps` writes ``value``; ``ValueError`` if it is not finite."""
    return _number(value, canonical=False)


def _integer(value: int, *, canonical: bool) -> str:
    if -(10**_PLAIN_DIGITS) < value < 10**_PLAIN_DIGITS:
        return str(value)
    return _number(Decimal(value), canonical=canonical)


def _write(value: Any, out: list[str], *, canonical: bool) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_encode_str(value))
    elif isinstance(value, int):
        out.append(_integer(value, canonical=canonical))
    elif isinstance(value, Decimal):
        out.append(_number(value, canonical=canonical))
    elif isinstance(value, float):
        out.append(_number(Decimal(repr(value)), canonical=canonical))
    elif isinstance(value, BaseModel):
        _write(value.model_dump(mode="python"), out, canonical=canonical)
    elif isinstance(value, Mapping):
        items = sorted(value.items()) if canonical else value.items()
        out.append("{")
        for index, (key, item) in enumerate(items):
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys must be strings, got {key!r}")
            if index:
                out.append(",")
            out.append(_encode_str(key))
            out.append(":")
            _write(item, out, canonical=canonical)
        out.append("}")
    elif isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(item, out, canonical=canonical)
        out.append("]")
    else:
        # Dates, enums, UUIDs: fall back to pydantic's JSON form of the value.
        from pydantic_core import to_jsonable_python

        _write(to_jsonable_python(value), out, canonical=canonical)


def dumps(value: Any) -> str:
    """Write JSON compactly, with ``Decimal`` as an exact JSON number."""
    out: list[str] = []
    _write(value, out, canonical=False)
    return "".join(out)


# --- the C writer, for checkpoints --------------------------------------------------------

# What the C writer is given for a Decimal: a string it writes as "\u0000" and the number,
# put back unquoted afterwards. A string of the document's own that holds the same
# characters is written the same way, so the marks are counted before they are replaced.
_MARK: Final = "\x00"
_MARKED: Final = re.compile(r'"\\u0000(-?[0-9][0-9.E+-]*)"')
# Spellings on which the C writer and ``dumps`` would disagree about what is read back:
# a float that ``repr`` writes with a positive exponent ("1e+16": ``dumps`` writes its
# digits, read back as int), and an int of more than ``_PLAIN_DIGITS`` digits (``dumps``
# writes an exponent). Looked for in C: "e+" anywhere, and a run of that many digits
# (every digit turned into "0" first), in strings too, which only costs a slower write.
_ZEROS: Final = bytes.maketrans(b"123456789", b"000000000")
_TOO_LONG: Final = b"0" * (_PLAIN_DIGITS + 1)


def _disagrees(text: str) -> bool:
    if "e+" in text:
        return True
    # "surrogatepass": a lone surrogate (a text the C writer passes through) is not a digit
    # either, and must not stop the look for a long run of them.
    return len(text) > _PLAIN_DIGITS and _TOO_LONG in text.encode(
        "utf-8", "surrogatepass"
    ).translate(_ZEROS)


class _Fallback(Exception):
    """A value the C writer cannot write as ``dumps`` does; ``dumps`` writes it."""


_marks = threading.local()  # how many Decimals the C writer marked, in this thread's write


def _mark(value: Any) -> Any:
    if isinstance(value, Decimal):
        _marks.count += 1
        return _MARK + _number(value, canonical=False)
    raise _Fallback


def _c_encoder() -> Callable[[Any], str]:
    """The C writer: what ``JSONEncoder(ensure_ascii=False, separators=(",", ":"),
    allow_nan=False, default=_mark).encode`` does, built once instead of at every call.

    Without the check for circular containers (a checkpoint's document has none); where
    CPython's ``_json`` is missing, that encoder's own ``encode``.
    """
    encoder = json.JSONEncoder(
        ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_mark
    )
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return encoder.encode
    # markers, default, encoder, indent, key separator, item separator, sort_keys,
    # skipkeys, allow_nan: the order of json.encoder's own call.
    chunks = make(None, _mark, json.encoder.encode_basestring, None, ":", ",", False, False, False)

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return encoder.encode(value)
        return "".join(chunks(value, 0))

    return encode


_c_writer: Final = _c_encoder()


def dumps_fast(value: Any) -> str:
    """``dumps(value)``, read back by ``loads`` exactly as it would be, written in C.

    For a document of dicts with text keys, lists, text, ints, floats, bools, ``None``
    and ``Decimal`` (a checkpoint's); anything else, and the few numbers the C writer
    spells differently (see ``_disagrees``), go through ``dumps``. Keys that are not
    text are the caller's to refuse: the C writer turns an int key into text. The one
    spelling left to the C writer: a float with a negative exponent as ``repr`` writes
    it (``1e-07``; ``dumps`` writes ``0.0000001``), which ``loads`` reads back as the
    same float (a checkpoint's own floats are tagged text, never written as numbers).
    """
    _marks.count = 0
    try:
        text = _c_writer(value)
    except (_Fallback, ValueError):
        return dumps(value)
    marked: int = _marks.count
    if _disagrees(text):
        return dumps(value)
    if marked or "\\u0000" in text:
        replaced, found = _MARKED.subn(r"\1", text)
        if found != marked:  # a string of the document's own looks like a mark
            return dumps(value)
        text = replaced
    return text


# --- orjson, for a checkpoint's bytes -------------------------------------------------------

# orjson writes a delta's UTF-8 bytes about ten times faster than the C writer above writes
# its text. Imported on first use: ``import statemachine`` (and a run without a store)
# does not load it.
_orjson: Any = None
_orjson_options = 0
_plain_options = 0  # for dumps_rows: subclasses of str, int, list and dict refused too


def _import_orjson() -> Any:
    global _orjson, _orjson_options, _plain_options
    import orjson

    # Datetimes and dataclasses go to ``default``, which leaves them to ``dumps_fast``:
    # orjson would write them in a form of its own.
    _orjson_options = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
    _plain_options = _orjson_options | orjson.OPT_PASSTHROUGH_SUBCLASS
    _orjson = orjson
    return orjson


def _fragment(value: Any) -> Any:
    """orjson's ``default``: a ``Decimal`` as the number ``dumps`` writes; else ``dumps_fast``."""
    if isinstance(value, Decimal):
        return _orjson.Fragment(_number(value, canonical=False))
    raise _Fallback


def dumps_bytes(value: Any, *, finite: bool = False) -> bytes:
    """``dumps(value)`` in UTF-8, read back by ``loads`` exactly as it would be, written by
    orjson.

    For the documents :func:`dumps_fast` takes. What orjson would write otherwise than
    that goes to ``dumps_fast``: a float with an exponent with a plus (16 digits or more
    before the point), an int beyond 64 bits, a value of a type orjson leaves to
    ``default`` (anything but ``Decimal``), and a text holding ``null`` unless orjson
    reads it back equal to ``value`` (orjson writes NaN and the infinities as ``null``,
    which ``dumps`` refuses). orjson escapes text as the C writer does, and spells each
    float with the same digits (the shortest that reads back), so it reads back the same.

    ``finite=True``: the caller vouches that every float in ``value`` is finite (a
    delta of the phase codec's, see ``persist._rows.FiniteOps``), so a ``null`` is a
    ``None`` and the text is not read back to look for a NaN. Nothing else is skipped.
    """
    orjson = _orjson or _import_orjson()
    try:
        data: bytes = orjson.dumps(value, default=_fragment, option=_orjson_options)
        if type(value) is str:  # text is text: no number or null to check in it
            return data
        # find, not ``in``: bytes' ``in`` tries its operand as an int first, and makes
        # and drops a TypeError for a bytes one (about 1,800 instructions a test).
        if data.find(b"e+") < 0 and (
            finite or data.find(b"null") < 0 or orjson.loads(data) == value
        ):
            return data
    except (TypeError, ValueError):  # orjson's errors: left to dumps_fast, which may refuse
        pass
    return dumps_fast(value).encode()


def _plain(value: Any) -> bool:
    """Whether ``value`` is of exact plain types only, all the way down: ``str``, ``int``,
    ``bool``, ``None``, and lists and dicts (text keys) of them. By type identity: a
    subclass, or a class equal to one of them by its metaclass, is not plain."""
    kind = type(value)
    if kind is str or value is None or kind is int or kind is bool:
        return True
    if kind is list:
        for item in value:  # noqa: SIM110 - a loop: no call for an item of text
            if type(item) is not str and not _plain(item):
                return False
        return True
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or (type(item) is not str and not _plain(item)):
                return False
        return True
    return False


def _plain_rows(rows: Any) -> bool:
    """Whether ``rows`` is a list of lists of plain values (see :func:`_plain`)."""
    if type(rows) is not list:
        return False
    for row in rows:
        if type(row) is not list:
            return False
        for value in row:
            if type(value) is not str and value is not None and not _plain(value):
                return False
    return True


def dumps_rows(rows: list[list[Any]]) -> str:
    """``dumps_fast(rows)``, the very same text, for a list of lists (a chunk's rows, see
    ``persist._chunks._packed``); written by orjson when every value in it is plain (see
    :func:`_plain`: exact types, no float, no ``Decimal``), else by ``dumps_fast``.

    On such values orjson writes what the C writer writes, character for character (the
    same escapes for quotes, backslashes and control characters, every other character as
    it is: tests/test_delta_fast3.py), and ``dumps_fast`` keeps the C writer's text. What
    orjson refuses (text holding a lone surrogate, an int beyond 64 bits) goes to
    ``dumps_fast``.
    """
    if _plain_rows(rows):
        orjson = _orjson or _import_orjson()
        try:  # no default: a value of any other type would be refused, not guessed at
            data: bytes = orjson.dumps(rows, option=_plain_options)
        except TypeError:
            pass
        else:
            return data.decode()
    return dumps_fast(rows)


# A list item's text, kept by the item's identity: (the item, its text).
Texts = dict[int, tuple[Any, str]]


def dumps_reusing(value: Any, texts: Texts) -> tuple[str, Texts]:
    """``dumps_fast(value)`` (its parts written by :func:`dumps_bytes`), writing each object
    or list found in a list only once.

    ``value``'s parts must never change (a checkpoint's document, whose successors share
    its lists' items): an item whose text ``texts`` holds, under the very same object,
    is not written again. Returns the text and the texts of this value's list items,
    for the next call. What ``loads`` reads back is what it reads from ``dumps(value)``.
    """
    kept: Texts = {}
    out: list[Any] = []  # str only: no text is _NO_PIECE long
    parts_reusing(value, texts, kept, out, _NO_PIECE)
    return "".join(out), kept


class Long(NamedTuple):
    """A long text in a list, left out of :func:`parts_reusing`'s parts as itself."""

    item: str


_NO_PIECE: Final = sys.maxsize


def parts_reusing(value: Any, texts: Texts, kept: Texts, out: list[str | Long], piece: int) -> None:
    """:func:`dumps_reusing`'s text of ``value`` as parts into ``out``, the texts of list
    items that are objects or lists reused from ``texts`` and kept in ``kept``; a text
    of at least ``piece`` characters in a list is put there as a :class:`Long` (its text
    is ``dumps_bytes``'s)."""
    if type(value) is dict:
        out.append("{")
        for index, (key, item) in enumerate(value.items()):
            if type(key) is not str:
                raise TypeError(f"JSON object keys must be strings, got {key!r}")
            out.append(("," if index else "") + _encode_str(key) + ":")
            parts_reusing(item, texts, kept, out, piece)
        out.append("}")
    elif type(value) is list:
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            if type(item) is dict or type(item) is list:
                known = texts.get(id(item))
                if known is not None and known[0] is item:
                    text = known[1]
                else:
                    text = dumps_bytes(item).decode()
                kept[id(item)] = (item, text)
                out.append(text)
            elif type(item) is str and len(item) >= piece:
                out.append(Long(item))
            else:
                out.append(dumps_bytes(item).decode())
        out.append("]")
    else:
        out.append(dumps_bytes(value).decode())


def fingerprint(value: Any) -> str:
    """An exact fingerprint of a JSON value: 1, 1.0, True and Decimal("1.00") all differ."""
    return _fingerprint_encoder.encode(value)


def _tag(value: object) -> object:
    # Decimal spells its digits ("800.00" != "800.0"); other non-JSON values keep their type.
    if isinstance(value, Decimal):
        return {_TAG + "Decimal": str(value)}
    from pydantic_core import to_jsonable_python

    return {_TAG + type(value).__qualname__: to_jsonable_python(value)}


_TAG: Final = "\x00statemachine\x00"
_fingerprint_encoder: Final = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), default=_tag
)


def canonical(value: Any) -> str:
    """The one spelling of a JSON value: sorted keys, normalised numbers."""
    out: list[str] = []
    _write(value, out, canonical=True)
    return "".join(out)


def canonical_hash(value: Any) -> str:
    """SHA-256 (hex) of the canonical spelling of ``value``."""
    # A lone surrogate is not text: encoding raises UnicodeEncodeError (a ValueError).
    return hashlib.sha256(canonical(value).encode()).hexdigest()
