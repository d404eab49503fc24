"""The delta format: what turns a run's checkpoint document into its next one.

A snapshot holds the document whole, and a delta holds only what changed since the
checkpoint before::

    {"kind": "full",  "document": {...}}
    {"kind": "delta", "ops": [["set", path, value], ["append", path, items],
                              ["drop", path], ["order", path, keys], ...]}

A path leads through objects up to three levels deep (``["fields", "loop",
"actions"]``). A list is diffed item by item: one that grew (a transcript) is stored
as the items appended, one whose last item changed (an action settled) as a splice,
a sliding window as a shift, so the bytes per transition stay flat as a run grows.

Version 3 (2026-12-02) adds two ops, so that a transition's delta holds what changed
and little else: ``["merge", path, {key: value, ...}]`` sets several entries of the
object at ``path`` (the phase's fields, a spend's counts, a settled record's outcome)
with one path, and ``["phase", kind]`` changes the phase to one of kind ``kind``, of
the class and fields the document's ``phases`` name for it: the kind and class are
set, the fields the new phase has not are dropped and the rest put in its order (its
new fields are set by the ops before it). Every older op still applies, so stores
written before replay as they did.

The ops come from two producers: :func:`_diff`, which compares two documents (by the
fingerprints of the first, :func:`_seen_of`), and :class:`PhaseDumper`, which dumps each
phase from the one before and knows what changed without comparing. :func:`_apply`
replays them.

The runner's saver uses a ``PhaseDumper``, so it hands the store the delta's ops with the
document (``ops=``, ``base=``). The store uses them, without looking at the document, only
when ``base`` is the very document it saved as the run's latest checkpoint; otherwise
(another process saved since, the store forgot the run, or it never saw it) it diffs.
Such documents never change once given, so they are written with the C JSON writer, and
a snapshot writes again only the list items no earlier snapshot of the run wrote.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final

import attrs
from pydantic import BaseModel

from .. import _json
from .._actions import _RECORD_FIELDS, CHUNK, ActionLog, ActionRecord
from .._budget import Spend
from .._fast._by_class import by_class
from .._governor import LoopState
from .._json import fingerprint
from .._model import Message, Transcript
from .._phases import Agent, Observing, Phase, Planning, ToolCalling
from .._seal import _UNSAVED
from .._tools import ReadCall, ReadTool, WriteCall, WriteTool
from ._chunks import _MESSAGE_KEYS, _packed
from ._codec import (
    _FAILED,
    _SCALARS,
    DOCUMENT_VERSION,
    _class_path,
    _copied,
    _dump_field,
    _dump_transcript,
    _encode,
    _field_names,
    _flat,
    _keeps_spelled,
    _message,
    _phase_table,
    _Plan,
    _plan,
    dump_phase,
)
from ._protocol import Document

__all__ = ["FiniteOps", "PhaseDumper", "_Seen", "_apply", "_diff", "_seen_of"]


class FiniteOps(list[list[Any]]):
    """Delta ops whose every float is finite: the phase codec's (which writes each float
    of a phase as a tagged text, ``{"$float": ...}``) and the saver's clock, checked finite.

    Made by :class:`PhaseDumper` and handed to a store's ``save`` as ``ops`` by the
    runner's saver only, it lets the store write the delta without reading its JSON back
    to look for a NaN or an infinity (orjson writes those as ``null``; see
    ``_json.dumps_bytes``). Only this exact type vouches: plain lists, subclasses and
    anything else are checked.
    """

    __slots__ = ()


# --- diff and apply -------------------------------------------------------------------

# What the store remembers of the last document of a run, to diff the next one against:
# per key, the exact JSON fingerprint of the value and, for a list, the fingerprint of
# each item (else None); objects down to _DEPTH levels hold the same one level down.
_Leaf = tuple[str, tuple[str, ...] | None]
_Seen = dict[str, Any]  # key -> _Leaf, or (an object within _DEPTH) key -> _Seen
# Objects are diffed inside down to this depth: the document, its "fields", and the
# objects among them (the governor's "loop"), so that a list deep in the state (the
# loop's actions) changes by the items that changed, not as a whole.
_DEPTH: Final = 3
# A list that keeps its last items but drops a few from the front (a sliding window):
# how many dropped items are looked for.
_SHIFT: Final = 8


def _leaf(value: Any) -> _Leaf:
    """Exact fingerprint: 1, 1.0, True and Decimal("1.00") all differ; written in C.

    A list is fingerprinted item by item, so that a change can be told apart from
    items appended, dropped from the front, or replaced at the end.
    """
    encode = fingerprint
    if isinstance(value, list | tuple):
        items = tuple(encode(item) for item in value)
        return "[" + ",".join(items) + "]", items
    return encode(value), None


def _seen_of(document: Mapping[str, Any], depth: int = 1) -> _Seen:
    return {
        key: _seen_of(value, depth + 1)
        if isinstance(value, dict) and depth < _DEPTH
        else _leaf(value)
        for key, value in document.items()
    }


def _list_op(at: list[str], value: Any, new: tuple[str, ...], old: tuple[str, ...]) -> list[Any]:
    """The smallest op among append, shift (drop from the front, append) and splice
    (keep a prefix, replace the rest) that turns the old list into the new one."""
    kept = 0
    for before, after in zip(old, new, strict=False):
        if before != after:
            break
        kept += 1
    if kept == len(old):
        return ["append", at, list(value[kept:])]
    for dropped in range(1, min(_SHIFT, len(old)) + 1):
        rest = len(old) - dropped
        if rest <= len(new) and old[dropped:] == new[:rest]:
            if rest >= kept:
                return ["shift", at, dropped, list(value[rest:])]
            break
    if kept:
        return ["splice", at, kept, list(value[kept:])]
    return ["set", at, value]


def _diff(
    old: Mapping[str, Any], new: Mapping[str, Any], path: list[str], ops: list[list[Any]]
) -> _Seen:
    """Append to ``ops`` what turns ``old`` into ``new``; return the fingerprints of ``new``."""
    nested = len(path) + 1 < _DEPTH  # objects down to _DEPTH levels are diffed inside
    seen: _Seen = {}
    for key in old:
        if key not in new:
            ops.append(["drop", [*path, key]])
    for key, value in new.items():
        if not isinstance(key, str):
            raise TypeError(f"JSON object keys must be strings, got {key!r}")
        at = [*path, key]
        before = old.get(key)
        if nested and isinstance(value, dict):
            if isinstance(before, dict):
                seen[key] = _diff(before, value, at, ops)
            else:
                ops.append(["set", at, value])
                seen[key] = _seen_of(value, len(at) + 1)
            continue
        leaf = _leaf(value)
        seen[key] = leaf
        if isinstance(before, tuple) and before[0] == leaf[0]:
            continue
        if isinstance(before, tuple) and before[1] is not None and leaf[1] is not None:
            ops.append(_list_op(at, value, leaf[1], before[1]))
        else:
            ops.append(["set", at, value])
    expected = [key for key in old if key in new] + [key for key in new if key not in old]
    if list(new) != expected:
        ops.append(["order", path, list(new)])
    return seen


def _apply(document: Document, ops: Any) -> None:
    """Apply a delta's ops in place; a malformed op raises (the caller reports corruption)."""
    if not isinstance(ops, list):
        raise TypeError("ops is not a list")
    for op in ops:
        name, path = op[0], op[1]
        target: Any = document
        if name == "phase":
            _phase(document, path)
            continue
        if name == "order" or name == "merge":
            for key in path:
                target = target[key]
            if name == "merge":
                if type(target) is not dict or type(op[2]) is not dict:
                    raise TypeError(f"merge at {path!r} needs an object into an object")
                target.update(op[2])
                continue
            if set(op[2]) != set(target):
                raise ValueError("the order names other keys than the object has")
            items = {key: target[key] for key in op[2]}
            target.clear()
            target.update(items)
            continue
        *parents, last = path
        for key in parents:
            target = target[key]
        if not isinstance(target, dict) or not isinstance(last, str):
            raise TypeError(f"path {path!r} does not lead into an object")
        if name == "set":
            target[last] = op[2]
        elif name == "append":
            target[last].extend(op[2])
        elif name in ("shift", "splice"):
            items, count, added = target[last], op[2], op[3]
            if not isinstance(items, list) or not isinstance(count, int):
                raise TypeError(f"{name} at {path!r} needs a list and a count")
            if not 0 <= count <= len(items):
                raise ValueError(f"{name} at {path!r}: {count} is outside the list")
            if name == "shift":
                del items[:count]
            else:
                del items[count:]
            items.extend(added)
        elif name == "pack":
            _pack(target[last], op[2], op[3], op[4], path)
        elif name == "drop":
            del target[last]
        else:
            raise ValueError(f"unknown op {name!r}")


def _phase(document: Document, kind: Any) -> None:
    """The ``phase`` op of version 3: the document's phase becomes one of kind ``kind``,
    of the class and fields its ``phases`` names for that kind. The fields of the phase
    before that the new one has not are dropped, and the rest put in that order; every
    field it names is there already (set by the ops before)."""
    entry = document["phases"][kind]
    fields = document["fields"]
    if not (type(entry) is list and len(entry) == 2 and type(entry[0]) is str):
        raise TypeError(f"the phases of the document name no class for {kind!r}")
    names = entry[1]
    if type(names) is not list or type(fields) is not dict:
        raise TypeError(f"the phases of the document name no fields for {kind!r}")
    kept = {name: fields[name] for name in names}  # a KeyError if one is not there
    document["kind"], document["class"] = kind, entry[0]
    fields.clear()
    fields.update(kept)


def _pack(items: Any, at: Any, count: Any, keys: Any, path: Any) -> None:
    """The ``pack`` op: ``items[at:at + count]``, objects of the fields ``keys``, become
    one string, their text (a full chunk of a version 2 document: ``_chunks._packed``)."""
    if not isinstance(items, list) or type(at) is not int or type(count) is not int:
        raise TypeError(f"pack at {path!r} needs a list, a position and a count")
    if not (type(keys) is list and all(type(key) is str for key in keys)):
        raise TypeError(f"pack at {path!r} needs the fields' names")
    if not (at >= 0 and count > 0 and at + count <= len(items)):
        raise ValueError(f"pack at {path!r}: {at} and {count} are outside the list")
    items[at : at + count] = [_packed(items[at : at + count], keys)]


# --- incremental dump ------------------------------------------------------------------

# Fields whose value is deeply immutable (frozen models of text, numbers and tuples of
# them), so that the same object has the same encoding: a field holding the very object
# the phase before held keeps that phase's encoding. Other fields (the context, a call's
# arguments, a tool's output) may be changed in place by their owner, so they are
# encoded again and compared exactly.
_SAME_BY_IDENTITY: Final = frozenset({"transcript", "spent", "loop", *_SCALARS})


_is: Final = operator.is_


def _kept(old: tuple[Any, ...], new: tuple[Any, ...], start: int, count: int) -> bool:
    """Whether ``new[:count]`` holds the very objects ``old[start:start + count]``.

    Identity, not equality: an equal item may encode differently (1 and 1.0). In C
    (``map`` of ``operator.is_``, which stops at the end of ``old``'s run), without
    calling an item's ``__eq__``. The run of an exact tuple is its slice (a copy of its
    pointers, cheaper than ``islice``'s step per item); another sequence's is read by
    ``islice``, through its iterator as before.
    """
    if count > len(new) or start + count > len(old):
        return False
    if start == 0 and count == len(old):
        return new is old or all(map(_is, new, old))
    if type(old) is tuple:
        return all(map(_is, new, old[start : start + count]))
    return all(map(_is, new, itertools.islice(old, start, start + count)))


def _tuple_change(
    old: tuple[Any, ...], encoded: list[Any], new: tuple[Any, ...], path: list[str]
) -> tuple[list[Any], list[Any] | None]:
    """``new``'s encoding from ``old``'s, and the op from one to the other (``None``: same)."""
    size = len(old)
    if size > 1 and len(new) == size and new[0] is not old[0]:
        pass  # not grown, nor its last replaced (both keep the first): a window, or whole
    elif len(new) >= size and _kept(old, new, 0, size):  # grew at the end
        if len(new) == size:
            return encoded, None
        added = [_encode(item) for item in new[size:]]
        return encoded + added, ["append", path, added]
    elif size and len(new) >= size and _kept(old, new, 0, size - 1):  # the last replaced
        added = [_encode(item) for item in new[size - 1 :]]
        return encoded[: size - 1] + added, ["splice", path, size - 1, added]
    for dropped in range(1, min(_SHIFT, size) + 1):  # a sliding window moved on
        rest = size - dropped
        if rest <= len(new) and _kept(old, new, dropped, rest):
            added = [_encode(item) for item in new[rest:]]
            return encoded[dropped:] + added, ["shift", path, dropped, added]
    whole = [_encode(item) for item in new]
    return whole, ["set", path, whole]


def _chunked_change(
    old: tuple[tuple[Any, ...], tuple[Any, ...]],
    new_parts: tuple[tuple[Any, ...], tuple[Any, ...]],
    new: Sequence[Any],
    encoded: list[Any],
    path: list[str],
    keys: tuple[str, ...],
) -> tuple[list[Any], list[list[Any]]]:
    """A chunked sequence's new encoding and the ops to it from the old one's (its items
    objects of the fields ``keys``).

    ``old`` is the old sequence's full chunks and tail, ``encoded`` its version 2
    encoding (each chunk's text, then the tail's items); ``new_parts`` and ``new`` are
    the new sequence's chunks and tail, and the sequence. The chunks both share (the very same
    objects, from the first on) are kept; what follows them is appended when the old
    items after them are still there, else spliced in from the first that differs; and
    each chunk that filled since is packed into its text, as :func:`_apply` packs it.
    """
    chunks, tail = old
    new_chunks, new_tail = new_parts
    size = len(tail)
    if (  # one item appended to the tail (a message, a record): its encoding appended
        new_chunks is chunks
        and type(new_tail) is tuple
        and len(new_tail) == size + 1
        and len(encoded) == len(chunks) + size
        and _kept(tail, new_tail, 0, size)
    ):
        added = [_encode(new_tail[size])]
        return encoded + added, [["append", path, added]]
    if (  # the tail's last record replaced by one settled: its fields that changed set
        new_chunks is chunks
        and size
        and type(new_tail) is tuple
        and len(new_tail) == size
        and type(new_tail[-1]) is ActionRecord
        and type(tail[-1]) is ActionRecord
        and len(encoded) == len(chunks) + size
        and new_tail[-1] is not tail[-1]
        and _kept(tail, new_tail, 0, size - 1)
    ):
        made = _record_fields(new_tail[-1], tail[-1], encoded[-1])
        if made is not None:
            settled, changed = made
            set_ops: list[list[Any]] = []
            _merge(set_ops, [*path, len(encoded) - 1], changed)
            return [*encoded[:-1], settled], set_ops
    kept = len(chunks)
    if (  # a full tail made a chunk by one item appended: that item encoded, the chunk packed
        size == CHUNK
        and len(new_tail) == 1
        and type(new_tail) is tuple
        and type(tail) is tuple
        and type(chunks) is tuple
        and type(new_chunks) is tuple
        and len(new_chunks) == kept + 1
        and type(encoded) is list
        and len(encoded) == kept + CHUNK
        and all(map(_is, new_chunks, chunks))
        and _full(new_chunks[kept], tail)
    ):
        added = [_encode(new_tail[0])]
        text = _packed(encoded[kept:], keys)
        return [*encoded[:kept], text, *added], [
            ["append", path, added],
            ["pack", path, kept, CHUNK, list(keys)],
        ]
    return _chunked_plain(old, new_parts, new, encoded, path, keys)


def _full(chunk: Any, tail: tuple[Any, ...]) -> bool:
    """Whether ``chunk`` holds the very items of ``tail`` (``CHUNK`` of them): it is
    ``tail`` itself (an action log's fill) or an exact tuple of its items, in order."""
    if chunk is tail:
        return True
    return type(chunk) is tuple and len(chunk) == CHUNK and all(map(_is, chunk, tail))


def _chunked_plain(
    old: tuple[tuple[Any, ...], tuple[Any, ...]],
    new_parts: tuple[tuple[Any, ...], tuple[Any, ...]],
    new: Sequence[Any],
    encoded: list[Any],
    path: list[str],
    keys: tuple[str, ...],
) -> tuple[list[Any], list[list[Any]]]:
    """:func:`_chunked_change` without its three shortcuts (one item appended, the last
    record settled, a full tail made a chunk by one item appended), which give what this
    gives (tests/test_delta_fast.py, tests/test_dump_fast25c.py)."""
    chunks, tail = old
    new_chunks, new_tail = new_parts
    kept = len(chunks)
    if len(new_chunks) < kept or not _kept(chunks, new_chunks, 0, kept):
        kept = 0
        while kept < min(len(chunks), len(new_chunks)) and new_chunks[kept] is chunks[kept]:
            kept += 1
        tail = ()  # the old chunks after the shared ones are replaced whole
    # What follows the chunks kept: the new tail itself when they are all its chunks.
    rest = new_tail if len(new_chunks) == kept else new[kept * CHUNK :]
    same = 0
    if kept == len(chunks):
        if type(rest) is tuple and _kept(tail, rest, 0, len(tail)):  # the tail is there
            same = len(tail)
        elif type(rest) is tuple and _kept(tail, rest, 0, len(tail) - 1):  # its last changed
            same = len(tail) - 1
        while same < len(tail) and same < len(rest) and rest[same] is tail[same]:
            same += 1
        if same == len(tail) == len(rest):
            return encoded, []
    changed = None
    if kept == len(chunks) and same < len(tail) <= len(rest):
        changed = _fields_changed(encoded[kept:], tail, rest, same, [*path], kept)
    ops: list[list[Any]]
    if changed is not None:  # items of the tail changed field by field (a record settled)
        items, ops = changed
        added = [_encode(item) for item in rest[len(tail) :]]
        if added:
            ops.append(["append", path, added])
            items += added
    else:
        added = [_encode(item) for item in rest[same:]]
        items = encoded[kept : kept + same] + added
        if kept == len(chunks) and same == len(tail):
            ops = [["append", path, added]]
        else:
            ops = [["splice", path, kept + same, added]]
    texts: list[str] = []
    for at in range(len(new_chunks) - kept):
        texts.append(_packed(items[at * CHUNK : (at + 1) * CHUNK], keys))
        ops.append(["pack", path, kept + at, CHUNK, list(keys)])
    return encoded[:kept] + texts + items[len(texts) * CHUNK :], ops


def _fields_changed(
    encoded: list[Any],
    tail: tuple[Any, ...],
    rest: Sequence[Any],
    start: int,
    path: list[Any],
    offset: int,
) -> tuple[list[Any], list[list[Any]]] | None:
    """The tail's encodings with the items ``rest`` replaced from ``start`` on, and for
    each item the op that sets its fields that changed (``[*path, position]``: see
    :func:`_merge`); ``None`` when an item changed in more than its fields' values (then
    splice it)."""
    items = list(encoded)
    ops: list[list[Any]] = []
    for at in range(start, len(tail)):
        record, before = rest[at], tail[at]
        if record is before:
            continue
        old = items[at]
        made = None
        if type(record) is ActionRecord and type(before) is ActionRecord:  # a record settled
            made = _by_fields(record, before, old, _RECORD_FIELDS, _RECORD_VALUES)
        if made is None:
            new = _encode(record)
            changed = _parts(new, old)
            if changed is None:
                return None
        else:
            new, changed = made
        _merge(ops, [*path, offset + at], changed)
        items[at] = new
    return items, ops


# Library classes whose fields are immutable values (text, numbers, ``None``) and whose
# encoding is the object of those fields, each encoded (``_encode`` of the model_dump):
# their fields, in order, and a reader of them all at once. By exact type only.
_RECORD_VALUES: Final = operator.attrgetter(*_RECORD_FIELDS)
_SPEND_FIELDS: Final = ("tokens", "cost", "tool_calls", "model_calls")
_SPEND_VALUES: Final = operator.attrgetter(*_SPEND_FIELDS)


def _by_fields(
    value: Any,
    previous: Any,
    encoded: Any,
    names: tuple[str, ...],
    read: operator.attrgetter[Any],
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``_encode(value)`` and the entries of it that differ from ``encoded`` (``previous``'s
    encoding), as ``_parts`` finds them, for a value of a class of immutable fields
    (``names``, read by ``read``) whose encoding is the object of its fields encoded: a
    field holding the very object ``previous`` held keeps its encoding, only the others
    are encoded and compared. ``None`` when ``encoded`` is not an object of those fields
    in that order (then ``_parts`` finds no parts either: the caller's plain path)."""
    if type(encoded) is not dict or len(encoded) != len(names) or tuple(encoded) != names:
        return None
    new: dict[str, Any] = {}
    parts: dict[str, Any] = {}
    for name, item, before in zip(names, read(value), read(previous), strict=True):
        if item is before:
            new[name] = encoded[name]
            continue
        new[name] = now = _encode(item)
        if not _same(now, encoded[name]):
            parts[name] = now
    return new, parts


def _spend_change(
    value: Spend, previous: Spend, encoded: Any
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """:func:`_by_fields` for a spend (tests/test_delta_pairs.py), its counts read one by
    one: a count that is not the very object the spend before held is encoded (an exact
    ``int`` is its own encoding) and compared with its encoding before, as ``_same``
    compares. ``None`` when ``encoded`` is not an object of a spend's fields in order."""
    if type(encoded) is not dict or tuple(encoded) != _SPEND_FIELDS:
        return None
    new = encoded.copy()
    parts: dict[str, Any] = {}
    item: Any = value.tokens
    if item is not previous.tokens:
        _count(new, parts, "tokens", item)
    item = value.cost
    if item is not previous.cost:
        _count(new, parts, "cost", item)
    item = value.tool_calls
    if item is not previous.tool_calls:
        _count(new, parts, "tool_calls", item)
    item = value.model_calls
    if item is not previous.model_calls:
        _count(new, parts, "model_calls", item)
    return new, parts


def _spent(
    cls: type[Phase[Any]],
    field: attrs.Attribute[Any],
    value: Spend,
    previous: Spend,
    encoded: Any,
    ops: list[list[Any]],
    merged: dict[str, Any],
    calls: list[tuple[Any, ...] | None],
) -> Any:
    """:func:`_spent_plain` for a spend whose counts are exact ``int`` and whose cost is
    an exact ``Decimal`` (what ``Spend`` makes) after an encoding before of an object of a
    spend's fields in order: the same steps in this frame, :func:`_money` and
    :func:`_merge` written out, and the new encoding made only when something changed
    (the encoding before with the changed entries: the same keys in the same order).
    A cost is most often a new ``Decimal`` of the spelling the cost before had (each
    step adds to it): its text is made once (``str``), and compared with that of the
    encoding before without looking the text up again when that is the last cost spelled
    (kept in ``_last_money`` as :func:`_money` keeps it) or an object of ``$decimal``
    holding exactly that text. Anything else goes to :func:`_spent_plain`."""
    global _last_money
    tokens, cost, tool_calls, model_calls = (
        value.tokens,
        value.cost,
        value.tool_calls,
        value.model_calls,
    )
    if not (
        type(tokens) is int
        and type(cost) is Decimal
        and type(tool_calls) is int
        and type(model_calls) is int
        and type(encoded) is dict
        and tuple(encoded) == _SPEND_FIELDS
    ):
        return _spent_plain(cls, field, value, previous, encoded, ops, merged, calls)
    parts: dict[str, Any] = {}
    if tokens is not previous.tokens:
        held = encoded["tokens"]
        if type(held) is not int or held != tokens:
            parts["tokens"] = tokens
    if cost is not previous.cost:  # _money(new, parts, "cost", cost, encoded["cost"])
        last, spelled, keeps = _last_money
        if cost is last:
            text = spelled
        else:
            text = str(cost)
            if text != spelled:
                keeps = _keeps_spelled(text)
            _last_money = (cost, text, keeps)
        before = encoded["cost"]
        if keeps:
            if not (
                type(before) is Decimal and (spelled if before is last else str(before)) == text
            ) and not _same(cost, before):
                parts["cost"] = cost
        elif not (
            type(before) is dict
            and len(before) == 1
            and type(held := before.get("$decimal")) is str
            and held == text
        ):
            now = {"$decimal": text}
            if not _same(now, before):
                parts["cost"] = now
    if tool_calls is not previous.tool_calls:
        held = encoded["tool_calls"]
        if type(held) is not int or held != tool_calls:
            parts["tool_calls"] = tool_calls
    if model_calls is not previous.model_calls:
        held = encoded["model_calls"]
        if type(held) is not int or held != model_calls:
            parts["model_calls"] = model_calls
    if not parts:
        return encoded
    new = encoded | parts  # the encoding's keys in its order, the changed entries set
    if len(parts) == 1:  # _merge(ops, ["fields", "spent"], parts), in place
        ((key, item),) = parts.items()
        ops.append(["set", ["fields", "spent", key], item])
    elif len(parts) < len(new):
        ops.append(["merge", ["fields", "spent"], parts])
    else:
        merged["spent"] = new
    return new


def _spent_plain(
    cls: type[Phase[Any]],
    field: attrs.Attribute[Any],
    value: Spend,
    previous: Spend,
    encoded: Any,
    ops: list[list[Any]],
    merged: dict[str, Any],
    calls: list[tuple[Any, ...] | None],
) -> Any:
    """:func:`_compared` of the field ``spent`` for two exact spends (the functions of
    :func:`_pair` ask :func:`_spent` only then), :func:`_spend_change`'s counts compared
    in this frame: an exact ``int`` as itself, a cost through :func:`_money`, anything
    else through :func:`_count`. An encoding before that is not an object of a spend's
    fields in order goes to :func:`_compared`."""
    if type(encoded) is not dict or tuple(encoded) != _SPEND_FIELDS:
        return _compared(cls, field, value, previous, encoded, ops, merged, calls)
    new = encoded.copy()
    parts: dict[str, Any] = {}
    item: Any = value.tokens
    if item is not previous.tokens:
        held = new["tokens"]
        if type(item) is not int:
            _count(new, parts, "tokens", item)
        elif type(held) is not int or held != item:
            new["tokens"] = parts["tokens"] = item
    item = value.cost
    if item is not previous.cost:
        if type(item) is Decimal:
            _money(new, parts, "cost", item, new["cost"])
        else:
            _count(new, parts, "cost", item)
    item = value.tool_calls
    if item is not previous.tool_calls:
        held = new["tool_calls"]
        if type(item) is not int:
            _count(new, parts, "tool_calls", item)
        elif type(held) is not int or held != item:
            new["tool_calls"] = parts["tool_calls"] = item
    item = value.model_calls
    if item is not previous.model_calls:
        held = new["model_calls"]
        if type(item) is not int:
            _count(new, parts, "model_calls", item)
        elif type(held) is not int or held != item:
            new["model_calls"] = parts["model_calls"] = item
    if not parts:
        return encoded
    if len(parts) < len(new):
        _merge(ops, ["fields", "spent"], parts)
    else:
        merged["spent"] = new
    return new


def _count(new: dict[str, Any], parts: dict[str, Any], name: str, item: Any) -> None:
    """Set ``new[name]`` (and ``parts[name]``) to ``item``'s encoding unless it is the
    encoding there already: an exact ``int`` compared as itself, anything else encoded."""
    before = new[name]
    if type(item) is int:
        if type(before) is int and before == item:
            return
        new[name] = parts[name] = item
        return
    if type(item) is Decimal:  # a cost: compared by its spelling, encoded only if new
        _money(new, parts, name, item, before)
        return
    now = _encode(item)
    if not _same(now, before):
        new[name] = parts[name] = now


# The last exact ``Decimal`` :func:`_money` spelled: it, its text and ``_keeps_spelled``'s
# answer for that text (one tuple, replaced whole). A cost is most often the same amount
# as the spend before's, a new object of the same spelling: its text is not looked up
# again, and the encoding before (that very object) is not spelled again.
_last_money: tuple[Any, str, bool] = (None, "", False)


def _money(
    new: dict[str, Any], parts: dict[str, Any], name: str, item: Decimal, before: Any
) -> None:
    """``_count`` of an exact ``Decimal``, its encoding made from its spelling (``str``,
    as ``_encode`` makes it): itself when a JSON number gives it back (``_keeps``), else
    ``{"$decimal": its spelling}``. The same as ``before`` without ``_same`` when that is
    an exact ``Decimal`` of the same spelling (``_same`` compares two by their
    fingerprints, their spellings), or an object of the one exact text key ``$decimal``
    holding exactly that text; anything else is compared by ``_same``."""
    global _last_money
    last, spelled, keeps = _last_money
    if item is last:
        text = spelled
    else:
        text = str(item)
        if text != spelled:
            keeps = _keeps_spelled(text)
        _last_money = (item, text, keeps)
    now: Any
    if keeps:
        if type(before) is Decimal and (spelled if before is last else str(before)) == text:
            return
        now = item
    else:
        if type(before) is dict and len(before) == 1:
            ((key, held),) = before.items()
            if type(key) is str and key == "$decimal" and type(held) is str and held == text:
                return
        now = {"$decimal": text}
    if not _same(now, before):
        new[name] = parts[name] = now


def _transcript_change(
    old: Sequence[Any], encoded: list[Any], new: Sequence[Any], path: list[str]
) -> tuple[list[Any], list[list[Any]]]:
    """``new``'s encoding from ``old``'s (a transcript that grew from it gives its new
    messages without comparing the others), and the ops from one to the other."""
    if type(old) is Transcript and type(new) is Transcript and not old._head and not new._head:
        return _chunked_change(
            (old._chunks, old._tail), (new._chunks, new._tail), new, encoded, path, _MESSAGE_KEYS
        )
    whole = _dump_transcript(new)
    return whole, [["set", path, whole]]


def _log_change(
    old: ActionLog, encoded: list[Any], new: ActionLog, path: list[str]
) -> tuple[list[Any], list[list[Any]]]:
    """As :func:`_transcript_change`, for the governor's action logs: only the records
    after the full chunks ``new`` shares with ``old`` are compared."""
    return _chunked_change(
        (old._chunks, old._tail), (new._chunks, new._tail), new, encoded, path, _RECORD_FIELDS
    )


def _same(encoded: Any, before: Any) -> bool:
    """Whether two encodings are the same JSON, exactly (1, 1.0, True and 1.00 differ)."""
    if encoded is before:
        return True
    kind = type(encoded)
    if kind is not type(before):
        return False
    if kind is str or kind is int:
        return bool(encoded == before)
    if kind is dict and len(encoded) <= _SMALL:  # a spend, a call, a $-tagged number
        return (
            len(encoded) == len(before)
            and list(encoded) == list(before)
            and all(map(_same, encoded.values(), before.values()))
        )
    if kind is list and len(encoded) <= _SMALL:  # the pending calls: mostly none
        return len(encoded) == len(before) and all(map(_same, encoded, before))
    return _json.fingerprint(encoded) == _json.fingerprint(before)


# Objects and lists of up to this many entries are compared entry by entry, in Python;
# larger ones (and numbers) by their fingerprints, written in C.
_SMALL: Final = 4


def _parts(new: Any, old: Any) -> dict[str, Any] | None:
    """The entries of the object ``new`` that differ from ``old``'s, when both are
    objects of the same keys in the same order; ``None`` otherwise."""
    if type(new) is not dict or type(old) is not dict or list(new) != list(old):
        return None
    return {key: value for key, value in new.items() if not _same(value, old[key])}


def _merge(ops: list[list[Any]], path: list[Any], changed: dict[str, Any]) -> None:
    """The op that sets the entries ``changed`` of the object at ``path``: none, a
    ``set`` of the one, or a ``merge`` of them all (version 3: one op, one path)."""
    if len(changed) == 1:
        ((key, value),) = changed.items()
        ops.append(["set", [*path, key], value])
    elif changed:
        ops.append(["merge", path, changed])


@by_class
def _names(cls: type[LoopState]) -> tuple[str, ...]:
    """The fields of a loop memory class, in order (``model_fields`` builds a dict)."""
    return tuple(cls.model_fields)


def _loop_change(
    old: LoopState, encoded: dict[str, Any], new: LoopState, ops: list[list[Any]]
) -> dict[str, Any]:
    """``new``'s encoding from ``old``'s, field by field; the ops go to ``ops``."""
    result: dict[str, Any] = {}
    merged: dict[str, Any] = {}  # the fields set whole
    for name in _names(type(new)):
        value, before = getattr(new, name), getattr(old, name)
        if value is before:
            result[name] = encoded[name]
            continue
        path = ["fields", "loop", name]
        if type(value) is ActionLog and type(before) is ActionLog:
            result[name], changes = _log_change(before, encoded[name], value, path)
            ops.extend(changes)
            continue
        if isinstance(value, tuple) and isinstance(before, tuple):
            result[name], op = _tuple_change(before, encoded[name], value, path)
            if op is not None:
                ops.append(op)
            continue
        result[name] = _encode(value)
        if _same(result[name], encoded[name]):
            result[name] = encoded[name]
        else:
            merged[name] = result[name]
    _merge(ops, ["fields", "loop"], merged)
    return result


@by_class
def _dumped_fields(cls: type[Phase[Any]]) -> tuple[attrs.Attribute[Any], ...]:
    """The fields :func:`dump_phase` writes, in its order."""
    return tuple(f for f in attrs.fields(cls) if f.init and f.name not in _UNSAVED)


class PhaseDumper:
    """Dumps the successive phases of one run, encoding only what changed since the last.

    A phase shares most of its fields with the phase before it (the same objects), and
    its transcript and the governor's lists grow at the end, move on as a window, or
    have their last item replaced. :meth:`dump` returns what :func:`dump_phase` gives,
    built from the previous document, and the delta ops (the store's op language) that
    turn the previous document into it. The documents it returns are never changed
    after, so they may share parts.
    """

    def __init__(self) -> None:
        self._phase: Phase[Any] | None = None
        self._document: dict[str, Any] | None = None
        # The last call encoded and what its encoding was made from (see _call_seen).
        self._call: list[tuple[Any, ...] | None] = [None]

    def forget(self) -> None:
        """Start again: the next :meth:`dump` encodes the whole phase and gives no ops."""
        self._phase = self._document = None
        self._call[0] = None

    def start_from(self, phase: Phase[Any], document: dict[str, Any]) -> None:
        """Go on from ``phase``, whose document (as :func:`dump_phase` writes it, with any
        keys of the caller's beside) is ``document``: the next :meth:`dump` gives ops
        (unless ``document`` names other phases than ``phase``'s agent has: then none)."""
        if document.get("phases") != _phase_table(phase.agent.phases):
            self.forget()
            return
        self._phase, self._document = phase, document

    def dump(self, phase: Phase[Any]) -> tuple[dict[str, Any], list[list[Any]] | None]:
        """``dump_phase(phase)``, and the ops from the previous document (``None``: first)."""
        old, before = self._phase, self._document
        cls = type(phase)
        if (
            old is not None
            and before is not None
            and (cls is Planning or cls is ToolCalling or cls is Observing)
            and type(before) is dict
        ):
            # :meth:`_change` for two of the library's own phases (by identity) whose
            # pair is made: the same document and ops, the header read in place
            # (the pair's whole function, of :func:`_whole_source`).
            known = _PAIRS.get((id(type(old)), id(cls)))
            if known is not None and known[0] is type(old) and known[1] is cls:
                made = known[4](old, before, phase, self._call)
                if made is not None:
                    self._phase, self._document = phase, made[0]
                    return made
        if (
            old is None
            or before is None
            or before.get("version") != DOCUMENT_VERSION
            or "phases" not in before
            or not isinstance(phase, Phase)
        ):
            document, ops = dump_phase(phase), None
        else:
            document, ops = self._change(old, before, phase, self._call)
        self._phase, self._document = phase, document
        return document, ops

    @staticmethod
    def _change(
        old: Phase[Any],
        before: dict[str, Any],
        phase: Phase[Any],
        calls: list[tuple[Any, ...] | None],
    ) -> tuple[dict[str, Any], list[list[Any]]]:
        cls, agent = type(phase), phase.agent
        # Every value in the ops is the codec's (no float but as {"$float": ...}) or a
        # name: the store may write them without reading them back for a NaN (FiniteOps),
        # once the phase's kind and agent's name are text, as the library's are.
        ops: list[list[Any]]
        ops = FiniteOps() if type(phase.kind) is str and type(agent.name) is str else []
        document: dict[str, Any] = {
            "version": DOCUMENT_VERSION,
            "kind": phase.kind,
            "class": _class_path(cls),
            "agent": agent.name,
            "phases": before["phases"]
            if agent.phases is old.agent.phases
            else _copied(_phase_table(agent.phases)),
        }
        moved = False  # another kind or class: the fields change with it
        for key, value in document.items():
            previous = before.get(key)
            if previous is value:
                continue
            if previous == value:
                document[key] = previous
            elif key == "kind" or key == "class":
                moved = True
            else:
                ops.append(["set", [key], value])
        fields_before: dict[str, Any] = before["fields"]
        pair = _pair(type(old), cls)
        made = None if pair is None else pair(old, fields_before, phase, ops, calls)
        if made is None:
            made = _fields_change(cls, old, fields_before, phase, ops, calls)
        fields, merged = made
        document["fields"] = fields
        return _moved(document, ops, fields_before, fields, merged, moved)


def _moved(
    document: dict[str, Any],
    ops: list[list[Any]],
    fields_before: dict[str, Any],
    fields: dict[str, Any],
    merged: dict[str, Any],
    moved: bool,
) -> tuple[dict[str, Any], list[list[Any]]]:
    """The end of :meth:`PhaseDumper._change`: the ops of the fields set whole, and of the
    phase's kind and class when they changed (``moved``)."""
    if not moved and list(fields) == list(fields_before):
        _merge(ops, ["fields"], merged)
        return document, ops
    kind = document["kind"]
    entry = document["phases"].get(kind)
    if entry is not None and entry[0] == document["class"] and entry[1] == list(fields):
        _merge(ops, ["fields"], merged)  # the new fields first: the phase op orders them
        ops.append(["phase", kind])
        return document, ops
    # A phase its document's phases do not name (written by other code): key by key.
    ops.extend(["set", [key], document[key]] for key in ("kind", "class") if moved)
    ops.extend(["drop", ["fields", key]] for key in fields_before if key not in fields)
    _merge(ops, ["fields"], merged)
    expected = [key for key in fields_before if key in fields]
    expected += [key for key in fields if key not in fields_before]
    if list(fields) != expected:
        ops.append(["order", ["fields"], list(fields)])
    return document, ops


def _fields_change(
    cls: type[Phase[Any]],
    old: Phase[Any],
    before: dict[str, Any],
    phase: Phase[Any],
    ops: list[list[Any]],
    calls: list[tuple[Any, ...] | None],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``phase``'s fields encoded from ``old``'s (``before``) and the fields set whole;
    the ops of the fields changed in part (lists, objects) go to ``ops``. ``calls[0]``
    is what the last call encoded was encoded from (:func:`_call_seen`), kept up to date."""
    fields: dict[str, Any] = {}
    merged: dict[str, Any] = {}
    for field in _dumped_fields(cls):
        name = field.name
        value = getattr(phase, name)
        if name not in before:
            fields[name] = merged[name] = _dump_field(cls, field, value)
            if name == "call":
                calls[0] = _call_seen(value, fields[name])
            continue
        previous = getattr(old, name, _FAILED)
        encoded = before[name]
        if value is previous and (
            name in _SAME_BY_IDENTITY or value is None or (type(value) is tuple and not value)
        ):
            fields[name] = encoded  # the same object, which cannot have changed
        elif name in _SCALARS and type(value) is _SCALARS[name]:  # text or an int: itself
            if type(encoded) is type(value) and encoded == value:
                fields[name] = encoded
            else:
                fields[name] = merged[name] = value
        elif name == "transcript" and isinstance(previous, Sequence):
            fields[name], changes = _transcript_change(previous, encoded, value, ["fields", name])
            ops.extend(changes)
        elif name == "loop" and type(value) is LoopState and type(previous) is LoopState:
            fields[name] = _loop_change(previous, encoded, value, ops)
        elif name == "call" and value is previous and _call_kept(value, calls[0], encoded):
            fields[name] = encoded  # the call encoded before, its arguments untouched
        else:
            fields[name] = _compared(cls, field, value, previous, encoded, ops, merged, calls)
    return fields, merged


def _compared(
    cls: type[Phase[Any]],
    field: attrs.Attribute[Any],
    value: Any,
    previous: Any,
    encoded: Any,
    ops: list[list[Any]],
    merged: dict[str, Any],
    calls: list[tuple[Any, ...] | None],
) -> Any:
    """The encoding of the field ``field`` of a phase holding ``value``, compared with
    ``encoded`` (that of the phase before, which held ``previous``): ``encoded`` itself
    when the same, else the new one, set whole (in ``merged``) or in part (a ``merge``
    op in ``ops``). Also when ``value`` is ``previous``: a value changed in place, an
    object of which only some entries changed (the spend, a context)."""
    name = field.name
    made = None
    if name == "spent" and type(value) is Spend and type(previous) is Spend:
        made = _spend_change(value, previous, encoded)
    if made is None:
        new = _dump_field(cls, field, value)
        parts = _parts(new, encoded)
    else:  # a spend: only its counts that changed are encoded and compared
        new, parts = made
    result = new
    if parts is None:
        if _same(new, encoded):
            result = encoded
        else:
            merged[name] = new
    elif not parts:
        result = encoded
    elif len(parts) < len(new):
        _merge(ops, ["fields", name], parts)
    else:
        merged[name] = new
    if name == "call":
        calls[0] = _call_seen(value, result)
    return result


def _call_seen(call: Any, encoded: Any) -> tuple[Any, ...] | None:
    """What ``encoded``, the encoding of ``call`` just made, was made from, for
    :func:`_call_kept` to find it unchanged at the next phase; ``None`` when that cannot
    be told without encoding it again.

    A call of exactly ``ReadCall`` or ``WriteCall`` (frozen), of a tool of exactly
    ``ReadTool`` or ``WriteTool`` (frozen), whose arguments model encodes as its JSON
    dump (``_Plan.TEXT``) and holds only exact ``str`` values: its encoding is a function
    of the objects read here (the tool's name, the hash, the arguments' class, field
    names and values), all of which are immutable. A tool may change its arguments in
    place (a pydantic model is mutable): the values are kept to be compared by identity.
    """
    kind = type(call)
    if kind is not ReadCall and kind is not WriteCall:
        return None
    tool, args = call.tool, call.args
    if type(tool) is not ReadTool and type(tool) is not WriteTool:
        return None
    model = type(args)
    if _plan(model) is not _Plan.TEXT:
        return None
    held = args.__dict__
    values = tuple(held.values())
    for value in values:
        if type(value) is not str:
            return None
    return (call, tool, tool.name, call.args_hash, args, model, tuple(held), values, encoded)


def _call_kept(call: Any, seen: tuple[Any, ...] | None, encoded: Any) -> bool:
    """Whether ``encoded`` is still ``call``'s encoding: it is the one :func:`_call_seen`
    saw made from ``call`` (``seen``), and every object it was made from is still there,
    the very same (identity: an equal text of a ``str`` subclass is not the same)."""
    if seen is None or seen[0] is not call or seen[8] is not encoded:
        return False
    tool, args = call.tool, call.args
    if tool is not seen[1] or tool.name is not seen[2] or call.args_hash is not seen[3]:
        return False
    if args is not seen[4] or type(args) is not seen[5]:
        return False
    held = args.__dict__
    keys, values = seen[6], seen[7]
    return (
        len(held) == len(keys)
        and all(map(_is, held, keys))
        and all(map(_is, held.values(), values))
    )


# --- a call of text arguments, encoded in place ---------------------------------------

# The keys of a pydantic core schema (``__pydantic_core_schema__``) that the fast way
# below knows to leave a model's JSON dump the object of its fields' values: a model of
# fields (no serializer, alias, exclusion or computed field; every other key is read as
# one that may change the dump), each field text, with or without a default.
_MODEL_KEYS: Final = frozenset(
    {"type", "cls", "schema", "config", "custom_init", "root_model", "post_init", "ref", "metadata"}
)
_FIELDS_KEYS: Final = frozenset(
    {"type", "fields", "model_name", "computed_fields", "extra_behavior", "strict"}
)
_FIELD_KEYS: Final = frozenset({"type", "schema", "metadata", "frozen"})
_DEFAULT_KEYS: Final = frozenset({"type", "schema", "default", "default_factory", "metadata"})
_STR_KEYS: Final = frozenset({"type", "metadata", "strict", "min_length", "max_length"})


@by_class
def _text_args(cls: type[Any]) -> tuple[str, ...] | None:
    """The fields of the arguments model class ``cls``, in order, when its JSON dump of
    an instance holding exactly those keys in its ``__dict__`` and an exact ``str`` under
    each (what ``_encode`` writes for it: ``model_dump(mode="json")``, its ``_Plan.TEXT``)
    is the object of those keys and values; ``None`` otherwise.

    Told by its core schema (only the keys above: a field's alias, ``exclude``,
    ``exclude_if`` or serializer, a literal, a computed field or a serializer of the
    model each adds a key or a type the fast way does not take), and then by a dump of
    an instance made without validation, holding texts of its own (a serializer set
    around the schema would write something else). The keys returned are the schema's,
    which validation also puts in an instance's ``__dict__`` (the very objects)."""
    if not issubclass(cls, BaseModel):
        return None
    if issubclass(cls, str | int | float | Decimal) or _plan(cls) is not _Plan.TEXT:
        return None
    schema = cls.__dict__.get("__pydantic_core_schema__")
    if type(schema) is not dict or not schema.keys() <= _MODEL_KEYS:
        return None
    if schema.get("type") != "model" or schema.get("cls") is not cls or schema.get("root_model"):
        return None
    inner = schema.get("schema")
    if type(inner) is not dict or not inner.keys() <= _FIELDS_KEYS:
        return None
    if inner.get("type") != "model-fields" or inner.get("computed_fields"):
        return None
    if inner.get("extra_behavior") not in (None, "ignore", "forbid"):
        return None
    fields = inner.get("fields")
    if type(fields) is not dict or tuple(fields) != tuple(cls.model_fields):
        return None
    for field in fields.values():
        if type(field) is not dict or not field.keys() <= _FIELD_KEYS:
            return None
        kind = field.get("schema")
        if field.get("type") != "model-field" or type(kind) is not dict:
            return None
        if kind.get("type") == "default":
            if not kind.keys() <= _DEFAULT_KEYS:
                return None
            kind = kind.get("schema")
            if type(kind) is not dict:
                return None
        if kind.get("type") != "str" or not kind.keys() <= _STR_KEYS:
            return None
    names = tuple(fields)
    if not all(type(name) is str for name in names):
        return None
    texts = tuple(f"text of {name}" for name in names)
    try:
        made = BaseModel.model_construct.__func__(cls, **dict(zip(names, texts, strict=True)))  # type: ignore[attr-defined]
        dumped = made.model_dump(mode="json")
    except Exception:  # a class this cannot dump: the plain way
        return None
    if type(dumped) is not dict or tuple(dumped) != names:
        return None
    if not all(type(value) is str for value in dumped.values()):
        return None
    if tuple(dumped.values()) != texts:
        return None
    return names


def _call_made(call: Any) -> tuple[Any, ...] | None:
    """``_dump_call(call)`` and :func:`_call_seen` of it at once, the encoding last in
    the record (``record[8]``), for a call of exactly ``ReadCall`` or ``WriteCall`` of a
    tool of exactly ``ReadTool`` or ``WriteTool`` whose arguments are of a class
    :func:`_text_args` takes and hold its fields' keys (the very objects, in order) with
    an exact ``str`` under each: the arguments' encoding is then the object of those
    keys and values, written here without ``model_dump``. ``None`` for anything else
    (then the caller takes ``_dump_field`` and ``_call_seen``)."""
    kind = type(call)
    if kind is ReadCall:
        label = "read"
    elif kind is WriteCall:
        label = "write"
    else:
        return None
    tool, args = call.tool, call.args
    if type(tool) is not ReadTool and type(tool) is not WriteTool:
        return None
    model = type(args)
    names = _text_args(model)
    if names is None:
        return None
    held = args.__dict__
    if type(held) is not dict or len(held) != len(names) or not all(map(_is, held, names)):
        return None
    values = tuple(held.values())
    for value in values:
        if type(value) is not str:
            return None
    name, args_hash = tool.name, call.args_hash
    encoded = {
        "type": label,
        "tool": name if type(name) is str else _encode(name),
        "args": dict(zip(names, values, strict=True)),
        "args_hash": args_hash if type(args_hash) is str else _encode(args_hash),
    }
    return (call, tool, name, args_hash, args, model, names, values, encoded)


# --- the library's phases, pair by pair -----------------------------------------------

# What :func:`_fields_change` does, written out for one pair of the library's own phase
# classes (the phase before, the phase now): the field names, whether each was a field
# of the phase before, and the test of :func:`_fields_change` that applies to each are
# known when the function is made, so at each dump it only reads, compares and encodes
# (on Python 3.11 each name looked up in a set, each ``elif`` on a name and each
# ``getattr`` of the loop costs a few hundred instructions, nine fields a phase).
_LIBRARY: Final[tuple[type[Phase[Any]], ...]] = (Planning, ToolCalling, Observing)
_Pair = Callable[
    [Phase[Any], Any, Phase[Any], list[list[Any]], list[tuple[Any, ...] | None]],
    tuple[dict[str, Any], dict[str, Any]] | None,
]
# By the ids of the two classes, each checked by identity at the look-up: only the
# library's classes above are kept, which live as long as the program.
# Beside the function: the new class's module, qualified name and path, as read when made,
# and the pair's whole function (of :func:`_whole_source`: the header and the fields at once).
_Whole = Callable[
    [Phase[Any], dict[str, Any], Phase[Any], list[tuple[Any, ...] | None]],
    tuple[dict[str, Any], list[list[Any]]] | None,
]
_Known = tuple[type[Any], type[Any], _Pair, tuple[str, str, str], _Whole]
_PAIRS: dict[tuple[int, int], _Known] = {}


def _pair(old: type[Any], new: type[Any]) -> _Pair | None:
    """The function of :func:`_pair_source` for the phase classes ``old`` then ``new``
    when both are the library's own (by identity: a subclass, or a class equal to one of
    them by its metaclass, gets ``None``, and :func:`_fields_change`)."""
    known = _PAIRS.get((id(old), id(new)))
    if known is not None and known[0] is old and known[1] is new:
        return known[2]
    if not any(old is cls for cls in _LIBRARY) or not any(new is cls for cls in _LIBRARY):
        return None
    namespace: dict[str, Any] = {
        "_FAILED": _FAILED,
        "_dump_field": _dump_field,
        "_compared": _compared,
        "_spent": _spent,
        "Spend": Spend,
        "_call_seen": _call_seen,
        "_call_kept": _call_kept,
        "_call_made": _call_made,
        "_encode": _encode,
        "_message": _message,
        "Message": Message,
        "_flat": _flat,
        "_is": _is,
        "_transcript_change": _transcript_change,
        "_chunked_change": _chunked_change,
        "_MESSAGE_KEYS": _MESSAGE_KEYS,
        "Transcript": Transcript,
        "_loop_fields": _loop_fields,
        "LoopState": LoopState,
        "Sequence": Sequence,
        "cls": new,
    }
    source = _pair_source(old, new, namespace)
    exec(compile(source, f"<statemachine dump {old.kind} {new.kind}>", "exec"), namespace)
    made: _Pair = namespace["change"]
    module, qualname = new.__module__, new.__qualname__
    path = f"{module}:{qualname}"
    namespace.update(
        MODULE=module,
        QUALNAME=qualname,
        PATH=path,
        NOW=[field.name for field in _dumped_fields(new)],
        DOCUMENT_VERSION=DOCUMENT_VERSION,
        Agent=Agent,
        FiniteOps=FiniteOps,
        _fields_change=_fields_change,
        _moved=_moved,
    )
    whole = _whole_source(source)
    exec(compile(whole, f"<statemachine dump {old.kind} {new.kind}>", "exec"), namespace)
    library: _Whole = namespace["library"]
    _PAIRS[(id(old), id(new))] = (old, new, made, (module, qualname, path), library)
    return made


def _whole_source(pair: str) -> str:
    """The source of ``library(old, before, phase, calls)``: :meth:`PhaseDumper._change`
    for a phase after another of the library's own classes, in one frame with the pair's
    function (of :func:`_pair_source`, whose source is ``pair``) written in, when
    :meth:`PhaseDumper.dump` would take ``_change``: the document's version is the int 3
    and it has ``phases``, the agent is an exact :class:`Agent` whose phases are the very
    ones of the phase before, and the new class's module and qualified name are the very
    objects read when the pair was made (``MODULE``, ``QUALNAME``; its path ``PATH``). The
    header's entries are compared as ``_change``'s loop compares them, one by one; the
    fields made are the class's (``NOW``, in order: both the pair's body and
    ``_fields_change`` make every field of the class, in its order). The same document
    and ops as ``_change``; ``None`` (nothing done: the caller takes ``_change``) for
    anything else. tests/delta_reference.py holds the same logic written plainly (a
    frame for the pair's function), the tests' reference for this one."""
    lines = pair.splitlines()
    head = [
        "def change(old, before, phase, ops, calls):",
        "    if type(before) is not dict or tuple(before) != HAD:",
        "        return None",
    ]
    if lines[:3] != head or lines[-1] != "    return fields, merged":
        raise AssertionError("the pair's source is not of the form expected")
    body = [
        "    " + line.replace("    encoded = before[", "    encoded = fields_before[")
        for line in lines[3:-1]
    ]
    lines = [
        "def library(old, before, phase, calls):",
        "    version = before.get('version')",
        "    if type(version) is not int or version != DOCUMENT_VERSION:",
        "        return None",
        "    if 'phases' not in before:",
        "        return None",
        "    agent = phase.agent",
        "    if type(agent) is not Agent or agent.phases is not old.agent.phases:",
        "        return None",
        "    if cls.__module__ is not MODULE or cls.__qualname__ is not QUALNAME:",
        "        return None",
        "    path = PATH",
        "    kind, name = phase.kind, agent.name",
        "    ops = FiniteOps() if type(kind) is str and type(name) is str else []",
        "    moved = False",
        "    previous = before.get('kind')",
        "    if previous is not kind:",
        "        if previous == kind:",
        "            kind = previous",
        "        else:",
        "            moved = True",
        "    previous = before.get('class')",
        "    if previous is not path:",
        "        if previous == path:",
        "            path = previous",
        "        else:",
        "            moved = True",
        "    previous = before.get('agent')",
        "    if previous is not name:",
        "        if previous == name:",
        "            name = previous",
        "        else:",
        "            ops.append(['set', ['agent'], name])",
        "    fields_before = before['fields']",
        "    if type(fields_before) is dict and tuple(fields_before) == HAD:",
        *body,
        "    else:",
        "        fields, merged = _fields_change(cls, old, fields_before, phase, ops, calls)",
        "    table = before['phases']",
        "    document = {",
        "        'version': version,",
        "        'kind': kind,",
        "        'class': path,",
        "        'agent': name,",
        "        'phases': table,",
        "        'fields': fields,",
        "    }",
        "    if moved:",
        "        entry = table.get(kind)",
        "        if entry is not None and entry[0] == path:",
        # list(fields) is NOW (equal lists): an exact list is compared with NOW itself,
        # anything else (its __eq__ might keep or change what it is given) with a copy
        "            names = entry[1]",
        "            same = names == NOW if type(names) is list else names == list(fields)",
        "        else:",
        "            same = False",
        "        if not same:",
        "            return _moved(document, ops, fields_before, fields, merged, moved)",
        "    elif list(fields) != list(fields_before):",
        "        return _moved(document, ops, fields_before, fields, merged, moved)",
        "    if len(merged) == 1:",
        "        ((key, value),) = merged.items()",
        "        ops.append(['set', ['fields', key], value])",
        "    elif merged:",
        "        ops.append(['merge', ['fields'], merged])",
        "    if moved:",
        "        ops.append(['phase', kind])",
        "    return document, ops",
    ]
    return "\n".join(lines) + "\n"


def _pair_source(old: type[Phase[Any]], new: type[Phase[Any]], namespace: dict[str, Any]) -> str:
    """The source of ``change(old, before, phase, ops, calls)``: what
    ``_fields_change(new, old, before, phase, ops, calls)`` gives for a phase of class
    ``new`` after one of class ``old``, or ``None`` when ``before`` is not exactly a dict
    of the fields of ``old`` in their order (a document of other code: then the caller
    asks ``_fields_change``). The field names are the library's (identifiers)."""
    had = _field_names(old)
    namespace["HAD"] = had
    lines = [
        "def change(old, before, phase, ops, calls):",
        "    if type(before) is not dict or tuple(before) != HAD:",
        "        return None",
        "    fields = {}",
        "    merged = {}",
    ]
    for at, field in enumerate(_dumped_fields(new)):
        name = field.name
        namespace[f"F{at}"] = field
        scalar = _SCALARS.get(name)
        if scalar is not None:
            namespace[f"T{at}"] = scalar
        lines.append(f"    value = phase.{name}")
        if name not in had:  # a field the phase before had not: encoded whole
            if name == "call":
                lines += [  # _dump_field and _call_seen at once, for a call of text
                    "    made = _call_made(value)",
                    "    if made is not None:",
                    f"        fields[{name!r}] = merged[{name!r}] = made[8]",
                    "        calls[0] = made",
                    "    else:",
                    f"        fields[{name!r}] = merged[{name!r}] = _dump_field(cls, F{at}, value)",
                    f"        calls[0] = _call_seen(value, fields[{name!r}])",
                ]
            elif scalar is not None:
                lines += [
                    f"    if type(value) is T{at}:",
                    f"        fields[{name!r}] = merged[{name!r}] = value",
                    "    else:",
                    f"        fields[{name!r}] = merged[{name!r}] = _dump_field(cls, F{at}, value)",
                ]
            elif name == "output":
                lines += [  # _dump_field's case of it (_dump_output) for a flat dict, at once
                    "    flat = _flat(value) if type(value) is dict else None",
                    "    if flat is not None:",
                    "        flat = {'type': 'json', 'value': flat}",
                    f"        fields[{name!r}] = merged[{name!r}] = flat",
                    "    else:",
                    f"        fields[{name!r}] = merged[{name!r}] = _dump_field(cls, F{at}, value)",
                ]
            else:
                lines.append(
                    f"    fields[{name!r}] = merged[{name!r}] = _dump_field(cls, F{at}, value)"
                )
            continue
        lines += [
            "    try:",
            f"        previous = old.{name}",
            "    except AttributeError:",
            "        previous = _FAILED",
            f"    encoded = before[{name!r}]",
        ]
        if name in _SAME_BY_IDENTITY:
            lines.append("    if value is previous:")
        else:
            lines.append(
                "    if value is previous and "
                "(value is None or (type(value) is tuple and not value)):"
            )
        lines.append(f"        fields[{name!r}] = encoded")
        if scalar is not None:
            lines += [
                f"    elif type(value) is T{at}:",
                f"        if type(encoded) is T{at} and encoded == value:",
                f"            fields[{name!r}] = encoded",
                "        else:",
                f"            fields[{name!r}] = merged[{name!r}] = value",
            ]
        elif name == "transcript":
            lines += [  # _transcript_change's first case, without its frame
                "    elif (",
                "        type(previous) is Transcript",
                "        and type(value) is Transcript",
                "        and not previous._head",
                "        and not value._head",
                "    ):",
                "        chunks, tail, new_tail = previous._chunks, previous._tail, value._tail",
                *_GROWN_READ,
                *_APPENDED,
                "            item = new_tail[-1]",  # a message: _encode's branch, at once
                "            added = [_message(item) if type(item) is Message else _encode(item)]",
                f"            fields[{name!r}] = encoded + added",
                f"            ops.append(['append', ['fields', {name!r}], added])",
                "        else:",
                f"            fields[{name!r}], changes = _chunked_change(",
                "                (chunks, tail),",
                "                (value._chunks, new_tail),",
                "                value,",
                "                encoded,",
                f"                ['fields', {name!r}],",
                "                _MESSAGE_KEYS,",
                "            )",
                "            ops.extend(changes)",
                "    elif isinstance(previous, Sequence):",
                f"        fields[{name!r}], changes = _transcript_change(",
                f"            previous, encoded, value, ['fields', {name!r}]",
                "        )",
                "        ops.extend(changes)",
            ]
        elif name == "spent":
            lines += [
                "    elif type(value) is Spend and type(previous) is Spend:",
                f"        fields[{name!r}] = _spent(",
                f"            cls, F{at}, value, previous, encoded, ops, merged, calls",
                "        )",
            ]
        elif name == "loop":
            lines += [
                "    elif type(value) is LoopState and type(previous) is LoopState:",
                f"        fields[{name!r}] = _loop_fields(previous, encoded, value, ops)",
            ]
        elif name == "call":
            lines += [
                "    elif value is previous and _call_kept(value, calls[0], encoded):",
                f"        fields[{name!r}] = encoded",
            ]
        lines += [
            "    else:",
            f"        fields[{name!r}] = _compared(",
            f"            cls, F{at}, value, previous, encoded, ops, merged, calls",
            "        )",
        ]
    lines.append("    return fields, merged")
    return "\n".join(lines) + "\n"


# The generated functions' read of ``value._grown`` (``value`` an exact ``Transcript``
# or ``ActionLog``), ``None`` should it not be set (an object made by other code around
# the class's makers), and their test of it: the pair the library's append or replace
# made, of the very tail before and the very tail now, so the tail now holds the tail
# before's items first, the very objects (all of them, for a tail one longer; all but
# the last, for a tail of the same length: the last replaced), without a look at them.
_GROWN_READ: Final = [
    "        try:",
    "            grown = value._grown",
    "        except AttributeError:",
    "            grown = None",
]
_GROWN: Final = (
    "type(grown) is tuple and len(grown) == 2 and grown[1] is new_tail and grown[0] is tail"
)


def _appended(encoded: str) -> list[str]:
    """The test of :func:`_chunked_change`'s first case (one item appended to the tail,
    the chunks the very same), as the generated functions write it in place: ``chunks``
    and ``tail`` are the sequence's before, ``new_tail`` its tail now (of ``value``),
    ``grown`` its ``_grown`` (:data:`_GROWN_READ`) and ``encoded`` names its encoding
    before. Stricter only in the types it takes (an exact tuple on both sides, a list
    encoded): anything else goes to ``_chunked_change``. The tail before's items are
    looked at one by one only when ``grown`` does not tell they are there."""
    return [
        "        if (",
        "            value._chunks is chunks",
        "            and type(new_tail) is tuple",
        "            and type(tail) is tuple",
        "            and len(new_tail) == len(tail) + 1",
        f"            and type({encoded}) is list",
        f"            and len({encoded}) == len(chunks) + len(tail)",
        f"            and ({_GROWN} or all(map(_is, new_tail, tail)))",
        "        ):",
    ]


_APPENDED: Final = _appended("encoded")


def _loop_source(names: tuple[str, ...]) -> str:
    """The source of ``change(old, encoded, new, ops)``: :func:`_loop_change` written
    out for a loop memory of exactly ``LoopState`` (fields ``names``, identifiers, in
    order) on either side, whose encoding before, ``encoded``, is exactly a dict of
    those fields in that order (else it asks :func:`_loop_change`): a field holding the
    very object it held keeps its encoding without a look (the dict is copied in C), and
    a field of an exact ``int`` or ``str`` (its own encoding) is compared as itself. An
    action log grown by one record (:func:`_appended`), and an exact tuple moved on or
    grown by one exact ``str`` or ``int`` (the evidence window: ``_tuple_change``'s
    shift and append of one), are written in place, as those functions write them."""
    lines = [
        "def change(old, encoded, new, ops):",
        "    if type(encoded) is not dict or tuple(encoded) != NAMES:",
        "        return _loop_change(old, encoded, new, ops)",
        "    result = encoded.copy()",
        "    merged = {}",
    ]
    for name in names:
        lines += [
            f"    value = new.{name}",
            f"    before = old.{name}",
            "    if value is before:",
            "        pass",
            "    elif type(value) is ActionLog and type(before) is ActionLog:",
            "        chunks, tail, new_tail = before._chunks, before._tail, value._tail",
            f"        was = encoded[{name!r}]",
            *_GROWN_READ,
            *_appended("was"),
            "            added = [_encode(new_tail[-1])]",
            f"            result[{name!r}] = was + added",
            f"            ops.append(['append', ['fields', 'loop', {name!r}], added])",
            "        elif (",  # _chunked_change's second case: the last record settled
            "            value._chunks is chunks",
            "            and type(new_tail) is tuple",
            "            and type(tail) is tuple",
            "            and tail",
            "            and len(new_tail) == len(tail)",
            "            and type(new_tail[-1]) is ActionRecord",
            "            and type(tail[-1]) is ActionRecord",
            "            and type(was) is list",
            "            and len(was) == len(chunks) + len(tail)",
            "            and new_tail[-1] is not tail[-1]",
            f"            and ({_GROWN} or all(map(_is, new_tail, tail[:-1])))",
            "        ):",
            "            made = _record_fields(new_tail[-1], tail[-1], was[-1])",
            "            if made is None:",  # what _chunked_change does then
            f"                result[{name!r}], changes = _chunked_plain(",
            "                    (chunks, tail),",
            "                    (value._chunks, new_tail),",
            "                    value,",
            "                    was,",
            f"                    ['fields', 'loop', {name!r}],",
            "                    _RECORD_FIELDS,",
            "                )",
            "                ops.extend(changes)",
            "            else:",
            "                settled, changed = made",
            f"                result[{name!r}] = [*was[:-1], settled]",
            "                if len(changed) == 1:",  # _merge's op, in place
            "                    ((key, item),) = changed.items()",
            f"                    at = ['fields', 'loop', {name!r}, len(was) - 1, key]",
            "                    ops.append(['set', at, item])",
            "                elif changed:",
            f"                    at = ['fields', 'loop', {name!r}, len(was) - 1]",
            "                    ops.append(['merge', at, changed])",
            "        else:",
            f"            result[{name!r}], changes = _chunked_change(",  # as _log_change asks
            "                (chunks, tail),",
            "                (value._chunks, new_tail),",
            "                value,",
            "                was,",
            f"                ['fields', 'loop', {name!r}],",
            "                _RECORD_FIELDS,",
            "            )",
            "            ops.extend(changes)",
            "    elif type(value) is tuple and type(before) is tuple:",
            f"        was = encoded[{name!r}]",
            "        size = len(before)",
            "        if (",  # _tuple_change's shift of one: a window moved on by an item
            "            size > 1",
            "            and len(value) == size",
            "            and value[0] is not before[0]",
            "            and type(was) is list",
            "            and (type(value[-1]) is str or type(value[-1]) is int)",
            "            and all(map(_is, value, before[1:]))",
            "        ):",
            "            added = [value[-1]]",  # an exact str or int: its own encoding
            f"            result[{name!r}] = was[1:] + added",
            f"            ops.append(['shift', ['fields', 'loop', {name!r}], 1, added])",
            "        elif (",  # its append of one
            "            len(value) == size + 1",
            "            and type(was) is list",
            "            and (type(value[-1]) is str or type(value[-1]) is int)",
            "            and all(map(_is, value, before))",
            "        ):",
            "            added = [value[-1]]",
            f"            result[{name!r}] = was + added",
            f"            ops.append(['append', ['fields', 'loop', {name!r}], added])",
            "        else:",
            f"            result[{name!r}], op = _tuple_change(",
            f"                before, was, value, ['fields', 'loop', {name!r}]",
            "            )",
            "            if op is not None:",
            "                ops.append(op)",
            "    elif isinstance(value, tuple) and isinstance(before, tuple):",
            f"        result[{name!r}], op = _tuple_change(",
            f"            before, encoded[{name!r}], value, ['fields', 'loop', {name!r}]",
            "        )",
            "        if op is not None:",
            "            ops.append(op)",
            "    elif type(value) is int or type(value) is str:",
            f"        was = encoded[{name!r}]",
            "        if type(was) is not type(value) or was != value:",
            f"            result[{name!r}] = merged[{name!r}] = value",
            "    else:",
            "        now = _encode(value)",
            f"        if not _same(now, encoded[{name!r}]):",
            f"            result[{name!r}] = merged[{name!r}] = now",
        ]
    lines += [
        "    if len(merged) == 1:",
        "        ((key, value),) = merged.items()",
        "        ops.append(['set', ['fields', 'loop', key], value])",
        "    elif merged:",
        "        ops.append(['merge', ['fields', 'loop'], merged])",
        "    return result",
    ]
    return "\n".join(lines) + "\n"


def _loop_made() -> Callable[[LoopState, Any, LoopState, list[list[Any]]], dict[str, Any]]:
    names = _names(LoopState)
    namespace: dict[str, Any] = {
        "NAMES": names,
        "ActionLog": ActionLog,
        "_log_change": _log_change,
        "_chunked_change": _chunked_change,
        "_chunked_plain": _chunked_plain,
        "_record_fields": _record_fields,
        "ActionRecord": ActionRecord,
        "_RECORD_FIELDS": _RECORD_FIELDS,
        "_is": _is,
        "_tuple_change": _tuple_change,
        "_loop_change": _loop_change,
        "_encode": _encode,
        "_same": _same,
    }
    exec(compile(_loop_source(names), "<statemachine dump LoopState>", "exec"), namespace)
    made: Callable[[LoopState, Any, LoopState, list[list[Any]]], dict[str, Any]]
    made = namespace["change"]
    return made


def _by_fields_source(names: tuple[str, ...]) -> str:
    """The source of ``change(value, previous, encoded)``: ``_by_fields(value, previous,
    encoded, names, attrgetter(*names))`` written out for the fields ``names``
    (identifiers): each field read by name, the encoding before copied in C when it is an
    object of exactly those fields in that order, and only a field that is not the very
    object ``previous`` held encoded and compared (an exact ``str``, its own encoding,
    compared as ``_same`` compares two texts)."""
    lines = [
        "def change(value, previous, encoded):",
        "    if type(encoded) is not dict or len(encoded) != SIZE or tuple(encoded) != NAMES:",
        "        return None",
        "    new = encoded.copy()",
        "    parts = {}",
    ]
    # Every field of ``value`` read, then every field of ``previous``, as the two
    # attrgetters of ``_by_fields`` read them (the same error, should one be missing).
    lines += [f"    v{at} = value.{name}" for at, name in enumerate(names)]
    lines += [f"    p{at} = previous.{name}" for at, name in enumerate(names)]
    for at, name in enumerate(names):
        lines += [
            f"    if v{at} is not p{at}:",
            f"        if type(v{at}) is str:",  # its own encoding; _same in place
            f"            new[{name!r}] = v{at}",
            f"            was = encoded[{name!r}]",
            f"            if was is not v{at} and (type(was) is not str or was != v{at}):",
            f"                parts[{name!r}] = v{at}",
            "        else:",
            f"            new[{name!r}] = now = _encode(v{at})",
            f"            if not _same(now, encoded[{name!r}]):",
            f"                parts[{name!r}] = now",
        ]
    lines.append("    return new, parts")
    return "\n".join(lines) + "\n"


def _by_fields_made(
    names: tuple[str, ...],
) -> Callable[[Any, Any, Any], tuple[dict[str, Any], dict[str, Any]] | None]:
    namespace: dict[str, Any] = {
        "NAMES": names,
        "SIZE": len(names),
        "_encode": _encode,
        "_same": _same,
    }
    exec(compile(_by_fields_source(names), "<statemachine dump by fields>", "exec"), namespace)
    made: Callable[[Any, Any, Any], tuple[dict[str, Any], dict[str, Any]] | None]
    made = namespace["change"]
    return made


# ``_by_fields`` for two action records (exact ``ActionRecord``: the caller's test).
_record_fields: Final = _by_fields_made(_RECORD_FIELDS)


# :func:`_loop_change` for a loop memory of exactly ``LoopState`` before and now (the
# functions of :func:`_pair` ask it only then); made after ``_record_fields``, which it
# holds.
_loop_fields: Final = _loop_made()
