"""What ``Planning`` does with the model, as functions the phase calls.

What ``Planning.advance`` does (``_plan``: the governor's verdict before the step,
then the model), the model call under the run's deadline (``_ask``), the routing of
its reply (``_route``; its tool calls are queued and taken one by one: ``_batch``),
and the answer: asked for at the end
of a run (``_finalize``) and put through the output guard (``_answer``, and
``_text_answer`` when the agent has no guard of its own). Each takes the
``Planning`` phase it works for and returns the phase that comes next, made by that
phase's own transitions; nothing here builds a phase.

This module imports the phases for the type checkers only: ``_phases`` imports it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any, Final, TypeVar, assert_never, cast

from . import _budget, _governor, _json
from ._batch import _LIBRARY_PLANNING, _LIBRARY_SHOWN, _queued, _take, _take_reply
from ._breaker import model_circuit
from ._budget import Budget, Spend, _make
from ._errors import (
    CircuitOpenError,
    ModelRequestError,
    ModelResponseError,
    ModelUnavailableError,
)
from ._events import _streamed
from ._fast._deadline import _until
from ._fast._messages import (
    _REQUEST_FIELD_SET,
    _MakingMessage,
    _MakingModelRequest,
    _model_request,
    _system,
)
from ._governor import CONTINUE as _CONTINUE_DECISION
from ._governor import LoopGovernor, LoopState, Verdict, _hold_free
from ._guard import (
    CustomerResponse,
    GuardMode,
    Invalid,
    OutputGuard,
    Parsed,
    Refusal,
    Truncated,
    _fallbacks,
    validate_with_retries,
)
from ._model import (
    Message,
    Model,
    ModelReply,
    ModelRequest,
    StreamingModel,
    Transcript,
    Usage,
    _checked_reply,
)
from ._retry import RetryPolicy, _transient_words, _Unanswered
from ._runtime import Runtime
from ._seal import _Ticket
from ._tools import ToolRegistry

if TYPE_CHECKING:
    from ._phases import (
        AwaitApproval,
        Failed,
        ModelRetrying,
        Planning,
        Responding,
        ToolCalling,
    )

__all__ = ["_answer", "_ask", "_finalize", "_plan", "_route", "_text_answer"]

C = TypeVar("C")

_monotonic = time.monotonic
_new: Final = object.__new__
_NO_CHECKS: Final = ()
# Spend.add, whose first answer _plan reads in its frame while the class holds it.
_SPEND_ADD: Final = Spend.add
# begin_step, whose last answer _plan reads in its frame while the class holds it.
_BEGIN_STEP: Final = LoopGovernor.begin_step

_TEXT_ANSWER = OutputGuard(CustomerResponse)
_CONTINUE: Final = Verdict.CONTINUE
_ZERO: Final = Decimal(0)
# What _plan reads the fields of a usage that is not a Usage itself from (none).
_NO_FIELDS: Final[dict[str, Any]] = {}
_TEXT_FALLBACK = {"statemachine.schema": "CustomerResponse"}


async def _plan(
    planning: Planning[C], rt: Runtime, free: object = None
) -> ToolCalling[C] | AwaitApproval[C] | Responding[C] | Planning[C] | ModelRetrying[C] | Failed[C]:
    """What ``Planning.advance`` does (its docstring says what).

    ``free`` is the budget the runner found with no limit at the drive's start (a
    ``Budget`` itself, frozen: what it read then it would read now), or ``None``: kept
    as the governor's free budget (``_hold_free``, which checks it), or forgotten.
    """
    agent = planning.agent
    runtime: object = rt  # a final class, whose subclasses the types do not foresee
    if free is not _governor._free_budget:  # nearly always the same: nothing to write
        _hold_free(free, agent.budget)
    governing = agent.governor
    ruler: object = governing
    state = planning.loop
    held_loop: object = state
    ctx, spending, limits = planning.ctx, planning.spent, agent.budget
    held_limits: object = limits
    held_spent: object = spending
    max_steps, max_tool_iterations = agent.max_steps, agent.max_tool_iterations
    # LoopGovernor.begin_step's last answer (continue), read in this frame: a Budget
    # itself that refuses nothing, no checks of its own, the step and tool-iteration caps
    # not near, nothing to finalize; the clock time.monotonic itself (a reading no one
    # sees, not needed then). Anything else asks begin_step, with the clock read.
    if (
        type(ruler) is LoopGovernor
        and LoopGovernor.begin_step is _BEGIN_STEP  # (the class's own, not patched)
        and type(runtime) is Runtime
        and rt.clock is _monotonic
        and type(held_limits) is Budget
        and (
            limits is _governor._free_budget
            or (
                limits.wall_clock is None
                and limits.tool_calls is None
                and limits.tokens is None
                and limits.cost is None
            )
        )
        and type(held_spent) is Spend
        and type(held_loop) is LoopState
        and type(max_steps) is int
        and governing.checks is _NO_CHECKS  # (an empty tuple itself: the one there is)
        and not state.finalize
        and spending.model_calls + 1 < max_steps
        and (
            max_tool_iterations is None
            or (type(max_tool_iterations) is int and state.tool_iterations < max_tool_iterations)
        )
    ):
        decision = _CONTINUE_DECISION
    else:
        decision = governing.begin_step(
            state,
            ctx=ctx,
            spent=spending,
            budget=limits,
            # Runtime.elapsed's own difference for a Runtime itself (the clock read as it
            # reads it).
            elapsed=rt.clock() - rt.started if type(runtime) is Runtime else rt.elapsed(),
            max_steps=max_steps,
            max_tool_iterations=max_tool_iterations,
        )
    verdict = decision.verdict
    # The usual answer, by identity (the match's first three cases are other members; a
    # str equal to "continue" that is not the member itself goes through the match).
    if verdict is not _CONTINUE:
        match cast("Verdict", verdict):  # not narrowed: a text "continue" comes here
            case Verdict.ABORT:
                planning._leave("advance")
                return planning._ruled("begin_step", decision).fail(decision.reason)
            case Verdict.PAUSE:
                planning._leave("advance")
                return planning._ruled("begin_step", decision).pause(decision.reason)
            case Verdict.FINALIZE:
                planning._leave("advance")
                # A finalize reached after the last action is in the history already.
                carried = decision.reason == planning.loop.finalize
                ruled = planning._copy() if carried else planning._ruled("begin_step", decision)
                return await _finalize(ruled, rt, decision.reason)
            case Verdict.CONTINUE | Verdict.SUPPRESS:
                pass
            case _:
                assert_never(decision.verdict)
    # Phase._leave("advance")'s first answer in this frame for the library's Planning
    # (its ticket a slot, as the runner reads it): a ticket of the library's class,
    # holding this very phase, not left yet, is left by advance; anything else is
    # _leave's (which reads it again and raises).
    if type(planning) is _LIBRARY_PLANNING[0]:
        ticket: object
        try:
            ticket = planning._ticket
        except AttributeError:
            ticket = None
        if (
            type(ticket) is _Ticket
            and (holder := ticket.holder) is not None
            and holder() is planning
            and ticket.left_by is None
        ):
            ticket.left_by = "advance"
        else:
            planning._leave("advance")
    else:
        planning._leave("advance")
    tools: object = agent.tools  # ToolRegistry.schemas's own answer for the class itself
    schemas = tools._schemas if type(tools) is ToolRegistry else agent.tools.schemas()
    budget = agent.budget
    if (
        type(runtime) is Runtime
        and rt.clock is _monotonic
        and type(budget) is Budget
        and (budget is free or budget.wall_clock is None)
    ):
        # _heard and _reply in this frame, in their order (no note, no answer wanted, no
        # time limit: the remaining time is None), without their two coroutines; with a
        # breaker or someone listening to the run, the model call is theirs.
        # Planning.messages() and _model_request in this frame, for the library's Planning
        # whose messages and instructions are its own (a subclass's, or a method patched
        # on the class, is called) holding a Transcript itself: the same reads in the same
        # order, the system message made as _system makes it for text and the transcript
        # prefixed with it as Transcript.prefixed makes it; anything else is theirs.
        shown: Any = None
        held_class = type(planning)
        if (
            held_class is _LIBRARY_PLANNING[0]
            and held_class.messages is _LIBRARY_SHOWN[0]
            and held_class.instructions is _LIBRARY_SHOWN[1]
            and type(showing := planning.transcript) is Transcript
        ):
            system = planning.agent.instructions
            if not system:
                shown = showing.prefixed()
            elif type(system) is str:
                told: Any = _MakingMessage()
                told.role = "system"
                told.content = system
                told.tool_calls = ()
                told.tool_call_id = ""
                told.name = ""
                told.__class__ = Message
                shown = _new(Transcript)
                shown._head, shown._chunks, shown._tail = (
                    (told,) + showing._head,  # noqa: RUF005
                    showing._chunks,
                    showing._tail,
                )
                shown._grown = None
            else:
                shown = showing.prefixed(_system(system))
            asking: Any = _MakingModelRequest()
            asking.__dict__ = {
                "messages": shown,
                "tools": schemas,
                "timeout": None,
                "output_schema": None,
                "settings": agent.model_settings,
            }
            asking.__pydantic_fields_set__ = _REQUEST_FIELD_SET.copy()
            asking.__pydantic_extra__ = None
            asking.__pydantic_private__ = None
            asking.__class__ = ModelRequest
            request: ModelRequest = asking
        else:
            request = _model_request(planning.messages(), schemas, None, None, agent.model_settings)
        governor = agent.governor
        held: object = governor
        if type(held) is LoopGovernor and governor.baseline_steps is None:
            loop = planning.loop  # LoopGovernor.flag's first answer: no baseline, no flag
        else:
            loop = governor.flag(planning.loop, planning.step)
        if agent.breaker is not None:
            reply, spent = await _call(planning, rt, request, None)
        elif rt.events is not None:
            choice = planning.model_choice
            model = rt.model if choice == 0 else rt.fallback_models[choice - 1]
            reply, spent, _ = await _reply(planning, rt, model, request, None)
        else:
            choice = planning.model_choice
            model = rt.model if choice == 0 else rt.fallback_models[choice - 1]
            policy, spent = agent.model_retry, planning.spent
            try:
                answered: object = await model.complete(request)
                if type(answered) is ModelReply:
                    got: ModelReply | None = answered
                else:
                    got = None if answered is _DEADLINE else _checked_reply(model, answered)
            except _MODEL_FAILURES as error:
                reply, spent, _ = _unreplied(planning, rt, error, None, policy, spent)
            else:
                # _replied's first answer for a ModelReply itself (whose usage is read
                # once, from its own dict), in this frame; anything else is _replied's.
                usage = got.usage if type(got) is ModelReply else None
                fields: Any = _NO_FIELDS if type(usage) is not Usage else usage.__dict__
                if type(fields) is not dict:  # a dict subclass set behind pydantic's back
                    fields = _NO_FIELDS
                inputs, outputs = fields.get("input_tokens"), fields.get("output_tokens")
                cost = fields.get("cost")
                if (
                    type(inputs) is int
                    and type(outputs) is int
                    and inputs >= 0
                    and outputs >= 0
                    and type(cost) is Decimal
                    and cost.is_finite()
                    and cost >= _ZERO
                ):
                    reply = cast("ModelReply", got)
                    held_spent = spent
                    if (
                        type(held_spent) is Spend
                        and not cost
                        and (was := spent.cost) is _budget._kept
                        and cost.adjusted() >= 0
                        and Spend.add is _SPEND_ADD  # (the class's own, not patched)
                    ):
                        # Spend.add's answer in this frame for a zero cost (a finite
                        # Decimal itself, checked above) of exponent 0 or more while the
                        # spend's cost is _kept: the cost stays (the sum is spelled as
                        # it), the same Spend made as add makes it. (add's memo of the
                        # zero, _zero, is left: it only lets add know a zero sooner.)
                        adding: Any = _make()
                        adding.tokens = spent.tokens + (inputs + outputs)
                        adding.cost = was
                        adding.tool_calls = spent.tool_calls + 0
                        adding.model_calls = spent.model_calls + 1
                        adding.__class__ = Spend
                        spent = adding
                    else:
                        spent = spent.add(tokens=inputs + outputs, cost=cost, model_calls=1)
                else:
                    reply, spent, _ = _replied(got, None, spent)
    else:
        reply, spent, loop = await _heard(planning, rt, tools=schemas, free=free)
    # A ModelReply itself is no str (the usual answer): the isinstance only for others.
    if type(reply) is not ModelReply and isinstance(reply, str):
        return _unanswered(planning._copy(spent=spent, loop=loop), reply)
    if (calls := reply.tool_calls) and reply.finish_reason != "length":
        # What _route does with the phase _ask makes, in one copy of this phase (or none:
        # _take_reply): the reply's usage and the calls it asks for, queued. A ModelReply
        # itself answers its field from its own dict, the same object at each read: read
        # once; another class's is read again, as before.
        return _take_reply(
            planning,
            rt,
            calls if type(reply) is ModelReply else reply.tool_calls,
            spent,
            loop,
        )
    return await _route(planning._copy(spent=spent, loop=loop), rt, reply)


def _unanswered(heard: Planning[C], reason: str, prefix: str = "") -> ModelRetrying[C] | Failed[C]:
    """Where a model call that gave no reply goes: ``ModelRetrying`` when the failure may
    pass (the service's words go with it), else ``Failed`` with ``prefix`` and ``reason``."""
    if isinstance(reason, _Unanswered) and reason.transient is not None:
        timed_out = isinstance(reason.transient, TimeoutError)
        words = str(reason) if timed_out else str(reason.transient)
        return heard.retry_model(words, retry_after=reason.retry_after)
    return heard.fail(f"{prefix}{reason}")


def _passing(reason: str) -> bool:
    """Whether a model call that gave no reply failed for now (asking again may help)."""
    return isinstance(reason, _Unanswered) and reason.transient is not None


async def _route(
    planning: Planning[C], rt: Runtime, reply: ModelReply
) -> ToolCalling[C] | AwaitApproval[C] | Responding[C] | Planning[C] | ModelRetrying[C] | Failed[C]:
    """Where the model's reply goes: an answer to the output guard (``_answer``); tool
    calls, every one of them, queued in the model's order, and the first taken: to the
    governor when it is valid, back to the model when not (``_batch``). Tool calls cut
    off at the token limit (``finish_reason`` ``length``) are a truncation: ``Failed``,
    saying so, and none of them runs."""
    if not reply.tool_calls:
        return await _answer(planning, rt, reply)
    if reply.finish_reason == "length":  # the last call was cut: none of them is whole
        cut = reply.tool_calls[-1]
        return planning.fail(
            "the model's tool call was cut off at the token limit (finish_reason length): "
            f"{cut.name} with arguments {_clipped(cut.arguments)!r}; raise max_tokens in "
            "the model's settings"
        )
    return _take(_queued(planning, reply.tool_calls), rt)


def _clipped(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


async def _ask(
    planning: Planning[C],
    rt: Runtime,
    *,
    tools: tuple[dict[str, Any], ...],
    note: str = "",
    answering: bool = False,
) -> tuple[ModelReply | str, Planning[C]]:
    """Call the model under the run's deadline; the reply and this phase with its usage.

    Instead of a reply, the reason the call failed: the deadline cancelled it, the
    model's own time limit ran out, the model's service refused or could not answer,
    or what came back is not a reply. ``answering`` (no tools, an answer wanted) sends
    the answer guard's schema to a constrained backend.
    """
    reply, spent, loop = await _heard(planning, rt, tools=tools, note=note, answering=answering)
    return reply, planning._copy(spent=spent, loop=loop)


async def _heard(
    planning: Planning[C],
    rt: Runtime,
    *,
    tools: tuple[dict[str, Any], ...],
    note: str = "",
    answering: bool = False,
    free: object = None,
) -> tuple[ModelReply | str, Spend, LoopState]:
    """What ``_ask`` does, with the spend and the loop memory its phase would hold
    instead of the phase (a caller that changes more makes the phase once)."""
    budget = planning.agent.budget
    runtime: object = rt  # a final class, whose subclasses the types do not foresee
    if (
        type(runtime) is Runtime
        and rt.clock is _monotonic
        and type(budget) is Budget
        and (budget is free or budget.wall_clock is None)
    ):  # rt.remaining(budget) without its three frames: no limit, and a clock read is inert
        # (not read again for the very budget the runner found with none: ``free``)
        remaining = None
    else:
        remaining = rt.remaining(budget)
    messages = planning.messages()
    if note:
        # A copy, rare: appended in place it would make the transcript's next append copy.
        messages = Transcript((*messages, Message(role="system", content=note)))
    guard = planning.agent.answer_guard
    schema = None
    if answering and guard is not None and guard.mode is GuardMode.CONSTRAINED:
        schema = guard.output_schema
    # The messages are validated already; constructing skips validating them again
    # (as ModelRequest.model_construct(...) with these five fields would): what
    # _trusted(ModelRequest, values, set(_REQUEST_FIELDS)) makes (_model_request).
    request = _model_request(messages, tools, remaining, schema, planning.agent.model_settings)
    governor = planning.agent.governor
    held: object = governor
    if type(held) is LoopGovernor and governor.baseline_steps is None:
        loop = planning.loop  # LoopGovernor.flag's first answer: no baseline, no flag
    else:
        loop = governor.flag(planning.loop, planning.step)
    if planning.agent.breaker is None:  # what _call does without a breaker, one frame fewer
        choice = planning.model_choice
        # Runtime.model_of's own answer for a Runtime itself, without its frame.
        model = (
            (rt.model if choice == 0 else rt.fallback_models[choice - 1])
            if type(runtime) is Runtime
            else rt.model_of(choice)
        )
        reply, spent, _ = await _reply(planning, rt, model, request, remaining)
        return reply, spent, loop
    reply, spent = await _call(planning, rt, request, remaining)
    return reply, spent, loop


async def _call(
    planning: Planning[C], rt: Runtime, request: ModelRequest, remaining: float | None
) -> tuple[ModelReply | str, Spend]:
    """The reply of the model ``planning.model_choice`` names, or why there is none (an
    :class:`_Unanswered` when asking again may help), and the spend with the call in it.

    With ``Agent.breaker`` an open circuit is not called (:class:`CircuitOpenError`,
    which may pass); a failure that may pass counts against the circuit, an answer (or
    a refusal: the service is up) closes it, and a call the deadline cut settles nothing.
    """
    model = rt.model_of(planning.model_choice)
    breaker = planning.agent.breaker
    if breaker is None:
        reply, spent, _ = await _reply(planning, rt, model, request, remaining)
        return reply, spent
    circuit = model_circuit(model)
    try:
        breaker.check(circuit, rt.clock())
    except CircuitOpenError as error:
        return _Unanswered(str(error), error, error.retry_in), planning.spent
    outcome: object = _DEADLINE
    try:
        reply, spent, outcome = await _reply(planning, rt, model, request, remaining)
    finally:
        if outcome is _DEADLINE:  # cut short (or cancelled): a probe may go again
            breaker.release(circuit)
        elif outcome is None:
            breaker.succeeded(circuit)
        else:
            breaker.failed(circuit, rt.clock())
    return reply, spent


async def _reply(
    planning: Planning[C], rt: Runtime, model: Model, request: ModelRequest, remaining: float | None
) -> tuple[ModelReply | str, Spend, object]:
    """What ``_call`` gets from ``model``, and the outcome for its circuit: ``None`` (it
    answered), the error of a failure that may pass, or ``_DEADLINE`` (the run's time)."""
    policy, spent = planning.agent.model_retry, planning.spent
    try:
        if remaining is None and rt.events is None:  # _answered(_asked(...)), unwrapped
            answered: object = await model.complete(request)
        else:
            answered = await _answered(_asked(model, request, rt, planning.step), remaining)
        if type(answered) is ModelReply:  # _checked_reply's isinstance, for the class itself
            reply: ModelReply | None = answered
        else:
            reply = None if answered is _DEADLINE else _checked_reply(model, answered)
    except _MODEL_FAILURES as error:
        return _unreplied(planning, rt, error, remaining, policy, spent)
    return _replied(reply, remaining, spent)


# What a model call (or the check of what it returned) may raise that its step turns
# into a reason (``_unreplied``); anything else propagates.
_MODEL_FAILURES: Final = (
    TimeoutError,
    ModelUnavailableError,
    ModelRequestError,
    ModelResponseError,
)


def _unreplied(
    planning: Planning[C],
    rt: Runtime,
    error: BaseException,
    remaining: float | None,
    policy: RetryPolicy,
    spent: Spend,
) -> tuple[str, Spend, object]:
    """``_reply``'s answer for a model call that raised ``error`` (one of
    ``_MODEL_FAILURES``, told apart by its class as ``except`` clauses tell it, in this
    order): the reason, the spend, and the outcome for the circuit."""
    kind = type(error)
    if issubclass(kind, TimeoutError):
        reason = _timed_out(
            cast("TimeoutError", error), remaining, rt.remaining(planning.agent.budget)
        )
        if reason.startswith("wall-clock"):  # the run's deadline: no time to ask again
            return reason, spent, _DEADLINE
        # The model's own limit: an attempt, counted, which ModelRetrying may repeat.
        said = _Unanswered(reason, error if policy.retries(error) else None)
        return said, spent.add(model_calls=1), said.transient
    if issubclass(kind, ModelUnavailableError | ModelRequestError):
        # Retries of a model call are not the model's to decide, nor this phase's: a
        # failure that may pass goes to ModelRetrying (the agent's model_retry policy).
        said = _transient_words(error, policy)
        return said, spent.add(model_calls=1), said.transient
    return f"the model's reply could not be used: {error}", spent, None


def _replied(
    reply: ModelReply | None, remaining: float | None, spent: Spend
) -> tuple[ModelReply | str, Spend, object]:
    """``_reply``'s answer for the model's ``reply`` (``None``: the run's deadline cut the
    call): the reply or why it cannot be used, the spend with its usage, the outcome."""
    if reply is None:
        return _out_of_time(remaining), spent, _DEADLINE
    # The model's usage belongs to this step whatever it chose. The model is not trusted
    # with the spend: a reply made without validation (``model_construct``) could carry
    # a usage that would give budget back.
    usage = reply.usage
    if type(usage) is Usage:  # _usage_problem's checks, its fields read once, and the sum
        fields: Any = usage.__dict__
        if type(fields) is not dict:  # a dict subclass set behind pydantic's back
            fields = {}
        inputs, outputs = fields.get("input_tokens"), fields.get("output_tokens")
        cost = fields.get("cost")
        if (
            type(inputs) is int
            and type(outputs) is int
            and inputs >= 0
            and outputs >= 0
            and type(cost) is Decimal
            and cost.is_finite()
            and cost >= _ZERO  # as cost >= 0 compares it (0 made a Decimal each time)
        ):  # usage.tokens is their sum (the class's own property), usage.cost the cost
            return reply, spent.add(tokens=inputs + outputs, cost=cost, model_calls=1), None
    problem = _usage_problem(usage)
    if problem is not None:
        return f"the model's reply could not be used: {problem}", spent, None
    return reply, spent.add(tokens=usage.tokens, cost=usage.cost, model_calls=1), None


def _usage_problem(usage: object) -> str | None:
    """Why a reply's ``usage`` may not be added to the run's spend, or ``None``: it must
    be a ``Usage`` (that class) of ``int`` token counts >= 0 and a finite ``Decimal``
    cost >= 0, as validating it makes it."""
    if type(usage) is not Usage:
        return f"its usage is a {type(usage).__name__}, not a Usage"
    fields = usage.__dict__
    inputs, outputs, cost = (
        fields.get("input_tokens"),
        fields.get("output_tokens"),
        fields.get("cost"),
    )
    if type(inputs) is not int or type(outputs) is not int or inputs < 0 or outputs < 0:
        return (
            f"its usage counts {inputs!r} input and {outputs!r} output tokens; each must be "
            "an int >= 0 (validate the reply: ModelReply(...), not model_construct)"
        )
    if type(cost) is not Decimal or not cost.is_finite() or cost < 0:
        return (
            f"its usage costs {cost!r}; a cost must be a finite Decimal >= 0 (validate the "
            "reply: ModelReply(...), not model_construct)"
        )
    return None


# What _answered returns when the run's deadline cancelled the model call.
_DEADLINE: Final = object()
# How far past the run's deadline (by the run's clock) a model's own TimeoutError may be
# counted as the deadline's: an adapter cuts its call to the time the run has left, and
# its timer and the runtime's clock can disagree by a scheduling tick.
_SLACK: Final = 0.005


def _asked(model: Model, request: ModelRequest, rt: Runtime, step: int) -> Awaitable[object]:
    """The call of ``model``: ``complete``, or ``stream`` when it can and someone listens
    to the run (each delta goes to the listener, the final reply comes back)."""
    sink = rt.events
    if sink is None or not isinstance(model, StreamingModel):
        return model.complete(request)
    return _streamed(model, request, partial(sink.text, step=step))


async def _answered(call: Awaitable[object], seconds: float | None) -> object:
    """What the model ``call`` answered, or ``_DEADLINE`` when the run's deadline
    (``seconds`` from now; ``None``: none) cancelled the call first.

    What ``_within`` does, except that the run's deadline is told apart from a
    ``TimeoutError`` the model raised itself (its own time limit), which propagates.
    """
    if seconds is None:
        return await call
    return await _until(call, seconds, _DEADLINE)


def _out_of_time(remaining: float | None) -> str:
    """The reason of a model call the run's deadline cancelled, ``remaining`` seconds in."""
    left = "the time" if remaining is None else f"the {remaining:.2f}s"
    return f"wall-clock budget: the model did not answer within {left} left"


def _timed_out(error: TimeoutError, remaining: float | None, left: float | None) -> str:
    """The reason of a model call that raised ``TimeoutError`` itself.

    ``remaining`` is the time the run had when the call began, ``left`` what it has now
    (``None``: the run has no wall-clock budget). An adapter that cut its call to the
    run's time (``ModelRequest.timeout``) and ran out has met the run's deadline: the
    reason is the wall-clock budget's. Else the model's own limit ran out first.
    """
    if remaining is not None and left is not None and left <= _SLACK:
        return _out_of_time(remaining)
    said = str(error) or "it raised TimeoutError"
    had = "the run has no wall-clock budget" if left is None else f"the run had {left:.2f}s left"
    return f"the model did not answer within its own time limit ({said}); {had}"


async def _finalize(
    planning: Planning[C], rt: Runtime, reason: str
) -> Responding[C] | ModelRetrying[C] | Failed[C]:
    note = (
        "Answer the customer now, from what you already have. Do not call tools. "
        f"(The run is finishing: {reason}.)"
    )
    reply, heard = await _ask(planning, rt, tools=(), note=note, answering=True)
    if type(reply) is not ModelReply and isinstance(reply, str):
        return _unanswered(heard, reply, f"finalize ({reason}): ")
    if not reply.text.strip():
        return heard.fail(
            f"finalize ({reason}): the model was asked to answer from what it has and sent no text"
        )
    return await _answer(heard, rt, reply)


async def _answer(
    planning: Planning[C], rt: Runtime, reply: ModelReply
) -> Responding[C] | ModelRetrying[C] | Failed[C]:
    """Put the model's answer through the output guard; every outcome is routed here.

    With ``Agent(answer_guard=...)`` the answer must parse into the guard's schema,
    through the validation loop; otherwise it must be a ``CustomerResponse``: plain
    text, not empty, at most 4,000 characters. Retries are model calls, charged to
    the run's spend; one that fails for now (the service is busy or down) goes to
    ``ModelRetrying``, as a planning call does, and the model is asked afresh.
    """
    guard = planning.agent.answer_guard
    if guard is None:
        return await _text_answer(planning, rt, reply)
    asked: list[Planning[C]] = [planning]
    stopped: list[str] = []  # why a model call of the loop gave no reply

    async def ask(feedback: str | None) -> ModelReply:
        if feedback is None:
            return reply
        again, heard = await _ask(asked[-1], rt, tools=(), note=feedback, answering=True)
        asked.append(heard)
        if isinstance(again, str):  # an empty reply ends the loop; the reason is kept
            stopped.append(again)
            return ModelReply(text="", finish_reason="length")
        return again

    result = await validate_with_retries(
        guard,
        ask,
        attempts=planning.agent.answer_attempts,
        deps=planning.ctx,
        today=rt.today(),
        fallbacks=rt.fallbacks,
    )
    heard = asked[-1]
    outcome = result.outcome
    match outcome:
        case Parsed():
            return heard.respond(outcome.data.decode(), verified=outcome)
        case Refusal():
            return heard._fail(f"the model refused to answer: {outcome.text}", partial=outcome.text)
        case Truncated() if stopped and _passing(stopped[-1]):
            return _unanswered(heard, stopped[-1])
        case Truncated() if stopped:
            best = result.best
            partial = best.raw if isinstance(best, Invalid) else ""
            return heard._fail(f"{stopped[-1]} (asked again for its answer)", partial=partial)
        case Truncated():
            return heard._fail("the answer was cut off at the token limit", partial=outcome.text)
        case Invalid():
            problems = "; ".join(f"{d.path}: {d.message}" for d in outcome.errors)
            best = result.best
            partial = best.raw if isinstance(best, Invalid) else outcome.raw
            return heard._fail(
                f"answer not accepted ({result.status} after {result.attempts} "
                f"attempt(s)): {problems}",
                partial=partial,
            )
        case _:
            assert_never(outcome)


async def _text_answer(
    planning: Planning[C], rt: Runtime, reply: ModelReply
) -> Responding[C] | ModelRetrying[C] | Failed[C]:
    attempts = planning.agent.answer_attempts
    heard: Planning[C] = planning
    for attempt in range(1, attempts + 1):
        wrapped = reply.model_copy(update={"text": _json.dumps({"text": reply.text})})
        if reply.finish_reason in ("refusal", "content_filter", "length"):
            wrapped = reply
        outcome = _TEXT_ANSWER.check(wrapped)
        match outcome:
            case Parsed():
                return heard.respond(outcome.value.text, verified=outcome)
            case Refusal():
                return heard._fail(
                    f"the model refused to answer: {outcome.text}", partial=outcome.text
                )
            case Truncated():
                return heard._fail(
                    "the answer was cut off at the token limit", partial=outcome.text
                )
            case Invalid():
                problems = "; ".join(d.message.rstrip(".") for d in outcome.errors)
                if attempt == attempts:
                    counter = _fallbacks() if rt.fallbacks is None else rt.fallbacks
                    counter.add(1, {**_TEXT_FALLBACK, "statemachine.stop": "attempts"})
                    return heard._fail(
                        f"answer not accepted after {attempts} attempt(s): {problems}",
                        partial=reply.text,
                    )
                note = (
                    f"Your answer was not accepted: {problems} (it had "
                    f"{len(reply.text.strip())} characters). Write the whole answer for "
                    "the customer again, as plain text of 1 to 4,000 characters."
                )
                again, heard = await _ask(heard, rt, tools=(), note=note)
                if isinstance(again, str) and _passing(again):
                    return _unanswered(heard, again)
                if isinstance(again, str):
                    return heard._fail(again, partial=reply.text)
                reply = again
            case _:
                assert_never(outcome)
    raise AssertionError("unreachable: the last attempt returns")  # pragma: no cover
