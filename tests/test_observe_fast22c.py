"""``Observing.observe`` makes the tool's message and appends it in its own frame (round 22).

For text content, call id and tool name exactly ``str``, ``observe`` makes the message as
``_told`` does, and for a ``Transcript`` itself whose tail stays within a chunk it
appends it as ``_appended`` does; anything else goes through those functions. These
tests pin ``observe``'s planning phase against the two functions called plainly: the
same message (every field, exactly a ``Message``), the same head, chunks and tail (the
very objects shared), the same ``_grown``, for transcripts on either side of a chunk's
bounds, and the same error for a call id that is not text.
"""

# pyright: reportPrivateUsage=false

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_sites import _calling

from statemachine import Message, Observing, _json
from statemachine._fast._messages import _appended, _result_text, _told
from statemachine._model import Transcript


def _said(at: int) -> Message:
    return Message(role="tool", content=f"m{at}", tool_call_id=f"c{at}", name="lookup")


_MESSAGES = [_said(at) for at in range(140)]


def _transcript(size: int, how: str) -> Any:
    messages = _MESSAGES[:size]
    if how == "made":
        return Transcript(messages)
    if how == "tuple":
        return tuple(messages)
    transcript = Transcript()
    for message in messages:
        transcript = transcript.appended(message)
    return transcript


def _observing(transcript: Any, output: Any, call_id: Any = "c9") -> Observing[Any]:
    calling: Any = _calling()
    made: Observing[Any] = calling._next(
        Observing, call=calling.call, call_id=call_id, output=output, transcript=transcript
    )
    return made


def _fields(message: Message) -> tuple[Any, ...]:
    return (
        type(message),
        message.role,
        message.content,
        message.tool_calls,
        message.tool_call_id,
        message.name,
    )


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 130),
    st.sampled_from(["made", "appended", "tuple"]),
    st.sampled_from([{"key": "k", "value": 42}, {"a": [1, 2]}, "plain", 7]),
)
def test_observe_appends_the_message_told_and_appended_make(
    size: int, how: str, output: Any
) -> None:
    """The planning phase ``observe`` makes holds ``_appended(transcript, _told(...))``:
    the same message and the same transcript, part for part."""
    transcript = _transcript(size, how)
    observing = _observing(transcript, output)
    planning = observing.observe()
    content = _result_text(output if type(output) is dict else _json.to_plain(output))
    told = _told(content, observing.call_id, observing.call.name)
    want = _appended(transcript, told)
    got = planning.transcript
    assert type(got) is Transcript
    assert _fields(got[-1]) == _fields(told)
    assert got._head is want._head or got._head == want._head
    assert len(got._chunks) == len(want._chunks)
    for a, b in zip(got._chunks, want._chunks, strict=True):
        assert a is b or all(x is y for x, y in zip(a, b, strict=True))
    assert len(got._tail) == len(want._tail)
    assert all(x is y for x, y in zip(got._tail[:-1], want._tail[:-1], strict=True))
    if want._grown is None:
        assert got._grown is None
    else:
        assert got._grown is not None
        assert got._grown[0] is want._grown[0]
        assert got._grown[1] is got._tail
    assert tuple(transcript) == tuple(_MESSAGES[:size])  # the transcript is unchanged


class _Id(str):
    """A call id that is text of another class: ``_told``'s plain way."""


@pytest.mark.parametrize("call_id", [_Id("c1"), "c1"])
def test_a_call_id_of_another_class_takes_told_s_plain_way(call_id: Any) -> None:
    """A call id that is not exactly ``str`` is ``Message``'s to make (its converter
    decides), as ``_told`` makes it."""
    observing = _observing(Transcript(_MESSAGES[:3]), {"key": "k"}, call_id)
    planning = observing.observe()
    told = _told(_result_text({"key": "k"}), call_id, "lookup")
    assert _fields(planning.transcript[-1]) == _fields(told)
    assert type(planning.transcript[-1].tool_call_id) is type(told.tool_call_id)
