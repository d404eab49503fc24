"""A checkpoint's messages, action records and chunks read back: the short ways, and the
chunks of a version 2 document read when first needed.

A document written by :func:`~statemachine.persist.dump_phase` holds each message and
action record in one form (all fields, in order, text as text); those are made here by
setting their slots, as the hot path makes them, and anything else goes the long way
(``model_validate`` of the decoded value), with its checks and errors. In version 2 a
transcript's and an action log's full chunks (32 items) are each one string, their JSON
text: a loaded transcript or log holds the string, and reads it here (once: it is kept)
when an item of it is first needed. A chunk that does not read back is
:class:`CheckpointCorruptError`, raised then.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Final

from .. import _actions, _json, _model
from .._actions import _EFFECTS, _OUTCOMES, _RECORD_FIELDS, ActionLog, ActionRecord, _record
from .._errors import CheckpointCorruptError
from .._fast._messages import _message, _request
from .._governor import LoopState
from .._model import _CHUNK, Message, ToolRequest, Transcript

__all__ = [
    "_MESSAGE_KEYS",
    "_decode",
    "_load_loop",
    "_load_message",
    "_load_record",
    "_load_transcript",
    "_packed",
    "_read_messages",
    "_read_records",
    "_text",
    "_unpacked",
]


def _decode(value: Any) -> Any:
    """The inverse of the codec's ``_encode``, up to lists for tuples (a schema makes
    them tuples)."""
    if isinstance(value, dict):
        if len(value) == 1:
            (key, item), *_ = value.items()
            if key == "$decimal":
                return Decimal(_text(item, key))
            if key == "$float":
                return float(_text(item, key))
            if key == "$object":
                if not isinstance(item, dict):
                    raise TypeError("a $object holds an object")
                return {k: _decode(v) for k, v in item.items()}
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(item) for item in value]
    return value


_MESSAGE_KEYS: Final = ("role", "content", "tool_calls", "tool_call_id", "name")
_REQUEST_KEYS: Final = ("name", "arguments", "id")
_MESSAGE_ROLES: Final = frozenset(("system", "user", "assistant", "tool"))


def _load_message(item: Any) -> Message:
    """``Message.model_validate(_decode(item))``, taking a short way for the form
    ``dump_phase`` writes (all five fields, text as text, each tool call's three fields
    as text); anything else goes the long way, with its checks and errors."""
    if type(item) is dict and tuple(item) == _MESSAGE_KEYS:
        role, content, calls, call_id, name = item.values()
        if (
            type(role) is str
            and role in _MESSAGE_ROLES
            and type(content) is str
            and type(call_id) is str
            and type(name) is str
            and type(calls) is list
        ):
            requests: list[ToolRequest] = []
            for call in calls:
                request = _load_request(call)
                if request is None:
                    break
                requests.append(request)
            else:
                return _message(role, content, tuple(requests), call_id, name)
    return Message.model_validate(_decode(item))


def _load_request(call: Any) -> ToolRequest | None:
    """The tool call ``call`` holds when it is in the form ``dump_phase`` writes, else None."""
    if type(call) is dict and tuple(call) == _REQUEST_KEYS:
        name, arguments, call_id = call.values()
        if type(name) is str and type(arguments) is str and type(call_id) is str:
            return _request(name, arguments, call_id)
    return None


def _load_loop(value: Any, chunked: bool) -> LoopState:
    """``LoopState.model_validate(_decode(value))``, its actions read the short way when
    every one is in the form ``dump_phase`` writes (else all of it goes the long way);
    in version 2, the full chunks of actions held as text are read when first needed."""
    actions = value.get("actions") if type(value) is dict else None
    if type(actions) is list:
        texts, items = _split_chunks(actions, chunked, "the loop's actions")
        records: list[ActionRecord] = []
        for item in items:
            record = _load_record(item)
            if record is None:
                break
            records.append(record)
        else:
            rest = _decode({key: item for key, item in value.items() if key != "actions"})
            return LoopState.model_validate({**rest, "actions": _log(texts, records)})
        if texts:  # the long way for the records after the chunks, the chunks as they are
            log = _log(texts, [ActionRecord.model_validate(_decode(item)) for item in items])
            rest = _decode({key: item for key, item in value.items() if key != "actions"})
            return LoopState.model_validate({**rest, "actions": log})
    return LoopState.model_validate(_decode(value))


def _split_chunks(items: list[Any], chunked: bool, what: str) -> tuple[tuple[str, ...], list[Any]]:
    """The leading strings of a version 2 list (its full chunks, as text), and the rest."""
    if not chunked:
        return (), items
    count = 0
    while count < len(items) and type(items[count]) is str:
        count += 1
    if any(type(item) is str for item in items[count:]):
        raise TypeError(f"{what} hold text where an object belongs")
    return tuple(items[:count]), items[count:]


def _log(texts: tuple[str, ...], records: list[ActionRecord]) -> ActionLog:
    """The action log of the chunks ``texts`` (read when first needed), then ``records``."""
    if not texts:
        return ActionLog(records)
    if not records:
        raise ValueError("the loop's actions end with a chunk: the records after it are missing")
    log = ActionLog._of(texts, ())
    for record in records:
        log = log.appended(record)
    return log


def _load_transcript(value: Any, chunked: bool) -> Transcript:
    """The transcript of a document's list; in version 2, its leading strings are full
    chunks (their JSON text), read when a message of them is first needed."""
    if type(value) is not list:
        raise TypeError("the transcript is a list")
    texts, items = _split_chunks(value, chunked, "the transcript's messages")
    messages = [_load_message(item) for item in items]
    if not texts:
        return Transcript(messages)
    if not messages:
        raise ValueError("the transcript ends with a chunk: the messages after it are missing")
    return Transcript._of((), texts, ()).appended(*messages)


def _packed(items: list[Any], keys: Sequence[str]) -> str:
    """A full chunk's text in a version 2 document: its items, each an object of exactly
    ``keys`` in that order, written as the list of the object's values (the keys, said
    once per item in version 1, are the chunk's kind's), the chunk as JSON.

    A chunk of the codec's messages or action records (``keys`` the very tuple of either)
    whose every value is of the plain form the codec writes is checked and turned into
    rows in one pass (:func:`_message_rows`, :func:`_record_rows`) and written by orjson,
    as ``dumps_rows`` writes plain rows; anything else, the general way below, with its
    checks and errors (tests/test_delta_fast21f.py)."""
    if keys is _MESSAGE_KEYS:
        plain = _message_rows(items)
    elif keys is _RECORD_FIELDS:
        plain = _record_rows(items)
    else:
        plain = None
    if plain is not None:  # plain rows (``_json._plain_rows``): dumps_rows's orjson branch
        orjson = _json._orjson or _json._import_orjson()
        try:
            data: bytes = orjson.dumps(plain, option=_json._plain_options)
        except TypeError:  # an int beyond 64 bits, a lone surrogate: as dumps_rows does
            return _json.dumps_fast(plain)
        return data.decode()
    return _packed_plain(items, keys)


def _packed_plain(items: list[Any], keys: Sequence[str]) -> str:
    """:func:`_packed` the general way: each item's keys compared with ``keys``, its
    values made a row, the rows written by ``dumps_rows``."""
    rows: list[list[Any]] = []
    names = list(keys)
    for item in items:
        if type(item) is not dict or list(item) != names:
            raise ValueError(f"a chunk packs objects of the fields {', '.join(keys)}")
        rows.append(list(item.values()))
    return _json.dumps_rows(rows)  # dumps_fast's text, by orjson when the rows are plain


def _message_rows(items: list[Any]) -> list[list[Any]] | None:
    """The rows of a chunk of messages as :func:`_packed_plain` makes them, when each item
    is exactly a dict of ``_MESSAGE_KEYS`` in order whose four texts are exact ``str`` and
    whose tool calls are an exact list of exact dicts of exact ``str`` keys and values (the
    codec's form, plain by ``_json._plain``); ``None`` for anything else."""
    rows: list[list[Any]] = []
    for item in items:
        if type(item) is not dict or tuple(item) != _MESSAGE_KEYS:
            return None
        role, content, calls, call_id, name = row = list(item.values())
        if not (str is type(role) is type(content) is type(call_id) is type(name)):
            return None
        if type(calls) is not list:
            return None
        for call in calls:
            if type(call) is not dict:
                return None
            for key, value in call.items():
                if type(key) is not str or type(value) is not str:
                    return None
        rows.append(row)
    return rows


def _record_rows(items: list[Any]) -> list[list[Any]] | None:
    """The rows of a chunk of action records as :func:`_packed_plain` makes them, when
    each item is exactly a dict of ``_RECORD_FIELDS`` in order whose eight texts are exact
    ``str`` and whose gain is ``None`` or an exact dict of exact ``str`` keys and values
    (the codec's ``{"$float": ...}``: plain by ``_json._plain``); ``None`` for anything else."""
    rows: list[list[Any]] = []
    for item in items:
        if type(item) is not dict or tuple(item) != _RECORD_FIELDS:
            return None
        call_id, tool, effect, exact, key, text, outcome, result, gain = row = list(item.values())
        if not (
            str
            is type(call_id)
            is type(tool)
            is type(effect)
            is type(exact)
            is type(key)
            is type(text)
            is type(outcome)
            is type(result)
        ):
            return None
        if gain is not None:
            if type(gain) is not dict:
                return None
            for tag, value in gain.items():
                if type(tag) is not str or type(value) is not str:
                    return None
        rows.append(row)
    return rows


def _chunk_items(text: str, what: str, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """The objects a chunk's text (see :func:`_packed`) holds, each of ``keys``."""
    try:
        rows = _json.loads(text)
    except ValueError as error:
        raise _damaged_chunk(what, f"is not JSON ({error})") from None
    if type(rows) is not list or len(rows) != _CHUNK:
        raise _damaged_chunk(what, f"is not a list of {_CHUNK}")
    items: list[dict[str, Any]] = []
    for row in rows:
        if type(row) is not list or len(row) != len(keys):
            raise _damaged_chunk(what, f"holds an item that is not a list of {len(keys)}")
        items.append(dict(zip(keys, row, strict=True)))
    return items


def _damaged_chunk(what: str, problem: str) -> CheckpointCorruptError:
    return CheckpointCorruptError(
        f"a chunk of {what} kept as text in the checkpoint this run was loaded from "
        f"{problem}. The stored checkpoint is damaged; restore it from a trusted copy"
    )


@functools.lru_cache(maxsize=1024)
def _read_messages(text: str) -> tuple[Message, ...]:
    """The messages of a transcript's chunk held as text (kept: a chunk is read once)."""
    items = _chunk_items(text, "the transcript", _MESSAGE_KEYS)
    try:
        return tuple(_load_message(item) for item in items)
    except (TypeError, ValueError) as error:
        raise _damaged_chunk(
            "the transcript", f"holds a message that is not one ({error})"
        ) from None


@functools.lru_cache(maxsize=1024)
def _read_records(text: str) -> tuple[ActionRecord, ...]:
    """The records of an action log's chunk held as text (kept: a chunk is read once)."""
    records: list[ActionRecord] = []
    items = _chunk_items(text, "the loop's actions", _RECORD_FIELDS)
    try:
        for item in items:
            record = _load_record(item)
            records.append(ActionRecord.model_validate(_decode(item)) if record is None else record)
    except (TypeError, ValueError) as error:
        raise _damaged_chunk(
            "the loop's actions", f"holds a record that is not one ({error})"
        ) from None
    return tuple(records)


def _unpacked(fields: dict[str, Any]) -> dict[str, Any]:
    """A document's fields with each chunk held as text written out again as the objects
    it holds, as version 1 wrote them: for a reader of the document itself (``runs
    show``, the inbox's conversation). A chunk that does not read is left as it is."""
    out = dict(fields)
    transcript = out.get("transcript")
    if type(transcript) is list:
        out["transcript"] = _expanded(transcript, _MESSAGE_KEYS)
    loop = out.get("loop")
    if type(loop) is dict and type(loop.get("actions")) is list:
        out["loop"] = {**loop, "actions": _expanded(loop["actions"], _RECORD_FIELDS)}
    return out


def _expanded(items: list[Any], keys: tuple[str, ...]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if type(item) is not str:
            out.append(item)
            continue
        try:
            out.extend(_chunk_items(item, "a document", keys))
        except CheckpointCorruptError:
            out.append(item)
    return out


# Transcripts and action logs loaded from a checkpoint read their chunks through these.
_model._chunk_reader = _read_messages
_actions._chunk_reader = _read_records


def _load_record(item: Any) -> ActionRecord | None:
    """The action record ``item`` holds when it is in the form ``dump_phase`` writes (its
    fields in order, text as text, the gain ``None`` or a finite ``$float``), else None."""
    if type(item) is not dict or tuple(item) != _RECORD_FIELDS:
        return None
    call_id, tool, effect, exact, key, text, outcome, result, gain = item.values()
    for field in (call_id, tool, effect, exact, key, text, outcome, result):
        if type(field) is not str:
            return None
    if effect not in _EFFECTS or outcome not in _OUTCOMES:
        return None
    if gain is not None:
        if type(gain) is not dict or len(gain) != 1 or type(gain.get("$float")) is not str:
            return None
        try:
            gain = float(gain["$float"])
        except ValueError:
            return None
        if not math.isfinite(gain):
            return None
    return _record(call_id, tool, effect, exact, key, text, outcome, result, gain)


def _text(value: Any, tag: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a {tag} holds text")
    return value
