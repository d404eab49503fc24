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

import time
from typing import TYPE_CHECKING, Any, Final, TypeVar, assert_never

from pydantic import BaseModel

from . import _governor, _json
from ._actions import CHUNK, ActionLog, ActionRecord, _MakingRecord
from ._budget import Budget, Spend
from ._errors import PhaseForgedError, SetupError
from ._fast._attrs import _COPIERS, _by_init, _kept, _site
from ._fast._classes import _per_class, _PerClass
from ._fast._messages import (
    _REQUEST_ID_FIELDS,
    _appended,
    _asking,
    _MakingMessage,
    _MakingRequest,
    _message,
    _request,
    _told,
)
from ._governor import CONTINUE as _CONTINUE_DECISION
from ._governor import (
    Decision,
    LoopGovernor,
    LoopState,
    Verdict,
    _case_insensitive,
    _insert,
    _Line,
    _MakingLoop,
)
from ._model import _CHUNK, Message, ToolRequest, Transcript
from ._runtime import Runtime
from ._seal import _own_ticket, _Ticket
from ._tools import _FREE, InvalidCall, ReadCall, ReadTool, WriteCall, _sha256

if TYPE_CHECKING:
    from ._phases import AwaitApproval, Failed, Phase, Planning, ToolCalling

__all__ = [
    "_asked_for",
    "_call_id",
    "_checked_call",
    "_LIBRARY_PLANNING",
    "_LIBRARY_SHOWN",
    "_library_planning",
    "_queued",
    "_rejected",
    "_routed_head",
    "_skipped",
    "_suppressed",
    "_take",
    "_take_next",
    "_take_reply",
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
    return _queue(planning, _with_ids(loop, planning.step, requests), **changes)


def _queue(planning: Planning[C], calls: tuple[ToolRequest, ...], **changes: Any) -> Planning[C]:
    """What ``_queued`` makes, for the calls with their ids (``_with_ids``)."""
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

    A reply of one call (a tuple of one exact ``ToolRequest`` of text, as a validated
    reply holds) is done here, as ``_each_with_id`` does it: its set of ids seen is empty
    and its ids given are the call's own. Anything else goes through ``_each_with_id``.
    A ``LoopState`` itself (not a subclass) whose index is a line of its own covering its
    ``ActionLog`` (nearly always) is read here for the model's id, or ``call-<step>`` when
    none is given: an id the line has no call of is free (``_call_free``'s first answer).
    Otherwise it is asked whether an id is free (``LoopState._call_free``, one frame)
    for the model's id and for ``call-<step>``; when neither is, the index is read as for
    any state.
    """
    if type(requests) is tuple and len(requests) == 1:
        request = requests[0]
        # Its fields, read from its __dict__ (what reading them from a ToolRequest reads:
        # the class has no attribute of their names; one missing reads as None here).
        fields = request.__dict__ if type(request) is ToolRequest else _NO_FIELDS
        if type(fields) is not dict:  # a dict subclass set behind pydantic's back
            fields = _NO_FIELDS
        given_id, name, arguments = fields.get("id"), fields.get("name"), fields.get("arguments")
        if type(given_id) is str and type(name) is str and type(arguments) is str:
            if type(loop) is LoopState:  # its one question, asked of it (a subclass: below)
                # _call_free's first answer, read here (no frame): an index that is a line
                # of its own covering its ActionLog, without a call of the id.
                line = loop._index
                log: Any = loop.actions
                if (
                    type(line) is _Line
                    and line.parent is None
                    and type(log) is ActionLog
                    and line.size >= len(log._chunks) * CHUNK + len(log._tail)
                ):
                    calls = line.calls
                    if given_id:
                        if given_id not in calls:
                            return requests  # the model's id, kept
                    else:  # no id given (one the line holds may be free: asked below)
                        call_id = f"call-{step}"
                        if call_id not in calls:
                            # _request(name, arguments, call_id) in this frame.
                            making: Any = _MakingRequest()
                            making.__dict__ = {"name": name, "arguments": arguments, "id": call_id}
                            making.__pydantic_fields_set__ = _REQUEST_ID_FIELDS
                            making.__pydantic_extra__ = None
                            making.__pydantic_private__ = None
                            making.__class__ = ToolRequest
                            return (making,)
                if given_id and loop._call_free(given_id):
                    return requests  # the model's id, kept
                call_id = f"call-{step}"
                if call_id != given_id and loop._call_free(call_id):
                    return (_request(name, arguments, call_id),)
            line = loop._line()
            size = len(loop.actions)
            if given_id and line.call(given_id, size) is None:
                return requests  # the model's id, kept (a tuple: nothing can change it)
            call_id, more = f"call-{step}", 1
            while call_id == given_id or line.call(call_id, size) is not None:
                more += 1
                call_id = f"call-{step}.{more}"
            return (_request(name, arguments, call_id),)
    return _each_with_id(loop, step, requests)


_NO_FIELDS: dict[str, Any] = {}


def _each_with_id(
    loop: LoopState, step: int, requests: tuple[ToolRequest, ...]
) -> tuple[ToolRequest, ...]:
    """What ``_with_ids`` makes, call by call (any number of calls, of any kind)."""
    line, size = loop._line(), len(loop.actions)
    given: set[str] | None = None  # the reply's own ids, read when one is replaced
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
            if given is None:
                given = {request.id for request in requests}
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


# What a transition about one call leaves behind it (_taken): the call's id; the transcript
# with the call asked (the queue's message, or one made); the calls still pending after
# it; whether it starts a tool iteration (the first of its reply). A plain tuple: a
# NamedTuple's __new__ is a Python call on the path of every call.
_Taken = tuple[str, Transcript, tuple[ToolRequest, ...], bool]


def _taken(planning: Planning[Any], name: str, arguments: BaseModel | str) -> _Taken:
    """The call of tool ``name`` that a transition of ``planning`` is about.

    With nothing pending it is a call of its own, asked now with ``arguments`` (a model:
    its JSON, written only then). Else it is the first pending call, already asked:
    :class:`SetupError` for a call of another tool, so that the calls are answered in the
    model's order.
    """
    pending = planning.pending
    if not pending:
        call_id = f"call-{planning.step}"
        text = arguments if isinstance(arguments, str) else _json.dumps(arguments)
        asking = _asking(name, text, call_id)
        return call_id, _appended(planning.transcript, asking), (), True
    head = pending[0]
    if head.name != name:
        raise SetupError(
            f"the model's call {head.id!r} of {head.name!r} is the first pending call, and "
            f"this transition is about a call of {name!r}; take the pending calls in order "
            "(Planning.next_call()), or answer them all with Planning.skip_pending(reason)"
        )
    transcript = planning.transcript
    # Nothing of the reply answered yet: its message is the last (a pause adds none). A
    # transcript's last message is its tail's when it has a tail (read without a call);
    # a phase built by hand may hold a tuple.
    held: object = transcript
    tail = transcript._tail if type(held) is Transcript else None
    last = tail[-1] if tail else transcript[-1] if transcript else None
    return head.id, transcript, pending[1:], last is None or last.role != "tool"


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
    call_id, transcript, pending, iteration = _taken(planning, call.name, call.args)
    planning._leave(transition)
    action = _action(planning, call, raw_arguments)
    return planning._next(
        cls,
        call=call,
        call_id=call_id,
        transcript=transcript,
        loop=planning.loop.record(action, iteration=iteration),
        pending=pending,
    )


def _suppressed(
    planning: Planning[C],
    call: ReadCall | WriteCall,
    decision: Decision,
    raw_arguments: str | None,
) -> Planning[C]:
    """``planning`` again, the model told why ``call`` was skipped."""
    call_id, transcript, pending, iteration = _taken(planning, call.name, call.args)
    planning._leave("suppress")
    action = _action(planning, call, raw_arguments).model_copy(
        update={"outcome": "suppressed", "result": decision.reason}
    )
    told = _told(decision.message, call_id, call.name)
    loop = planning.loop.record(action, iteration=iteration)
    return planning._next(
        planning.agent.phases.planning,
        transcript=_appended(transcript, told),
        loop=loop.noted(planning.step, "before_action", decision),
        pending=pending,
    )


def _rejected(planning: Planning[C], invalid: InvalidCall) -> Planning[C]:
    """``planning`` again, the model told what to fix in ``invalid``."""
    call_id, transcript, pending, iteration = _taken(planning, invalid.name, invalid.arguments)
    planning._leave("reject_call")
    told = Message(role="tool", content=invalid.feedback, tool_call_id=call_id, name=invalid.name)
    loop = planning.loop
    return planning._next(
        planning.agent.phases.planning,
        transcript=_appended(transcript, told),
        invalid_streak=planning.invalid_streak + 1,
        loop=loop._evolve(tool_iterations=loop.tool_iterations + iteration),
        pending=pending,
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
    head = planning.pending[0]
    routed = planning.agent.tools.route(head.name, head.arguments)
    return _routed(planning, rt, routed, head.arguments)


def _routed(
    planning: Planning[C],
    rt: Runtime,
    routed: ReadCall | WriteCall | InvalidCall,
    arguments: str,
) -> ToolCalling[C] | AwaitApproval[C] | Planning[C] | Failed[C]:
    """Where ``_take`` sends the first pending call once the agent's tools routed it."""
    agent = planning.agent
    match routed:
        case ReadCall() | WriteCall():
            return _checked_call(planning, rt, routed, arguments)
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
    planning: Planning[C],
    rt: Runtime,
    routed: ReadCall | WriteCall,
    arguments: str,
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
    return _ruled_call(planning, routed, arguments, decision)


def _ruled_call(
    planning: Planning[C], routed: ReadCall | WriteCall, arguments: str, decision: Decision
) -> ToolCalling[C] | AwaitApproval[C] | Planning[C] | Failed[C]:
    """Where the governor's ``decision`` on the model's valid call sends it."""
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


# --- a reply's first call, without the queued copy -----------------------------------------


def _take_reply(
    planning: Planning[C],
    rt: Runtime,
    requests: tuple[ToolRequest, ...],
    spent: Spend,
    loop: LoopState,
) -> ToolCalling[C] | AwaitApproval[C] | Planning[C] | Failed[C]:
    """``_take(_queued(planning, requests, spent=spent, loop=loop), rt)``, for a
    ``planning`` left by ``advance``: the reply's calls queued and the first taken.

    A read call the governor lets run goes to ``ToolCalling`` from ``planning`` itself,
    without the queued copy between them, when nothing could tell the copy was not made
    (``_unseen_copy``): the same ``ToolCalling``, fields, governor calls and arguments, in
    the same order, one transition from ``planning`` as the runner checks it. Anything
    else goes on from the copy, with what was already asked (route, record, decision).
    """
    cls = type(planning)
    library = cls is _LIBRARY_PLANNING[0]
    if library:
        # _own_ticket(planning, "copy") in this frame, for the library's own class (its
        # _ticket a slot): a ticket of the library's class, holding this very phase, is
        # its answer; for anything else _own_ticket itself reads the phase again and
        # raises, and a ticket held by another object is its error. Its _unseen answer,
        # kept once.
        ticket: Any = None
        try:
            ticket = planning._ticket
            holder = ticket.holder if type(ticket) is _Ticket else None
        except AttributeError:
            holder = None
        if holder is None:
            ticket = _own_ticket(planning, "copy")  # raises: no ticket of its own
        elif holder() is not planning:
            raise _copied_phase(planning)
        unseen = _LIBRARY_UNSEEN[0] if _LIBRARY_UNSEEN else _library_unseen(cls)
    else:
        ticket = _own_ticket(planning, "copy")
        known = _UNSEEN.get(id(cls))  # _unseen(cls), its memo read here when it has the class
        unseen = known[1] if known is not None and known[0]() is cls else _unseen(cls)
    if ticket.left_by != "advance" or ticket.copied or not unseen:
        return _take(_queued(planning, requests, spent=spent, loop=loop), rt)
    step = planning.step
    # _with_ids's first answers in this frame: a reply of one call, a ToolRequest itself
    # (its fields read from its own dict, all text), a LoopState itself whose line of its
    # own covers its ActionLog and has no call of the id: the model's id kept, or with
    # none given, call-<step> (the request made as _request makes it). Anything else is
    # _with_ids's.
    calls: tuple[ToolRequest, ...] | None = None
    one = False  # whether calls is known to hold one request (the first answers below)
    name: Any = None
    arguments: Any = None
    if type(requests) is tuple and len(requests) == 1 and type(loop) is LoopState:
        only: object = requests[0]
        fields: Any = only.__dict__ if type(only) is ToolRequest else _NO_FIELDS
        if type(fields) is not dict:
            fields = _NO_FIELDS
        given, name, arguments = fields.get("id"), fields.get("name"), fields.get("arguments")
        index = loop._index
        held_log: Any = loop.actions
        if (
            type(given) is str
            and type(name) is str
            and type(arguments) is str
            and type(index) is _Line
            and index.parent is None
            and type(held_log) is ActionLog
            and index.size >= len(held_log._chunks) * CHUNK + len(held_log._tail)
        ):
            if given:
                if given not in index.calls:
                    calls = requests
                    one = True
            elif (made_id := f"call-{step}") not in index.calls:
                making_request: Any = _MakingRequest()
                making_request.__dict__ = {"name": name, "arguments": arguments, "id": made_id}
                making_request.__pydantic_fields_set__ = _REQUEST_ID_FIELDS
                making_request.__pydantic_extra__ = None
                making_request.__pydantic_private__ = None
                making_request.__class__ = ToolRequest
                calls = (making_request,)
                one = True
    if calls is None:
        calls = _with_ids(loop, step, requests)
    head = calls[0]
    agent = planning.agent
    # A ToolRequest itself answers its fields from its own dict, the same objects at each
    # read: its arguments and id are read once; another class's are read again, as before.
    # (One request read above is a ToolRequest itself whose name and arguments are those
    # read from its dict, and nothing but the library's code has run since.)
    if one:
        exact = True
    else:
        request: object = head
        exact = type(request) is ToolRequest
        arguments = head.arguments if exact else ""
        name = head.name
    routed = agent.tools.route(name, arguments if exact else head.arguments)
    if type(routed) is not ReadCall:
        return _routed(
            _queue(planning, calls, spent=spent, loop=loop),
            rt,
            routed,
            arguments if exact else head.arguments,
        )
    # What _checked_call asks, with the copy's values: Planning._action's record (the
    # call id is the first pending call's), and the governor's ruling.
    governor = agent.governor
    budget = agent.budget
    ruler: object = governor  # a LoopGovernor itself: its action and ruling read here
    # Whether the ruling was read in this frame for the library's Planning: then loop
    # held a line of its own (line) covering its ActionLog (log: chunks, records, size
    # records), read above with nothing but the library's code run since.
    ruled = False
    line: Any = None
    log: Any = None
    records: Any = ()
    chunks: Any = ()
    size = position = 0
    count: Any = 0
    decision: Decision | None = None
    ours = False  # whether the governor is a LoopGovernor itself (and the rest, below)
    runtime: object = rt  # final classes, whose subclasses the types do not foresee
    tool = routed.tool
    pricing: object = tool
    if (
        exact
        and type(ruler) is LoopGovernor
        and LoopGovernor.action is _ACTION  # (the class's own, not patched)
        and LoopGovernor.before_action is _BEFORE_ACTION
        and type(runtime) is Runtime
        and rt.clock is _monotonic
        and type(pricing) is ReadTool
        and tool.cost is None
    ):
        # LoopGovernor.action(routed, arguments, call_id) in this frame, for a ReadCall
        # itself (its tool's name; the record made as action makes it).
        ours = True
        call_id = head.id
        name = tool.name
        exact_hash = _sha256(f"{name}\x00{arguments}".encode()).hexdigest()
        if _case_insensitive(type(routed.args)):
            canonical = _json.canonical(LoopGovernor._folded(routed))
            key = f"{name}:{_sha256(canonical.encode()).hexdigest()}"
        else:
            canonical = routed._canonical
            key = f"{name}:{routed.args_hash}"
        recording: Any = _new(_MakingRecord)
        recording.call_id = call_id
        recording.tool = name
        recording.effect = "read"  # a ReadTool itself (final) is no WriteTool
        recording.exact = exact_hash
        recording.key = key
        recording.text = f"{name}({canonical})"
        recording.outcome = "pending"
        recording.result = ""
        recording.gain = None
        recording.__class__ = ActionRecord
        action: ActionRecord = recording
        # before_action's first answer in this frame: a Budget itself that refuses
        # nothing, a LoopState itself whose own line covers its ActionLog, a new call,
        # nothing failed, and _cycle's first answers. Anything else asks before_action.
        spending: object = budget
        line = loop._index
        log = loop.actions
        if (
            type(spending) is Budget
            and (
                budget is _governor._free_budget
                or (
                    budget.wall_clock is None
                    and budget.tool_calls is None
                    and budget.tokens is None
                    and budget.cost is None
                )
            )
            and type(loop) is LoopState
            and type(line) is _Line
            and line.parent is None
            and type(log) is ActionLog
        ):
            records = log._tail
            keys = line.keys
            chunks = log._chunks
            size = len(chunks) * CHUNK + len(records)
            if (
                line.size >= size
                and exact_hash not in keys
                and key not in keys
                and loop.failures is _NO_FAILURES  # (an empty tuple itself: the one there is)
            ):
                # _cycle's first answers (the action a read): the latest action settled
                # and gaining enough, or a run of this one tool shorter than the window.
                last = records[-1] if records else None
                window = governor.cycle_window
                if (
                    last is not None
                    and last.outcome != "pending"
                    and not (last.gain or 0.0) < governor.cycle_gain
                ) or (
                    type(name) is str
                    and name == line.tool
                    and type(window) is int
                    and (line.run <= size - window + 1 or not line.run)
                ):
                    decision = _CONTINUE_DECISION
                    ruled = library
    elif exact:
        call_id = head.id
        action = governor.action(routed, arguments, call_id)
    else:
        call_id = ""  # read again below, as before
        action = governor.action(routed, head.arguments, head.id)
    if decision is None:
        # Runtime.elapsed's own difference for a Runtime itself (the clock read as it
        # reads it), and Tool.price's first answer for a read tool of exactly the
        # library's class with no cost function (as execute prices it); anything else is
        # asked. (Neither is read when the ruling above was made: the clock is
        # time.monotonic itself, a reading no one sees, and the price free.)
        elapsed = rt.clock() - rt.started if type(runtime) is Runtime else rt.elapsed()
        price = (
            _FREE if type(pricing) is ReadTool and tool.cost is None else tool.price(routed.args)
        )
        decision = governor.before_action(
            loop, action, spent=spent, budget=budget, elapsed=elapsed, price=price
        )
    verdict = decision.verdict
    if verdict is not _CONTINUE and verdict is not _FINALIZE:
        queued = _queue(planning, calls, spent=spent, loop=loop)
        _last_action[0] = (queued, routed, head.arguments, action)
        return _ruled_call(queued, routed, head.arguments, decision)
    # What the copy's call_tool makes (_asked_for): the call asked by the reply's message
    # (the last of the transcript, so it starts a tool iteration) and recorded.
    ticket.copied = True  # as the copy would have
    _last_action[0] = None  # as _asked_for leaves it
    # _message("assistant", "", calls, "", "") in this frame (calls: validated requests).
    making: Any = _MakingMessage()
    making.role = "assistant"
    making.content = ""
    making.tool_calls = calls
    making.tool_call_id = ""
    making.name = ""
    making.__class__ = Message
    asking: Message = making
    before: Any = planning.transcript  # a phase built by hand may hold a tuple
    if type(before) is Transcript and len(tail := before._tail + (asking,)) <= _CHUNK:  # noqa: RUF005
        # Transcript.appended's steps within a chunk (as _appended takes them).
        transcript: Transcript = _new(Transcript)
        transcript._head, transcript._chunks, transcript._tail = (
            before._head,
            before._chunks,
            tail,
        )
        transcript._grown = (before._tail, tail)
    else:
        transcript = _appended(before, asking)
        ruled = False  # (a class of another's may have run)
    to = agent.phases.tool_calling
    called = call_id if exact else head.id
    # LoopState.record(action, iteration=True)'s own path in this frame (for the record
    # made above): a LoopState itself holding an ActionLog, an int count and a line that
    # covers exactly its actions; anything else is recorded by record.
    recorded: Any = None
    if ruled:
        # The loop, its line and ActionLog as the ruling read them (the same objects).
        count = loop.tool_iterations
        position = size
        if type(count) is not int or LoopState.record is not _RECORD:
            ruled = False
    elif ours and type(loop) is LoopState and LoopState.record is _RECORD:
        log = loop.actions
        count = loop.tool_iterations
        line = loop._index
        if type(log) is ActionLog and type(count) is int and type(line) is _Line:
            chunks, records = log._chunks, log._tail
            position = len(chunks) * CHUNK + len(records)
            ruled = True
    if ruled and line.size == position:
        grown: ActionLog = _new(ActionLog)
        if len(records) < CHUNK:
            grown._chunks, grown._tail = chunks, records + (action,)  # noqa: RUF005
            grown._grown = (records, grown._tail)
        else:
            grown._chunks, grown._tail = chunks + (records,), (action,)  # noqa: RUF005
            grown._grown = None
        recorded = _new(_MakingLoop)
        recorded.actions = grown
        recorded.evidence = loop.evidence
        recorded.tool_iterations = count + 1
        recorded.low_gain_streak = loop.low_gain_streak
        recorded.finalize = loop.finalize
        recorded.paused = loop.paused
        recorded.verdicts = loop.verdicts
        recorded.flags = loop.flags
        recorded.failures = loop.failures
        recorded._index = line
        recorded._grams = loop._grams
        recorded.__class__ = LoopState
        line.size = position + 1
        ids = line.calls
        recorded_id = action.call_id
        if ids.get(recorded_id) is None:
            ids[recorded_id] = position
        else:
            _insert(ids, recorded_id, position)
        named = action.tool
        if type(named) is not str or named != line.tool:
            line.tool = named if type(named) is str else None
            line.run = position
    if recorded is None:
        recorded = loop.record(action, iteration=True)
    calling: ToolCalling[C] = _TO_CALLING(
        to, planning, routed, called, transcript, spent, recorded, () if one else calls[1:]
    )
    return calling


_CONTINUE: Final = Verdict.CONTINUE
_NO_FAILURES: Final = ()
_FINALIZE: Final = Verdict.FINALIZE
_new: Final = object.__new__
_monotonic: Final = time.monotonic
# The methods whose answers _take_reply reads in its frame (read there only while the
# classes hold these very functions: a method patched on the class is asked).
_ACTION: Final = LoopGovernor.action
_BEFORE_ACTION: Final = LoopGovernor.before_action
_RECORD: Final = LoopState.record

# What ``planning._next(tool_calling, call=..., call_id=..., transcript=..., spent=...,
# loop=..., pending=...)`` makes, the values passed as they are (no dict of them).
_TO_CALLING = _site("call", "call_id", "transcript", "spent", "loop", "pending")


# The library's own Planning class, named by _phases as it defines it (_phases imports
# this module, so this module does not import it).
_PLANNING: list[type[Any]] = []


def _library_planning(cls: type[P]) -> type[P]:
    """Name ``cls`` as the library's ``Planning`` (a class decorator, used once)."""
    _PLANNING.append(cls)
    _LIBRARY_PLANNING[0] = cls
    named: Any = cls  # the library's Planning (a Phase to the types)
    _LIBRARY_SHOWN[:] = [named.messages, named.instructions]
    return cls


# The library's Planning (one entry; None until _phases names it), and _unseen's answer
# for it once asked (its memo's entry never goes: the class stays).
_LIBRARY_PLANNING: list[type[Any] | None] = [None]
# The library's Planning's own messages and instructions, as _phases defines them (while
# the class holds these very functions, _plan shows the model what messages would).
_LIBRARY_SHOWN: list[Any] = []
_LIBRARY_UNSEEN: list[bool] = []


def _library_unseen(cls: type[Any]) -> bool:
    """``_unseen(cls)`` for the library's Planning, kept in ``_LIBRARY_UNSEEN``."""
    unseen = _unseen(cls)
    _LIBRARY_UNSEEN.append(unseen)
    return unseen


def _copied_phase(planning: Planning[Any]) -> PhaseForgedError:
    """The error ``_own_ticket(planning, "copy")`` raises for a copy of a phase."""
    return PhaseForgedError(
        type(planning).kind, "copy() on a copy of a phase (attrs.evolve, copy, pickle)"
    )


# Whether a Planning class's queued copy is seen by nothing (_unseen_copy), per class.
_UNSEEN: _PerClass[bool] = {}
# What the way from a reply to its first call calls on the copy (or on the class).
_COPY_METHODS = ("_copy", "_next", "_leave", "_action", "call_tool", "__getattribute__")


def _unseen(cls: type[Any]) -> bool:
    return _per_class(_UNSEEN, cls, _unseen_copy)


def _unseen_copy(cls: type[Any]) -> bool:
    """Whether a queued copy of a ``cls`` phase, made and left on the way from a reply to
    its first call's ``ToolCalling``, runs no code but the library's: the class copies by
    setting its slots (``_fast._attrs``: no validator, converter or factory of its own),
    has no ``__attrs_post_init__`` or ``__del__``, and overrides none of the methods that
    way calls (``_COPY_METHODS``)."""
    (planning,) = _PLANNING
    copier = _kept(_COPIERS, cls, copy=True)
    return (
        copier is not _by_init
        and type(cls) is type(planning)
        and not hasattr(cls, "__attrs_post_init__")
        and not hasattr(cls, "__del__")
        and all(getattr(cls, name) is getattr(planning, name) for name in _COPY_METHODS)
    )
