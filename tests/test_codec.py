"""persist._codec: every phase round-trips through a JSON document, exactly, or is refused."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support import CityArgs, FlightArgs, RecordingSleep, exactly

from agents.research import _scenarios as research
from agents.travel import _scenarios as travel
from statemachine import (
    Agent,
    AwaitApproval,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointTamperedError,
    CustomerResponse,
    Done,
    Failed,
    Idle,
    LoopState,
    Message,
    Observing,
    OutputGuard,
    Parsed,
    Phase,
    Phases,
    Planning,
    Responding,
    Retrying,
    SetupError,
    Spend,
    ToolCalling,
    ToolRequest,
    Transcript,
    dump_phase,
    dumps,
    load_phase,
    loads,
    read_tool,
    write_tool,
)
from statemachine._approval import _approve
from statemachine.persist import _chunks, _codec
from statemachine.testing import hand_approval, hand_built

NOON = datetime(2026, 1, 1, 12, tzinfo=UTC)
KINDS = {
    "Idle",
    "Planning",
    "AwaitApproval",
    "ToolCalling",
    "Observing",
    "Retrying",
    "Responding",
    "Failed",
    "Done",
}


# --- helpers ---------------------------------------------------------------------------


def round_trip(phase: Phase[Any], **agents: Agent[Any]) -> Phase[Any]:
    """The phase written as JSON text with statemachine's dumps and read back."""
    given = agents or {phase.agent.name: phase.agent}
    return load_phase(loads(dumps(dump_phase(phase))), agents=given)


def decimals(value: Any, path: str = "$") -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Every Decimal reachable from ``value`` (tools and agents aside), by path, as digits."""
    if isinstance(value, Decimal):
        yield path, value.as_tuple()
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from decimals(getattr(value, name), f"{path}.{name}")
    elif attrs.has(type(value)):
        for field in attrs.fields(type(value)):
            if field.name not in ("agent", "tool", "_left_by"):
                yield from decimals(getattr(value, field.name), f"{path}.{field.name}")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from decimals(item, f"{path}[{key!r}]")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from decimals(item, f"{path}[{index}]")


def assert_restored(phase: Phase[Any], **agents: Agent[Any]) -> Phase[Any]:
    """The round trip gives an equal, unused phase whose Decimals keep their digits."""
    restored = round_trip(phase, **agents)
    assert restored == phase
    assert type(restored) is type(phase)
    assert restored is not phase
    assert not restored.left
    assert restored.agent is phase.agent
    assert list(decimals(restored)) == list(decimals(phase))
    assert dumps(dump_phase(restored)) == dumps(dump_phase(phase))
    return restored


async def scenario_states() -> list[Phase[Any]]:
    sleep = RecordingSleep()
    states: list[Phase[Any]] = []
    for outcome in [
        await travel.prompt_flip(approve=True, sleep=sleep),
        await travel.prompt_flip(approve=False, sleep=sleep),
        await travel.flaky_weather(sleep=sleep),
        await travel.weather_down(sleep=sleep),
        await travel.budget_stops_before_spending(sleep=sleep),
    ]:
        states.extend(outcome.result.states)
    for lookups_fail in (False, True):
        handoff = (await travel.handoff(lookups_fail=lookups_fail, sleep=sleep)).handoff
        states.extend(handoff.researcher.states)
        booker = getattr(handoff, "booker", None)
        if booker is not None:
            states.extend(booker.states)
    for run in (
        research.rubric_coverage,
        research.repeated_queries,
        research.plateau,
        research.tight_search_budget,
        research.cyclic_plan,
    ):
        states.extend((await run()).result.states)
    return states


@pytest.fixture(scope="module")
def shipped_states() -> list[Phase[Any]]:
    return anyio.run(scenario_states)


# --- tools and agents for constructed phases -------------------------------------------


@read_tool
async def weather(args: CityArgs) -> dict[str, object]:
    """The weather."""
    return {"city": args.city}


@write_tool
async def book(args: FlightArgs) -> dict[str, object]:
    """Book a flight."""
    return {"flight": args.flight, "charged": args.price}


class Trip(BaseModel):
    """A pydantic context."""

    traveller: str
    limit: Decimal


class Receipt(BaseModel):
    """A pydantic tool output."""

    reference: str
    charged: Decimal


AGENT: Agent[Any] = Agent(name="desk", tools=[weather, book])
TRIP = Trip(traveller="Ada", limit=Decimal("1000.00"))
FLIGHT = {"flight": "TP1351", "price": Decimal("800.00")}


def approved_call() -> Any:
    call = book.call(FLIGHT)
    waiting = hand_built(AwaitApproval, agent=AGENT, ctx=TRIP, call=call, call_id="call-1")
    return _approve(call, hand_approval(waiting, by="ada@example.com", at=NOON))


def constructed() -> list[Phase[Any]]:
    """Phases built directly, for what the scenarios do not reach."""
    spent = Spend(tokens=12, cost=Decimal("0.0300"), tool_calls=1, model_calls=2)
    base: dict[str, Any] = {"agent": AGENT, "ctx": TRIP, "spent": spent, "step": 4}
    parsed = OutputGuard(CustomerResponse).check_text('{"text": "Booked."}')
    assert isinstance(parsed, Parsed)
    loop = LoopState().record(AGENT.governor.action(book.call(FLIGHT), dumps(FLIGHT), "call-1"))
    return [
        hand_built(Idle, agent=AGENT, ctx=None, input="Book me a flight"),
        hand_built(Planning, **base, invalid_streak=2, loop=loop),
        hand_built(AwaitApproval, **base, call=book.call(FLIGHT), call_id="call-1"),
        hand_built(ToolCalling, **base, call=approved_call(), call_id="call-1", attempt=2),
        hand_built(ToolCalling, **base, call=weather.call({"city": "Lisbon"}), call_id="call-2"),
        hand_built(
            Observing,
            **base,
            call=approved_call(),
            call_id="call-1",
            output=Receipt(reference="TRV-1", charged=Decimal("800.00")),
        ),
        hand_built(
            Observing,
            **base,
            call=weather.call({"city": "Lisbon"}),
            call_id="call-2",
            output={"$decimal": "not mine", "amounts": [Decimal("8E+2"), Decimal("-0"), 0.1]},
        ),
        hand_built(
            Retrying, **base, call=approved_call(), call_id="call-1", attempt=1, error="503"
        ),
        hand_built(Responding, **base, text="Booked.", verified=parsed),
        hand_built(Done, **base, answer="Booked.", verified=parsed, answer_sha256=parsed.sha256),
        hand_built(Failed, **base, reason="budget", from_phase="ToolCalling", partial="half"),
    ]


# --- round trips -----------------------------------------------------------------------


def test_every_shipped_phase_kind_round_trips_equal(shipped_states: list[Phase[Any]]) -> None:
    """Every state of the travel, handoff and research runs comes back equal and unused."""
    assert {state.kind for state in shipped_states} == KINDS
    for state in shipped_states:
        assert_restored(state)


def test_constructed_phases_round_trip_equal() -> None:
    """Approved calls, pydantic outputs and contexts, verified answers come back equal."""
    for phase in constructed():
        assert_restored(phase)


def test_money_keeps_its_digits(shipped_states: list[Phase[Any]]) -> None:
    """Decimal("800") and Decimal("800.00") stay Decimals with their own exponents."""
    found = [
        (path, digits)
        for state in shipped_states
        if isinstance(state, Observing)
        for path, digits in decimals(round_trip(state))
    ]
    assert ("$.output['charged']", Decimal("800").as_tuple()) in found
    observed = constructed()[5]
    restored = round_trip(observed)
    assert isinstance(restored, Observing)
    assert str(restored.output.charged) == "800.00"
    assert str(restored.call.args.price) == "800.00"  # type: ignore[attr-defined]
    assert str(restored.spent.cost) == "0.0300"


def test_awkward_json_values_in_an_output_come_back_as_they_were() -> None:
    """8E+2, -0 and 0.1 keep their type and spelling; a user's "$decimal" key stays a key."""
    restored = round_trip(constructed()[6])
    assert isinstance(restored, Observing)
    amounts = restored.output["amounts"]
    assert [type(a) for a in amounts] == [Decimal, Decimal, float]
    assert [str(a) for a in amounts] == ["8E+2", "-0", "0.1"]
    assert restored.output["$decimal"] == "not mine"


def test_the_document_is_json_values_with_the_documented_header() -> None:
    """Version, kind, class path, agent name and the agent's phases head the document;
    calls carry their hash."""
    phase = constructed()[3]
    document = loads(dumps(dump_phase(phase)))
    assert list(document) == ["version", "kind", "class", "agent", "phases", "fields"]
    assert {k: document[k] for k in ("version", "kind", "class", "agent")} == {
        "version": 3,
        "kind": "ToolCalling",
        "class": "statemachine._phases:ToolCalling",
        "agent": "desk",
    }
    # Every kind the agent's phases may be in: its class and the fields its document holds.
    phases = document["phases"]
    assert list(phases) == [
        *("Idle", "Planning", "AwaitApproval", "ToolCalling", "Observing", "Retrying"),
        *("ModelRetrying", "Responding", "Failed", "Done"),
    ]
    assert phases["ToolCalling"] == ["statemachine._phases:ToolCalling", list(document["fields"])]
    for kind, (path, names) in phases.items():
        cls = _codec._import(path)
        assert cls.kind == kind
        assert names == [
            f.name for f in attrs.fields(cls) if f.init and f.alias not in ("agent", "ticket")
        ]
    call = document["fields"]["call"]
    assert call["type"] == "approved"
    assert call["tool"] == "book"
    assert call["args"] == {"flight": "TP1351", "price": Decimal("800.00")}
    assert call["approval"]["approved_by"] == "ada@example.com"
    assert document["fields"]["ctx"] == {
        "type": "pydantic",
        "class": "test_codec:Trip",
        "data": {"traveller": "Ada", "limit": Decimal("1000.00")},
    }


@pytest.mark.anyio
async def test_a_restored_phase_goes_on_running() -> None:
    """The single-use cell of the restored phase is fresh: it can take its transition."""
    idle = hand_built(Idle, agent=AGENT, ctx=TRIP, input="hello")
    idle.receive("hello")
    restored = round_trip(idle)
    assert isinstance(restored, Idle)
    planning = restored.receive("hello")
    assert planning.transcript == (Message(role="user", content="hello"),)


# Money's range: at most 28 decimal places, less than 1E+36 in size, spelled any way.
money_amounts = st.builds(
    lambda coefficient, exponent: Decimal(f"{coefficient}E{exponent}"),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=-28, max_value=5),
)


@settings(max_examples=150, deadline=None)
@given(price=money_amounts, cost=money_amounts)
def test_any_decimal_in_money_args_and_spend_round_trips_exactly(
    price: Decimal, cost: Decimal
) -> None:
    """Amounts in money's range keep sign, digits and exponent in the call and the spend."""
    call = book.call({"flight": "X1", "price": price})
    phase = hand_built(
        AwaitApproval, agent=AGENT, ctx=None, call=call, call_id="call-1", spent=Spend(cost=cost)
    )
    restored = round_trip(phase)
    assert isinstance(restored, AwaitApproval)
    assert restored.call.args.price.as_tuple() == price.as_tuple()  # type: ignore[attr-defined]
    assert restored.spent.cost.as_tuple() == cost.as_tuple()
    assert restored == phase


# --- refusals when loading ---------------------------------------------------------------


def document_of(phase: Phase[Any]) -> dict[str, Any]:
    return loads(dumps(dump_phase(phase)))  # type: ignore[no-any-return]


def test_an_unknown_agent_is_refused() -> None:
    """A document names its agent; resuming without that agent says which to pass."""
    document = document_of(constructed()[0])
    with pytest.raises(
        CheckpointMismatchError,
        match=exactly(
            "checkpoint of run 'r-1': the checkpoint is of agent 'desk', which was not given "
            "(agents given: 'other'); pass that agent in agents= to resume it"
        ),
    ) as raised:
        load_phase(document, agents={"other": AGENT}, run_id="r-1")
    assert raised.value.run_id == "r-1"


def test_a_phase_class_the_agent_does_not_use_is_refused() -> None:
    """A document written by a Planning subclass does not load into plain Planning."""

    class Elsewhere(Planning[Any]):
        pass

    other = Agent(name="desk", tools=[weather, book], phases=Phases(planning=Elsewhere))
    document = document_of(constructed()[1])
    with pytest.raises(
        CheckpointMismatchError,
        match=exactly(
            "checkpoint: the checkpoint's Planning phase is statemachine._phases:Planning, but "
            "agent 'desk' runs Planning as test_codec:test_a_phase_class_the_agent_does_not_"
            "use_is_refused.<locals>.Elsewhere; resume it with an agent whose Phases names "
            "statemachine._phases:Planning"
        ),
    ):
        load_phase(document, agents={"desk": other})


def test_an_unknown_kind_is_refused() -> None:
    """A kind that is not one of the nine phases is refused."""
    document = document_of(constructed()[0]) | {"kind": "Sleeping"}
    with pytest.raises(CheckpointMismatchError, match="phase 'Sleeping', which is not a phase"):
        load_phase(document, agents={"desk": AGENT})


def test_an_older_schema_version_is_refused_as_older() -> None:
    """Version 0 is from an older schema, and the error says so and what to do."""
    document = document_of(constructed()[0]) | {"version": 0}
    with pytest.raises(
        CheckpointMismatchError,
        match=exactly(
            "checkpoint: the phase document is from an older schema (version 0) and this "
            "library reads versions 1 to 3; resume it with the statemachine release that wrote it, "
            "or migrate it"
        ),
    ):
        load_phase(document, agents={"desk": AGENT})


def test_a_newer_schema_version_is_refused_as_newer() -> None:
    """Version 4 asks for an upgrade."""
    document = document_of(constructed()[0]) | {"version": 4}
    with pytest.raises(CheckpointMismatchError, match=r"newer schema .* upgrade statemachine"):
        load_phase(document, agents={"desk": AGENT})


def test_a_tool_the_agent_no_longer_has_is_refused() -> None:
    """The call names a tool; an agent without it cannot resume the run."""
    document = document_of(constructed()[2])
    with pytest.raises(
        CheckpointMismatchError,
        match=exactly(
            "checkpoint: the checkpoint holds a call of tool 'book', which agent 'desk' no "
            "longer has (its tools: weather); resume it with an agent that has the tool, or "
            "abort the run"
        ),
    ):
        load_phase(document, agents={"desk": Agent(name="desk", tools=[weather])})


def test_arguments_that_do_not_match_their_hash_are_refused() -> None:
    """Changing the price in a stored call is tampering: the recorded hash no longer fits."""
    document = document_of(constructed()[3])
    recorded = document["fields"]["call"]["args_hash"]
    document["fields"]["call"]["args"]["price"] = Decimal("1.00")
    now = book.call({"flight": "TP1351", "price": Decimal("1.00")}).args_hash
    with pytest.raises(
        CheckpointTamperedError,
        match=exactly(
            f"checkpoint: the arguments of the 'book' call do not match their recorded hash "
            f"(recorded {recorded}, now {now}): the checkpoint was altered, or the tool's "
            "arguments model reads them differently now. Do not resume it; restore it from a "
            "trusted copy"
        ),
    ):
        load_phase(document, agents={"desk": AGENT})


def test_an_approval_moved_to_another_call_is_refused() -> None:
    """A rehashed call with the old approval: the approval names another call."""
    document = document_of(constructed()[3])
    other = book.call({"flight": "TP1351", "price": Decimal("1.00")})
    document["fields"]["call"]["args"]["price"] = Decimal("1.00")
    document["fields"]["call"]["args_hash"] = other.args_hash
    with pytest.raises(CheckpointTamperedError, match="the approval in the checkpoint is for"):
        load_phase(document, agents={"desk": AGENT})


def test_a_verified_answer_whose_bytes_changed_is_refused() -> None:
    """The answer's bytes must match their SHA-256."""
    document = document_of(constructed()[9])
    recorded = document["fields"]["verified"]["sha256"]
    document["fields"]["verified"]["data"] = '{"text":"Refunded."}'
    actual = hashlib.sha256(b'{"text":"Refunded."}').hexdigest()
    with pytest.raises(
        CheckpointTamperedError,
        match=exactly(
            f"checkpoint: the verified answer's bytes do not match their SHA-256 (recorded "
            f"{recorded}, now {actual}): the checkpoint was altered. Do not resume it; "
            "restore it from a trusted copy"
        ),
    ):
        load_phase(document, agents={"desk": AGENT})


def test_a_read_call_of_a_tool_now_declared_write_is_refused() -> None:
    """A call cannot change its effect between writing and resuming."""
    document = document_of(constructed()[4])

    @write_tool(name="weather")
    async def weather_write(args: CityArgs) -> None:
        """Now a write."""

    agent: Agent[Any] = Agent(name="desk", tools=[weather_write])
    with pytest.raises(CheckpointMismatchError, match="now declares 'weather' a write tool"):
        load_phase(document, agents={"desk": agent})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("version"), "the document has no version number"),
        (lambda d: d.update(fields=[]), "the document has no fields object"),
        (lambda d: d["fields"].pop("call_id"), "the ToolCalling phase lacks its field 'call_id'"),
        (lambda d: d["fields"].update(step="4"), "field 'step' cannot be read"),
        (lambda d: d["fields"]["spent"].update(cost="lots"), "field 'spent' cannot be read"),
    ],
)
def test_a_malformed_document_is_corrupt(change: Any, message: str) -> None:
    """Missing or mistyped parts are reported as a damaged checkpoint, never a crash."""
    document = copy.deepcopy(document_of(constructed()[4]))
    change(document)
    with pytest.raises(CheckpointCorruptError, match=message) as raised:
        load_phase(document, agents={"desk": AGENT})
    assert str(raised.value).endswith("restore it from a trusted copy")
    assert isinstance(raised.value, CheckpointError)
    assert isinstance(raised.value, ValueError)


def test_a_field_the_class_does_not_have_is_refused() -> None:
    """A document from another version of the phase class does not load silently."""
    document = document_of(constructed()[0])
    document["fields"]["mood"] = "happy"
    with pytest.raises(CheckpointMismatchError, match=r"field\(s\) mood that Idle does not"):
        load_phase(document, agents={"desk": AGENT})


# --- refusals when dumping ---------------------------------------------------------------


def test_a_context_of_another_type_is_refused_when_dumped() -> None:
    """Only pydantic, attrs and None contexts can be checkpointed; the error says so."""
    phase = hand_built(Idle, agent=AGENT, ctx={"traveller": "Ada"}, input="hi")
    with pytest.raises(
        SetupError,
        match=exactly(
            "a checkpoint cannot hold a context of type dict; contexts that can be "
            "checkpointed are pydantic models, attrs classes and None"
        ),
    ):
        dump_phase(phase)


def test_a_context_class_defined_in_a_function_is_refused_when_dumped() -> None:
    """A class that cannot be imported back is refused at write time, not at resume."""

    class Local(BaseModel):
        name: str

    with pytest.raises(SetupError, match=r"Define the class at module level$"):
        dump_phase(hand_built(Idle, agent=AGENT, ctx=Local(name="x"), input="hi"))


def test_an_output_that_would_not_come_back_equal_is_refused_when_dumped() -> None:
    """A set is not JSON: the output would come back as a list, so it is refused."""
    phase = hand_built(
        Observing,
        agent=AGENT,
        ctx=None,
        call=weather.call({"city": "x"}),
        call_id="c",
        output={1, 2},
    )
    with pytest.raises(SetupError, match="a tool output of type set cannot be checkpointed"):
        dump_phase(phase)


# --- the transcript's short way on load -------------------------------------------------

_TEXT = st.text(max_size=8)
_ANY_VALUE = st.one_of(
    _TEXT,
    st.none(),
    st.integers(),
    st.lists(_TEXT, max_size=2),
    st.dictionaries(st.sampled_from(["$decimal", "$float", "$object", "k"]), _TEXT, max_size=1),
)
_REQUEST_ITEM = st.one_of(
    st.fixed_dictionaries({"name": _TEXT, "arguments": _TEXT, "id": _TEXT}),
    st.dictionaries(st.sampled_from(["name", "arguments", "id", "extra"]), _ANY_VALUE),
    _ANY_VALUE,
)
_MESSAGE_ITEM = st.one_of(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["system", "user", "assistant", "tool", "other"]),
            "content": _TEXT,
            "tool_calls": st.lists(_REQUEST_ITEM, max_size=2),
            "tool_call_id": _TEXT,
            "name": _TEXT,
        }
    ),
    st.dictionaries(
        st.sampled_from(["role", "content", "tool_calls", "tool_call_id", "name", "extra"]),
        _ANY_VALUE,
    ),
    _ANY_VALUE,
)


def _outcome(load: Any, item: Any) -> tuple[str, Any]:
    try:
        message = load(item)
    except (KeyError, TypeError, ValueError, ArithmeticError, AttributeError) as error:
        return ("error", type(error).__name__)
    calls = [(type(call), call.model_dump(), call.model_fields_set) for call in message.tool_calls]
    return ("message", (type(message), message.model_dump(), calls))


@settings(max_examples=300, deadline=None)
@given(_MESSAGE_ITEM)
def test_a_transcript_message_loads_as_the_long_way_loads_it(item: Any) -> None:
    # The short way for dump_phase's own form makes the same message (and the same tool
    # calls, with the same fields set) as Message.model_validate(_decode(item)); any other
    # form goes the long way and is refused as it refuses it.
    short = _outcome(_chunks._load_message, item)
    long = _outcome(lambda value: Message.model_validate(_chunks._decode(value)), item)
    assert short == long


def test_the_short_way_takes_what_dump_phase_writes() -> None:
    message = Message(
        role="assistant", tool_calls=(ToolRequest(name="lookup", arguments="{}", id="c1"),)
    )
    phase = hand_built(Planning, agent=AGENT, ctx=TRIP, transcript=Transcript((message,)))
    (item,) = dump_phase(phase)["fields"]["transcript"]
    loaded = _chunks._load_message(loads(dumps(item)))
    assert loaded == message
    assert loaded.tool_calls[0].model_fields_set == {"name", "arguments", "id"}


_GAIN = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda gain: {"$float": repr(gain)}),
    st.just({"$float": "x"}),
    st.integers(-2, 2),
    st.just({"$decimal": "1"}),
)
_RECORD_ITEM = st.one_of(
    st.fixed_dictionaries(
        {
            "call_id": _TEXT,
            "tool": _TEXT,
            "effect": st.sampled_from(["read", "write", "other"]),
            "exact": _TEXT,
            "key": _TEXT,
            "text": _TEXT,
            "outcome": st.sampled_from(["pending", "ok", "failed", "refused", "suppressed", "x"]),
            "result": st.one_of(_TEXT, st.none()),
            "gain": _GAIN,
        }
    ),
    st.dictionaries(st.sampled_from(["call_id", "tool", "effect", "gain", "extra"]), _ANY_VALUE),
    _ANY_VALUE,
)
_LOOP_ITEM = st.one_of(
    st.fixed_dictionaries(
        {"actions": st.lists(_RECORD_ITEM, max_size=3)},
        optional={"tool_iterations": st.integers(0, 3), "flags": st.lists(_TEXT, max_size=2)},
    ),
    st.dictionaries(st.sampled_from(["actions", "tool_iterations", "extra"]), _ANY_VALUE),
    _ANY_VALUE,
)


def _loop_outcome(load: Any, value: Any) -> tuple[str, Any]:
    try:
        loop = load(value)
    except (KeyError, TypeError, ValueError, ArithmeticError, AttributeError) as error:
        return ("error", type(error).__name__)
    records = [(type(record), record.model_dump()) for record in loop.actions]
    return ("loop", (type(loop.actions), loop.model_dump(), records))


@settings(max_examples=300, deadline=None)
@given(_LOOP_ITEM)
def test_loop_memory_loads_as_the_long_way_loads_it(value: Any) -> None:
    # The actions in dump_phase's form are made the short way, to the same records and
    # state; anything else is validated whole the long way and refused as it refuses it.
    short = _loop_outcome(lambda item: _chunks._load_loop(item, False), value)
    long = _loop_outcome(lambda item: LoopState.model_validate(_chunks._decode(item)), value)
    assert short == long


def test_a_dumped_loop_memory_loads_the_short_way() -> None:
    loop = LoopState().record(AGENT.governor.action(book.call(FLIGHT), dumps(FLIGHT), "call-1"))
    loop = loop.settle("call-1", "ok", "booked")
    phase = hand_built(Planning, agent=AGENT, ctx=TRIP, loop=loop)
    value = loads(dumps(dump_phase(phase)["fields"]["loop"]))
    assert _chunks._load_record(value["actions"][0]) is not None
    assert _chunks._load_loop(value, True) == loop


# --- version 2: full chunks held as their JSON text --------------------------------------


def _said(n: int) -> Message:
    return Message(role="user", content=f"message {n}")


def _looked(loop: LoopState, n: int, outcome: str = "ok") -> LoopState:
    action = AGENT.governor.action(book.call(FLIGHT), f'{{"n": {n}}}', f"call-{n}")
    return loop.record(action).settle(f"call-{n}", outcome, f"result {n}")


@settings(max_examples=40, deadline=None)
@given(messages=st.integers(0, 140), actions=st.integers(0, 70))
def test_a_version_2_document_loads_the_phase_it_was_dumped_from(
    messages: int, actions: int
) -> None:
    """Each full chunk of the transcript and of the loop's actions is one string, the
    JSON text of its items as version 1 wrote them, each as the list of its values;
    loaded, it is read when first needed, and the phase is the one dumped (and dumps
    again to the same document)."""
    transcript = Transcript().appended(*(_said(n) for n in range(messages)))
    loop = LoopState()
    for n in range(actions):
        loop = _looked(loop, n)
    phase = hand_built(Planning, agent=AGENT, ctx=TRIP, transcript=transcript, loop=loop)
    document = loads(dumps(dump_phase(phase)))
    assert document["version"] == _codec.DOCUMENT_VERSION
    written, records = document["fields"]["transcript"], document["fields"]["loop"]["actions"]
    for items, plain in ((written, list(transcript)), (records, list(loop.actions))):
        full = (len(plain) - 1) // 32 if plain else 0
        assert [type(item) for item in items] == [str] * full + [dict] * (len(plain) - full * 32)
        for at in range(full):
            assert (
                loads(items[at])
                == [  # each item as the list of its fields' values
                    list(loads(dumps(_codec._encode(one))).values())
                    for one in plain[at * 32 : at * 32 + 32]
                ]
            )
    loaded = load_phase(document, agents={"desk": AGENT})
    assert isinstance(loaded, Planning)
    assert all(type(chunk) is str for chunk in loaded.transcript._chunks)  # not read yet
    assert loaded == phase
    assert tuple(loaded.transcript) == tuple(transcript)
    assert tuple(loaded.loop.actions) == tuple(loop.actions)
    assert dumps(dump_phase(loaded)) == dumps(document)


def test_a_damaged_chunk_is_refused_when_first_read() -> None:
    transcript = Transcript().appended(*(_said(n) for n in range(40)))
    phase = hand_built(Planning, agent=AGENT, ctx=TRIP, transcript=transcript)
    document = loads(dumps(dump_phase(phase)))
    document["fields"]["transcript"][0] = dumps([{"role": "nobody"}] * 32)
    loaded = load_phase(document, agents={"desk": AGENT})
    assert loaded.transcript[-1] == _said(39)  # the tail is read as it is
    with pytest.raises(CheckpointCorruptError, match="a chunk of the transcript kept as text"):
        loaded.transcript[0]
    document["fields"]["transcript"][0] = "[1, 2"
    with pytest.raises(CheckpointCorruptError, match="is not JSON"):
        tuple(load_phase(document, agents={"desk": AGENT}).transcript)


def test_text_after_an_object_in_a_version_2_list_is_refused() -> None:
    transcript = Transcript().appended(*(_said(n) for n in range(40)))
    phase = hand_built(Planning, agent=AGENT, ctx=TRIP, transcript=transcript)
    document = loads(dumps(dump_phase(phase)))
    document["fields"]["transcript"].append("[]")
    with pytest.raises(CheckpointCorruptError, match="transcript"):
        load_phase(document, agents={"desk": AGENT})


def test_a_version_1_document_loads_and_dumps_as_version_2() -> None:
    transcript = Transcript().appended(*(_said(n) for n in range(70)))
    loop = LoopState()
    for n in range(40):
        loop = _looked(loop, n)
    phase = hand_built(Planning, agent=AGENT, ctx=TRIP, transcript=transcript, loop=loop)
    old = loads(dumps(dump_phase(phase)))
    old["version"] = 1  # as version 1 wrote it: every item an object
    old["fields"]["transcript"] = [_codec._encode(one) for one in transcript]
    old["fields"]["loop"]["actions"] = [_codec._encode(one) for one in loop.actions]
    old = loads(dumps(old))
    loaded = load_phase(old, agents={"desk": AGENT})
    assert loaded == phase
    assert dumps(dump_phase(loaded)) == dumps(dump_phase(phase))


def test_successive_phases_dump_as_ops_that_pack_full_chunks() -> None:
    """The dumper's document for each phase is dump_phase's, and its ops (appends, the
    fields of a settled record set, packs of the chunks that filled) turn the document
    before into it; a record settled in an older full chunk is spliced from there."""
    from statemachine.persist._delta import PhaseDumper, _apply

    dumper = PhaseDumper()
    transcript, loop = Transcript(), LoopState()
    before: dict[str, Any] | None = None
    kinds: set[str] = set()
    for n in range(90):
        transcript = transcript.appended(*(_said(n * 10 + i) for i in range(n % 3 + 1)))
        pending = AGENT.governor.action(book.call(FLIGHT), f'{{"n": {n}}}', f"call-{n}")
        loop = loop.record(pending)
        if n % 2:  # settled later, after a record or two more (a chunk may fill between)
            loop = loop.settle(f"call-{n - 1}", "ok", f"result {n}")
        if n == 80:  # a record of the first full chunk settled: spliced from there
            loop = loop.settle("call-5", "failed", "late")
        phase = hand_built(Planning, agent=AGENT, ctx=TRIP, transcript=transcript, loop=loop)
        document, ops = dumper.dump(phase)
        assert dumps(document) == dumps(dump_phase(phase))
        if before is not None:
            assert ops is not None
            kinds.update(op[0] for op in ops)
            rebuilt = copy.deepcopy(before)
            _apply(rebuilt, loads(dumps(ops)))
            assert dumps(rebuilt) == dumps(document)
        before = loads(dumps(document))
    assert {"append", "splice", "pack", "merge"} <= kinds


@pytest.mark.parametrize(
    "op",
    [
        ["pack", ["items"], 1, 5, ["a"]],
        ["pack", ["items"], -1, 1, ["a"]],
        ["pack", ["items"], 0, 0, ["a"]],
        ["pack", ["items"], "0", 1, ["a"]],
        ["pack", ["count"], 0, 1, ["a"]],
        ["pack", ["items"], 0, 2, ["b"]],
        ["pack", ["items"], 0, 2, "a"],
        ["pack", ["others"], 0, 1, ["a"]],
    ],
)
def test_a_pack_outside_its_list_or_of_other_objects_is_refused(op: list[Any]) -> None:
    from statemachine.persist._delta import _apply

    document = {"items": [{"a": 1}, {"a": 2}], "count": 3, "others": [1]}
    with pytest.raises((TypeError, ValueError)):
        _apply(document, [op])
    _apply(document, [["pack", ["items"], 0, 2, ["a"]]])
    assert document["items"] == ["[[1],[2]]"]


def test_a_reader_of_the_document_sees_every_message_and_record_as_an_object() -> None:
    """``runs show`` and the inbox read the stored document itself: the chunks a version
    2 document holds as text are written out again as the objects version 1 held."""
    from statemachine.cli._show import fields

    transcript = Transcript().appended(*(_said(n) for n in range(70)))
    loop = LoopState()
    for n in range(40):
        loop = _looked(loop, n)
    phase = hand_built(Planning, agent=AGENT, ctx=TRIP, transcript=transcript, loop=loop)
    shown = fields(loads(dumps(dump_phase(phase))))
    assert shown["transcript"] == [message.model_dump(mode="json") for message in transcript]
    assert shown["loop"]["actions"] == [record.model_dump() for record in loop.actions]


# --- version 3: a phase change is one op ------------------------------------------------


def respent(phase: Phase[Any], spent: Spend) -> Phase[Any]:
    """``phase`` with another spend (a new phase: phases are not copied)."""
    values = {
        f.alias: getattr(phase, f.name) for f in attrs.fields(type(phase)) if f.alias != "ticket"
    }
    return hand_built(type(phase), **{**values, "spent": spent})


spends = st.builds(
    Spend,
    tokens=st.integers(0, 3),
    cost=st.sampled_from([Decimal("0"), Decimal("0.0300"), Decimal("0.03"), Decimal("1E+1")]),
    tool_calls=st.integers(0, 2),
    model_calls=st.integers(0, 2),
)


@settings(max_examples=80, deadline=None)
@given(walk=st.lists(st.tuples(st.integers(0, 10), spends | st.none()), min_size=2, max_size=10))
def test_a_walk_over_phase_kinds_dumps_as_dump_phase_and_one_op_per_change(
    walk: list[tuple[int, Spend | None]],
) -> None:
    """Any succession of phases (every kind, the same kind again, the same phase again,
    spends that differ in some of their fields): the dumper's document is dump_phase's,
    its ops (through JSON) rebuild it exactly from the one before, and a change of kind
    is the one ``phase`` op, never the fields' drops and order."""
    from statemachine.persist._delta import PhaseDumper, _apply

    phases = constructed()
    dumper = PhaseDumper()
    before: dict[str, Any] | None = None
    phase: Phase[Any] = phases[0]
    for index, spent in walk:
        phase = phases[index] if spent is None else respent(phases[index], spent)
        document, ops = dumper.dump(phase)
        assert dumps(document) == dumps(dump_phase(phase))
        if before is not None:
            assert ops is not None
            rebuilt = copy.deepcopy(before)
            _apply(rebuilt, loads(dumps(ops)))
            assert dumps(rebuilt) == dumps(document)
            names = [op[0] for op in ops]
            assert "order" not in names
            assert "drop" not in names
            assert ["set", ["kind"], phase.kind] not in ops
            moved = before["kind"] != document["kind"]
            assert (["phase", phase.kind] in ops) is moved
        before = loads(dumps(document))
    assert before is not None
    assert load_phase(before, agents={"desk": AGENT}) == phase


@attrs.frozen(kw_only=True)
class Checking(Planning[Any]):
    """A planning phase of the program's own, with a field of its own."""

    note: str = ""


def test_a_phase_class_of_the_program_s_own_changes_by_the_phase_op() -> None:
    from statemachine.persist._delta import PhaseDumper, _apply

    agent: Agent[Any] = Agent(name="desk", tools=[weather, book], phases=Phases(planning=Checking))
    idle = hand_built(Idle, agent=agent, ctx=TRIP, input="hello")
    checking = hand_built(Checking, agent=agent, ctx=TRIP, note="first")
    dumper = PhaseDumper()
    first, _ = dumper.dump(idle)
    assert first["phases"]["Planning"] == [
        "test_codec:Checking",
        [
            *("ctx", "transcript", "spent", "step", "loop", "pending", "invalid_streak"),
            *("model_attempt", "model_choice", "note"),
        ],
    ]
    second, ops = dumper.dump(checking)
    assert ops is not None
    assert ops[-1] == ["phase", "Planning"]
    rebuilt = loads(dumps(first))
    _apply(rebuilt, loads(dumps(ops)))
    assert dumps(rebuilt) == dumps(second) == dumps(dump_phase(checking))
    assert load_phase(rebuilt, agents={"desk": agent}) == checking


def test_a_document_naming_other_phases_is_not_gone_on_from() -> None:
    """A loaded document whose phases are not the agent's (its Phases changed since):
    the dumper gives no ops from it (the store diffs), and dumps in full."""
    from statemachine.persist._delta import PhaseDumper

    phase = constructed()[1]
    document = loads(dumps(dump_phase(phase)))
    document["phases"]["Planning"][0] = "elsewhere:Planning"
    dumper = PhaseDumper()
    dumper.start_from(phase, document)
    dumped, ops = dumper.dump(constructed()[2])
    assert ops is None
    assert dumps(dumped) == dumps(dump_phase(constructed()[2]))
    dumper.start_from(phase, loads(dumps(dump_phase(phase))))
    assert dumper.dump(constructed()[2])[1] is not None


def test_a_phase_the_document_s_phases_do_not_name_changes_key_by_key() -> None:
    """A document whose phases lack the kind (or name another class or other fields for
    it) cannot take the phase op: the kind, the class, the drops and the order are
    written as before, and rebuild the document exactly."""
    from statemachine.persist._delta import PhaseDumper, _apply

    phases = constructed()
    dumper = PhaseDumper()
    document, _ = dumper.dump(phases[1])
    dumper.start_from(phases[1], document)
    del document["phases"]["ToolCalling"]  # only this test's copy: dump_phase's is fresh
    later, ops = dumper.dump(phases[3])
    assert ops is not None
    names = [op[0] for op in ops]
    assert "phase" not in names
    assert {"drop", "order"} <= set(names)
    assert ["set", ["kind"], "ToolCalling"] in ops
    rebuilt = loads(dumps(document))
    _apply(rebuilt, loads(dumps(ops)))
    assert rebuilt["fields"] == later["fields"]
    assert list(rebuilt["fields"]) == list(later["fields"])


@pytest.mark.parametrize(
    ("ops", "error"),
    [
        ([["phase", "Unknown"]], KeyError),
        ([["phase", ["Planning"]]], TypeError),
        ([["phase", "Broken"]], TypeError),
        ([["phase", "Bare"]], TypeError),
        ([["phase", "Wider"]], KeyError),
        ([["merge", ["fields"], ["step", 2]]], TypeError),
        ([["merge", ["fields", "step"], {"a": 1}]], TypeError),
        ([["merge", ["nowhere"], {"a": 1}]], KeyError),
    ],
)
def test_a_phase_or_merge_op_that_does_not_fit_is_refused(
    ops: list[Any], error: type[Exception]
) -> None:
    from statemachine.persist._delta import _apply

    document: dict[str, Any] = {
        "kind": "Idle",
        "class": "a:Idle",
        "phases": {
            "Planning": ["a:Planning", ["step"]],
            "Broken": "a:Broken",
            "Bare": ["a:Bare", "step"],
            "Wider": ["a:Wider", ["step", "call"]],
        },
        "fields": {"step": 1, "input": "hi"},
    }
    with pytest.raises(error):
        _apply(document, ops)
    _apply(document, [["merge", ["fields"], {"step": 2, "input": "yo"}], ["phase", "Planning"]])
    assert document == {
        **document,
        "kind": "Planning",
        "class": "a:Planning",
        "fields": {"step": 2},
    }
    assert list(document) == ["kind", "class", "phases", "fields"]


# --- the dumper's shortcuts against the plain ways ---------------------------------------

texts = st.text(max_size=6) | st.sampled_from(["ok", "", "0", "é", "\x00"])


class Word(str):
    """Text of a subclass: encoded as plain text."""


@settings(max_examples=200, deadline=None)
@given(
    values=st.tuples(texts, texts, texts, texts, texts, texts),
    effect=st.sampled_from(["read", "write", Word("read")]),
    outcome=st.sampled_from(["pending", "ok", "failed", Word("ok")]),
    gain=st.none() | st.integers(-3, 3) | st.floats(allow_nan=False, allow_infinity=False),
)
def test_an_action_record_encodes_as_its_plain_dump_encodes(
    values: tuple[str, ...], effect: str, outcome: str, gain: float | None
) -> None:
    """The codec's short way for an action record (its fields, text kept, the rest
    encoded) gives what the long way gives: the record as pydantic dumps it, encoded."""
    from pydantic_core import to_jsonable_python

    from statemachine._actions import ActionRecord

    call_id, tool, exact, key, text, result = values
    record = ActionRecord(
        call_id=call_id or "c",
        tool=tool or "t",
        effect=effect,
        exact=exact,
        key=key,
        text=text,
        outcome=outcome,
        result=result,
        gain=gain,
    )
    short = _codec._encode(record)
    plain = _codec._encode(to_jsonable_python(record))
    assert exact_json(short) == exact_json(plain)
    assert [type(value) for value in short.values()] == [type(value) for value in plain.values()]


def exact_json(value: Any) -> str:
    from statemachine._json import fingerprint

    return fingerprint(value)


encodings = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 2)
    | st.sampled_from([Decimal("1.5"), Decimal("1.50"), Decimal("0"), Decimal("-0")])
    | texts,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "$decimal", "$float"]), inner, max_size=5)
    ),
    max_leaves=8,
)


@settings(max_examples=500, deadline=None)
@given(first=encodings, second=encodings)
def test_the_dumper_s_comparison_is_the_fingerprints(first: Any, second: Any) -> None:
    """Two encodings are the same exactly when their exact fingerprints are (1 and True,
    1.5 and 1.50, key order all differ), also for the small objects compared in Python."""
    from statemachine._json import fingerprint
    from statemachine.persist._delta import _same

    for a, b in ((first, second), (first, copy.deepcopy(first)), (second, second)):
        assert _same(a, b) is (fingerprint(a) == fingerprint(b))
    reordered = dict(reversed(first.items())) if isinstance(first, dict) else first
    assert _same(first, reordered) is (fingerprint(first) == fingerprint(reordered))
