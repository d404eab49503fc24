"""The Planning side's shortcuts of issue 23's thirteenth round, against the plain path.

- ``LoopGovernor.action`` tells a read from a write by the tool's exact class first: a
  ``ReadTool`` itself is a read, a ``WriteTool`` itself a write, anything else is asked
  ``isinstance(tool, WriteTool)`` as before (a subclass, a class equal to ``ReadTool`` by
  its metaclass, a call of another class). A call of the library's own classes has its
  tool read once; any other call is read as before (its name, then its tool).
- ``LoopGovernor.action`` makes its record, and ``ToolRegistry.route`` its ``ReadCall`` or
  ``WriteCall``, as an instance of a private subclass whose slots are stored as
  ``object`` stores them, then given the class's own (``__class__`` assignment): the
  same record and call as the plain path's (``ActionRecord(...)``, ``tool.call``), of
  the class itself, frozen as it.
- ``_plan`` and ``_finalize`` ask ``isinstance(reply, str)`` only of what is not a
  ``ModelReply`` itself (which is no ``str``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import pickle
from decimal import Decimal
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import LoopGovernor, ModelReply, ToolRegistry, WriteTool
from statemachine._actions import ActionRecord
from statemachine._governor import _case_insensitive
from statemachine._json import canonical
from statemachine._tools import ReadCall, ReadTool, WriteCall

# A tool of each kind and one whose arguments are folded (a case-insensitive field).
_RAWS = {
    "weather": '{"city":"Oslo"}',
    "forecast": '{"city":"OSLO"}',
    "refund": '{"reason":"damaged","amount":25.0,"order":"A-1001"}',
}


def _registry() -> ToolRegistry[Any]:
    from test_governor import Shop

    return ToolRegistry(Shop().tools)


_REGISTRY = _registry()


def _routed(name: str) -> Any:
    """The call routed from the tool's usual arguments."""
    return _REGISTRY.route(name, _RAWS[name])


class _Sub(WriteTool[Any, Any]):  # pyright: ignore[reportGeneralTypeIssues]  # a write
    __slots__ = ()


class _Equal(type):
    """A metaclass whose classes are equal to ReadTool (and hash as it)."""

    def __eq__(cls, other: object) -> bool:
        return other is ReadTool or type.__eq__(cls, other) is True

    def __hash__(cls) -> int:
        return hash(ReadTool)


class _Sneaky(WriteTool[Any, Any], metaclass=_Equal):  # pyright: ignore[reportGeneralTypeIssues]
    __slots__ = ()


def _recast(tool: Any, cls: type[Any]) -> Any:
    """A copy of ``tool`` of the layout-compatible class ``cls``."""
    made = copy.copy(tool)
    object.__setattr__(made, "__class__", cls)
    return made


class _Duck:
    """A call of no library class: its attributes are read as the plain path reads them
    (each read noted)."""

    def __init__(self, call: Any, tool: Any) -> None:
        self._call, self._tool = call, tool
        self.reads: list[str] = []

    @property
    def name(self) -> str:
        self.reads.append("name")
        return str(self._tool.name)

    @property
    def tool(self) -> Any:
        self.reads.append("tool")
        return self._tool

    @property
    def args(self) -> BaseModel:
        self.reads.append("args")
        return self._call.args  # type: ignore[no-any-return]

    @property
    def _canonical(self) -> str:
        self.reads.append("_canonical")
        return self._call._canonical  # type: ignore[no-any-return]

    @property
    def args_hash(self) -> str:
        self.reads.append("args_hash")
        return self._call.args_hash  # type: ignore[no-any-return]


def _plain(call: Any, raw: str, call_id: str) -> ActionRecord:
    """The record as round 12's action made it, step for step (the plain path)."""
    name = call.tool.name if type(call) is ReadCall or type(call) is WriteCall else call.name
    exact = hashlib.sha256(f"{name}\x00{raw}".encode()).hexdigest()
    args: BaseModel = call.args
    if _case_insensitive(type(args)):
        text = canonical(LoopGovernor._folded(call))
        key = f"{name}:{hashlib.sha256(text.encode()).hexdigest()}"
    else:
        text = call._canonical
        key = f"{name}:{call.args_hash}"
    effect = "write" if isinstance(call.tool, WriteTool) else "read"
    return ActionRecord(
        call_id=call_id, tool=name, effect=effect, exact=exact, key=key, text=f"{name}({text})"
    )


_TOOL_CLASSES = (None, ReadTool, WriteTool, _Sub, _Sneaky)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(sorted(_RAWS)),
    st.sampled_from(_TOOL_CLASSES),
    st.booleans(),
    st.text(max_size=12),
    st.text(max_size=30),
)
def test_action_makes_the_plain_paths_record(
    tool_name: str, recast: type[Any] | None, duck: bool, call_id: str, extra: str
) -> None:
    """Every call (the library's own, one whose tool was swapped after it was made, one of
    another class) gets the plain path's record, a write exactly when isinstance says so."""
    raw = _RAWS[tool_name]
    call: Any = _routed(tool_name)
    assert type(call) is ReadCall or type(call) is WriteCall
    tool = call.tool
    if recast is not None:
        # The tool as another class (its layout the same), after the call was validated.
        source = tool
        if (recast is ReadTool) != (type(tool) is ReadTool):
            other = "refund" if type(tool) is ReadTool else "weather"
            source = _routed(other).tool
        tool = _recast(source, recast) if type(source) is not recast else source
        object.__setattr__(call, "tool", tool)
    duck_call = _Duck(call, tool)
    if duck:
        call = duck_call
    raw_sent = raw + extra
    made = LoopGovernor().action(call, raw_sent, call_id)
    reads = list(duck_call.reads)
    duck_call.reads.clear()
    expected = _plain(call, raw_sent, call_id)
    assert type(made) is ActionRecord
    assert made == expected
    assert made.effect == ("write" if isinstance(tool, WriteTool) else "read")
    assert (made.outcome, made.result, made.gain) == ("pending", "", None)
    assert reads == duck_call.reads  # read in the plain path's order


def test_a_write_tools_subclass_and_a_class_equal_to_read_tool_are_writes() -> None:
    """The exact-class shortcut takes neither: each is asked isinstance (a write)."""
    call: Any = _routed("weather")
    write_tool: Any = _routed("refund").tool
    for cls in (_Sub, _Sneaky):
        odd = _recast(write_tool, cls)
        assert type(odd) is cls
        assert (type(odd) == ReadTool) is (cls is _Sneaky)  # noqa: E721  (the metaclass trick)
        object.__setattr__(call, "tool", odd)
        assert LoopGovernor().action(call, "{}", "c").effect == "write"
        duck: Any = _Duck(call, odd)
        assert LoopGovernor().action(duck, "{}", "c").effect == "write"
    object.__setattr__(call, "tool", write_tool)  # a read call holding a write tool
    assert LoopGovernor().action(call, "{}", "c").effect == "write"


def test_a_model_reply_is_no_str() -> None:
    """What the planning step's shortcut rests on: a ModelReply itself is never a str."""
    assert not issubclass(ModelReply, str)
    assert not isinstance(ModelReply(text="x"), str)


def _same_call(made: Any, plain: Any) -> None:
    """``made`` is ``plain``'s equal in every slot, of its class, and as frozen."""
    assert type(made) is type(plain)
    assert made == plain
    for field in ("args", "args_hash", "_canonical", "tool"):
        assert getattr(made, field) == getattr(plain, field)
    assert made.tool is plain.tool
    assert (made.key, made.name, made.describe()) == (plain.key, plain.name, plain.describe())
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        made.args_hash = "changed"
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        del made.tool
    assert copy.copy(made) == plain  # (the tools here are local functions: no pickle)


_WORDS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(("weather", "forecast", "refund")), _WORDS, st.integers(0, 10**6))
def test_route_makes_the_plain_paths_call(tool_name: str, word: str, cents: int) -> None:
    """A call routed in place is the one ``tool.call`` makes of the same arguments."""
    if tool_name == "refund":
        value: dict[str, Any] = {"reason": word, "amount": cents / 100, "order": word}
    else:
        value = {"city": word}
    raw = json.dumps(value)
    made: Any = _REGISTRY.route(tool_name, raw)
    plain = _REGISTRY.get(tool_name).call(json.loads(raw, parse_float=Decimal))
    _same_call(made, plain)
    record = LoopGovernor().action(made, raw, "c")
    assert type(record) is ActionRecord
    assert record == _plain(plain, raw, "c")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(record, "outcome", "ok")  # noqa: B010  (as a frozen class refuses it)
    assert pickle.loads(pickle.dumps(record)) == record
