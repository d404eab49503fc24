"""``_batch._take_reply``'s and ``_with_ids``' work in their own frames, pinned.

For the library's own ``Planning`` (by identity) ``_take_reply`` reads the phase's ticket
itself (``_own_ticket``'s check) and keeps ``_unseen``'s answer for the class once; it
makes the reply's assistant message (``_message``) and appends it to a ``Transcript``
within a chunk (``Transcript.appended``) in its frame; ``_with_ids`` makes the request
with the id it gives (``_request``) in its frame. Each is compared with the plain
function: the same errors, the same objects field by field, the same phases.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_calls import _CALLS, _fields, _lookup, _writes

from statemachine import Agent, PhaseForgedError, Planning, Runtime, _batch, _phases
from statemachine._batch import _each_with_id, _queued, _take, _take_reply, _with_ids
from statemachine._fast._messages import _request
from statemachine._governor import LoopState
from statemachine._model import _CHUNK, Message, ToolRequest, Transcript
from statemachine._seal import _own_ticket
from statemachine.testing import AutoDenyGate, ScriptedModel

_TEXT = st.text(max_size=12)


@settings(max_examples=200, deadline=None)
@given(name=_TEXT, arguments=_TEXT, step=st.integers(0, 10**6), taken=st.booleans())
def test_an_id_given_is_the_request_request_makes(
    name: str, arguments: str, step: int, taken: bool
) -> None:
    """A reply's one call without an id gets ``call-<step>`` in a ``ToolRequest`` made as
    ``_request`` makes it (fields, their set shared, no extra, no private) and equal to
    what ``_each_with_id`` (every call, the plain way) gives; the id taken already by a
    call of the run goes the plain way too."""
    loop = LoopState()
    loop._line()  # its index made: the line of its own that _with_ids reads
    if taken:  # the run's call of that id: _call_free answers no
        agent = Agent[None](name="t", tools=[_lookup])
        planning = agent.start(None, "go").receive("go")
        routed: Any = agent.tools.route("_lookup", '{"key": "a"}')
        loop = loop.record(agent.governor.action(routed, '{"key": "a"}', f"call-{step}"))
        assert planning is not None
        assert loop._index is not None
    requests = (ToolRequest(name=name, arguments=arguments),)
    (made,) = _with_ids(loop, step, requests)
    (plain,) = _each_with_id(loop, step, requests)
    call_id = f"call-{step}.2" if taken else f"call-{step}"
    expected = _request(name, arguments, call_id)
    for got in (made, plain):
        assert type(got) is ToolRequest
        assert got.__dict__ == expected.__dict__
        assert list(got.__dict__) == list(expected.__dict__)
        assert got.__pydantic_extra__ is None
        assert got.__pydantic_private__ is None
        assert got.model_fields_set == expected.model_fields_set
    assert made.__pydantic_fields_set__ is expected.__pydantic_fields_set__


def _ruled_out(planning: Any) -> tuple[type[BaseException], str]:
    try:
        _own_ticket(planning, "copy")
    except PhaseForgedError as error:
        return type(error), str(error)
    raise AssertionError("_own_ticket let it through")


class _Holding:
    """Not a ticket, with a ``holder`` whose reads are counted."""

    def __init__(self, planning: Any) -> None:
        self.reads = 0
        self.planning = planning

    @property
    def holder(self) -> Any:
        self.reads += 1
        return lambda: self.planning


@pytest.mark.parametrize(
    "how", ["another's ticket", "no ticket", "not a ticket", "unheld", "counted"]
)
def test_a_phase_without_its_own_ticket_is_refused_as_own_ticket_refuses_it(how: str) -> None:
    """``_take_reply`` on a library ``Planning`` whose ticket is another phase's, missing,
    not a ticket, or held by nobody raises ``_own_ticket``'s error, word for word, and
    makes nothing; a ticket that is not one is read as ``_own_ticket`` reads it."""
    agent = Agent[None](name="t", tools=[_lookup])
    planning = agent.start(None, "go").receive("go")
    other = agent.start(None, "go").receive("go")
    if how == "another's ticket":  # left by advance, as the fast way wants it
        other._leave("advance")
        object.__setattr__(planning, "_ticket", other._ticket)
    elif how == "counted":
        object.__setattr__(planning, "_ticket", _Holding(planning))
    elif how == "no ticket":
        object.__delattr__(planning, "_ticket")
    elif how == "not a ticket":
        object.__setattr__(planning, "_ticket", object())
    else:
        planning._ticket.holder = None
    expected = _ruled_out(planning)
    reads = planning._ticket.reads if how == "counted" else 0
    rt = Runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate(), clock=lambda: 0.0)
    requests = (ToolRequest(name="_lookup", arguments='{"key": "a"}'),)
    with pytest.raises(PhaseForgedError) as raised:
        _take_reply(planning, rt, requests, spent=planning.spent, loop=planning.loop)
    assert (type(raised.value), str(raised.value)) == expected
    if how == "counted":  # read as _own_ticket reads it: once
        assert planning._ticket.reads == 2 * reads == 2


def test_the_library_planning_s_answer_is_its_memo_s() -> None:
    """The answer kept for the library's ``Planning`` is ``_unseen``'s for it (the
    memo's), and the class kept is the one ``_phases`` named."""
    assert _batch._LIBRARY_PLANNING[0] is _phases.Planning
    agent = Agent[None](name="t", tools=[_lookup])
    planning = agent.start(None, "go").receive("go")
    planning._leave("advance")
    rt = Runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate(), clock=lambda: 0.0)
    requests = (ToolRequest(name="_lookup", arguments='{"key": "a"}'),)
    _take_reply(planning, rt, requests, spent=planning.spent, loop=planning.loop)
    assert [_batch._unseen_copy(_phases.Planning)] == _batch._LIBRARY_UNSEEN


class _Instructed(Planning[None]):
    """A subclass as agents write them (the memo's way, not the kept answer)."""

    def instructions(self) -> str:
        return "Be brief."


@settings(max_examples=150, deadline=None)
@given(
    before=st.integers(0, 2 * _CHUNK + 2),
    form=st.sampled_from(["transcript", "prefixed", "tuple"]),
    requests=st.lists(_CALLS, min_size=1, max_size=3).map(tuple),
    cls=st.sampled_from([Planning, _Instructed]),
)
def test_a_reply_s_message_is_appended_as_the_queued_copy_appends_it(
    before: int, form: str, requests: tuple[ToolRequest, ...], cls: type[Planning[None]]
) -> None:
    """``_take_reply`` ends where ``_take(_queued(...))`` does for a transcript of any
    length about the chunk's size (the tail full, one short, a chunk cut), one with a
    message before it, and a tuple (a phase built by hand): the same phase class and
    fields, the transcript's parts (head, chunks, tail) alike, and the reply's message
    made as ``Message(role="assistant", tool_calls=...)`` makes it."""
    phases = _phases.Phases[None](planning=cls)
    agent = Agent[None](name="t", tools=[_lookup, _writes], phases=phases)
    rt = Runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate(), clock=lambda: 0.0)
    said = tuple(Message(role="user", content=f"m{n}") for n in range(before))
    transcript: Any = Transcript(said)
    if form == "prefixed":
        transcript = transcript.prefixed(Message(role="system", content="s"))
    elif form == "tuple":
        transcript = said
    made: list[Any] = []
    for take in ("fast", "plain"):
        at = agent.start(None, "go").receive("go")
        at = at._copy(transcript=transcript)
        at._leave("advance")
        spent, loop = at.spent.add(tokens=3, model_calls=1), at.loop
        if take == "fast":
            made.append(_take_reply(at, rt, requests, spent=spent, loop=loop))
        else:
            made.append(_take(_queued(at, requests, spent=spent, loop=loop), rt))
    fast, plain = made
    assert type(fast) is type(plain)
    assert _fields(fast) == _fields(plain)
    shown, plain_shown = fast.transcript, plain.transcript
    assert type(shown) is type(plain_shown) is Transcript
    assert (shown._head, shown._chunks, shown._tail) == (
        plain_shown._head,
        plain_shown._chunks,
        plain_shown._tail,
    )
    assert (shown._grown is None) == (plain_shown._grown is None)
    asking = next(m for m in reversed(tuple(shown)) if m.role == "assistant")
    expected = Message(role="assistant", tool_calls=asking.tool_calls)
    assert attrs.asdict(asking, recurse=False) == attrs.asdict(expected, recurse=False)
    assert type(asking) is Message
