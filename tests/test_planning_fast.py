"""The Planning side's shortcuts, each pinned against the plain version it replaces.

- ``_batch._with_ids``: a reply of one call given its id in one pass, against the plain
  loop over the calls (``_each_with_id``): the same ids, the same requests, through ids
  the run used before, ids the model repeats, empty ids, subclasses and values that are
  not text.
- ``_fast._messages._request``: a request made by setting its slots, against
  ``_trusted`` (``model_construct``'s way) and ``ToolRequest(...)``.
- ``_planning._heard``: the model request made in its frame, against ``_trusted``; the
  reply taken without ``_call``, ``_answered``, ``_asked`` and ``_checked_reply`` (no
  breaker, no listener, no wall-clock budget), against them.
- ``_batch._with_ids`` reading a request's fields from its ``__dict__`` (a dict itself
  only), and ``_planning._reply`` checking and counting a reply's usage from its fields
  read once, against the plain loop and ``_usage_problem`` with ``usage.tokens``: for
  requests and usages made without validation or changed behind pydantic's back.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import Agent, Budget, ModelReply, Runtime, _planning, read_tool
from statemachine._actions import ActionRecord
from statemachine._batch import _each_with_id, _with_ids
from statemachine._fast._messages import _REQUEST_FIELDS, _REQUEST_ID_FIELDS, _request
from statemachine._fast._pydantic import _trusted
from statemachine._governor import LoopState
from statemachine._model import (
    Message,
    ModelRequest,
    ToolRequest,
    Transcript,
    Usage,
    _checked_reply,
)
from statemachine.testing import AutoDenyGate, ScriptedModel, tool_call


class _Request(ToolRequest, frozen=True):
    """A subclass: the plain loop validates it into a ``ToolRequest``."""


class _Text(str):
    pass


_IDS = st.sampled_from(["", "call-3", "call-3.2", "call-3.3", "call-4", "x", "y"])


def _loop(ids: list[str]) -> LoopState:
    """A loop memory whose actions had these call ids (in order)."""
    loop = LoopState()
    for call_id in ids:
        record = ActionRecord(
            call_id=call_id, tool="t", effect="read", exact="e", key="k", text="t()"
        )
        loop = loop.record(record)
    return loop


def _one(call_id: str, kind: str) -> Any:
    if kind == "subclass":
        return _Request(name="t", arguments="{}", id=call_id)
    request = ToolRequest(name="t", arguments="{}", id=call_id)
    if kind == "text subclass":  # set behind pydantic's back, as model_construct may
        object.__setattr__(request, "id", _Text(call_id))
    return request


def _plain(requests: tuple[ToolRequest, ...]) -> list[tuple[Any, ...]]:
    return [(type(r), type(r.id), r.name, r.arguments, r.id, r.model_fields_set) for r in requests]


@given(
    earlier=st.lists(_IDS, max_size=5),
    ids=st.lists(_IDS, min_size=1, max_size=3),
    kinds=st.lists(st.sampled_from(["plain", "subclass", "text subclass"]), min_size=3),
    step=st.sampled_from([3, 4]),
    as_list=st.booleans(),
)
def test_a_replys_ids_are_the_plain_loops(
    earlier: list[str], ids: list[str], kinds: list[str], step: int, as_list: bool
) -> None:
    """``_with_ids`` gives every call the id the plain loop gives it, the requests alike
    (class, text, fields set), for replies of one call or more, the run's earlier ids
    taken by the model or not."""
    loop = _loop(earlier)
    made = [_one(call_id, kind) for call_id, kind in zip(ids, kinds, strict=False)]
    requests: Any = made if as_list else tuple(made)
    fast = _with_ids(loop, step, requests)
    plain = _each_with_id(loop, step, requests)
    assert type(fast) is tuple
    assert fast == plain
    assert _plain(fast) == _plain(plain)
    # Every id is new to the run and to the reply.
    assert len({r.id for r in fast}) == len(fast)
    assert all(r.id and r.id not in earlier for r in fast)


def test_a_kept_request_is_the_models_own() -> None:
    """A call whose id the run has not used is kept as it came (as the plain loop keeps it)."""
    request = ToolRequest(name="t", arguments="{}", id="mine")
    (kept,) = _with_ids(_loop(["other"]), 1, (request,))
    assert kept is request


@given(st.text(), st.text(), st.text())
def test_a_request_is_the_trusted_one(name: str, arguments: str, call_id: str) -> None:
    """``_request`` makes what ``_trusted`` made, and what ``ToolRequest(...)`` validates."""
    fast = _request(name, arguments, call_id)
    values = {"name": name, "arguments": arguments, "id": call_id}
    plain = _trusted(ToolRequest, values, _REQUEST_ID_FIELDS)
    valid = ToolRequest(name=name, arguments=arguments, id=call_id)
    for made in (plain, valid):
        assert type(fast) is type(made)
        assert fast == made
        assert fast.__dict__ == made.__dict__
        assert list(fast.__dict__) == list(made.__dict__)
        assert fast.model_fields_set == made.model_fields_set
        assert fast.__pydantic_extra__ == made.__pydantic_extra__
        assert fast.__pydantic_private__ == made.__pydantic_private__
        assert fast.model_dump_json() == made.model_dump_json()


# --- the model call: the request made in _heard, the reply taken without _answered -------


class _Args(BaseModel):
    key: str


@read_tool
async def _lookup(args: _Args) -> dict[str, str]:
    """Look a key up."""
    return {"key": args.key}


class _Said(ModelReply, frozen=True):
    """A reply of a subclass: checked by ``_checked_reply`` (it is a reply)."""


_TURNS = [
    tool_call("_lookup", '{"key": "a"}', tokens=3, cost="0.5"),
    _Said(tool_calls=(ToolRequest(name="_lookup", arguments='{"key": "b"}'),)),
    ModelReply(text="done"),
]


@pytest.mark.anyio
@pytest.mark.parametrize("turn", _TURNS, ids=["reply", "subclass", "answer"])
@pytest.mark.parametrize("wall_clock", [None, 60.0])
async def test_a_model_call_is_asked_and_heard_as_before(
    turn: ModelReply, wall_clock: float | None
) -> None:
    """The request the model gets is the one ``_trusted`` makes (fields, fields set, no
    extra or private values), and the reply, usage and loop memory ``_heard`` gives are
    what the wrapped call (``_answered(_asked(...))`` and ``_checked_reply``) gives, with
    and without a wall-clock budget."""
    agent = Agent[None](name="t", tools=[_lookup], budget=Budget(wall_clock=wall_clock))
    model = ScriptedModel([turn, turn])
    rt = Runtime(run_id="r", model=model, gate=AutoDenyGate(), clock=lambda: 0.0)
    planning = agent.start(None, "go").receive("go")
    planning._leave("advance")
    reply, spent, loop = await _planning._heard(planning, rt, tools=agent.tools.schemas())
    (request,) = model.requests
    values = {name: getattr(request, name) for name in _REQUEST_FIELDS}
    made = _trusted(ModelRequest, values, set(_REQUEST_FIELDS))
    assert type(request) is ModelRequest
    assert request.__dict__ == made.__dict__
    assert list(request.__dict__) == list(_REQUEST_FIELDS)
    assert request.model_fields_set == made.model_fields_set
    assert request.__pydantic_extra__ is None
    assert request.__pydantic_private__ is None
    assert request.timeout == wall_clock
    assert loop == planning.loop
    said = _checked_reply(
        model, await _planning._answered(_planning._asked(model, request, rt, 1), None)
    )
    assert reply is said is turn
    usage = said.usage
    assert spent == planning.spent.add(tokens=usage.tokens, cost=usage.cost, model_calls=1)


@pytest.mark.anyio
async def test_a_reply_that_is_no_reply_is_refused_as_before() -> None:
    """What is not a ``ModelReply`` is still the model's error, named (``_checked_reply``)."""
    agent = Agent[None](name="t", tools=[_lookup], budget=Budget())
    model = ScriptedModel(["not a reply"])  # type: ignore[list-item]
    rt = Runtime(run_id="r", model=model, gate=AutoDenyGate(), clock=lambda: 0.0)
    planning = agent.start(None, "go").receive("go")
    planning._leave("advance")
    reply, spent, _ = await _planning._heard(planning, rt, tools=())
    assert isinstance(reply, str)
    assert reply.startswith("the model's reply could not be used:")
    assert "a str" in reply
    assert spent == planning.spent


@given(st.integers(0, 70), st.integers(1, 40))
def test_an_appended_transcript_is_the_one_of_makes(size: int, more: int) -> None:
    """``Transcript.appended`` (the new transcript made in its frame) holds the messages
    and the storage ``Transcript._of`` and ``Transcript(...)`` give, sharing the chunks."""
    messages = [Message(role="user", content=str(n)) for n in range(size + more)]
    start = Transcript(messages[:size])
    new = tuple(messages[size:])
    fast = start.appended(*new)
    whole = Transcript(messages)
    assert type(fast) is Transcript
    assert tuple(fast) == tuple(whole) == tuple(messages)
    assert (fast._head, len(fast._chunks), fast._tail) == (
        whole._head,
        len(whole._chunks),
        whole._tail,
    )
    assert fast._chunks[: len(start._chunks)] == start._chunks
    if len(start._tail) + more <= 32:
        plain = Transcript._of(start._head, start._chunks, start._tail + new)
        assert (fast._head, fast._tail) == (plain._head, plain._tail)
        assert fast._chunks is start._chunks is plain._chunks


# --- a request's fields read from its __dict__; a reply's usage checked in _reply ----------


class _Lying(dict[str, Any]):
    """A ``__dict__`` set behind pydantic's back whose ``get`` says other values."""

    def get(self, key: str, default: Any = None) -> Any:
        return f"lie-{key}"


def _outcome(call: Any, *args: Any) -> Any:
    try:
        made = call(*args)
    except Exception as error:  # the error itself is compared
        return ("raised", type(error), str(error))
    return _plain(made)


@pytest.mark.parametrize("how", ["missing id", "missing name", "lying dict", "int id"])
def test_a_request_changed_behind_pydantics_back_is_read_as_the_plain_loop_reads_it(
    how: str,
) -> None:
    """A request made without validation, or whose ``__dict__`` was replaced, gives what
    the plain loop gives (its values, or the same error): the fields are read from the
    ``__dict__`` only when it is a dict itself."""
    if how == "missing id":
        request = ToolRequest.model_construct(name="t", arguments="{}")
        del request.__dict__["id"]
    elif how == "missing name":
        request = ToolRequest.model_construct(arguments="{}", id="x")  # type: ignore[call-arg]
    elif how == "lying dict":
        request = ToolRequest(name="t", arguments="{}", id="")
        object.__setattr__(request, "__dict__", _Lying(request.__dict__))
    else:
        request = ToolRequest.model_construct(name="t", arguments="{}", id=7)  # type: ignore[arg-type]
    loop = _loop(["call-3"])
    assert _outcome(_with_ids, loop, 3, (request,)) == _outcome(_each_with_id, loop, 3, (request,))


def _usage_plain(spent: Any, usage: Any) -> Any:
    """What ``_reply`` gave for a reply's usage before its own check: the reason, or the
    spend with the call in it."""
    problem = _planning._usage_problem(usage)
    if problem is not None:
        return f"the model's reply could not be used: {problem}"
    return spent.add(tokens=usage.tokens, cost=usage.cost, model_calls=1)


class _Int(int):
    pass


_COUNTS = st.one_of(
    st.integers(-3, 10**12), st.sampled_from([True, 2.0, _Int(4), None, "3", Decimal(2)])
)
_COSTS = st.one_of(
    st.decimals(allow_nan=True, allow_infinity=True, places=4),
    st.sampled_from([Decimal("-0"), Decimal("sNaN"), 0, 1.5, None, "1"]),
)


@pytest.mark.anyio
@given(
    inputs=_COUNTS,
    outputs=_COUNTS,
    cost=_COSTS,
    how=st.sampled_from(["construct", "validated", "lying dict", "missing", "subclass"]),
)
async def test_a_replys_usage_is_counted_or_refused_as_before(
    inputs: Any, outputs: Any, cost: Any, how: str
) -> None:
    """``_reply`` counts a reply's usage (its tokens and cost read from the fields once)
    or refuses it with the reason ``_usage_problem`` gives, as before: for usages made
    without validation, a ``__dict__`` set behind pydantic's back, a missing field and a
    subclass."""
    if how == "validated":
        try:
            usage: Any = Usage(input_tokens=inputs, output_tokens=outputs, cost=cost)
        except (ValueError, TypeError, ArithmeticError):
            usage = Usage()
    elif how == "subclass":
        usage = _Usage.model_construct(input_tokens=inputs, output_tokens=outputs, cost=cost)
    else:
        usage = Usage.model_construct(input_tokens=inputs, output_tokens=outputs, cost=cost)
    if how == "lying dict":
        object.__setattr__(usage, "__dict__", _Lying(usage.__dict__))
    elif how == "missing":
        del usage.__dict__["output_tokens"]
    reply = ModelReply.model_construct(**{**ModelReply(text="hi").__dict__, "usage": usage})
    agent = Agent[None](name="t", tools=[_lookup], budget=Budget())
    model = ScriptedModel([reply])
    rt = Runtime(run_id="r", model=model, gate=AutoDenyGate(), clock=lambda: 0.0)
    planning = agent.start(None, "go").receive("go")
    request = ModelRequest(messages=planning.messages())
    try:
        expected: Any = _usage_plain(planning.spent, usage)
    except Exception as error:  # the error itself is compared
        expected = ("raised", type(error), str(error))
    try:
        said, spent, _ = await _planning._reply(planning, rt, model, request, None)
        got: Any = said if isinstance(said, str) else spent
    except Exception as error:  # the error itself is compared
        got = ("raised", type(error), str(error))
    assert got == expected
    if not isinstance(got, tuple | str):
        assert type(got.cost) is type(expected.cost)
        assert str(got.cost) == str(expected.cost)


class _Usage(Usage, frozen=True):
    """A usage of a subclass: refused by ``_usage_problem`` (not the class itself)."""
