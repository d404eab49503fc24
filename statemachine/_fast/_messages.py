"""Messages, transcripts and results built without pydantic's or json's long way (see ``_fast``)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from .. import _json
from .._model import Message, ModelRequest, ToolRequest, Transcript
from ._pydantic import _trusted

__all__ = [
    "_REQUEST_FIELDS",
    "_appended",
    "_asking",
    "_c_writes_as_dumps",
    "_result_text",
    "_system",
    "_told",
]

_ASKING_FIELDS = frozenset({"role", "tool_calls"})
_REQUEST_ID_FIELDS = frozenset({"name", "arguments", "id"})
_TOLD_FIELDS = frozenset({"role", "content", "tool_call_id", "name"})
_SYSTEM_FIELDS = frozenset({"role", "content"})


def _asking(name: str, arguments: str, call_id: str) -> Message:
    """``Message(role="assistant", tool_calls=(ToolRequest(name=..., arguments=..., id=...),))``.

    Text is not validated again (on the hot path, as pydantic would make the two
    models); anything else goes through validation, and its error, as before.
    """
    if type(name) is str and type(arguments) is str and type(call_id) is str:
        request = _trusted(
            ToolRequest,
            {"name": name, "arguments": arguments, "id": call_id},
            set(_REQUEST_ID_FIELDS),
        )
        values = {
            "role": "assistant",
            "content": "",
            "tool_calls": (request,),
            "tool_call_id": "",
            "name": "",
        }
        return _trusted(Message, values, set(_ASKING_FIELDS))
    request = ToolRequest(name=name, arguments=arguments, id=call_id)
    return Message(role="assistant", tool_calls=(request,))


def _system(content: str) -> Message:
    """``Message(role="system", content=content)``, as ``_asking`` makes its message."""
    if type(content) is str:
        values = {
            "role": "system",
            "content": content,
            "tool_calls": (),
            "tool_call_id": "",
            "name": "",
        }
        return _trusted(Message, values, set(_SYSTEM_FIELDS))
    return Message(role="system", content=content)


def _told(content: str, call_id: str, name: str) -> Message:
    """``Message(role="tool", content=..., tool_call_id=..., name=...)``, as ``_asking``."""
    if type(content) is str and type(call_id) is str and type(name) is str:
        values = {
            "role": "tool",
            "content": content,
            "tool_calls": (),
            "tool_call_id": call_id,
            "name": name,
        }
        return _trusted(Message, values, set(_TOLD_FIELDS))
    return Message(role="tool", content=content, tool_call_id=call_id, name=name)


_REQUEST_FIELDS = tuple(ModelRequest.model_fields)


def _appended(transcript: Sequence[Message], *new: Message) -> Transcript:
    """``transcript`` with ``new`` after it, sharing its messages when it is a transcript.

    A phase built by hand may hold a tuple: it becomes a transcript here.
    """
    if type(transcript) is Transcript:
        return transcript.appended(*new)
    return Transcript((*transcript, *new))


def _result_text(value: Any) -> str:
    """``_json.dumps(value)``: in C (``dumps_fast``) when ``_c_writes_as_dumps(value)``."""
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
            if not isinstance(key, str) or not _c_writes_as_dumps(item):
                return False
        return True
    if kind is list or kind is tuple:
        return all(_c_writes_as_dumps(item) for item in value)
    if kind in _LEAVES:
        return True
    return not isinstance(value, int | float | dict | list | tuple)
