"""Every tool call of a model's reply, run or answered, one at a time and in its order.

A reply may ask for several tools. ``Planning`` queues them all (``_queued``): one
assistant message that carries every call with the model's own id (an id it left out,
repeated, or used earlier in the run is replaced: ``_with_ids``), and the calls, in
order, in the ``pending`` field that every phase of a call carries on. Back in
``Planning`` with calls pending, the first is taken (``_take_next``) instead of asking
the model, through the same typed transitions as a single call: a read goes to
``ToolCalling``, a write to ``AwaitApproval`` and an approval of its own, an invalid call
or one the governor suppresses is answered at once with the reason (``_take``). The
model is asked again only once every id of its reply has had exactly one tool message.
A reply's calls make one tool iteration (``max_tool_iterations`` counts the steps that
ask for tools), and when the run must finish (a plateau, the agent's completion signal)
the calls still pending are answered without running (``_skipped``).

The transitions' bodies for a call live here (``_asked_for``, ``_suppressed``,
``_rejected``), so that a call taken from the queue and a call made in code go the
same way. The runner checks the queue between two phases (``_watch``). This module
imports the phases for the type checkers only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, assert_never

from . import _json
from ._actions import ActionRecord
from ._errors import SetupError
from ._fast._messages import _appended, _asking, _message, _request, _told
from ._governor import Decision, LoopState, Verdict
from ._model import Message, ToolRequest, Transcript
from ._runtime import Runtime
from ._tools import InvalidCall, ReadCall, WriteCall

if TYPE_CHECKING:
    from ._phases import AwaitApproval, Failed, Phase, Planning, ToolCalling

__all__ = [
    "_asked_for",
    "_call_id",
    "_checked_call",
    "_queued",
    "_rejected",
    "_routed_head",
    "_skipped",
    "_suppressed",
    "_take",
    "_take_next",
    "_unanswered_refused",
]

C = TypeVar("C")
P = TypeVar("P", bound="Phase[Any]")


# --- the queue ---------------------------------------------------------------------------


def _queued(
    planning: Planning[C], requests: tuple[ToolRequest, ...], **changes: Any
) -> Planning[C]:
    """``planning`` with the reply's calls asked (one message) and queued, in its place,
    and the ``changes`` (its spend and loop memory: ``_plan`` makes one copy) made."""
    loop: LoopState = changes.get("loop", planning.loop)
    calls = _with_ids(loop, planning.step, requests)
    # As Message(role="assistant", tool_calls=calls) makes it: each call is a ToolRequest.
    asking = _message("assistant", "", calls, "", "")
    transcript = _appended(planning.transcript, asking)
    return planning._copy(transcript=transcript, pending=calls, **changes)


def _with_ids(
    loop: LoopState, step: int, requests: tuple[ToolRequest, ...]
) -> tuple[ToolRequest, ...]:
    """``requests``, each with an id no other call of the reply or of the run has.

    Each is a validated ``ToolRequest`` itself (the queue holds nothing else). The
    model's own id is kept; an empty one, a repeat within the reply, or an id an earlier
    call of the run had is replaced by ``call-<step>`` (the first call of the reply) or
    ``call-<step>-<n>`` (the n-th), made unique if the model took that too.
    """
    line, size = loop._line(), len(loop.actions)
    given = {request.id for request in requests}
    seen: set[str] = set()
    calls: list[ToolRequest] = []
    for index, request in enumerate(requests):
        name, arguments, given_id = request.name, request.arguments, request.id
        texts = type(name) is str and type(arguments) is str and type(given_id) is str
        if type(request) is not ToolRequest or not texts:
            # A subclass, or a reply made without validation: validated here.
            request = ToolRequest(name=name, arguments=arguments, id=given_id)
        call_id = request.id
        if not call_id or call_id in seen or line.call(call_id, size) is not None:
            base = f"call-{step}" if index == 0 else f"call-{step}-{index + 1}"
            call_id, more = base, 1
            while call_id in given or call_id in seen or line.call(call_id, size) is not None:
                more += 1
                call_id = f"{base}.{more}"
            # As request.model_copy(update={"id": call_id}) makes it: its text is text.
            request = _request(request.name, request.arguments, call_id)
        seen.add(call_id)
        calls.append(request)
    return tuple(calls)


def _call_id(planning: Planning[Any]) -> str:
    """The id of the call a transition of ``planning`` is about: the first pending call's,
    else ``call-<step>`` (a single call, made in code or by a subclass)."""
    pending = planning.pending
    return pending[0].id if pending else f"call-{planning.step}"


class _Taken(NamedTuple):
    """What a transition about one call leaves behind it."""

    call_id: str
    transcript: Transcript  # with the call asked: the queue's message, or one made
    pending: tuple[ToolRequest, ...]  # the calls still pending after this one
    iteration: bool  # whether this call starts a tool iteration (the first of its reply)


def _taken(planning: Planning[Any], name: str, arguments: Callable[[], str]) -> _Taken:
    """The call of tool ``name`` that a transition of ``planning`` is about.

    With nothing pending it is a call of its own, asked now with ``arguments()``. Else
    it is the first pending call, already asked: :class:`SetupError` for a call of
    another tool, so that the calls are answered in the model's order.
    """
    pending = planning.pending
    if not pending:
        call_id = f"call-{planning.step}"
        asking = _asking(name, arguments(), call_id)
        return _Taken(call_id, _appended(planning.transcript, asking), (), True)
    head = pending[0]
    if head.name != name:
        raise SetupError(
            f"the model's call {head.id!r} of {head.name!r} is the first pending call, and "
            f"this transition is about a call of {name!r}; take the pending calls in order "
            "(Planning.next_call()), or answer them all with Planning.skip_pending(reason)"
        )
    transcript = planning.transcript
    # Nothing of the reply answered yet: its message is the last (a pause adds none).
    first = not transcript or transcript[-1].role != "tool"
    return _Taken(head.id, transcript, pending[1:], first)


def _routed_head(planning: Planning[Any]) -> ReadCall | WriteCall | InvalidCall | None:
    """The first pending call, routed by the agent's tools; ``None`` when none is pending."""
    if not planning.pending:
        return None
    head = planning.pending[0]
    return planning.agent.tools.route(head.name, head.arguments)


# --- the transitions' bodies (each leaves the phase once its call is known) -------------


# The action record ``_action`` made last: (the phase, the call, its raw arguments, the
# record). A tuple, replaced whole, so that a reader in another thread sees one entry.
_last_action: list[tuple[object, object, str | None, ActionRecord] | None] = [None]


def _action(
    planning: Planning[Any], call: ReadCall | WriteCall, raw_arguments: str | None
) -> ActionRecord:
    """``planning._action(call, raw_arguments)``: the governor's record of ``call``.

    Made once for a call the model asked for: ``_checked_call`` makes it for the
    governor's ``before_action``, and the transition it then takes records the same
    record (the same phase, call and arguments give the same record: the governor's
    ``action`` reads only them, the call id from the phase's pending calls). The
    record is kept for one more ask only: the second takes it out.
    """
    last = _last_action[0]
    if last is not None and last[0] is planning and last[1] is call and last[2] == raw_arguments:
        _last_action[0] = None  # taken: the phase and its call are not kept past it
        return last[3]
    action = planning._action(call, raw_arguments)
    _last_action[0] = (planning, call, raw_arguments, action)
    return action


def _asked_for(
    planning: Planning[Any],
    transition: str,
    cls: type[P],
    call: ReadCall | WriteCall,
    raw_arguments: str | None,
) -> P:
    """The ``cls`` (``ToolCalling`` or ``AwaitApproval``) that ``planning`` goes to for
    ``call``, by ``transition``."""
    taken = _taken(planning, call.name, lambda: _json.dumps(call.args))
    planning._leave(transition)
    action = _action(planning, call, raw_arguments)
    return planning._next(
        cls,
        call=call,
        call_id=taken.call_id,
        transcript=taken.transcript,
        loop=planning.loop.record(action, iteration=taken.iteration),
        pending=taken.pending,
    )


def _suppressed(
    planning: Planning[C],
    call: ReadCall | WriteCall,
    decision: Decision,
    raw_arguments: str | None,
) -> Planning[C]:
    """``planning`` again, the model told why ``call`` was skipped."""
    taken = _taken(planning, call.name, lambda: _json.dumps(call.args))
    planning._leave("suppress")
    action = _action(planning, call, raw_arguments).model_copy(
        update={"outcome": "suppressed", "result": decision.reason}
    )
    told = _told(decision.message, taken.call_id, call.name)
    loop = planning.loop.record(action, iteration=taken.iteration)
    return planning._next(
        planning.agent.phases.planning,
        transcript=_appended(taken.transcript, told),
        loop=loop.noted(planning.step, "before_action", decision),
        pending=taken.pending,
    )


def _rejected(planning: Planning[C], invalid: InvalidCall) -> Planning[C]:
    """``planning`` again, the model told what to fix in ``invalid``."""
    taken = _taken(planning, invalid.name, lambda: invalid.arguments)
    planning._leave("reject_call")
    told = Message(
        role="tool", content=invalid.feedback, tool_call_id=taken.call_id, name=invalid.name
    )
    loop = planning.loop
    return planning._next(
        planning.agent.phases.planning,
        transcript=_appended(taken.transcript, told),
        invalid_streak=planning.invalid_streak + 1,
        loop=loop._evolve(tool_iterations=loop.tool_iterations + taken.iteration),
        pending=taken.pending,
    )


def _skipped(planning: Planning[C], reason: str) -> Planning[C]:
    """``planning`` again, every pending call answered, not run, with ``reason``."""
    told = tuple(
        _told(f"Not run, and nothing was done: {reason}.", request.id, request.name)
        for request in planning.pending
    )
    return planning._next(
        planning.agent.phases.planning,
        transcript=_appended(planning.transcript, *told),
        invalid_streak=planning.invalid_streak,
    )


def _unanswered_refused(planning: Planning[Any], transition: str) -> None:
    """Refuse ``transition`` (an answer) while the model's calls are pending."""
    if planning.pending:
        ids = ", ".join(repr(request.id) for request in planning.pending)
        raise SetupError(
            f"{transition} would leave the model's call(s) {ids} unanswered; take them "
            "(Planning.next_call()) or answer them with Planning.skip_pending(reason) first"
        )


# --- routing -----------------------------------------------------------------------------


def _take_next(
    planning: Planning[C], rt: Runtime
) -> ToolCalling[C] | AwaitApproval[C] | Planning[C] | Failed[C]:
    """What ``Planning.advance`` does with calls pending: take the first (or, when the run
    must finish, answer them all unrun, and plan again)."""
    planning._leave("advance")
    taking = planning._copy()  # carries on the transition this advance claimed
    finishing = taking.loop.finalize
    if finishing:
        return taking.skip_pending(f"the run is finishing ({finishing})")
    return _take(taking, rt)


def _take(
    planning: Planning[C], rt: Runtime
) -> ToolCalling[C] | AwaitApproval[C] | Planning[C] | Failed[C]:
    """The first pending call, routed: a valid one to the governor (``_checked_call``), an
    invalid one back to the model, or to ``Failed`` after ``max_invalid_calls`` in a row."""
    agent = planning.agent
    head = planning.pending[0]
    routed = agent.tools.route(head.name, head.arguments)
    match routed:
        case ReadCall() | WriteCall():
            return _checked_call(planning, rt, routed, head.arguments)
        case InvalidCall():
            if planning.invalid_streak + 1 >= agent.max_invalid_calls:
                return planning.fail(
                    f"the model sent {planning.invalid_streak + 1} invalid tool calls in a row; "
                    f"last: {'; '.join(routed.problems)}"
                )
            return planning.reject_call(routed)
        case _:
            assert_never(routed)


def _checked_call(
    planning: Planning[C], rt: Runtime, routed: ReadCall | WriteCall, arguments: str
) -> ToolCalling[C] | AwaitApproval[C] | Planning[C] | Failed[C]:
    """The model's valid call, once the governor has ruled on it (``before_action``)."""
    agent = planning.agent
    decision = agent.governor.before_action(
        planning.loop,
        _action(planning, routed, arguments),
        spent=planning.spent,
        budget=agent.budget,
        elapsed=rt.elapsed(),
        price=routed.tool.price(routed.args),
    )
    match decision.verdict:
        case Verdict.ABORT:
            return planning._ruled("before_action", decision).fail(decision.reason)
        case Verdict.PAUSE:
            return planning._ruled("before_action", decision).pause(decision.reason)
        case Verdict.SUPPRESS:
            return planning.suppress(routed, decision, raw_arguments=arguments)
        case Verdict.CONTINUE | Verdict.FINALIZE:
            pass
        case _:
            assert_never(decision.verdict)
    # The public transitions record the same action the governor checked.
    if isinstance(routed, ReadCall):
        return planning.call_tool(routed, raw_arguments=arguments)
    return planning.request_approval(routed, raw_arguments=arguments)
