# pyright: reportPrivateUsage=false, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false
"""A reply's ``tool_calls`` is read once by the whole check (``Watch._checked``, through
``_asked_problem`` and ``_reply``): the object whose truth was asked is the one whose ids
are read, whatever asking its truth did. The short way (a pair's function, and its plain
form ``Watch._quick``) reads a reply only when it is exactly a ``Message`` whose
``tool_calls`` is exactly a tuple (reading a slot and asking an exact tuple's truth run
no code); any other reply it leaves to ``_checked`` without asking its ``tool_calls``
anything. So a hand-made message whose ``tool_calls`` rewrites the message when asked
its truth is judged the same by ``accept`` (the pair's function, then ``_checked``), by
``_quick`` then ``_checked``, and by ``_checked`` alone: the same answer or error, the
same counters, queue and cut, and the message left the same.
"""

from __future__ import annotations

from typing import Any

import test_fast_runner4 as runner4
import test_watch_quick as quick_cases
from hypothesis import given, settings
from hypothesis import strategies as st
from test_watch_fast16 import _judged
from test_watch_fast17 import _request

from statemachine import Message, Planning, ToolRequest, Transcript, _watch

_Seen = quick_cases._Seen
_CHUNK = 32  # statemachine._model._CHUNK: a transcript's chunks' length


class _Rewriting:
    """A reply's ``tool_calls``: a sequence of ``calls`` whose truth (asked ``asks``
    times at most, then plain) puts ``to`` in its message's place of it; ``to`` may be
    another such object, and the message is put back by ``reset``."""

    def __init__(self, calls: tuple[ToolRequest, ...], truth: bool) -> None:
        self.calls, self.truth = calls, truth
        self.message: Any = None
        self.to: object = None

    def __bool__(self) -> bool:
        if self.message is not None:
            object.__setattr__(self.message, "tool_calls", self.to)
        return self.truth

    def __len__(self) -> int:
        return len(self.calls)

    def __iter__(self) -> Any:
        return iter(self.calls)

    def __getitem__(self, at: int) -> ToolRequest:
        return self.calls[at]


class _RewritingTuple(tuple[ToolRequest, ...]):
    """A tuple of calls whose truth puts ``to`` in its message's place of it."""

    message: Any = None
    to: object = None

    def __bool__(self) -> bool:
        if self.message is not None:
            object.__setattr__(self.message, "tool_calls", self.to)
        return True


_IDS = st.sampled_from(["c1", "c2", "c3", "zz"])
_KINDS = st.sampled_from(["object", "tuple", "falsy"])
_TO = st.sampled_from(["empty", "calls", "others", "list", "another", "none"])


def _hostile(kind: str, calls: tuple[ToolRequest, ...]) -> Any:
    if kind == "tuple":
        return _RewritingTuple(calls)
    return _Rewriting(calls, kind != "falsy")


def _replaced(to: str, calls: tuple[ToolRequest, ...], others: tuple[ToolRequest, ...]) -> Any:
    """What a truth puts in place of the message's ``tool_calls``."""
    return {
        "empty": (),
        "calls": calls,
        "others": others,
        "list": list(others),
        "another": _Rewriting(others, True),
        "none": None,
    }[to]


def _three_ways(seen: _Seen, reset: Any) -> tuple[object, ...]:
    """The pair's function and ``_quick``: the same; ``accept``, the reference (``_quick``
    then ``_checked``) and ``_checked`` alone: the same, and the reply's ``tool_calls``
    left as the same object by each. Answers ``accept``'s."""
    reply = seen[4].transcript[_reply_at(seen[4].transcript)]
    reset()
    fast = _judged(seen, "fast")
    left = reply.tool_calls
    reset()
    assert fast == _judged(seen, "plain")
    assert reply.tool_calls is left
    reset()
    accepted = runner4._answer(seen, "accept")
    left = reply.tool_calls
    reset()
    assert accepted == runner4._answer(seen, "reference")
    assert reply.tool_calls is left
    reset()
    alone = quick_cases._outcome(seen, "checked")
    assert (accepted[0], *accepted[2:]) == alone
    assert reply.tool_calls is left
    reset()
    return accepted


def _reply_at(transcript: Any) -> int:
    at = len(transcript) - 1
    while transcript[at].role == "tool":
        at -= 1
    return at


@settings(max_examples=300, deadline=None)
@given(
    pair=st.sampled_from(runner4._SHORT_PAIRS[1:4]),
    asked=st.lists(_IDS, min_size=1, max_size=3),
    others=st.lists(_IDS, min_size=0, max_size=3),
    kind=_KINDS,
    to=_TO,
    answered_whole=st.booleans(),
    back=st.booleans(),
)
def test_a_reply_rewritten_by_its_truth_is_judged_alike_three_ways(
    pair: tuple[str, str],
    asked: list[str],
    others: list[str],
    kind: str,
    to: str,
    answered_whole: bool,
    back: bool,
) -> None:
    """A ``Message`` reply whose ``tool_calls`` (a sequence of calls, a tuple subclass, or
    one whose truth is false) puts another object in its place when asked its truth
    (nothing, its calls, other calls, a list of them, another such object, ``None``),
    answered whole or not, in the transcript's last messages or just before them: the
    three ways judge it alike, and none takes the short way."""
    run = quick_cases._recorded(1)
    seen = next(s for s in run if (type(s[3]).__name__, type(s[4]).__name__) == pair)
    after = seen[4]
    put = object.__setattr__
    calls = tuple(map(_request, asked))
    message = Message(role="assistant", tool_calls=calls)
    hostile = _hostile(kind, calls)
    replaced = _replaced(to, calls, tuple(map(_request, others)))
    hostile.message, hostile.to = message, replaced

    def reset() -> None:
        put(message, "tool_calls", hostile)
        if isinstance(replaced, _Rewriting):
            replaced.message, replaced.to = message, ()

    holds = type(after) is not Planning
    answered = asked[: len(asked) - holds] if answered_whole else asked[:1]
    answers = tuple(
        Message(role="tool", content="{}", tool_call_id="".join(list(name)), name="lookup")
        for name in answered
    )
    if holds:
        put(after, "call_id", "".join(list(asked[-1])))
    messages = list(after.transcript)
    if back and answers:  # the reply last of a chunk, its answers the whole tail
        pad = -(len(messages) + 1) % _CHUNK
        messages += [Message(role="user", content="pad")] * pad
    transcript = Transcript((*messages, message, *answers))
    if back and answers:
        assert transcript._tail[0].role == "tool"
    put(after, "transcript", transcript)
    reset()
    accepted = _three_ways(seen, reset)
    assert runner4._answer(seen, "accept")[1] == 1  # the whole check judged it
    reset()
    assert accepted[0] != ("accepted", True) or _judged(seen, "fast")[0] == ("answer", False)


@settings(max_examples=200, deadline=None)
@given(
    pair=st.sampled_from(runner4._SHORT_PAIRS[1:4]),
    asked=st.lists(_IDS, min_size=1, max_size=3),
    answered_whole=st.booleans(),
    back=st.booleans(),
)
def test_an_exact_reply_is_judged_alike_and_the_short_way(
    pair: tuple[str, str], asked: list[str], answered_whole: bool, back: bool
) -> None:
    """The same transcripts with a reply of the library's own (an exact ``Message`` with
    an exact tuple): judged alike, and the short way accepts exactly what the whole check
    accepts."""
    run = quick_cases._recorded(1)
    seen = next(s for s in run if (type(s[3]).__name__, type(s[4]).__name__) == pair)
    after = seen[4]
    put = object.__setattr__
    calls = tuple(map(_request, asked))
    message = Message(role="assistant", tool_calls=calls)
    holds = type(after) is not Planning
    answered = asked[: len(asked) - holds] if answered_whole else asked[:1]
    answers = tuple(
        Message(role="tool", content="{}", tool_call_id="".join(list(name)), name="lookup")
        for name in answered
    )
    if holds:
        put(after, "call_id", "".join(list(asked[-1])))
    messages = list(after.transcript)
    if back and answers:
        messages += [Message(role="user", content="pad")] * (-(len(messages) + 1) % _CHUNK)
    put(after, "transcript", Transcript((*messages, message, *answers)))
    accepted = _three_ways(seen, _nothing)
    took = _judged(seen, "fast")[0]
    assert took == ("answer", accepted[0] == ("accepted", True))


def _nothing() -> None:
    return None


def test_the_whole_check_reads_tool_calls_once() -> None:
    """``_reply`` and ``_reply_plain`` answer the very object whose truth they asked, and
    ``_asked_problem`` reads the reply's ids from it (a truth that empties the message
    does not make its calls vanish from the check)."""
    calls = (_request("c1"), _request("c2"))
    message = Message(role="assistant", tool_calls=calls)
    hostile = _Rewriting(calls, True)
    hostile.message, hostile.to = message, ()
    for read in (_watch._reply, _watch._reply_plain):
        object.__setattr__(message, "tool_calls", hostile)
        asking, asked, answered = read((Message(role="user", content="hi"), message))
        assert asking is message
        assert asked is hostile
        assert answered == ()
        assert message.tool_calls == ()
    object.__setattr__(message, "tool_calls", hostile)
    assert _watch._exact_reply((message,)) is None
    left: object = message.tool_calls
    assert left is hostile  # not asked its truth


def test_the_ids_checked_are_those_of_the_object_read() -> None:
    """``_asked_problem`` judges the calls of the ``tool_calls`` it read, not what its
    truth put in the message's place: calls answered are accounted for though the truth
    puts others in place, and calls not answered are not though the truth puts the
    answered ones in place (a transcript as a tuple and as a ``Transcript``)."""
    answer = Message(role="tool", content="{}", tool_call_id="c1", name="lookup")
    for own, put_in, problem in (("c1", "zz", False), ("zz", "c1", True)):
        for made in (tuple, Transcript):
            message = Message(role="assistant", tool_calls=(_request(own),))
            hostile = _Rewriting((_request(own),), True)
            hostile.message, hostile.to = message, (_request(put_in),)
            object.__setattr__(message, "tool_calls", hostile)
            after = _Holding(made((Message(role="user", content="go"), message, answer)))
            found = _watch._asked_problem(after, ())  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
            assert (found is not None) is problem, (own, put_in, made, found)
            if problem:
                assert found == (
                    "the model asked for calls ['zz'], and ['c1'] are answered, held or pending"
                )


class _Holding:
    """A phase-like object holding a transcript and no call."""

    def __init__(self, transcript: Any) -> None:
        self.transcript = transcript
