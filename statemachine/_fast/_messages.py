"""Messages, transcripts and results built without pydantic's or json's long way (see ``_fast``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, Final

from .. import _json
from .._model import _CHUNK, Message, ModelRequest, ToolRequest, Transcript
from ._canonical import _INT_BOUND, _plain_item
from ._making import making_class

__all__ = [
    "_REQUEST_FIELDS",
    "_appended",
    "_asking",
    "_c_writes_as_dumps",
    "_message",
    "_model_request",
    "_request",
    "_result_text",
    "_system",
    "_told",
]

# The fields set of every ToolRequest made here: all three, in one set they share (a
# frozen model never changes its set; model_copy copies it before adding to it).
_REQUEST_ID_FIELDS = {"name", "arguments", "id"}

_new = object.__new__


def _called(cls: type[Any]) -> Callable[[], Any]:
    """``making_class(cls)``, made to be called with no argument: its ``__init__`` is
    ``object``'s (it sets nothing), so ``maker()`` is ``object.__new__(maker)``, one
    object of the making class and nothing stored, by the type's own call (without
    ``object.__new__``'s argument checks, ~300 instructions fewer an object)."""
    made = making_class(cls)
    type.__setattr__(made, "__init__", object.__init__)
    return made


# A Message being made by _message: see making_class.
_MakingMessage = _called(Message)


def _message(
    role: str, content: str, tool_calls: tuple[ToolRequest, ...], tool_call_id: str, name: str
) -> Message:
    """``Message(role=..., ...)`` for values known valid, as its ``__init__`` makes it
    (the values are text the library made, or a tuple of validated ``ToolRequest`` s):
    its slots stored as ``object`` stores them (``_MakingMessage``), then the class its own."""
    making: Any = _MakingMessage()
    making.role = role
    making.content = content
    making.tool_calls = tool_calls
    making.tool_call_id = tool_call_id
    making.name = name
    making.__class__ = Message
    made: Message = making
    return made


# A ToolRequest being made by _request: see making_class.
_MakingRequest = _called(ToolRequest)


def _request(name: str, arguments: str, call_id: str) -> ToolRequest:
    """``ToolRequest(name=..., arguments=..., id=...)`` for text known to be text: what
    ``_trusted(ToolRequest, values, _REQUEST_ID_FIELDS)`` makes, in this one frame, its
    slots stored as ``object`` stores them (``_MakingRequest``), then the class its own."""
    making: Any = _MakingRequest()  # ToolRequest.__new__ is object's
    making.__dict__ = {"name": name, "arguments": arguments, "id": call_id}
    making.__pydantic_fields_set__ = _REQUEST_ID_FIELDS
    making.__pydantic_extra__ = None
    making.__pydantic_private__ = None
    making.__class__ = ToolRequest
    made: ToolRequest = making
    return made


# A ModelRequest being made by _model_request: see making_class.
_MakingModelRequest = _called(ModelRequest)


def _model_request(
    messages: Transcript,
    tools: tuple[dict[str, Any], ...],
    timeout: float | None,
    output_schema: dict[str, Any] | None,
    settings: Any,
) -> ModelRequest:
    """``ModelRequest.model_construct(messages=..., ...)`` with its five fields, all set, for
    values valid already (the run's transcript, the tools' schemas, the agent's settings):
    its slots stored as ``object`` stores them (``_MakingModelRequest``), then the class
    its own."""
    making: Any = _MakingModelRequest()  # ModelRequest.__new__ is object's
    making.__dict__ = {
        "messages": messages,
        "tools": tools,
        "timeout": timeout,
        "output_schema": output_schema,
        "settings": settings,
    }
    making.__pydantic_fields_set__ = _REQUEST_FIELD_SET.copy()  # set(_REQUEST_FIELDS), its own
    making.__pydantic_extra__ = None
    making.__pydantic_private__ = None
    making.__class__ = ModelRequest
    made: ModelRequest = making
    return made


def _asking(name: str, arguments: str, call_id: str) -> Message:
    """A tool-call message: ``Message(role="assistant", tool_calls=(ToolRequest(name=...,
    arguments=..., id=...),))``.

    Text is not checked again (on the hot path); anything else goes through the
    classes' own checks, and their errors.
    """
    if type(name) is str and type(arguments) is str and type(call_id) is str:
        return _message("assistant", "", (_request(name, arguments, call_id),), "", "")
    request = ToolRequest(name=name, arguments=arguments, id=call_id)
    return Message(role="assistant", tool_calls=(request,))


def _system(content: str) -> Message:
    """A system message: ``Message(role="system", content=content)``."""
    if type(content) is str:
        return _message("system", content, (), "", "")
    return Message(role="system", content=content)


def _told(content: str, call_id: str, name: str) -> Message:
    """A tool's result: ``Message(role="tool", content=..., tool_call_id=..., name=...)``."""
    if type(content) is str and type(call_id) is str and type(name) is str:
        # _message("tool", content, (), call_id, name), in this frame
        making: Any = _MakingMessage()
        making.role = "tool"
        making.content = content
        making.tool_calls = ()
        making.tool_call_id = call_id
        making.name = name
        making.__class__ = Message
        made: Message = making
        return made
    return Message(role="tool", content=content, tool_call_id=call_id, name=name)


_REQUEST_FIELDS = tuple(ModelRequest.model_fields)
# Copied for each request (a model may change the set it is handed): never changed here.
_REQUEST_FIELD_SET: Final = set(_REQUEST_FIELDS)


def _appended(transcript: Sequence[Message], *new: Message) -> Transcript:
    """``transcript`` with ``new`` after it, sharing its messages when it is a transcript.

    A phase built by hand may hold a tuple: it becomes a transcript here.

    For a ``Transcript`` itself, ``Transcript.appended``'s steps in this frame while the
    tail stays within a chunk (the same operations in the same order, without its frame
    and the call's unpacking: tests/test_fast_runner5.py); a tail that fills a chunk is
    cut by ``appended`` itself.
    """
    if type(transcript) is Transcript:
        tail = transcript._tail + new
        if len(tail) <= _CHUNK:
            made: Transcript = _new(Transcript)
            made._head, made._chunks, made._tail = transcript._head, transcript._chunks, tail
            made._grown = (transcript._tail, tail)
            return made
        return transcript.appended(*new)
    return Transcript((*transcript, *new))


def _plain_chunks() -> Callable[[Any, int], Any] | None:
    """The C encoder's function writing a value as ``JSONEncoder(ensure_ascii=False,
    separators=(",", ":"))`` does, keys in their order, made once; ``None`` where CPython's
    ``_json`` is missing. Without the check for circular containers and without a
    ``default``: only for values ``_plain_json`` has walked."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    # markers, default, encoder, indent, key separator, item separator, sort_keys,
    # skipkeys, allow_nan: the order of json.encoder's own call.
    chunks: Callable[[Any, int], Any] = make(
        None, _refuse, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
    return chunks


def _refuse(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not written by the plain C encoder")


_plain_c: Final = _plain_chunks()

# orjson's dumps, imported on the first plain result (not with the package: import time).
_orjson_dumps: Callable[[Any], bytes] | None = None


def _load_orjson() -> Callable[[Any], bytes]:
    global _orjson_dumps
    import orjson

    _orjson_dumps = orjson.dumps
    return orjson.dumps


# The types of a flat result's values that orjson writes as ``_result_text`` does (its
# first case): an int orjson writes has at most 20 digits, within ``_INT_BOUND``.
_FLAT: Final = frozenset({str, int, bool, type(None)})


def _result_text(value: Any) -> str:
    """``_json.dumps(value)``: a dict of plain JSON (``_plain_json``) as the C encoder
    itself writes it (which is as ``dumps`` does), by orjson, whose UTF-8 is that very
    text for every value ``_plain_json`` passes (exact text, bools, ``None``, ints, dicts
    of text keys in their order, lists and tuples: tests/test_fast_runner4.py, every code
    point); what orjson refuses (a lone surrogate, an int beyond 64 bits, nesting past its
    depth) by the C encoder. Else in C (``dumps_fast``) when ``_c_writes_as_dumps(value)``.
    One spelling differs, as in ``dumps_fast``: a float with a negative exponent is
    written as ``repr`` writes it (``1e-07``, where ``dumps`` writes ``0.0000001``), the
    same number when read back; the same value always takes the same path, so its text
    does not change from one transition or run to the next."""
    # Every value exactly text, an int, a bool or None (asked in C, of the values' types):
    # orjson writes it as the check below would have it written, or refuses it (a key
    # that is not exactly text, an int beyond 64 bits, a lone surrogate), and then the
    # whole way below judges it as before.
    if type(value) is dict and _plain_c is not None and _FLAT.issuperset(map(type, value.values())):
        try:
            return (_orjson_dumps or _load_orjson())(value).decode()
        except TypeError:  # orjson.JSONEncodeError
            pass
    if type(value) is dict and _plain_c is not None:
        # _plain_json(value) in this frame: its dict's loop, each item as it judges it
        # (a break where it answers False; the else where it answers True).
        for key, item in value.items():
            if type(key) is not str:
                break
            kind = type(item)
            if kind is str or kind is bool or item is None:
                continue
            if kind is int:
                number: int = item
                if -_INT_BOUND < number < _INT_BOUND:
                    continue
                break
            if not _plain_item(item):
                break
        else:
            dumps = _orjson_dumps or _load_orjson()
            try:
                return dumps(value).decode()
            except TypeError:  # orjson.JSONEncodeError
                return "".join(_plain_c(value, 0))
    if _c_writes_as_dumps(value):
        return _json.dumps_fast(value)
    return _json.dumps(value)


_LEAVES = frozenset({str, int, float, bool, type(None), Decimal})


def _c_writes_as_dumps(value: Any) -> bool:
    """Whether ``_json.dumps_fast(value)`` is ``_json.dumps(value)``, error for error.

    ``dumps_fast`` writes a key that is not text (``dumps`` refuses it), an int or float
    subclass as its number (``dumps`` writes its ``str`` and ``repr``), and a list
    subclass as a list, whatever its ``__iter__`` (``dumps`` iterates it). Those, and
    subclasses of dict and tuple, are left to ``dumps``; a value of any other type
    ``dumps_fast`` hands to ``dumps`` whole itself.
    """
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if not isinstance(key, str):
                return False
            # A leaf is read here (a tool's result is mostly a flat dict), not by a call.
            if type(item) not in _LEAVES and not _c_writes_as_dumps(item):
                return False
        return True
    if kind is list or kind is tuple:
        return all(_c_writes_as_dumps(item) for item in value)
    if kind in _LEAVES:
        return True
    return not isinstance(value, int | float | dict | list | tuple)
