"""The Watch's cheaper reads find what the plain reads find.

``_asked_problem`` reads the ids of the model's last reply, its answers, the call held
and the queue as tuples in C; ``_last_reply`` reads a ``Transcript``'s last messages
from its ``_tail``; the queue is read once per transition. Each is compared here with
the plain version (the code before, kept below), on phases of every kind given
transcripts and queues that do and do not account for the reply's calls, and on
transcripts whose insides were changed in place.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import (
    AwaitApproval,
    Done,
    Failed,
    LoopState,
    Message,
    ModelRetrying,
    Observing,
    Planning,
    Retrying,
    Spend,
    ToolCalling,
    ToolRequest,
    Transcript,
    _watch,
)
from statemachine._phases import Phase

_IDS = ("c0", "c1", "c2", "c3")
_REQUESTS = {call_id: ToolRequest(id=call_id, name="lookup", arguments="{}") for call_id in _IDS}


def _asked_problem_plain(after: Phase[Any]) -> str | None:
    """``_asked_problem`` as it was: lists built one call at a time, the queue read from
    the phase."""
    if isinstance(after, Failed):
        return None
    asking, answered = _watch._last_reply_plain(after.transcript)
    if asking is None:
        return None
    accounted = [message.tool_call_id for message in answered]
    if isinstance(after, ToolCalling | AwaitApproval | Observing | Retrying):
        accounted.append(after.call_id)
    accounted.extend(request.id for request in getattr(after, "pending", ()))
    asked = [call.id for call in asking.tool_calls]
    if accounted != asked:
        return f"the model asked for calls {asked}, and {accounted} are answered, held or pending"
    return None


def _message(kind: str, ids: tuple[str, ...]) -> Message:
    if kind == "asking":
        return Message(role="assistant", tool_calls=tuple(_REQUESTS[i] for i in ids))
    if kind == "tool":
        return Message(role="tool", content="x", tool_call_id=ids[0] if ids else "c0")
    return Message(role=kind, content="words")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


_SOME_IDS = st.lists(st.sampled_from(_IDS), max_size=3).map(tuple)
_MESSAGES = st.lists(
    st.tuples(st.sampled_from(["asking", "tool", "tool", "assistant", "user"]), _SOME_IDS).map(
        lambda kind_ids: _message(*kind_ids)
    ),
    max_size=45,
)
_KINDS: tuple[type[Phase[Any]], ...] = (
    Planning,
    ToolCalling,
    AwaitApproval,
    Observing,
    Retrying,
    ModelRetrying,
    Failed,
    Done,
)


def _phase(
    kind: type[Phase[Any]], transcript: object, call_id: str, pending: tuple[Any, ...]
) -> Any:
    """A phase of ``kind`` holding these fields, as a hostile ``object.__setattr__`` could
    leave one (only the fields the check reads are set)."""
    phase = object.__new__(kind)
    object.__setattr__(phase, "transcript", transcript)
    if any("call_id" in vars(klass) for klass in kind.__mro__):
        object.__setattr__(phase, "call_id", call_id)
    if hasattr(kind, "pending"):
        object.__setattr__(phase, "pending", pending)
    return phase


@settings(max_examples=400, deadline=None)
@given(
    messages=_MESSAGES,
    head=st.integers(0, 2),
    kind=st.sampled_from(_KINDS),
    call_id=st.sampled_from(_IDS),
    pending=_SOME_IDS,
    as_tuple=st.booleans(),
)
def test_the_reply_is_accounted_for_as_the_plain_check_finds(
    messages: list[Message],
    head: int,
    kind: type[Phase[Any]],
    call_id: str,
    pending: tuple[str, ...],
    as_tuple: bool,
) -> None:
    transcript = Transcript(messages[head:]).prefixed(*messages[:head])
    given_as: object = tuple(transcript) if as_tuple else transcript
    queue = tuple(_REQUESTS[i] for i in pending)
    after = _phase(kind, given_as, call_id, queue)
    read = getattr(after, "pending", ())
    assert _watch._asked_problem(after, read) == _asked_problem_plain(after)


def _asking_then(*answers: str) -> list[Message]:
    return [
        Message(role="user", content="go"),
        _message("asking", ("c0", "c1", "c2")),
        *(_message("tool", (i,)) for i in answers),
    ]


@pytest.mark.parametrize(
    "change",
    [
        "tail as a list",
        "tail emptied",
        "tail of one tool message",
        "tail a text",
    ],
)
def test_a_transcript_changed_in_place_is_read_as_the_plain_read_finds(change: str) -> None:
    """A transcript whose ``_tail`` was replaced in place: where it is no tuple, or holds
    no reply, the check reads the transcript one index at a time, as before."""
    transcript = Transcript([Message(role="user", content=str(n)) for n in range(40)])
    transcript = transcript.appended(*_asking_then("c0", "c1"))
    tail = transcript._tail  # pyright: ignore[reportPrivateUsage]
    replaced: object = {
        "tail as a list": list(tail),
        "tail emptied": (),
        "tail of one tool message": (_message("tool", ("c1",)),),
        "tail a text": "text",
    }[change]
    object.__setattr__(transcript, "_tail", replaced)
    try:
        plain: Any = _watch._last_reply_plain(transcript)
    except Exception as error:  # the same error either way
        with pytest.raises(type(error)):
            _watch._last_reply(transcript)
        return
    fast = _watch._last_reply(transcript)
    assert fast[0] is plain[0]
    assert list(fast[1]) == list(plain[1])


@pytest.mark.parametrize("answers", [(), ("c0",), ("c0", "c1"), ("c0", "c1", "c2")])
def test_a_reply_before_the_tail_is_found_one_index_at_a_time(answers: tuple[str, ...]) -> None:
    """A reply whose answers fill the tail (the reply itself in a full chunk before it)
    is found by the plain read: the same reply and answers."""
    transcript = Transcript([Message(role="user", content=str(n)) for n in range(31)])
    transcript = transcript.appended(*_asking_then(*answers)[1:])
    for extra in range(40):
        fast, plain = _watch._last_reply(transcript), _watch._last_reply_plain(transcript)
        assert fast[0] is plain[0]
        assert all(a is b for a, b in zip(fast[1], plain[1], strict=True))
        assert len(fast[1]) == len(plain[1])
        transcript = transcript.appended(_message("tool", (f"x{extra}",)))


@settings(max_examples=100, deadline=None)
@given(size=st.integers(0, 140))
def test_an_action_logs_length_is_read_as_its_len(size: int) -> None:
    """The counters read an ``ActionLog``'s length from its chunks and tail, as its
    ``__len__`` does (and ``len`` of anything else)."""
    from statemachine._actions import ActionLog, ActionRecord

    record = ActionRecord(
        call_id="c", tool="lookup", effect="read", exact="e", key="k", text="t", outcome="ok"
    )
    log = ActionLog(record for _ in range(size))
    phase = object.__new__(Planning)
    loop = LoopState().model_copy(update={"actions": log})
    object.__setattr__(phase, "loop", loop)
    object.__setattr__(phase, "spent", Spend())
    object.__setattr__(phase, "step", 3)
    assert _watch._counters(phase)[5] == len(log) == size
    object.__setattr__(phase, "loop", loop.model_copy(update={"actions": tuple(log)}))
    assert _watch._counters(phase)[5] == size
