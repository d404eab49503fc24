"""statemachine: LLM agents as explicit, typed state machines.

Every phase of a run is a frozen generic class whose transition methods return the
next phase, so mypy rejects illegal transitions: a write tool reaches
``ToolCalling`` only through ``AwaitApproval``, and ``Failed``/``Done`` have no way
out. Retries, budgets and approval are owned by the phases, never by the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ._approval import (
    Approval,
    ApprovalGate,
    ApprovalRequest,
    Approve,
    ApprovedCall,
    Denial,
    Pending,
    dump_decision,
    load_decision,
)
from ._breaker import CircuitBreaker
from ._budget import Budget, Spend
from ._context import BudgetLeft, RunContext
from ._embedding import EmbeddingSimilarity
from ._errors import (
    ApprovalMismatchError,
    BadArgumentsError,
    BudgetError,
    BudgetExceededError,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointKeyError,
    CheckpointMismatchError,
    CheckpointOrderError,
    CheckpointTamperedError,
    CircuitOpenError,
    ConfigError,
    DecisionRefusedError,
    EffectUncertainError,
    EstimateExceededError,
    IllegalStatusChangeError,
    IllegalTransitionError,
    ModelRequestError,
    ModelResponseError,
    ModelRetriesExhaustedError,
    ModelUnavailableError,
    OutputRejectedError,
    OutputTamperedError,
    PhaseForgedError,
    PhaseReusedError,
    ReservationSettledError,
    RunClaimedError,
    RunError,
    RunPausedError,
    ScriptExhaustedError,
    SetupError,
    StatemachineError,
    ToolError,
    UnapprovedWriteError,
    UnknownRunError,
    UnknownToolError,
)
from ._events import RunEvent, RunEvents, RunFinished, TextDelta, TransitionEvent
from ._governor import (
    ActionRecord,
    Check,
    Decision,
    LoopGovernor,
    LoopState,
    SignedSimilarity,
    Similarity,
    Verdict,
    VerdictRecord,
    lexical_similarity,
    trigram_similarity,
)
from ._guard import (
    CustomerResponse,
    GuardMode,
    GuardOutcome,
    Invalid,
    OutputGuard,
    Parsed,
    Refusal,
    Repair,
    Rule,
    Truncated,
    ValidationResult,
    validate_with_retries,
)
from ._json import canonical, canonical_hash, dumps, loads
from ._lazy import lazy_names
from ._ledger import EffectLedger, EffectRecord
from ._model import (
    Message,
    Model,
    ModelChunk,
    ModelReply,
    ModelRequest,
    ModelSettings,
    StreamingModel,
    ToolRequest,
    Transcript,
    Usage,
)
from ._money import Money, money_difference, money_sum, to_money
from ._observe import ProgressLine, configure_logging
from ._phases import (
    Active,
    Agent,
    AnyPhase,
    AwaitApproval,
    Done,
    Failed,
    Idle,
    ModelRetrying,
    Observing,
    Phase,
    Phases,
    Planning,
    Responding,
    Retrying,
    Runtime,
    ToolCalling,
)
from ._reserve import BudgetMeter, Reservation
from ._retry import RetryPolicy
from ._runner import Runner, RunResult, StopReport
from ._schema import Diagnostic, validate_config
from ._tools import (
    InvalidCall,
    ReadCall,
    ReadTool,
    ToolRegistry,
    WriteCall,
    WriteTool,
    current_idempotency_key,
    idempotency_key,
    read_tool,
    write_tool,
)
from .persist._codec import dump_phase, load_phase
from .persist._lifecycle import RunLifecycle, RunStatus
from .persist._memory import MemoryCheckpointer
from .persist._protocol import CheckpointEntry, Checkpointer, LeaseRecord, RunRecord, Sealer
from .persist._sqlite import SQLiteCheckpointer

if TYPE_CHECKING:
    from ._config import AgentConfig, RetrySettings
    from ._diagram import AgentGraph, agent_graph
    from ._patch import PatchAccepted, PatchRejected, apply_patch
    from ._worker import Worker
    from .models._anthropic import AnthropicModel
    from .models._llamacpp import LlamaCppConfig, LlamaCppModel
    from .models._openai import OpenAICompatibleModel
    from .models._prices import TokenPrices
    from .persist._crypto import CheckpointCipher, generate_key
    from .persist._postgres import PostgresCheckpointer


__all__ = (
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
    "CustomerResponse",
    "Decision",
    "DecisionRefusedError",
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
)

# Parts a run of the core does not need are imported on first use, so that
# ``import statemachine`` does not pay for httpx, cryptography, psycopg, llama.cpp,
# the diagram, the worker or the configuration models. ``from statemachine import X``
# and ``statemachine.X`` work as before; the type checkers read the imports above.
_LAZY: Final[dict[str, str]] = {
    "AgentConfig": "._config",
    "AgentGraph": "._diagram",
    "AnthropicModel": ".models._anthropic",
    "CheckpointCipher": ".persist._crypto",
    "LlamaCppConfig": ".models._llamacpp",
    "LlamaCppModel": ".models._llamacpp",
    "OpenAICompatibleModel": ".models._openai",
    "PatchAccepted": "._patch",
    "PatchRejected": "._patch",
    "PostgresCheckpointer": ".persist._postgres",
    "RetrySettings": "._config",
    "TokenPrices": ".models._prices",
    "Worker": "._worker",
    "agent_graph": "._diagram",
    "apply_patch": "._patch",
    "generate_key": ".persist._crypto",
}


if not TYPE_CHECKING:  # hidden from the type checkers, so a misspelt name stays an error
    __getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)
