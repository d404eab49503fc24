"""The library's exceptions, all under one root.

Each error also inherits the nearest builtin, so callers' existing ``except``
clauses keep working, and related errors share a family (``RunError``, ``BudgetError``,
``CheckpointError``) that callers can catch whole::

    StatemachineError (Exception)
    ├── SetupError (TypeError)             an agent, tool or phase is defined wrongly
    │   ├── UnknownToolError (LookupError) a tool name no registry knows
    │   └── ConfigError (ValueError)       configuration with an unknown key or a bad value
    ├── BadArgumentsError (ValueError)     tool arguments fail the tool's schema
    ├── ApprovalMismatchError (ValueError) an approval presented for another call
    ├── UnapprovedWriteError (RuntimeError) a write call reached execution without approval
    ├── PhaseReusedError (RuntimeError)    a phase object transitioned a second time
    ├── PhaseForgedError (RuntimeError)    a phase no transition made: built, copied or unpickled
    ├── IllegalTransitionError (RuntimeError) advance returned a phase the runner refuses
    ├── RunError (RuntimeError)            a saved run cannot be driven or changed so now
    │   ├── RunPausedError (RuntimeError)  a paused run driven without a person's resume
    │   ├── RunClaimedError (RuntimeError) a run another process is resuming right now
    │   ├── IllegalStatusChangeError (RuntimeError) a run's status moved where its lifecycle forbids
    │   ├── UnknownRunError (LookupError)  a run id the checkpoint store has never saved
    │   └── CheckpointOrderError (ValueError) a checkpoint saved out of turn: not the run's next seq
    ├── DecisionRefusedError (ValueError)  a person's decision for a run not waiting for one
    ├── EffectUncertainError (RuntimeError) a write may have gone through: a person must check
    ├── ToolError (RuntimeError)           raised by a tool: its service failed (503, ...)
    ├── BudgetError (RuntimeError)         a reservation of a shared budget cannot be made so
    │   ├── BudgetExceededError (RuntimeError) it does not fit in what the budget has left
    │   ├── EstimateExceededError (ValueError) it committed more than its estimate
    │   └── ReservationSettledError (RuntimeError) it was committed or released twice
    ├── ScriptExhaustedError (RuntimeError) a scripted model or gate ran out of turns
    ├── OutputRejectedError (ValueError)   guard mode 'reject' met an invalid model reply
    ├── OutputTamperedError (RuntimeError) a validated reply changed before it was shipped
    ├── ModelUnavailableError (RuntimeError) the model's server is busy or down (429, 5xx)
    │   └── ModelRetriesExhaustedError (RuntimeError) still so after every retry: resume later
    ├── CircuitOpenError (RuntimeError)    a circuit breaker is open: its service is left alone
    ├── ModelRequestError (ValueError)     the model's server refused the request (4xx): fix it
    ├── ModelResponseError (ValueError)    the model (or its server) answered something not a reply
    └── CheckpointError (ValueError)       a checkpoint cannot be restored as it is
        ├── CheckpointMismatchError (ValueError) it does not fit this library or these agents
        ├── CheckpointCorruptError (ValueError) it is truncated or is not a checkpoint
        │   └── CheckpointTamperedError (ValueError) altered, moved, removed or rolled back
        └── CheckpointKeyError (LookupError)  it was sealed with a key id the configuration lacks

Messages say what happened and what to do next. Errors carry the context that
caused them as attributes (``.phase``, ``.transition``, ``.tool``, ...).
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._schema import Diagnostic

__all__ = [
    "ApprovalMismatchError",
    "BadArgumentsError",
    "BudgetError",
    "BudgetExceededError",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointKeyError",
    "CheckpointMismatchError",
    "CheckpointOrderError",
    "CheckpointTamperedError",
    "CircuitOpenError",
    "ConfigError",
    "DecisionRefusedError",
    "EffectUncertainError",
    "EstimateExceededError",
    "IllegalStatusChangeError",
    "IllegalTransitionError",
    "ModelRequestError",
    "ModelResponseError",
    "ModelRetriesExhaustedError",
    "ModelUnavailableError",
    "OutputRejectedError",
    "OutputTamperedError",
    "PhaseForgedError",
    "PhaseReusedError",
    "ReservationSettledError",
    "RunClaimedError",
    "RunError",
    "RunPausedError",
    "ScriptExhaustedError",
    "SetupError",
    "StatemachineError",
    "ToolError",
    "UnapprovedWriteError",
    "UnknownRunError",
    "UnknownToolError",
]


class StatemachineError(Exception):
    """Root of every error this library raises on purpose."""


class SetupError(StatemachineError, TypeError):
    """An agent, tool or phase class is defined in a way that cannot work."""


class UnknownToolError(SetupError, LookupError):
    """A tool name that the agent's registry does not know."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        self.tool = name
        self.known = known
        listed = ", ".join(known) if known else "(none)"
        super().__init__(
            f"unknown tool {name!r}; this agent's tools are: {listed}. "
            "Register the tool on the agent or fix the name."
        )


class RunError(StatemachineError, RuntimeError):
    """A saved run cannot be driven or changed as asked: the family of the run errors."""


class BudgetError(StatemachineError, RuntimeError):
    """A reservation of a shared budget cannot be made or settled as asked (the family)."""


class BadArgumentsError(StatemachineError, ValueError):
    """Tool arguments that do not match the tool's arguments model."""

    def __init__(self, tool: str, problems: tuple[str, ...]) -> None:
        self.tool = tool
        self.problems = problems
        super().__init__(
            f"arguments for tool {tool!r} are invalid: "
            + "; ".join(problems)
            + ". Pass arguments that match the tool's schema."
        )


class ApprovalMismatchError(StatemachineError, ValueError):
    """An approval given for one call was presented for a different one."""

    def __init__(self, *, approved: str, presented: str) -> None:
        self.approved = approved
        self.presented = presented
        super().__init__(
            f"approval refused: it was given for {approved}, but the call waiting is "
            f"{presented}. Ask the approver to approve this exact call."
        )


class UnapprovedWriteError(StatemachineError, RuntimeError):
    """A write call reached ``ToolCalling`` without a matching approval.

    ``.reason`` says what was missing (``None``: no approval at all). The tool did not run.
    """

    def __init__(self, tool: str, reason: str | None = None) -> None:
        self.tool = tool
        self.reason = reason
        if reason is None:
            super().__init__(
                f"write tool {tool!r} may only run after AwaitApproval.approve(); "
                "route write calls through Planning.request_approval()."
            )
        else:
            super().__init__(
                f"write tool {tool!r} was not run: {reason}. A write runs only with the "
                "approval this run's gate or a person gave for that exact call, once; "
                "route write calls through Planning.request_approval()."
            )


class PhaseForgedError(StatemachineError, RuntimeError):
    """A phase that no transition made: built by hand, copied, evolved or unpickled.

    ``.phase`` is its kind; ``.how`` says what was refused. Start a run with
    ``agent.start(ctx, text)``; every later phase comes from a transition.
    """

    def __init__(self, phase: str, how: str) -> None:
        self.phase = phase
        self.how = how
        super().__init__(
            f"{how}: a {phase} phase is made only by a transition. Start a run with "
            "agent.start(ctx, text) and continue from what each transition returns; to "
            "drive phases by hand in a unit test, use statemachine.testing.hand_built()."
        )


class IllegalTransitionError(StatemachineError, RuntimeError):
    """``advance`` returned a phase that the runner refuses to go on with.

    ``.phase`` is the kind advanced, ``.to`` the kind returned, ``.detail`` why. Nothing
    of the refused phase was saved or run.
    """

    def __init__(self, phase: str, to: str, detail: str) -> None:
        self.phase = phase
        self.to = to
        self.detail = detail
        super().__init__(
            f"{phase}.advance returned {to}, which the runner refuses: {detail}. A phase "
            "goes on only by one of its transition methods, to a phase its advance "
            "annotation names."
        )


class PhaseReusedError(StatemachineError, RuntimeError):
    """A phase object was transitioned twice: the stand-in for Rust's move."""

    def __init__(self, phase: str, transition: str, first: str) -> None:
        self.phase = phase
        self.transition = transition
        self.first = first
        super().__init__(
            f"this {phase} phase was already left by {first}(); calling {transition}() "
            "on it again would fork the run. Continue from the phase that "
            f"{first}() returned (state = {_call_of(first)})."
        )


def _call_of(transition: str) -> str:
    if transition in ("advance", "execute", "retry"):
        return f"await state.{transition}(rt)"
    return f"state.{transition}(...)"


class ScriptExhaustedError(StatemachineError, RuntimeError):
    """A scripted test double was asked for more turns than it was given."""

    def __init__(self, what: str, given: int) -> None:
        self.given = given
        super().__init__(
            f"the {what} was asked for turn {given + 1} but its script has only {given}; "
            "add a turn to the script or check why the run took an extra step."
        )


class ToolError(StatemachineError, RuntimeError):
    """Raised by a tool when its service failed; ``Retrying`` decides what happens next.

    ``retryable=False`` says a second attempt cannot help (a card declined, say):
    the run goes to ``Failed`` without retrying.
    """

    def __init__(self, message: str, *, retryable: bool = True, status: int | None = None) -> None:
        self.retryable = retryable
        self.status = status
        super().__init__(message)


class BudgetExceededError(BudgetError):
    """A reservation that does not fit in what is left of the budget.

    ``.budget`` names the limit in the way (``"tokens"``, ``"cost"``, ``"tool_calls"``
    or ``"wall_clock"``); ``.reason`` is the refusal without the advice.
    """

    def __init__(self, reason: str, *, budget: str) -> None:
        self.reason = reason
        self.budget = budget
        if budget == "wall_clock":
            advice = "Start no new work: finish with what the run has, or allow more time."
        else:
            advice = (
                "Reserve less, wait for open reservations to be committed or released, "
                f"or raise Budget.{budget}."
            )
        super().__init__(f"{reason}. {advice}")


class EstimateExceededError(BudgetError, ValueError):
    """A commit of more than its reservation's estimate; nothing was recorded."""

    def __init__(
        self, purpose: str, *, budget: str, estimate: int | Decimal, actual: int | Decimal
    ) -> None:
        self.purpose = purpose
        self.budget = budget
        self.estimate = estimate
        self.actual = actual
        super().__init__(
            f"commit refused: {purpose or 'this reservation'} used {_amount(budget, actual)} "
            f"but reserved only {_amount(budget, estimate)}; nothing was recorded and the "
            "reservation is still open. The estimate is the ceiling: reserve the worst case, "
            "then commit the actual use."
        )


def _amount(budget: str, value: int | Decimal) -> str:
    if budget == "cost":
        return f"${value}"
    unit = {"tokens": "token", "tool_calls": "tool call"}.get(budget, budget)
    return f"{value} {unit}" if value == 1 else f"{value} {unit}s"


class ReservationSettledError(BudgetError):
    """A reservation committed or released after it was already settled."""

    def __init__(self, purpose: str, *, first: str, attempted: str) -> None:
        self.purpose = purpose
        self.first = first
        self.attempted = attempted
        subject = f"the reservation for {purpose}" if purpose else "this reservation"
        super().__init__(
            f"{subject} was already {first}; {attempted}() refused. Commit or release a "
            "reservation exactly once, and reserve again for new work."
        )


class RunPausedError(RunError):
    """A run that waits for a person was driven on without being resumed."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"this run is paused for a person ({reason}); call resume(note) on the paused "
            "phase and drive the phase it returns"
        )


class EffectUncertainError(StatemachineError, RuntimeError):
    """A write call has an intent and no result in the ledger, and its tool is not idempotent.

    The run stopped before the call mid-way (a crash, a stop): the service may or
    may not have acted, and calling again might act twice. The runner leaves the run
    ``interrupted``, waiting for a person. ``.run_id``, ``.tool`` and ``.key`` (the
    idempotency key) name the effect.
    """

    def __init__(self, run_id: str, *, tool: str, key: str) -> None:
        self.run_id = run_id
        self.tool = tool
        self.key = key
        super().__init__(
            f"run {run_id!r} stopped while {tool} was running (idempotency key {key}); it "
            f"may or may not have gone through, and {tool} is not idempotent, so it is not "
            "sent again. A person must check with its service whether it went through: if "
            "it did, record its result (checkpointer.record_result(key, result)); if not, "
            "discard the intent (checkpointer.discard_intent(key)). Then resume the run."
        )

    @property
    def waiting_for(self) -> str:
        """What the interrupted run waits for, as its registry row says it."""
        return f"a person to check whether {self.tool} went through (effect {self.key})"


class ConfigError(SetupError, ValueError):
    """Configuration that cannot be used: an unknown key (a typo) or a value of the wrong type.

    ``.problems`` lists every problem; ``.path`` is where the first one is, ``.key``
    the unknown key there (if that is the problem) and ``.suggestion`` the closest
    valid key.
    """

    def __init__(
        self,
        problems: tuple[str, ...],
        *,
        path: str = "$",
        key: str | None = None,
        suggestion: str | None = None,
    ) -> None:
        self.problems = problems
        self.path = path
        self.key = key
        self.suggestion = suggestion
        super().__init__(
            "invalid configuration: " + "; ".join(problems) + ". Fix the configuration "
            "and start again: nothing was started with it."
        )


class OutputRejectedError(StatemachineError, ValueError):
    """A model reply failed the output guard in ``reject`` mode: no repair, no retry."""

    def __init__(self, schema: str, diagnostics: tuple[Diagnostic, ...]) -> None:
        self.schema = schema
        self.diagnostics = diagnostics
        listed = "; ".join(f"{item.path}: {item.message}" for item in diagnostics)
        super().__init__(
            f"model reply rejected: it is not a valid {schema} ({listed}). Guard mode "
            "'reject' neither repairs nor retries: fix the prompt or the model, or "
            "configure mode 'auto_repair' to repair and retry."
        )


class OutputTamperedError(StatemachineError, RuntimeError):
    """A validated reply whose value or bytes changed after validation; it is not shipped."""

    def __init__(self, part: str, *, recorded: str, actual: str) -> None:
        self.part = part
        self.recorded = recorded
        self.actual = actual
        super().__init__(
            f"Parsed.{part} changed after validation (SHA-256 recorded {recorded[:16]}, "
            f"now {actual[:16]}); it was not shipped. Ship Parsed.verify() as the guard "
            "returned it and never modify a validated reply."
        )


class ModelUnavailableError(StatemachineError, RuntimeError):
    """The model's server could not answer now: overloaded (429), failing (5xx) or unreachable.

    ``.status`` is the HTTP status (``None``: no answer at all, e.g. the connection
    was refused); ``.retry_after`` the seconds the server asked to wait, if it said.
    ``.retryable`` is always ``True``: the same request may succeed later. The adapter
    never retries by itself; retries belong to the caller's policy.
    """

    retryable = True

    def __init__(
        self, detail: str, *, url: str, status: int | None = None, retry_after: float | None = None
    ) -> None:
        self.detail = detail
        self.url = url
        self.status = status
        self.retry_after = retry_after
        if status is None:
            what = f"could not reach the model at {url}: {detail}. Check that the server is "
            what += "running and that base_url is right, then try again"
        else:
            what = f"the model at {url} is unavailable (HTTP {status}: {detail}). "
            what += "This is usually temporary: try again later"
            if retry_after is not None:
                what += f" (the server asked to wait {retry_after:g}s)"
        super().__init__(what)


class CircuitOpenError(StatemachineError, RuntimeError):
    """A call not made: the circuit breaker of its model or tool is open after failures.

    ``.circuit`` names it (``model:<name>@<url>``, ``tool:<name>``), ``.failures`` is the
    failures in a row that opened it, ``.retry_in`` the seconds until a probe may go.
    """

    def __init__(self, circuit: str, *, failures: int, retry_in: float) -> None:
        self.circuit = circuit
        self.failures = failures
        self.retry_in = retry_in
        super().__init__(
            f"the circuit breaker of {circuit} is open after {failures} failure(s) in a row, "
            f"so it was not called; a probe may go in {retry_in:.2f}s. Wait, or configure "
            "a fallback model"
        )


class ModelRetriesExhaustedError(ModelUnavailableError):
    """A model call still failed after the retries ``ModelRetrying`` allowed; the run waits.

    Raised by ``ModelRetrying.advance``, so the run is not over: its last checkpoint is
    the ``ModelRetrying`` phase and the runner leaves it ``failed_resumable``. ``.error``
    is the service's words on the last attempt, ``.attempts`` the attempts made, ``.cap``
    the policy's ``max_attempts``; ``.asked`` the seconds the service asked to wait when
    that was more than the policy waits (``None``: the attempts ran out).
    """

    def __init__(self, error: str, *, attempts: int, cap: int, asked: float | None = None) -> None:
        self.error = error
        self.attempts = attempts
        self.cap = cap
        self.asked = asked
        self.detail = error
        self.url = ""
        self.status = None
        self.retry_after = asked
        if asked is None:
            what = f"the model could not be asked in {attempts} attempt(s), the cap is {cap}"
        else:
            what = (
                f"the model's service asked to wait {asked:g}s, longer than the retry "
                f"policy waits (after {attempts} attempt(s))"
            )
        RuntimeError.__init__(
            self,
            f"{what}; last error: {error}. The run is saved where it waits (failed_resumable): "
            "resume it when the service is back (statemachine runs resume <run id>, or a "
            "worker), or raise Agent.model_retry's max_attempts or max_delay.",
        )


class ModelRequestError(StatemachineError, ValueError):
    """The model's server refused the request (a 4xx other than 429); sending it again fails.

    ``.status`` is the HTTP status and ``.detail`` the server's own error message.
    """

    retryable = False

    def __init__(self, detail: str, *, url: str, status: int) -> None:
        self.detail = detail
        self.url = url
        self.status = status
        if status in (401, 403):
            advice = "Check the API key and that it may use this model."
        elif status == 404:
            advice = "Check base_url (it usually ends in /v1) and the model name the server serves."
        elif status == 413:
            advice = "The request is too large: shorten the conversation or the tools' schemas."
        else:
            advice = (
                "Fix the request (the model name, the tools' schemas, or an output schema "
                "the server's strict mode does not support); the same request fails again."
            )
        super().__init__(
            f"the model at {url} refused the request with HTTP {status}: {detail}. {advice}"
        )


class ModelResponseError(StatemachineError, ValueError):
    """The model answered, but not with anything a run can use as its reply.

    From an HTTP adapter: the server's body is not a chat completion; ``.url`` is the
    endpoint. From a model in this process (:meth:`in_process`): its ``complete()``
    returned something other than a ``ModelReply``; ``.url`` is then the model's class,
    ``module.QualifiedName``. ``.detail`` says what was wrong; ``.excerpt`` is the start
    of what was received.
    """

    retryable = False

    def __init__(
        self, detail: str, *, url: str, excerpt: str = "", message: str | None = None
    ) -> None:
        self.detail = detail
        self.url = url
        self.excerpt = excerpt
        if message is None:  # an HTTP adapter's: say what to check about the server
            shown = f" (the body starts {excerpt!r})" if excerpt else ""
            message = (
                f"the server at {url} did not answer with a chat completion: {detail}{shown}. "
                "Check that base_url points at an OpenAI-compatible API (POST "
                "<base_url>/chat/completions) and that the server supports what was asked."
            )
        super().__init__(message)

    @classmethod
    def in_process(cls, model: str, *, came: str, excerpt: str = "") -> ModelResponseError:
        """The error for the model ``model`` in this process, whose ``complete()``
        returned ``came`` (``"None"``, ``"a str"``) instead of a ``ModelReply``.

        ``excerpt`` is the start of the ``repr`` of what came. The message says what
        ``complete()`` must return: such a model has no server or base_url to check.
        """
        shown = f" ({excerpt})" if excerpt else ""
        return cls(
            f"complete() returned {came}, not a ModelReply",
            url=model,
            excerpt=excerpt,
            message=(
                f"the model {model} answered {came}{shown} where a ModelReply was expected: "
                "its complete() must return a statemachine.ModelReply (text or tool calls, "
                "and usage), e.g. ModelReply(text=...)"
            ),
        )


class CheckpointError(StatemachineError, ValueError):
    """A checkpoint that cannot be restored as it is; nothing was restored.

    ``.run_id`` is the run whose checkpoint it is, when the caller said; ``.detail``
    is the message without the run prefix.
    """

    def __init__(self, detail: str, *, run_id: str | None = None) -> None:
        self.detail = detail
        self.run_id = run_id
        prefix = f"checkpoint of run {run_id!r}: " if run_id is not None else "checkpoint: "
        super().__init__(prefix + detail)


class CheckpointMismatchError(CheckpointError):
    """A checkpoint that does not fit: another schema version, agent, phase class or tool."""


class CheckpointCorruptError(CheckpointError):
    """Bytes or a document that are not a whole checkpoint: truncated, garbage, malformed."""


class CheckpointTamperedError(CheckpointCorruptError):
    """A checkpoint, or a run's chain of them, that fails its own checks: altered, moved,
    removed, replayed or rolled back, or opened with the wrong key or context.

    Raised instead of returning anything: no part of the checkpoint is trusted. ``.seq``
    is the checkpoint the check failed at, when one can be named (the run's recorded
    head when the chain as a whole does not end where the head says). It is a
    :class:`CheckpointCorruptError`: whether bytes changed by accident or on purpose
    cannot be told apart, and both are handled the same way.
    """

    def __init__(self, detail: str, *, run_id: str | None = None, seq: int | None = None) -> None:
        self.seq = seq
        super().__init__(detail, run_id=run_id)


class CheckpointKeyError(CheckpointError, LookupError):
    """A checkpoint sealed with a key id that the cipher's configuration does not hold."""

    def __init__(self, key_id: str, known: tuple[str, ...], *, run_id: str | None = None) -> None:
        self.key_id = key_id
        self.known = known
        listed = ", ".join(repr(k) for k in known) or "(none)"
        super().__init__(
            f"it was sealed with key id {key_id!r}, which is not configured (configured: "
            f"{listed}). Add the key {key_id!r} to the checkpoint keys; keep retired keys "
            "configured until no checkpoint sealed with them remains.",
            run_id=run_id,
        )


class IllegalStatusChangeError(RunError):
    """A change of a run's status that its lifecycle does not allow; the status is unchanged.

    ``.run_id``, ``.current`` and ``.target`` name the refused change; ``.legal`` lists
    the statuses the run may go to from ``.current`` (empty for an ending).
    """

    def __init__(self, run_id: str, *, current: str, target: str, legal: tuple[str, ...]) -> None:
        self.run_id = run_id
        self.current = current
        self.target = target
        self.legal = legal
        if legal:
            advice = f"From {current} it may only go to: {', '.join(legal)}."
        else:
            advice = f"An ending never changes: start a new run instead of reopening {run_id!r}."
        super().__init__(
            f"run {run_id!r} cannot go from {current} to {target}; its status is still "
            f"{current}. {advice}"
        )


class UnknownRunError(RunError, LookupError):
    """A run id with no checkpoint in the store: never saved, purged, or mistyped."""

    def __init__(self, run_id: str, *, store: str) -> None:
        self.run_id = run_id
        self.store = store
        super().__init__(
            f"run {run_id!r} has no checkpoint in {store}; it was never saved there or "
            "was purged. Check the run id (list the runs with the registry)."
        )


class CheckpointOrderError(RunError, ValueError):
    """A checkpoint whose seq is not the run's next one; nothing was saved.

    ``.expected`` is the seq the run is waiting for (0 for a new run), ``.seq`` the one given.
    """

    def __init__(self, run_id: str, *, seq: int, expected: int) -> None:
        self.run_id = run_id
        self.seq = seq
        self.expected = expected
        super().__init__(
            f"checkpoint {seq} of run {run_id!r} refused: the run's next checkpoint is "
            f"{expected}, and nothing was saved. Save one checkpoint per transition, in "
            "order; a seq already saved means two processes are driving the same run."
        )


class RunClaimedError(RunError):
    """Another process holds the run (it is resuming it); only one may go on."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(
            f"run {run_id} is being resumed elsewhere right now, so it was not resumed "
            "here; wait for that process to finish (a claim lapses after its lease if "
            "the process died) and check the run's status"
        )


class DecisionRefusedError(StatemachineError, ValueError):
    """A person's decision that was not stored: the run is not waiting for one, or it is malformed.

    ``.run_id`` is the run it was given for (``None`` when no run was named);
    ``.detail`` is the message without the run prefix. Nothing was changed.
    """

    def __init__(self, detail: str, *, run_id: str | None = None) -> None:
        self.detail = detail
        self.run_id = run_id
        prefix = (
            "decision refused: " if run_id is None else f"decision for run {run_id!r} refused: "
        )
        super().__init__(prefix + detail)
