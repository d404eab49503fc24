"""``Watch.accept``'s short way, written out in its own frame (``_quick``'s checks, and
``_all_accounted``'s comparisons for a reply among the transcript's last messages),
answers as ``_quick`` then ``_checked`` do: the same phase or the same refusal, the same
counters and queue recorded, the ticket chain cut the same; and it accepts on its own
(without ``_checked``) exactly what ``_quick`` accepts.

Each case takes one transition of a real run (as the runner's ``accept`` saw it) and
changes it in place (``object.__setattr__``, as a hostile phase, tool or model might):
the changes of tests/test_watch_quick.py, and transcripts ending with replies of one to
three calls, answered, held or pending in any order, by ids that are the same object,
equal but built apart, or other.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
import test_watch_quick as quick_cases
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import Message, Observing, Planning, ToolCalling, ToolRequest, _json, _watch
from statemachine._fast import _messages
from statemachine._fast._canonical import _plain_json
from statemachine._fast._messages import _c_writes_as_dumps

_Seen = quick_cases._Seen

# The transitions the short way judges in a run of the library's classes.
_SHORT_PAIRS = [
    ("Idle", "Planning"),
    ("Planning", "ToolCalling"),
    ("ToolCalling", "Observing"),
    ("Observing", "Planning"),
    ("Planning", "Responding"),
    ("Responding", "Done"),
]


@contextmanager
def _counting_checked() -> Iterator[list[int]]:
    """Count the calls of ``Watch._checked`` (the whole check) while in the block."""
    plain = _watch.Watch._checked
    calls = [0]

    def counted(self: _watch.Watch, before: Any, after: object, kinds: Any) -> Any:
        calls[0] += 1
        return plain(self, before, after, kinds)

    _watch.Watch._checked = counted  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        _watch.Watch._checked = plain  # type: ignore[method-assign]


def _state(seen: _Seen) -> Any:
    watch, counters, pending, _before, after, parent = seen
    watch._counters, watch._pending = counters, pending
    ticket = getattr(after, "_ticket", None)
    if ticket is not None:
        ticket.parent = parent
    return ticket


def _answer(seen: _Seen, how: str) -> tuple[object, ...]:
    """What judging ``seen`` answers and records: by ``accept`` (and whether it called
    the whole check), or by the reference, ``_quick`` and then (when it does not accept)
    ``_checked``."""
    watch, _counters, _pending, before, after, _parent = seen
    ticket = _state(seen)
    calls = [0]
    try:
        if how == "accept":
            with _counting_checked() as calls:
                got: object = watch.accept(before, after)
        else:
            entry = _watch._FAST.get(type(before), (None, {}))[1].get(type(after))
            got = None
            if entry is not None and entry[0] is type(after):
                got = watch._quick(before, after, entry[1])
            if got is None:
                calls[0] = 1
                got = watch._checked(before, after, None)
        result: tuple[object, object] = ("accepted", got is after)
    except Exception as error:  # a refusal, or an error the whole check raises too
        result = (type(error).__name__, str(error))
    return (
        result,
        calls[0],
        watch._counters,
        watch._pending,
        None if ticket is None else ticket.parent is None,
    )


def _judged_alike(seen: _Seen) -> None:
    """``accept`` against the reference, and against ``_checked`` alone."""
    fast = _answer(seen, "accept")
    assert fast == _answer(seen, "reference")
    alone = quick_cases._outcome(seen, "checked")
    assert (fast[0], *fast[2:]) == alone


def test_a_run_is_accepted_the_short_way() -> None:
    """The figures' premise: each transition of a run of the library's classes but the
    retry's and the copy's is accepted by ``accept`` without the whole check, and each
    is judged as the reference judges it."""
    run = quick_cases._recorded(3, flaky=True)
    short = 0
    for seen in run:
        answer = _answer(seen, "accept")
        assert answer[0] == ("accepted", True)
        short += answer[1] == 0
        _judged_alike(seen)
    assert short >= len(run) - 3
    assert {(type(s[3]).__name__, type(s[4]).__name__) for s in run} >= set(_SHORT_PAIRS)


@settings(max_examples=250, deadline=None)
@given(
    at=st.integers(0, 10**6),
    changes=st.lists(st.sampled_from(quick_cases._CHANGES), min_size=1, max_size=2),
)
def test_accept_answers_as_quick_then_checked_after_changes(at: int, changes: list[str]) -> None:
    """Whatever is changed in place (the changes of tests/test_watch_quick.py, one or two),
    ``accept`` answers, records and cuts as ``_quick`` then ``_checked``, and calls the
    whole check exactly when ``_quick`` does not accept."""
    run = quick_cases._recorded(2, flaky=True)
    seen = run[at % len(run)]
    for change in changes:
        try:
            seen = quick_cases._change(seen, change)
        except (TypeError, AttributeError, ValueError):  # a change the class does not allow
            continue
    _judged_alike(seen)


class _Both(str):
    """A text that answers ``!=`` with ``True``, and ``==`` with ``True`` but for "tool"
    (equal to "assistant" and unequal to it as well)."""

    def __eq__(self, other: object) -> bool:
        return other != "tool"

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


def _apart(text: str) -> str:
    """``text`` as another ``str`` object of the same characters."""
    made = "".join(list(text))
    return made if made is not text else text + ""


# An id: a name from a small alphabet, as the very object or one built apart.
_IDS = st.tuples(st.sampled_from(["c1", "c2", "c3", "zz"]), st.booleans())


def _id(chosen: tuple[str, bool]) -> str:
    name, apart = chosen
    return _apart(name * 2)[: len(name)] if apart else name


@settings(max_examples=300, deadline=None)
@given(
    pair=st.sampled_from([p for p in _SHORT_PAIRS[1:4]]),
    asked=st.lists(_IDS, min_size=0, max_size=3),
    answered=st.lists(_IDS, min_size=0, max_size=3),
    held=st.none() | _IDS,
    pending=st.lists(_IDS, min_size=0, max_size=2),
    asker=st.sampled_from(["assistant", "user", "lying"]),
)
def test_accept_accounts_for_a_reply_as_the_reference(
    pair: tuple[str, str],
    asked: list[tuple[str, bool]],
    answered: list[tuple[str, bool]],
    held: tuple[str, bool] | None,
    pending: list[tuple[str, bool]],
    asker: str,
) -> None:
    """A transcript ending with a reply of up to three calls and up to three answers, the
    call held by the phase (or its id changed), and calls pending: ``accept`` judges as
    the reference (the comparisons in place against ``_all_accounted``'s)."""
    run = quick_cases._recorded(1)
    seen = next(s for s in run if (type(s[3]).__name__, type(s[4]).__name__) == pair)
    after = seen[4]
    put = object.__setattr__
    requests = tuple(ToolRequest(id=_id(c), name="lookup", arguments="{}") for c in asked)
    asking = Message(role="assistant", content="", tool_calls=requests)
    if asker == "user":
        asking = Message(role="user", content="hi")
    elif asker == "lying":  # a role equal to "assistant" and unequal to it as well
        put(asking, "role", _Both())
    transcript = after.transcript.appended(asking)
    for chosen in answered:
        transcript = transcript.appended(
            Message(role="tool", content="{}", tool_call_id=_id(chosen), name="lookup")
        )
    put(after, "transcript", transcript)
    if held is not None and hasattr(after, "call_id"):
        put(after, "call_id", _id(held))
    if pending and type(after) is Planning:
        queue = tuple(ToolRequest(id=_id(c), name="lookup", arguments="{}") for c in pending)
        put(after, "pending", queue)
    _judged_alike(seen)


@pytest.mark.parametrize("pair", _SHORT_PAIRS[1:4])
def test_a_reply_answered_or_held_by_equal_ids_is_accepted_the_short_way(
    pair: tuple[str, str],
) -> None:
    """Ids equal but not the same object account for the calls as the same object does:
    accepted by ``accept`` alone; another id sends it to the whole check, which refuses."""
    for name, accepted in (("c1", True), ("zz", False)):
        run = quick_cases._recorded(1)
        seen = next(s for s in run if (type(s[3]).__name__, type(s[4]).__name__) == pair)
        after = seen[4]
        put = object.__setattr__
        request = ToolRequest(id="c1", name="lookup", arguments="{}")
        transcript = after.transcript.appended(Message(role="assistant", tool_calls=(request,)))
        if type(after) is Planning:
            transcript = transcript.appended(
                Message(role="tool", content="{}", tool_call_id=_apart(name), name="lookup")
            )
        else:
            assert type(after) in (ToolCalling, Observing)
            put(after, "call_id", _apart(name))
        put(after, "transcript", transcript)
        answer = _answer(seen, "accept")
        if accepted:
            assert answer[:2] == (("accepted", True), 0)
        else:
            assert answer[0][0] == "IllegalTransitionError"
            assert answer[1] == 1
        _judged_alike(seen)


# --- a tool's plain result written by orjson ----------------------------------------------


def _c_text(value: object) -> str:
    """The C encoder's text of a plain value: ``_result_text``'s plain form before."""
    assert _messages._plain_c is not None
    return "".join(_messages._plain_c(value, 0))


def _written(value: object) -> tuple[str, str]:
    try:
        return ("text", _messages._result_text(value))
    except Exception as error:  # compared with the plain form's error
        return (type(error).__name__, str(error))


def _written_plain(value: object) -> tuple[str, str]:
    try:
        if type(value) is dict and _plain_json(value):
            return ("text", _c_text(value))
        return (
            "text",
            _json.dumps_fast(value) if _c_writes_as_dumps(value) else _json.dumps(value),
        )
    except Exception as error:  # compared with the fast form's error
        return (type(error).__name__, str(error))


def test_every_code_point_is_written_as_the_c_encoder_writes_it() -> None:
    """Every code point (a lone surrogate too), in a key and a value, alone and between
    others: the same text as the C encoder's."""
    for start in range(0, 0x110000, 0x800):
        text = "".join(chr(point) for point in range(start, start + 0x800))
        for value in ({text: text}, {"k": [text, (text,)], text[:7]: {text[-5:]: '"\\'}}):
            assert _messages._result_text(value) == _c_text(value)
    assert _messages._result_text({"a": "\ud800"}) == _c_text({"a": "\ud800"}) == '{"a":"\ud800"}'


_TEXT = st.text(st.characters(codec=None), max_size=6) | st.sampled_from(
    ["\ud800", "\udfff", '"', "\\", "\x00\x1f\x7f", "\u2028\u2029", "é€😀", "null", "1e-7"]
)
_SCALARS = (
    _TEXT
    | st.booleans()
    | st.none()
    | st.integers()
    | st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, 10**40])
    | st.floats(allow_nan=True)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(_TEXT, inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(value=st.dictionaries(_TEXT, _VALUES, max_size=4))
def test_a_result_is_written_as_before(value: dict[str, object]) -> None:
    """Any result of plain values (text of every kind, ints either side of 64 bits, lists,
    tuples, dicts; floats, which are not plain): the same text or error as before."""
    assert _written(value) == _written_plain(value)


def test_nesting_past_orjsons_depth_and_values_not_plain_take_the_c_encoder() -> None:
    """orjson refuses nesting past its depth: the C encoder writes it; a value that is
    not plain (a subclass, a float) never reaches orjson."""
    deep: object = "x"
    for _ in range(300):
        deep = [deep]
    value = {"deep": deep}
    assert _plain_json(value)
    assert _messages._result_text(value) == _c_text(value)

    class _Text(str):
        pass

    class _Int(int):
        pass

    for odd in ({"a": _Text("b")}, {_Text("a"): 1}, {"a": _Int(1)}, {"a": 1.5}, {"a": {1: 2}}):
        assert _written(odd) == _written_plain(odd)


# --- the loop's log event, asked in its own frame ------------------------------------------


@pytest.mark.parametrize("at", [(0, 3), (2, 5), (4, 4), (1, 99)])
def test_the_loop_logs_a_transition_while_a_capture_is_on(at: tuple[int, int]) -> None:
    """A capture started and ended from inside a run (between two transitions): the loop
    logs each transition after the one that started it, up to the one that ended it, as
    ``events_wanted`` answers then."""
    import contextlib

    from structlog.testing import capture_logs

    from statemachine import Agent, Budget, Runner
    from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

    start, end = at
    seen = [0]
    captured: list[list[dict[str, Any]]] = []
    stack = contextlib.ExitStack()

    def moved(before: object, after: object) -> None:
        seen[0] += 1
        if seen[0] == start:
            captured.append(stack.enter_context(capture_logs()))
        if seen[0] == end:
            stack.close()

    agent = Agent[None](name="a", tools=[quick_cases.lookup], budget=Budget(), max_steps=100)
    turns = [tool_call("lookup", f'{{"key": "k{n}"}}') for n in range(3)]
    runner = Runner(
        agent,
        model=ScriptedModel([*turns, reply("done")]),
        gate=AutoDenyGate(),
        on_transition=moved,
    )
    with stack:
        result = anyio.run(runner.run, None, "go")
    total = len(result.path) - 1
    events = [e for got in captured for e in got if e.get("event") == "transition"]
    if start == 0:  # never started
        assert events == []
    else:
        assert len(events) == min(end, total) - start
        assert [e["step"] for e in events] == list(range(start + 1, min(end, total) + 1))
