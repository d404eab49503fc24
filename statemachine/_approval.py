"""Approval of write calls by a person, and the gate that asks for it.

Trust runs one way here. A gate (a queue, a chat message, a CLI; ``statemachine.testing``
ships scripted ones) answers an :class:`ApprovalRequest` with a *decision*:
:class:`Approve`, :class:`Denial` or :class:`Pending`. Only the run's runtime turns an
``Approve`` into an :class:`Approval`, which has no public constructor: it is bound to
the run, the call id, the tool and the hash of the call's canonical arguments, carries
an id of its own, and is recorded in the run's approval book (``_ApprovalBook``).
``ToolCalling.execute`` checks every write against that book before the tool runs, and
an approval authorises one effect: its first attempt, and further attempts only of an
``idempotent`` tool under the same idempotency key.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, final, runtime_checkable

import attrs
from pydantic import BaseModel, Field, ValidationError

from ._errors import DecisionRefusedError, SetupError, UnapprovedWriteError, UnknownToolError
from ._tools import AM, ToolRegistry, WriteCall, WriteTool, _canonical

if TYPE_CHECKING:
    from pydantic import BaseModel as _Args

__all__ = [
    "Approval",
    "ApprovedCall",
    "ApprovalGate",
    "ApprovalRequest",
    "Approve",
    "Denial",
    "Pending",
    "dump_decision",
    "load_decision",
]


# What a run waiting for an approval waits for, in its registry row: this, then the tool
# (``AwaitApproval.waiting_for``); the stores and the command line read it back with
# :func:`waits_for_approval`.
APPROVAL_OF: Final = "approval of "


def waits_for_approval(waiting_for: str) -> bool:
    """Whether a registry row's ``waiting_for`` says the run waits for an approval."""
    return waiting_for.startswith(APPROVAL_OF)


class ApprovalRequest(BaseModel, Generic[AM], frozen=True, extra="forbid", defer_build=True):
    """What the person is asked to approve: one exact write call of one run.

    Generic in the call's arguments model, as the :class:`Approval` made from it is.
    """

    run_id: str
    agent: str
    call_id: str = ""
    tool: str
    arguments: dict[str, Any]
    args_hash: str
    summary: str = Field(description="the call as a person reads it")

    @classmethod
    def for_call(
        cls, call: WriteCall[AM], *, run_id: str, agent: str, call_id: str = ""
    ) -> ApprovalRequest[AM]:
        """The request for ``call`` (the model's call ``call_id`` in run ``run_id``)."""
        return ApprovalRequest[AM](
            run_id=run_id,
            agent=agent,
            call_id=call_id,
            tool=call.name,
            arguments=call.args.model_dump(mode="python"),
            args_hash=call.args_hash,
            summary=call.describe(),
        )

    @property
    def key(self) -> str:
        """``tool:hash``: the call this request is about."""
        return f"{self.tool}:{self.args_hash}"


class Approve(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """A person's yes: a gate's answer to the request it was asked.

    A gate returns ``Approve(by=...)``; the runtime makes the :class:`Approval` from it.
    A yes given outside the run (the store, the command line) names the request it
    answers: ``Approve.of(request, by=...)``. It is refused for any other request.
    """

    by: str = Field(min_length=1)
    note: str = ""
    at: datetime | None = None
    # Set by Approve.of: the request this yes answers (None: the one the gate was asked).
    run_id: str | None = None
    call_id: str | None = None
    tool: str | None = None
    args_hash: str | None = None

    @classmethod
    def of(
        cls, request: ApprovalRequest, *, by: str, note: str = "", at: datetime | None = None
    ) -> Approve:
        """A yes to exactly ``request``: its run, its call id, its tool and arguments."""
        return cls(
            by=by,
            note=note,
            at=at,
            run_id=request.run_id,
            call_id=request.call_id,
            tool=request.tool,
            args_hash=request.args_hash,
        )

    @property
    def bound(self) -> bool:
        """Whether this yes names the request it answers (see :meth:`of`)."""
        return self.args_hash is not None

    def misfit(self, request: ApprovalRequest) -> str | None:
        """Why this yes does not answer ``request``; ``None`` when it does."""
        named = (self.run_id, self.call_id, self.tool, self.args_hash)
        asked = (request.run_id, request.call_id, request.tool, request.args_hash)
        for what, given, wanted in zip(
            ("run", "call id", "tool", "arguments hash"), named, asked, strict=True
        ):
            if given is not None and given != wanted:
                return f"it was given for {what} {given!r}, and the request is for {wanted!r}"
        return None


@final
class _Sealed:
    """The type of the one value that unlocks :class:`Approval`'s constructor.

    A required keyword of this type makes ``Approval(...)`` in user code a type error
    (``call-arg`` for mypy, ``reportCallIssue`` for pyright), not only a run-time one.
    """

    __slots__ = ()


_MINT = _Sealed()


@final
@attrs.frozen(init=False)
class Approval(Generic[AM]):
    """An approval of one write call in one run, made by the run's runtime from a yes.

    There is no public constructor: a gate or a person gives an :class:`Approve`, and
    the runtime that asked makes this from it and records it. ``id`` is unique, so the
    run's record can tell this approval from any copy or forgery of it.
    """

    id: str
    run_id: str
    call_id: str
    tool: str
    args_hash: str
    approved_by: str
    approved_at: datetime
    note: str

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            id: str,
            run_id: str,
            call_id: str,
            tool: str,
            args_hash: str,
            approved_by: str,
            approved_at: datetime,
            note: str,
            _token: _Sealed,
        ) -> None: ...

    else:

        def __init__(self, *, _token=None, **fields):
            if _token is not _MINT:
                raise SetupError(
                    "Approval has no public constructor: a gate answers Approve(by=...) and "
                    "the run's runtime makes the Approval; in a unit test that drives phases "
                    "by hand, use statemachine.testing.hand_approval()"
                )
            self.__attrs_init__(**fields)

    @property
    def key(self) -> str:
        """``tool:hash`` of the call this approval is for."""
        return f"{self.tool}:{self.args_hash}"


def _mint(request: ApprovalRequest[AM], decision: Approve) -> Approval[AM]:
    return Approval(
        id=uuid.uuid4().hex,
        run_id=request.run_id,
        call_id=request.call_id,
        tool=request.tool,
        args_hash=request.args_hash,
        approved_by=decision.by,
        approved_at=decision.at or datetime.now(UTC),
        note=decision.note,
        _token=_MINT,
    )


# The one value that unlocks ApprovedCall's constructor (as _MINT unlocks Approval's).
_APPROVAL_TOKEN = _Sealed()


@final
@attrs.frozen(init=False)
class ApprovedCall(Generic[AM]):
    """A write call together with the approval that lets it run.

    Only ``AwaitApproval.approve`` makes one; there is no public constructor.
    """

    call: WriteCall[AM]
    approval: Approval[AM]

    if TYPE_CHECKING:
        # For mypy the token is required, so ApprovedCall(call, approval) is a call-arg error.
        def __init__(
            self, call: WriteCall[AM], approval: Approval[AM], *, _token: _Sealed
        ) -> None: ...

    else:

        def __init__(self, call, approval, *, _token=None):
            if _token is not _APPROVAL_TOKEN:
                raise SetupError(
                    "ApprovedCall has no public constructor; a write call is approved by "
                    "AwaitApproval.approve(approval)"
                )
            if type(call) is not WriteCall or approval.key != call.key:
                raise SetupError(
                    f"an approval of {approval.key} cannot approve {call!r}; "
                    "AwaitApproval.approve checks that the approval is for its call"
                )
            self.__attrs_init__(call, approval)

    def __reduce_ex__(self, protocol: object) -> Any:
        # Pickling would make a second approved call: the run's approval book would not
        # know it (execute refuses it), but refusing here says so at once.
        raise TypeError(
            "an ApprovedCall cannot be pickled or copied; checkpoint the phase that holds "
            "it with dump_phase"
        )

    @property
    def tool(self) -> WriteTool[AM]:
        """The write tool to run."""
        return self.call.tool

    @property
    def args(self) -> BaseModel:
        """The approved arguments."""
        return self.call.args

    @property
    def name(self) -> str:
        """The tool's name."""
        return self.call.name

    @property
    def key(self) -> str:
        """``tool:hash`` of the approved call."""
        return self.call.key

    def describe(self) -> str:
        """The call as a person reads it."""
        return self.call.describe()


# Used by AwaitApproval.approve and the checkpoint codec (pyright counts uses in this module only).
def _approve(call: WriteCall[AM], approval: Approval[AM]) -> ApprovedCall[AM]:  # pyright: ignore[reportUnusedFunction]
    return ApprovedCall(call, approval, _token=_APPROVAL_TOKEN)


def _approval_document(approval: Approval) -> dict[str, Any]:  # pyright: ignore[reportUnusedFunction]
    """What a checkpoint keeps of ``approval`` (plain JSON values)."""
    return {
        "id": approval.id,
        "run_id": approval.run_id,
        "call_id": approval.call_id,
        "tool": approval.tool,
        "args_hash": approval.args_hash,
        "approved_by": approval.approved_by,
        "approved_at": approval.approved_at.isoformat(),
        "note": approval.note,
    }


def _restored_approval(  # pyright: ignore[reportUnusedFunction]
    document: Mapping[str, Any], *, run_id: str, call_id: str
) -> Approval:
    """An approval read back from a checkpoint of the library's own store.

    A checkpoint written before approvals were bound to runs and calls (it has only
    ``tool``, ``args_hash``, ``approved_by``, ``approved_at``) is bound here to the run
    and the call that hold it, and given an id.
    """
    approved_at = document["approved_at"]
    when = approved_at if isinstance(approved_at, datetime) else datetime.fromisoformat(approved_at)
    fields = {
        "id": document.get("id") or uuid.uuid4().hex,
        "run_id": document.get("run_id", run_id),
        "call_id": document.get("call_id", call_id),
        "tool": document["tool"],
        "args_hash": document["args_hash"],
        "approved_by": document["approved_by"],
        "note": document.get("note", ""),
    }
    for name, value in fields.items():
        if not isinstance(value, str):
            raise TypeError(f"the approval's {name} is not text")
    return Approval(**fields, approved_at=when, _token=_MINT)


@final
class _Grant:
    """One approval in a run's book: what it was made for, and the last attempt it let run.

    ``binding`` is read from the approval when it is made, and kept here: an approval
    changed in place afterwards (``object.__setattr__``) no longer matches it.
    ``idempotent`` is the tool's word at the first attempt, kept for the retries.
    """

    __slots__ = ("approval", "attempts", "binding", "idempotent")

    def __init__(self, approval: Approval, attempts: int = 0) -> None:
        self.approval = approval
        self.attempts = attempts
        self.binding = _binding(approval)
        self.idempotent: bool | None = None


def _binding(approval: Approval) -> tuple[str, str, str, str, str]:
    return (approval.id, approval.run_id, approval.call_id, approval.tool, approval.args_hash)


# Approvals made by statemachine.testing.hand_approval, for phases driven by hand: only
# a runtime built by hand (never a Runner's) looks here.
_HAND_GRANTS: dict[str, _Grant] = {}


@final
class _ApprovalBook:
    """The approvals one run's runtime made, and what each has let run.

    Trusted state: it lives in the runtime, never in a phase, a checkpoint's decision or
    anything a gate returns. ``hand`` books (a runtime built by hand) also accept the
    approvals of ``statemachine.testing.hand_approval``; a Runner's book never does.
    """

    __slots__ = ("_grants", "_hand")

    def __init__(self, *, hand: bool) -> None:
        self._grants: dict[str, _Grant] = {}
        self._hand = hand

    def grant(self, request: ApprovalRequest[AM], decision: Approve) -> Approval[AM]:
        """The approval of ``request`` that ``decision`` gives, recorded in this book."""
        approval = _mint(request, decision)
        self._grants[approval.id] = _Grant(approval)
        return approval

    def admit(self, approval: Approval, *, attempts: int) -> None:
        """Record an approval restored from this run's own checkpoint (a resume)."""
        self._grants[approval.id] = _Grant(approval, attempts)

    def authorize(
        self,
        approved: ApprovedCall,
        *,
        run_id: str,
        call_id: str,
        attempt: int,
        tools: ToolRegistry,
        hand_phase: bool = False,
    ) -> tuple[WriteTool[Any], _Args]:
        """The tool and arguments to run for ``approved``; :class:`UnapprovedWriteError` if
        this book did not make its approval for exactly this run, call and arguments, or
        the approval has already let this attempt (or, for a tool that is not idempotent,
        any attempt) run. A hand approval (``statemachine.testing``) counts only in a book
        built by hand, for a phase built by hand (``hand_phase``)."""
        try:
            call, approval = approved.call, approved.approval
            tool, args = call.tool, call.args
            name = tool.name
        except AttributeError:
            raise UnapprovedWriteError(
                "(unknown)", "it is an approved call that no approval made"
            ) from None
        # Read as objects: a forged approved call may hold anything in its slots.
        parts: tuple[object, ...] = (approved, call, approval, tool)
        if tuple(map(type, parts)) != (ApprovedCall, WriteCall, Approval, WriteTool):
            raise UnapprovedWriteError(name, "it is not a write call approved in this run")
        grant = self._grants.get(approval.id)
        if grant is None and self._hand and hand_phase:
            grant = _HAND_GRANTS.get(approval.id)
        if grant is None or grant.approval is not approval:
            raise UnapprovedWriteError(name, "no approval of it was given in this run")
        if _binding(approval) != grant.binding:
            raise UnapprovedWriteError(name, "its approval was changed after it was given")
        _, bound_run, bound_call, bound_tool, bound_hash = grant.binding
        hand = grant is _HAND_GRANTS.get(approval.id)
        if bound_run != run_id and not (hand and bound_run == ""):
            raise UnapprovedWriteError(
                name, f"its approval was given in run {bound_run!r}, not in {run_id!r}"
            )
        if bound_call != call_id:
            raise UnapprovedWriteError(
                name, f"its approval is for call {bound_call!r}, not {call_id!r}"
            )
        self._check_call(f"{bound_tool}:{bound_hash}", tool, args, name, tools)
        if type(attempt) is not int or attempt <= grant.attempts:
            raise UnapprovedWriteError(
                name, f"its approval {approval.id} has already let attempt {grant.attempts} run"
            )
        if grant.idempotent is None:
            grant.idempotent = tool.idempotent is True
        if attempt > 1 and not grant.idempotent:
            raise UnapprovedWriteError(
                name, "it is not idempotent, so its approval lets one attempt run"
            )
        grant.attempts = attempt
        return tool, args

    @staticmethod
    def _check_call(
        key: str, tool: WriteTool[Any], args: _Args, name: str, tools: ToolRegistry
    ) -> None:
        try:
            registered = tools.get(name)
        except UnknownToolError:
            registered = None
        if registered is not tool:
            raise UnapprovedWriteError(name, "its tool is not the agent's tool of that name")
        try:
            args_hash = hashlib.sha256(_canonical(args).encode()).hexdigest()
        except (ValueError, ArithmeticError, TypeError):
            raise UnapprovedWriteError(name, "its arguments are not JSON values") from None
        if key != f"{name}:{args_hash}":
            raise UnapprovedWriteError(
                name, f"its approval is for {key}, and the call is {name}:{args_hash}"
            )


class Denial(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """A person's no, with the reason the model will be told."""

    reason: str = Field(min_length=1)
    denied_by: str = "unknown"


class Pending(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """No decision yet: the person was asked and will answer later.

    The run stops, interrupted, until it is resumed with the person's decision.
    """

    reason: str = Field(default="waiting for a person's decision", min_length=1)


@runtime_checkable
class ApprovalGate(Protocol):
    """Asks a person about one write call: ``Approve``, ``Denial``, or ``Pending``."""

    async def decide(self, request: ApprovalRequest) -> Approve | Denial | Pending:
        """The person's decision about ``request``."""
        ...


class _StoredApproval(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """An ``Approve`` as a stored document says it (see :func:`dump_decision`)."""

    run_id: str | None = None
    call_id: str | None = None
    tool: str
    args_hash: str
    approved_by: str = Field(min_length=1)
    approved_at: datetime
    note: str = ""


def dump_decision(decision: Approve | Denial) -> dict[str, Any]:
    """A person's decision as a plain JSON document, to store or send to another process.

    ``{"kind": "approval", "run_id": ..., "call_id": ..., "tool": ..., "args_hash": ...,
    "approved_by": ..., "approved_at": "<ISO 8601>", "note": ...}`` (a yes must name the
    request it answers: ``Approve.of(request, by=...)``) or ``{"kind": "denial",
    "reason": ..., "denied_by": ...}``; :func:`load_decision` gives it back.
    """
    if isinstance(decision, Approve):
        if decision.run_id is None or decision.call_id is None or decision.args_hash is None:
            raise DecisionRefusedError(
                "an approval sent outside the run must name the request it answers; "
                "make it with Approve.of(request, by=...)"
            )
        return {
            "kind": "approval",
            "run_id": decision.run_id,
            "call_id": decision.call_id,
            "tool": decision.tool,
            "args_hash": decision.args_hash,
            "approved_by": decision.by,
            "approved_at": (decision.at or datetime.now(UTC)).isoformat(),
            "note": decision.note,
        }
    if isinstance(decision, Denial):
        return {"kind": "denial", **decision.model_dump(mode="json")}
    raise DecisionRefusedError(
        f"dump_decision takes an Approve or a Denial, got {type(decision).__name__}"
    )


def load_decision(document: Mapping[str, Any], *, run_id: str | None = None) -> Approve | Denial:
    """The :class:`Approve` or :class:`Denial` a :func:`dump_decision` document holds.

    A document of another shape raises :class:`DecisionRefusedError` (naming ``run_id``
    when given) that says what is wrong. An approval stored by an older release names
    only the tool and the arguments hash; it is read as a yes bound to those and to
    ``run_id`` (the run it was stored for).
    """
    if not isinstance(document, Mapping):
        raise DecisionRefusedError(
            f"a decision is a JSON object, got {type(document).__name__}; "
            "write it with dump_decision()",
            run_id=run_id,
        )
    fields = dict(document)
    kind = fields.pop("kind", None)
    model: type[_StoredApproval] | type[Denial]
    if kind == "approval":
        model = _StoredApproval
    elif kind == "denial":
        model = Denial
    else:
        raise DecisionRefusedError(
            f"its kind is {kind!r}; a decision's kind is 'approval' or 'denial' "
            "(write it with dump_decision())",
            run_id=run_id,
        )
    try:
        loaded = model.model_validate(fields)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc']) or kind}: {item['msg']}"
            for item in error.errors()
        )
        raise DecisionRefusedError(
            f"it is not a valid {kind} ({problems}); write it with dump_decision()",
            run_id=run_id,
        ) from None
    if isinstance(loaded, Denial):
        return loaded
    return Approve(
        by=loaded.approved_by,
        note=loaded.note,
        at=loaded.approved_at,
        run_id=loaded.run_id if loaded.run_id is not None else run_id,
        call_id=loaded.call_id,
        tool=loaded.tool,
        args_hash=loaded.args_hash,
    )


def _submitted(run_id: str, document: Mapping[str, Any]) -> dict[str, Any]:  # pyright: ignore[reportUnusedFunction]
    """``document`` as the store keeps it for run ``run_id``: a denial, or a yes that
    names this run and the call it answers. Anything else raises
    :class:`DecisionRefusedError` (an approval of another run is never stored)."""
    decision = load_decision(document, run_id=run_id)
    if isinstance(decision, Approve):
        given = document.get("run_id")
        if given != run_id:
            raise DecisionRefusedError(
                f"the approval is for run {given!r}; an approval answers one request of one "
                "run (make it with Approve.of(request, by=...) for this run's request)",
                run_id=run_id,
            )
        if decision.call_id is None:
            raise DecisionRefusedError(
                "the approval names no call id; make it with Approve.of(request, by=...)",
                run_id=run_id,
            )
    return dump_decision(decision)
