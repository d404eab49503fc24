# pyright: reportPrivateUsage=false, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false
"""A pair's function (``_watch._pair_code``) reads the model's last reply's
``tool_calls`` once where ``Watch._quick`` (and the function before) read it twice:
only for a reply that is exactly a ``Message`` whose ``tool_calls`` is exactly a tuple,
read with no code of anyone's run between (an exact tuple's truth runs none), so the
second read would give the very same object; anything else (a hand-made object, a
subclass, a property answering otherwise at each read, an object whose truth changes
the message, a list) goes to ``_all_accounted``, which reads it again as ``_quick``
does. And it compares the answers in place of the transcript's last messages (no
slice of them). Checked against ``_quick`` and against ``accept`` = ``_quick`` then
``_checked``: the same answer, counters (the very objects), queue and cut. ``_placer``
finds its function by the code's identity: one function per code object, an equal code
made apart gets its own.
"""

from __future__ import annotations

from typing import Any

import test_fast_runner4 as runner4
import test_watch_quick as quick_cases
from hypothesis import given, settings
from hypothesis import strategies as st
from test_watch_fast16 import _judged

from statemachine import Message, Observing, Planning, ToolCalling, ToolRequest, Transcript, _watch

_Seen = quick_cases._Seen


class _Duck:
    """A hand-made reply: the fields a ``Message`` reply has, not a ``Message``."""

    def __init__(self, tool_calls: object) -> None:
        self.role = "assistant"
        self.tool_calls = tool_calls


class _SubMessage(Message):  # type: ignore[misc]  # pyright: ignore[reportGeneralTypeIssues]
    """A ``Message`` subclass (read the plain way)."""


class _Shifty:
    """A reply whose ``tool_calls`` answers ``first`` at its first read, ``later`` after."""

    def __init__(self, first: tuple[ToolRequest, ...], later: tuple[ToolRequest, ...]) -> None:
        self.role = "assistant"
        self.first, self.later, self.reads = first, later, 0

    @property
    def tool_calls(self) -> tuple[ToolRequest, ...]:
        self.reads += 1
        return self.first if self.reads == 1 else self.later

    def reset(self) -> None:
        self.reads = 0


class _Swapping:
    """A ``tool_calls`` whose truth puts ``calls`` in its message's place of it."""

    def __init__(self, message: Message, calls: tuple[ToolRequest, ...]) -> None:
        self.message, self.calls = message, calls

    def __bool__(self) -> bool:
        object.__setattr__(self.message, "tool_calls", self.calls)
        return True

    def reset(self) -> None:
        object.__setattr__(self.message, "tool_calls", self)


_IDS = st.sampled_from(["c1", "c2", "c3", "zz"])
_ASKERS = ["message", "apart", "duck", "sub", "shifty", "swapping", "list", "empty", "user"]


def _request(name: str) -> ToolRequest:
    return ToolRequest(id="".join(list(name)), name="lookup", arguments="{}")


def _reply(asker: str, calls: tuple[ToolRequest, ...], other: tuple[ToolRequest, ...]) -> Any:
    """The reply asking for ``calls`` (``other``: what a changing one changes to)."""
    if asker == "duck":
        return _Duck(calls)
    if asker == "sub":
        return _SubMessage(role="assistant", tool_calls=calls)
    if asker == "shifty":
        return _Shifty(calls, other)
    message = Message(role="assistant", tool_calls=calls)
    if asker == "swapping":
        object.__setattr__(message, "tool_calls", _Swapping(message, calls))
    elif asker == "list":
        object.__setattr__(message, "tool_calls", list(calls))
    elif asker == "empty":
        object.__setattr__(message, "tool_calls", ())
    elif asker == "user":
        message = Message(role="user", content="hi")
    elif asker == "apart":  # the very calls' tuple, made again
        object.__setattr__(message, "tool_calls", tuple(list(calls)))
    return message


def _both_ways(seen: _Seen, reset: Any) -> tuple[Any, Any]:
    """The pair's function and ``_quick`` on ``seen`` (each from the reply as it was
    made): the same; then ``accept`` against the reference and against ``_checked``
    alone, the same (a reply whose reads change it included: only an exact ``Message``
    with an exact tuple is read the short way, where reading runs no code, and
    ``_checked`` reads its ``tool_calls`` once); answers the pair's function's answer
    and ``accept``'s."""
    reset()
    fast = _judged(seen, "fast")
    reset()
    assert fast == _judged(seen, "plain")
    reset()
    accepted = runner4._answer(seen, "accept")
    reset()
    assert accepted == runner4._answer(seen, "reference")
    reset()
    assert (accepted[0], *accepted[2:]) == quick_cases._outcome(seen, "checked")
    return fast[0], accepted[0]


@settings(max_examples=400, deadline=None)
@given(
    pair=st.sampled_from(runner4._SHORT_PAIRS[1:4]),
    asked=st.lists(_IDS, min_size=0, max_size=3),
    answered=st.lists(_IDS, min_size=0, max_size=3),
    held=st.none() | _IDS,
    pending=st.lists(_IDS, min_size=0, max_size=2),
    others=st.lists(_IDS, min_size=0, max_size=3),
    asker=st.sampled_from(_ASKERS),
    whole=st.booleans(),
)
def test_a_reply_is_judged_as_quick_judges_it(
    pair: tuple[str, str],
    asked: list[str],
    answered: list[str],
    held: str | None,
    pending: list[str],
    others: list[str],
    asker: str,
    whole: bool,
) -> None:
    """A transcript ending with a reply of any kind above, up to three answers (or the
    whole of its calls answered), the call held by the phase (or its id changed) and
    calls pending: the pair's function and ``accept`` answer as ``_quick`` and the
    reference."""
    run = quick_cases._recorded(1)
    seen = next(s for s in run if (type(s[3]).__name__, type(s[4]).__name__) == pair)
    after = seen[4]
    put = object.__setattr__
    calls = tuple(map(_request, asked))
    reply = _reply(asker, calls, tuple(map(_request, others)))
    if whole:
        answered = asked[: len(asked) - (type(after) is not Planning)]
    answers = tuple(
        Message(role="tool", content="{}", tool_call_id="".join(list(name)), name="lookup")
        for name in answered
    )
    transcript = Transcript(after.transcript)
    put(transcript, "_tail", (*transcript._tail, reply, *answers))
    put(after, "transcript", transcript)
    if type(after) is not Planning:
        name = asked[-1] if asked and held is None else held or "zz"
        put(after, "call_id", "".join(list(name)))
    if pending and type(after) is Planning:
        put(after, "pending", tuple(map(_request, pending)))
    reset = getattr(reply, "reset", None) or getattr(reply.tool_calls, "reset", None) or _nothing
    _both_ways(seen, reset)


def _nothing() -> None:
    return None


def test_each_kind_of_reply_is_taken_the_way_it_should() -> None:
    """A reply answered whole: accepted the short way for a ``Message`` (its calls'
    tuple, or one made again); a hand-made object, a subclass, a list, a truth that
    swaps in the calls or a property answering other calls at its second read take the
    plain way (``_checked``, reading ``tool_calls`` once): accepted but for the swapping
    truth (its object is not a sequence of calls: the ``TypeError`` reading its ids
    raises, in ``accept`` and in ``_checked`` alone)."""
    for asker, short, judged in (
        ("message", True, True),
        ("apart", True, True),
        ("duck", False, True),
        ("sub", False, True),
        ("swapping", False, None),
        ("list", False, True),
        ("shifty", False, True),
    ):
        for pair in runner4._SHORT_PAIRS[1:4]:
            run = quick_cases._recorded(1)
            seen = next(s for s in run if (type(s[3]).__name__, type(s[4]).__name__) == pair)
            after = seen[4]
            put = object.__setattr__
            calls = (_request("c1"),)
            reply = _reply(asker, calls, (_request("zz"),))
            tail: tuple[Any, ...] = (reply,)
            if type(after) is Planning:
                tail += (Message(role="tool", content="{}", tool_call_id="c1", name="lookup"),)
            else:
                assert type(after) in (ToolCalling, Observing)
                put(after, "call_id", "c1")
            transcript = Transcript(after.transcript)
            put(transcript, "_tail", (*transcript._tail, *tail))
            put(after, "transcript", transcript)
            reset = (
                getattr(reply, "reset", None)
                or getattr(reply.tool_calls, "reset", None)
                or _nothing
            )
            fast, accepted = _both_ways(seen, reset)
            assert fast == ("answer", short), (asker, pair)
            if judged is None:
                assert accepted[0] == "TypeError", (asker, pair, accepted)
            else:
                assert (accepted == ("accepted", True)) is judged, (asker, pair, accepted)


def test_the_placer_is_found_by_the_code_itself() -> None:
    """``_placer`` answers one function per code object, kept with the code (never
    another code's of the same id), and an equal code made apart gets its own, placing
    the same constants as the plain loop."""
    keys = ("tokens",)
    code = _watch._pair_code(True, True, True, True, False, keys)
    placed = _watch._placer(code)
    assert _watch._placer(code) is placed
    apart = code.replace()
    assert apart == code
    assert apart is not code
    assert _watch._placer(apart) is not placed
    kept = tuple(object() for _ in range(sum(map(_watch._placeholder, code.co_consts))))
    for made in (code, apart):
        plain = tuple(
            kept[int(const[len(_watch._KEPT) :])] if _watch._placeholder(const) else const
            for const in made.co_consts
        )
        got = _watch._placer(made)(kept)
        assert len(got) == len(plain)
        assert all(a is b for a, b in zip(got, plain, strict=True))
    # An entry under another code's id (as if that code were gone and its id reused):
    # not taken for it.
    other = _watch._same_all_code(keys)
    stale = _watch._PLACERS.pop(id(other), None)
    _watch._PLACERS[id(other)] = (code, placed)
    try:
        assert _watch._placer(other) is not placed
        assert _watch._PLACERS[id(other)][0] is other
    finally:
        if stale is not None:
            _watch._PLACERS[id(other)] = stale
