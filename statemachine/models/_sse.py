"""A streamed chat completion read back into one: server-sent events, deltas accumulated.

A server asked for ``"stream": true`` answers ``text/event-stream``: lines
``data: {json}``, each a ``chat.completion.chunk`` whose ``choices[0].delta`` holds
the text (``content``), refusal or tool-call pieces written since the last one, and a
last ``data: [DONE]``. Tool calls come in pieces by ``index``: the first carries the
``id`` and the function's ``name``, later ones more of its ``arguments`` text. Usage
comes, if the server sends it, in a chunk of its own (OpenAI's, with
``stream_options.include_usage``) or with the last choice.

:class:`_Completion` collects them and gives back the document a non-streamed call
would have answered, so that the adapter reads both the same way.
"""

from __future__ import annotations

from typing import Any, Final, final

from .. import _json

__all__ = ["DONE", "_Completion", "_StreamBroken", "_StreamMalformed", "data_of"]

DONE: Final = "[DONE]"


class _StreamMalformed(Exception):
    """An event whose data is not a chat completion chunk."""


class _StreamBroken(Exception):
    """The server reported an error in the stream, after its 200."""


def data_of(line: str) -> str | None:
    """The data of one event-stream line; ``None`` for a comment, an empty line, or a field
    other than ``data`` (``event:``, ``id:``, ``retry:``)."""
    if not line.startswith("data:"):
        return None
    data = line[5:]
    return data[1:] if data.startswith(" ") else data


@final
class _Completion:
    """The chunks of one streamed completion, added as they come."""

    __slots__ = ("_calls", "_content", "_finish", "_refusal", "_usage", "done")

    def __init__(self) -> None:
        self._content: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, dict[str, str]] = {}
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self.done = False

    @property
    def finished(self) -> bool:
        """Whether the server said the answer is over (``[DONE]`` or a finish reason)."""
        return self.done or self._finish is not None

    def add(self, data: str) -> str:
        """Add one event's data; the text it adds (``""`` for none)."""
        if data.strip() == DONE:
            self.done = True
            return ""
        try:
            chunk = _json.loads(data, bounded=True)
        except (ValueError, RecursionError):
            raise _StreamMalformed("an event's data is not JSON") from None
        if not isinstance(chunk, dict):
            raise _StreamMalformed("an event's data is not a JSON object")
        error = chunk.get("error")
        if error is not None:
            said = error.get("message") if isinstance(error, dict) else error
            raise _StreamBroken(str(said) if said else "the server sent an error event")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return ""  # a usage-only chunk (or a server's keep-alive)
        choice = choices[0]
        if not isinstance(choice, dict):
            raise _StreamMalformed("choices[0] is not a JSON object")
        finish = choice.get("finish_reason")
        if isinstance(finish, str):
            self._finish = finish
        delta = choice.get("delta")
        if delta is None:
            return ""
        if not isinstance(delta, dict):
            raise _StreamMalformed("choices[0].delta is not a JSON object")
        return self._add_delta(delta)

    def _add_delta(self, delta: dict[str, Any]) -> str:
        text = _text(delta, "content")
        self._content.append(text)
        self._refusal.append(_text(delta, "refusal"))
        calls = delta.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise _StreamMalformed("delta.tool_calls is not a list")
            for piece in calls:
                self._add_call(piece)
        return text

    def _add_call(self, piece: Any) -> None:
        if not isinstance(piece, dict) or not isinstance(piece.get("index", 0), int):
            raise _StreamMalformed("a tool-call delta is not an object with an integer index")
        call = self._calls.setdefault(
            piece.get("index", 0), {"id": "", "name": "", "arguments": ""}
        )
        if isinstance(piece.get("id"), str):
            call["id"] = piece["id"]
        function = piece.get("function") or {}
        if not isinstance(function, dict):
            raise _StreamMalformed("a tool-call delta's function is not an object")
        call["name"] += _text(function, "name")
        call["arguments"] += _text(function, "arguments")

    def document(self) -> dict[str, Any]:
        """The chat completion these chunks make up, as a non-streamed call answers it."""
        message: dict[str, Any] = {"content": "".join(self._content)}
        refusal = "".join(self._refusal)
        if refusal:
            message["refusal"] = refusal
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for _, call in sorted(self._calls.items())
            ]
        document: dict[str, Any] = {
            "choices": [{"message": message, "finish_reason": self._finish}]
        }
        if self._usage is not None:
            document["usage"] = self._usage
        return document


def _text(container: dict[str, Any], key: str) -> str:
    value = container.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _StreamMalformed(f"a delta's {key!r} is not a string")
    return value
