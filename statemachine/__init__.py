"""statemachine: LLM agents as explicit, typed state machines.

Every phase of a run is a frozen generic class whose transition methods return the
next phase, so mypy rejects illegal transitions: a write tool reaches
``ToolCalling`` only through ``AwaitApproval``, and ``Failed``/``Done`` have no way
out. Retries, budgets and approval are owned by the phases, never by the model.
"""

from ._approval import Approval, ApprovalGate, ApprovalRequest, Denial
from ._budget import Budget, Spend
from ._errors import (
    ApprovalMismatchError,
    BadArgumentsError,
    PhaseReusedError,
    ScriptExhaustedError,
    SetupError,
    StatemachineError,
    ToolError,
    UnapprovedWriteError,
    UnknownToolError,
)
from ._json import canonical, canonical_hash, dumps, loads
from ._model import Message, Model, ModelReply, ModelRequest, ToolRequest, Usage
from ._money import Money, to_money
from ._phases import (
    Active,
    Agent,
    AwaitApproval,
    Done,
    Failed,
    Idle,
    Observing,
    Phase,
    Phases,
    Planning,
    Responding,
    Retrying,
    Runtime,
    ToolCalling,
)
from ._retry import RetryPolicy
from ._runner import Runner, RunResult
from ._tools import (
    ApprovedCall,
    InvalidCall,
    ReadCall,
    ReadTool,
    ToolRegistry,
    WriteCall,
    WriteTool,
    read_tool,
    write_tool,
)

__all__ = (
    "Active",
    "Agent",
    "Approval",
    "ApprovalGate",
    "ApprovalMismatchError",
    "ApprovalRequest",
    "ApprovedCall",
    "AwaitApproval",
    "BadArgumentsError",
    "Budget",
    "Denial",
    "Done",
    "Failed",
    "Idle",
    "InvalidCall",
    "Message",
    "Model",
    "ModelReply",
    "ModelRequest",
    "Money",
    "Observing",
    "Phase",
    "PhaseReusedError",
    "Phases",
    "Planning",
    "ReadCall",
    "ReadTool",
    "Responding",
    "RetryPolicy",
    "Retrying",
    "RunResult",
    "Runner",
    "Runtime",
    "ScriptExhaustedError",
    "SetupError",
    "Spend",
    "StatemachineError",
    "ToolCalling",
    "ToolError",
    "ToolRegistry",
    "ToolRequest",
    "UnapprovedWriteError",
    "UnknownToolError",
    "Usage",
    "WriteCall",
    "WriteTool",
    "canonical",
    "canonical_hash",
    "dumps",
    "loads",
    "read_tool",
    "to_money",
    "write_tool",
)
