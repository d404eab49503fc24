"""The public surface: a pinned __all__, nothing private exported, the documented error tree."""

from __future__ import annotations

import builtins
import inspect
import re

import statemachine
import statemachine.testing
from statemachine import _errors

PUBLIC = {
    "ActionRecord",
    "Active",
    "Agent",
    "AnyPhase",
    "AgentConfig",
    "AgentGraph",
    "AnthropicModel",
    "Approval",
    "ApprovalGate",
    "ApprovalMismatchError",
    "ApprovalRequest",
    "Approve",
    "ApprovedCall",
    "AwaitApproval",
    "BadArgumentsError",
    "Budget",
    "BudgetError",
    "BudgetExceededError",
    "BudgetLeft",
    "BudgetMeter",
    "Check",
    "CheckpointCipher",
    "CheckpointCorruptError",
    "CheckpointEntry",
    "CheckpointError",
    "CheckpointKeyError",
    "CheckpointMismatchError",
    "CheckpointOrderError",
    "CheckpointTamperedError",
    "CircuitBreaker",
    "CircuitOpenError",
    "Checkpointer",
    "ConfigError",
    "DecisionRefusedError",
    "CustomerResponse",
    "Decision",
    "Denial",
    "Diagnostic",
    "Done",
    "EffectLedger",
    "EffectRecord",
    "EmbeddingSimilarity",
    "EffectUncertainError",
    "EstimateExceededError",
    "Failed",
    "GuardMode",
    "GuardOutcome",
    "Idle",
    "IllegalStatusChangeError",
    "IllegalTransitionError",
    "Invalid",
    "InvalidCall",
    "LeaseRecord",
    "LlamaCppConfig",
    "LlamaCppModel",
    "LoopGovernor",
    "LoopState",
    "MemoryCheckpointer",
    "Message",
    "Model",
    "ModelChunk",
    "ModelReply",
    "ModelRequest",
    "ModelRequestError",
    "ModelResponseError",
    "ModelRetriesExhaustedError",
    "ModelRetrying",
    "ModelSettings",
    "ModelUnavailableError",
    "Money",
    "Observing",
    "OpenAICompatibleModel",
    "OutputGuard",
    "OutputRejectedError",
    "OutputTamperedError",
    "Parsed",
    "PatchAccepted",
    "PatchRejected",
    "Pending",
    "Phase",
    "PhaseForgedError",
    "PhaseReusedError",
    "Phases",
    "Planning",
    "PostgresCheckpointer",
    "ProgressLine",
    "ReadCall",
    "ReadTool",
    "Refusal",
    "Repair",
    "Reservation",
    "ReservationSettledError",
    "Responding",
    "RetryPolicy",
    "RetrySettings",
    "Retrying",
    "Rule",
    "RunClaimedError",
    "RunEvent",
    "RunEvents",
    "RunFinished",
    "RunError",
    "RunLifecycle",
    "RunPausedError",
    "RunRecord",
    "RunContext",
    "RunResult",
    "RunStatus",
    "Runner",
    "Runtime",
    "SQLiteCheckpointer",
    "ScriptExhaustedError",
    "Sealer",
    "SetupError",
    "SignedSimilarity",
    "Similarity",
    "Spend",
    "StatemachineError",
    "StopReport",
    "StreamingModel",
    "TextDelta",
    "TokenPrices",
    "ToolCalling",
    "ToolError",
    "ToolRegistry",
    "ToolRequest",
    "Transcript",
    "TransitionEvent",
    "Truncated",
    "UnapprovedWriteError",
    "UnknownRunError",
    "UnknownToolError",
    "Usage",
    "ValidationResult",
    "Verdict",
    "VerdictRecord",
    "Worker",
    "WriteCall",
    "WriteTool",
    "agent_graph",
    "apply_patch",
    "canonical",
    "canonical_hash",
    "configure_logging",
    "current_idempotency_key",
    "dump_decision",
    "dump_phase",
    "dumps",
    "generate_key",
    "idempotency_key",
    "lexical_similarity",
    "load_decision",
    "load_phase",
    "loads",
    "money_difference",
    "money_sum",
    "read_tool",
    "to_money",
    "trigram_similarity",
    "validate_config",
    "validate_with_retries",
    "write_tool",
}

TESTING = {
    "AutoApproveGate",
    "AutoDenyGate",
    "Capture",
    "CapturedSpan",
    "FunctionModel",
    "MemoryCheckpointer",
    "MetricPoint",
    "ScriptedGate",
    "ScriptedModel",
    "capture",
    "hand_approval",
    "hand_built",
    "reply",
    "tool_call",
}


def test_all_is_exactly_the_pinned_public_surface() -> None:
    """Adding or removing a public name is a deliberate change to this list."""
    assert isinstance(statemachine.__all__, tuple)
    assert len(statemachine.__all__) == len(set(statemachine.__all__))
    assert set(statemachine.__all__) == PUBLIC


def test_every_public_name_is_importable() -> None:
    """Each name in __all__ exists on the package (``from statemachine import *`` works)."""
    namespace: dict[str, object] = {}
    exec("from statemachine import *", namespace)
    assert set(namespace) >= PUBLIC
    assert all(getattr(statemachine, name, None) is not None for name in PUBLIC)


def test_no_private_name_is_exported() -> None:
    """Nothing whose name starts with an underscore is public."""
    assert [name for name in statemachine.__all__ if name.startswith("_")] == []
    assert [name for name in statemachine.testing.__all__ if name.startswith("_")] == []


def test_testing_exports_the_test_doubles() -> None:
    """statemachine.testing offers exactly the test doubles, the turn helpers and capture."""
    assert set(statemachine.testing.__all__) == TESTING
    assert all(hasattr(statemachine.testing, name) for name in TESTING)


# --- the error tree ---------------------------------------------------------------------

TREE_LINE = re.compile(r"^(?P<indent>[ │├└─]*?)(?P<name>\w+Error) \((?P<builtin>\w+)\)")


def documented_tree() -> list[tuple[int, str, str]]:
    """(depth, class name, builtin name) for each line of the tree in _errors' docstring."""
    doc = inspect.getdoc(_errors) or ""
    lines = [line for line in doc.splitlines() if TREE_LINE.match(line)]
    entries = []
    root_indent = None
    for line in lines:
        match = TREE_LINE.match(line)
        assert match is not None
        indent = len(match["indent"])
        root_indent = indent if root_indent is None else root_indent
        entries.append(((indent - root_indent) // 4, match["name"], match["builtin"]))
    return entries


def error_classes() -> set[str]:
    """Names of the exception classes defined in statemachine._errors."""
    return {
        name
        for name, value in vars(_errors).items()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__ == _errors.__name__
    }


def test_the_docstring_tree_lists_every_error_class() -> None:
    """Every exception class in _errors is drawn in its docstring, and nothing else is."""
    drawn = {name for _, name, _ in documented_tree()}
    assert drawn == error_classes()
    assert len(drawn) == 36


def test_every_error_subclasses_the_root_and_its_documented_builtin() -> None:
    """Each error is a StatemachineError and also the builtin the tree names beside it."""
    for _, name, builtin in documented_tree():
        cls = getattr(_errors, name)
        assert issubclass(cls, statemachine.StatemachineError), name
        assert issubclass(cls, getattr(builtins, builtin)), (name, builtin)


def test_every_error_subclasses_its_parent_in_the_tree() -> None:
    """The indentation of the tree is the class hierarchy: a child subclasses its parent."""
    parents: dict[int, str] = {}
    for depth, name, _ in documented_tree():
        parents[depth] = name
        if depth:
            assert issubclass(getattr(_errors, name), getattr(_errors, parents[depth - 1])), name


def test_every_error_is_public() -> None:
    """Callers can catch every error the library raises by its public name."""
    assert error_classes() <= PUBLIC
    assert error_classes() == set(_errors.__all__)
