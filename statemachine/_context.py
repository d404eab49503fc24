"""A tool's view of its run: :class:`RunContext`, and the checks on an agent's dependencies.

A tool may take a ``RunContext[Deps]`` beside its arguments model
(``async def refund(args: RefundArgs, ctx: RunContext[Desk])``). The runner builds a
new one for each call from its own records: the run's dependencies (the value given
to ``Runner.run``/``resume`` as ``deps=``, never checkpointed), the run id, the step,
this call's idempotency key, the time the call is cancelled at, what is left of the
budget, what the run has spent, and the conversation so far.

It is a copy, not a handle: frozen, holding only values (numbers, text, ``Decimal``,
a fresh ``Spend``, a tuple of frozen messages) and no reference to the runtime, its
gate, its approvals or its ledger. What a tool does to it (``attrs.evolve``, ``copy``,
even ``object.__setattr__``) changes that copy only; the runner never reads it back.

An agent declares the type of its dependencies with ``Agent(..., deps_type=Deps)``
(its type is then ``Agent[Ctx, Deps]``); the type checkers reject a tool asking for
other dependencies and a run given another value, and the checks here refuse the
same at run time (:func:`_check_tools_deps` where the agent is defined,
:func:`_deps_for_run` where a run starts), with messages saying what to pass.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Generic, final

import anyio
import attrs
from typing_extensions import TypeVar

from ._budget import Budget, Spend
from ._errors import SetupError
from ._model import Message
from ._money import money_difference

if TYPE_CHECKING:
    from ._phases import ToolCalling
    from ._runtime import Runtime

__all__ = [
    "BudgetLeft",
    "RunContext",
    "_check_tools_deps",
    "_context_param",
    "_deps_for_run",
    "_run_context",
    "_tools_fit",
]

# Covariant: a RunContext[SupportDesk] is a RunContext[object]. Defaulted to object,
# so that a bare ``RunContext`` asks for no dependencies in particular.
D = TypeVar("D", covariant=True, default=object)


@final
@attrs.frozen(kw_only=True)
class BudgetLeft:
    """What the run may still spend once the call it is given to is counted.

    ``None``: no limit of that kind. ``cost`` is exact money; ``seconds`` is what is
    left of the run's wall-clock budget when the call starts.
    """

    tokens: int | None
    cost: Decimal | None
    tool_calls: int | None
    seconds: float | None

    @classmethod
    def of(cls, budget: Budget, spent: Spend, *, elapsed: float) -> BudgetLeft:
        """What is left of ``budget`` once ``spent`` is spent, ``elapsed`` seconds in."""
        return cls(
            tokens=None if budget.tokens is None else budget.tokens - spent.tokens,
            cost=None if budget.cost is None else money_difference(budget.cost, spent.cost),
            tool_calls=None if budget.tool_calls is None else budget.tool_calls - spent.tool_calls,
            seconds=budget.remaining_seconds(elapsed),
        )


@final
@attrs.frozen(kw_only=True)
class RunContext(Generic[D]):
    """What a tool may know of the run it is called in: read-only, made for this one call.

    ``deps`` are the run's dependencies (``Runner.run(..., deps=...)``); ``run_id``,
    ``step`` (of the ``ToolCalling`` phase running the call), ``tool`` and
    ``attempt`` say where the call is; ``idempotency_key`` is this call's key in the
    side-effect ledger (a write; ``None`` for a read), to hand to a service that
    honours idempotency keys; ``deadline`` is the ``anyio.current_time()`` at which the
    call is cancelled (its timeout or the run's wall-clock budget, whichever ends
    first; :meth:`seconds_left`); ``budget_left`` is what the run may spend once this
    call (its tool call and its price) is counted, and ``spent`` what it has spent
    with this call counted; ``elapsed`` is the seconds the run had used when the call
    started; ``messages`` is the conversation so far.

    The runner builds a new one for every call and never reads it back: changing a
    copy (``attrs.evolve``, ``copy``, ``object.__setattr__``) changes nothing the runner
    uses. A test may build one by hand to call a tool's function directly.
    """

    deps: D
    run_id: str
    step: int
    tool: str
    attempt: int = 1
    idempotency_key: str | None = None
    deadline: float
    budget_left: BudgetLeft
    spent: Spend = attrs.field(factory=Spend)
    elapsed: float = 0.0
    messages: tuple[Message, ...] = attrs.field(default=(), repr=False)

    def seconds_left(self) -> float:
        """Seconds until the call is cancelled (0 once the deadline has passed)."""
        return max(0.0, self.deadline - anyio.current_time())


def _run_context(
    calling: ToolCalling[Any],
    rt: Runtime,
    *,
    key: str | None,
    seconds: float,
    spent: Spend,
    price: Decimal,
) -> RunContext[Any]:
    """The context of the call ``calling`` is about to make, which ends ``seconds`` from
    now; ``spent`` counts the call's tool call, ``price`` is its price (counted here)."""
    elapsed = rt.elapsed()
    counted = spent.add(cost=price)  # a Spend of its own: the runner's is not handed out
    return RunContext(
        deps=rt.deps,
        run_id=rt.run_id,
        step=calling.step,
        tool=calling.call.name,
        attempt=calling.attempt,
        idempotency_key=key,
        deadline=anyio.current_time() + seconds,
        budget_left=BudgetLeft.of(calling.agent.budget, counted, elapsed=elapsed),
        spent=counted,
        elapsed=elapsed,
        messages=tuple(calling.transcript),
    )


# -- dependencies, checked at run time -------------------------------------------------

_NO_DEPS: tuple[object, ...] = (object, Any, None, type(None))


def _context_param(hint: object) -> tuple[bool, object]:
    """Whether ``hint`` (a tool's second parameter's annotation) is a ``RunContext``, and
    the dependencies it asks for (``object``: none in particular)."""
    if hint is RunContext:
        return True, object
    if typing.get_origin(hint) is RunContext:
        (wanted,) = typing.get_args(hint)
        return True, object if wanted in _NO_DEPS else wanted
    return False, object


def _name(kind: object) -> str:
    return getattr(kind, "__qualname__", None) or repr(kind)


def _check_tools_deps(agent: str, deps_type: object, tools: Iterable[Any]) -> None:
    """Refuse a tool whose ``RunContext`` asks for dependencies the agent does not declare.

    What the type checkers reject, refused again where the agent is defined, for code
    they do not see. A dependencies type they can compare only statically (a protocol,
    a generic alias) is left to them.
    """
    for tool in tools:
        wanted: object = getattr(tool, "deps_type", object)
        if wanted is object:
            continue
        if deps_type is None:
            raise SetupError(
                f"tool {tool.name!r} takes RunContext[{_name(wanted)}], but agent {agent!r} "
                f"declares no dependencies: give Agent(..., deps_type={_name(wanted)}) and "
                "pass deps=... to every run"
            )
        try:
            fits = not (isinstance(wanted, type) and isinstance(deps_type, type)) or issubclass(
                deps_type, wanted
            )
        except TypeError:  # a protocol that is not runtime-checkable, a generic alias
            fits = True
        if not fits:
            raise SetupError(
                f"tool {tool.name!r} takes RunContext[{_name(wanted)}], but agent {agent!r} "
                f"declares deps_type={_name(deps_type)}: give the tool "
                f"RunContext[{_name(deps_type)}] (or a base of it), or the agent the "
                "dependencies the tool needs"
            )


def _tools_fit(agent: Any, _: object, deps_type: object) -> None:
    """``Agent.deps_type``'s validator: its tools must ask for no other dependencies."""
    _check_tools_deps(agent.name, deps_type, agent.tools)


def _deps_for_run(agent: str, deps_type: object, deps: object) -> object:
    """The dependencies a run of ``agent`` is given, checked against its ``deps_type``."""
    if deps_type is None:
        if deps is not None:
            raise SetupError(
                f"agent {agent!r} declares no dependencies, but the run was given "
                f"deps={_name(type(deps))}(...): declare them with Agent(..., "
                f"deps_type={_name(type(deps))}), or run it without deps="
            )
        return None
    if deps is None:
        raise SetupError(
            f"agent {agent!r} declares its dependencies (deps_type={_name(deps_type)}) and "
            f"this run was given none: pass deps={_name(deps_type)}(...) to Runner.run(ctx, "
            "text, deps=...) or Runner.resume(run_id, deps=...), or once to "
            "Runner(agent, ..., deps=...). Dependencies are never checkpointed, so a "
            "resumed run is given them again"
        )
    try:
        fits = not isinstance(deps_type, type) or isinstance(deps, deps_type)
    except TypeError:  # a protocol that is not runtime-checkable, a generic alias
        fits = True
    if not fits:
        raise SetupError(
            f"agent {agent!r} declares deps_type={_name(deps_type)}, but the run was given "
            f"a {_name(type(deps))}: pass a {_name(deps_type)}"
        )
    return deps
