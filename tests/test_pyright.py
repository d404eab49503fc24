"""The pyright messages users read most, pinned exactly, and the gaps between the checkers.

pyright is pinned in pyproject.toml (messages change between releases). It runs once
per session, over one small file per case, in strict mode as ``make typecheck`` runs
it; each test then reads its file's diagnostics. The mypy side of the same cases is
tests/test_typing_messages.yml.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

Diagnostic = tuple[int, str, str]  # (line, rule, message)

CASES: dict[str, str] = {
    "pending_call_passed_to_call_tool": """
        from statemachine import Planning, ToolCalling

        def run_first(planning: Planning[str]) -> ToolCalling[str]:
            return planning.call_tool(planning.pending[0])
        """,
    "unnarrowed_next_call_passed_to_call_tool": """
        from statemachine import Planning, ToolCalling

        def run_next(planning: Planning[str]) -> ToolCalling[str]:
            return planning.call_tool(planning.next_call())
        """,
    "write_call_passed_to_call_tool": """
        from statemachine import Planning, ToolCalling, WriteCall

        def book(planning: Planning[str], call: WriteCall) -> ToolCalling[str]:
            return planning.call_tool(call)
        """,
    "transition_on_terminal_phase": """
        from statemachine import Failed, Runtime

        async def again(failed: Failed[str], rt: Runtime) -> None:
            await failed.retry(rt)
        """,
    "unnarrowed_retry_returned_as_tool_calling": """
        from statemachine import Retrying, Runtime, ToolCalling

        async def again(retrying: Retrying[str], rt: Runtime) -> ToolCalling[str]:
            return await retrying.retry(rt)
        """,
    "unnarrowed_model_retry_returned_as_planning": """
        from statemachine import ModelRetrying, Planning, Runtime

        async def again(retrying: ModelRetrying[str], rt: Runtime) -> Planning[str]:
            return await retrying.retry(rt)
        """,
    "unnarrowed_execute_assigned_as_observing": """
        from statemachine import Observing, Runtime, ToolCalling

        async def run(tool_calling: ToolCalling[str], rt: Runtime) -> Observing[str]:
            seen: Observing[str] = await tool_calling.execute(rt)
            return seen
        """,
    "advance_override_adds_a_successor": """
        from statemachine import Observing, Responding, Runtime

        class EagerObserving(Observing[str]):
            async def advance(self, rt: Runtime) -> Responding[str]:
                return self.observe().respond("done")
        """,
    "assigning_a_phase_field": """
        from statemachine import Planning

        def rewind(planning: Planning[str]) -> None:
            planning.step = 0
        """,
    "assigning_an_approval_field": """
        from statemachine import Approval

        def forge(approval: Approval) -> None:
            approval.approved_by = "mallory"
        """,
    # Gap: pyright does not check attrs.evolve's keywords (mypy's attrs plugin does).
    # The runtime refuses the new phase (UnapprovedWriteError as it is built).
    "gap_evolve_with_a_write_call": """
        import attrs

        from statemachine import ToolCalling, WriteCall

        def swap(tool_calling: ToolCalling[str], write: WriteCall) -> ToolCalling[str]:
            return attrs.evolve(tool_calling, call=write)
        """,
    # Gap: a loop variable that starts narrowed to Idle loses its later types in
    # pyright's loop analysis; it calls the isinstance unnecessary, and the code after
    # the loop unreachable. Starting from a Phase parameter is clean.
    "gap_loop_from_a_narrowed_start": """
        from statemachine import Active, Agent, Phase, Runtime

        async def drive(agent: Agent[str], rt: Runtime) -> Phase[str]:
            state: Phase[str] = agent.start("ctx", "hello")
            while isinstance(state, Active):
                state = await state.advance(rt)
            return state
        """,
    # Gap: pyright reads a pydantic model's frozenness from the class keyword only.
    "gap_frozen_through_model_config": """
        from pydantic import BaseModel, ConfigDict

        class Refund(BaseModel):
            model_config = ConfigDict(frozen=True)

            amount: str

        def raise_it(refund: Refund) -> None:
            refund.amount = "1000000"
        """,
    "building_a_phase_directly": """
        from statemachine import Agent, ReadCall, ToolCalling

        def skip(agent: Agent[str], call: ReadCall) -> ToolCalling[str]:
            return ToolCalling[str](agent=agent, ctx="c", call=call, call_id="c")
        """,
    "approving_without_a_gate": """
        from statemachine import ApprovalRequest, Approval

        def mint(request: ApprovalRequest) -> Approval:
            return Approval(
                id="x",
                run_id="r",
                call_id="c",
                tool="t",
                args_hash="h",
                approved_by="me",
                approved_at=None,
                note="",
            )
        """,
    "approval_of_another_tools_call": """
        from pydantic import BaseModel

        from statemachine import Approval, AwaitApproval


        class ChargeArgs(BaseModel):
            amount: str


        class RefundArgs(BaseModel):
            order: str


        def mix(waiting: AwaitApproval[str, ChargeArgs], approval: Approval[RefundArgs]) -> None:
            waiting.approve(approval)
        """,
    "legal_loop_from_a_phase_parameter": """
        from statemachine import Active, Agent, Phase, Runtime
        from statemachine.testing import AutoApproveGate, ScriptedModel, reply

        async def drive(state: Phase[str], rt: Runtime) -> Phase[str]:
            while isinstance(state, Active):
                state = await state.advance(rt)
            return state

        async def start(agent: Agent[str]) -> Phase[str]:
            rt = Runtime(run_id="r", model=ScriptedModel([reply("hi")]), gate=AutoApproveGate())
            return await drive(agent.start("ctx", "hello"), rt)
        """,
}


@pytest.fixture(scope="session")
def pyright_diagnostics(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Diagnostic]]:
    """Every case's diagnostics, from one pyright run over all the case files."""
    folder = tmp_path_factory.mktemp("pyright")
    for name, source in CASES.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source).lstrip("\n"))
    config = {
        "typeCheckingMode": "strict",
        "pythonVersion": "3.11",
        # The package is installed editable (an import hook pyright cannot follow).
        "extraPaths": [str(ROOT)],
        "enableTypeIgnoreComments": False,
        "reportUnnecessaryTypeIgnoreComment": "error",
    }
    (folder / "pyrightconfig.json").write_text(json.dumps(config))
    pyright = Path(sys.executable).parent / "pyright"
    result = subprocess.run(
        [str(pyright), "--outputjson", "--pythonpath", sys.executable, "-p", str(folder)],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYRIGHT_PYTHON_IGNORE_WARNINGS": "1"},
    )
    report = json.loads(result.stdout)
    found: dict[str, list[Diagnostic]] = {name: [] for name in CASES}
    for item in report["generalDiagnostics"]:
        name = Path(item["file"]).stem
        line = item["range"]["start"]["line"] + 1
        # pyright indents a message's detail lines with no-break spaces.
        message = item["message"].replace("\xa0", " ")
        found[name].append((line, item.get("rule", ""), message))
    assert report["summary"]["filesAnalyzed"] == len(CASES)
    return found


def test_pyright_is_the_pinned_version() -> None:
    """The messages below are pyright 1.1.414's (pinned in the dev extra)."""
    pyright = Path(sys.executable).parent / "pyright"
    result = subprocess.run(
        [str(pyright), "--version"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYRIGHT_PYTHON_IGNORE_WARNINGS": "1"},
    )
    assert result.stdout.strip() == "pyright 1.1.414"


def test_write_call_passed_to_call_tool(pyright_diagnostics: dict[str, list[Diagnostic]]) -> None:
    """A write call cannot go straight to call_tool."""
    assert pyright_diagnostics["write_call_passed_to_call_tool"] == [
        (
            4,
            "reportArgumentType",
            'Argument of type "WriteCall[Any]" cannot be assigned to parameter "call" of type '
            '"ReadCall" in function "call_tool"\n'
            '  "WriteCall[Any]" is not assignable to "ReadCall"',
        )
    ]


def test_transition_on_terminal_phase(pyright_diagnostics: dict[str, list[Diagnostic]]) -> None:
    """Failed has no retry (two diagnostics: the access, and its unknown type)."""
    assert pyright_diagnostics["transition_on_terminal_phase"] == [
        (4, "reportUnknownMemberType", 'Type of "retry" is unknown'),
        (
            4,
            "reportAttributeAccessIssue",
            'Cannot access attribute "retry" for class "Failed[str]"\n'
            '  Attribute "retry" is unknown',
        ),
    ]


def test_unnarrowed_retry(pyright_diagnostics: dict[str, list[Diagnostic]]) -> None:
    """retry() may end in Failed, so its result is not a ToolCalling until narrowed."""
    assert pyright_diagnostics["unnarrowed_retry_returned_as_tool_calling"] == [
        (
            4,
            "reportReturnType",
            'Type "ToolCalling[str] | Failed[str]" is not assignable to return type '
            '"ToolCalling[str]"\n  Type "ToolCalling[str] | Failed[str]" is not assignable to '
            'type "ToolCalling[str]"\n    "Failed[str]" is not assignable to "ToolCalling[str]"',
        )
    ]


def test_unnarrowed_model_retry(pyright_diagnostics: dict[str, list[Diagnostic]]) -> None:
    """A model retry may end in Failed, so its result is not a Planning until narrowed."""
    assert pyright_diagnostics["unnarrowed_model_retry_returned_as_planning"] == [
        (
            4,
            "reportReturnType",
            'Type "Planning[str] | Failed[str]" is not assignable to return type '
            '"Planning[str]"\n  Type "Planning[str] | Failed[str]" is not assignable to '
            'type "Planning[str]"\n    "Failed[str]" is not assignable to "Planning[str]"',
        )
    ]


def test_unnarrowed_execute(pyright_diagnostics: dict[str, list[Diagnostic]]) -> None:
    """execute() may end in Retrying or Failed, so it is not an Observing until narrowed."""
    assert pyright_diagnostics["unnarrowed_execute_assigned_as_observing"] == [
        (
            4,
            "reportAssignmentType",
            'Type "Observing[str] | Retrying[str] | Failed[str]" is not assignable to declared '
            'type "Observing[str]"\n  Type "Observing[str] | Retrying[str] | Failed[str]" is not '
            'assignable to type "Observing[str]"\n    "Failed[str]" is not assignable to '
            '"Observing[str]"',
        )
    ]


def test_advance_override_adds_a_successor(
    pyright_diagnostics: dict[str, list[Diagnostic]],
) -> None:
    """An override of advance may narrow its successors, never widen them."""
    assert pyright_diagnostics["advance_override_adds_a_successor"] == [
        (
            4,
            "reportIncompatibleMethodOverride",
            'Method "advance" overrides class "Observing" in an incompatible manner\n'
            '  Return type mismatch: base method returns type "CoroutineType[Any, Any, '
            'Planning[str]]", override returns type "CoroutineType[Any, Any, Responding[str]]"\n'
            '    "CoroutineType[Any, Any, Responding[str]]" is not assignable to '
            '"CoroutineType[Any, Any, Planning[str]]"\n'
            '      Type parameter "_ReturnT_nd_co@CoroutineType" is covariant, but '
            '"Responding[str]" is not a subtype of "Planning[str]"\n'
            '        "Responding[str]" is not assignable to "Planning[str]"',
        )
    ]


def test_assigning_a_phase_field(pyright_diagnostics: dict[str, list[Diagnostic]]) -> None:
    """A phase is frozen: its fields cannot be assigned."""
    assert pyright_diagnostics["assigning_a_phase_field"] == [
        (
            4,
            "reportAttributeAccessIssue",
            'Cannot assign to attribute "step" for class "Planning[str]"\n'
            '  Attribute "step" is read-only',
        )
    ]


def test_assigning_an_approval_field(pyright_diagnostics: dict[str, list[Diagnostic]]) -> None:
    """A frozen pydantic model is frozen for pyright too (it reads the class keyword)."""
    assert pyright_diagnostics["assigning_an_approval_field"] == [
        (
            4,
            "reportAttributeAccessIssue",
            'Cannot assign to attribute "approved_by" for class "Approval[Any]"\n'
            '  Attribute "approved_by" is read-only',
        )
    ]


def test_gap_evolve_is_not_checked(pyright_diagnostics: dict[str, list[Diagnostic]]) -> None:
    """pyright accepts attrs.evolve with a write call; mypy rejects it (README, typing)."""
    assert pyright_diagnostics["gap_evolve_with_a_write_call"] == []


def test_gap_frozen_through_model_config(
    pyright_diagnostics: dict[str, list[Diagnostic]],
) -> None:
    """pyright accepts assigning a field frozen by model_config; mypy's plugin rejects it."""
    assert pyright_diagnostics["gap_frozen_through_model_config"] == []


def test_gap_loop_from_a_narrowed_start(pyright_diagnostics: dict[str, list[Diagnostic]]) -> None:
    """pyright's false positive on the advance loop from agent.start (README, typing)."""
    assert pyright_diagnostics["gap_loop_from_a_narrowed_start"] == [
        (
            5,
            "reportUnnecessaryIsInstance",
            'Unnecessary isinstance call; "Idle[str] | Planning[str]" is always an instance of '
            '"Active[Unknown]"',
        )
    ]


def test_loop_from_a_phase_parameter_is_clean(
    pyright_diagnostics: dict[str, list[Diagnostic]],
) -> None:
    """The advance loop from a Phase parameter, and a Runtime built by hand, are clean."""
    assert pyright_diagnostics["legal_loop_from_a_phase_parameter"] == []


def test_building_a_phase_directly(pyright_diagnostics: dict[str, list[Diagnostic]]) -> None:
    """Phases are sealed: only a transition makes one (a required private ticket)."""
    assert pyright_diagnostics["building_a_phase_directly"] == [
        (4, "reportCallIssue", 'Argument missing for parameter "ticket"'),
    ]


def test_approving_without_a_gate(pyright_diagnostics: dict[str, list[Diagnostic]]) -> None:
    """Approval has no public constructor: the runtime makes it from a gate's yes."""
    assert pyright_diagnostics["approving_without_a_gate"] == [
        (4, "reportCallIssue", 'Argument missing for parameter "_token"'),
    ]


def test_approval_of_another_tools_call(pyright_diagnostics: dict[str, list[Diagnostic]]) -> None:
    """Approvals are typed by the arguments model of the call they are for."""
    assert pyright_diagnostics["approval_of_another_tools_call"] == [
        (
            15,
            "reportArgumentType",
            'Argument of type "Approval[RefundArgs]" cannot be assigned to parameter "approval" '
            'of type "Approval[ChargeArgs]" in function "approve"\n'
            '  "Approval[RefundArgs]" is not assignable to "Approval[ChargeArgs]"\n'
            '    Type parameter "AM@Approval" is invariant, but "RefundArgs" is not the same as '
            '"ChargeArgs"',
        )
    ]


def test_pending_call_passed_to_call_tool(pyright_diagnostics: dict[str, list[Diagnostic]]) -> None:
    """A call of a reply waits as the model's request: it runs only once routed."""
    assert pyright_diagnostics["pending_call_passed_to_call_tool"] == [
        (
            4,
            "reportArgumentType",
            'Argument of type "ToolRequest" cannot be assigned to parameter "call" of type '
            '"ReadCall" in function "call_tool"\n'
            '  "ToolRequest" is not assignable to "ReadCall"',
        )
    ]


def test_unnarrowed_next_call_passed_to_call_tool(
    pyright_diagnostics: dict[str, list[Diagnostic]],
) -> None:
    """The next pending call may be a write: it is not run until narrowed to a read."""
    assert pyright_diagnostics["unnarrowed_next_call_passed_to_call_tool"] == [
        (
            4,
            "reportArgumentType",
            'Argument of type "ReadCall | WriteCall[Any] | InvalidCall | None" cannot be '
            'assigned to parameter "call" of type "ReadCall" in function "call_tool"\n'
            '  Type "ReadCall | WriteCall[Any] | InvalidCall | None" is not assignable to type '
            '"ReadCall"\n'
            '    "InvalidCall" is not assignable to "ReadCall"',
        )
    ]
