"""The phase codec vouches for its deltas' floats (``persist._delta.FiniteOps``).

No float leaves ``_codec._encode`` but as ``{"$float": ...}``, whatever a model holds
(one made by ``model_construct``, one with a ``model_dump`` of its own, one that writes
infinities as bare numbers in JSON mode); the runner's saver hands the store the
dumper's ops as ``FiniteOps`` only with a finite clock. So a non-finite float anywhere
in a phase is stored exactly (tagged) or refused, never written as ``null``.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any, cast

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict
from support import CityArgs

from statemachine import (
    Agent,
    Message,
    Observing,
    Planning,
    Runtime,
    SetupError,
    Spend,
    ToolRequest,
    Transcript,
    dump_phase,
    dumps,
    loads,
    read_tool,
)
from statemachine._json import fingerprint
from statemachine._saving import _Saver
from statemachine.persist import MemoryCheckpointer
from statemachine.persist._codec import _encode
from statemachine.persist._delta import FiniteOps, PhaseDumper
from statemachine.testing import AutoDenyGate, ScriptedModel, hand_built


class Note(BaseModel):
    """A model of text only (the codec's TEXT plan)."""

    text: str
    tag: str = ""


class Notes(BaseModel):
    """Text and a tuple of text-only models (TEXT too)."""

    title: str
    notes: tuple[Note, ...] = ()


class Wide(BaseModel):
    """A float that JSON mode writes as a bare number, infinities included."""

    model_config = ConfigDict(ser_json_inf_nan="constants")
    value: float


class Own(BaseModel):
    """A model whose own ``model_dump`` gives what it likes: a bare infinity too."""

    text: str

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        return {"text": self.__dict__["text"], "scale": math.inf}


class Measured(BaseModel):
    """A context with a float field."""

    reading: float = 0.0
    label: str = ""


def floats_in(value: Any) -> list[float]:
    """Every float in a JSON value, wherever it is (a tag's text is not one)."""
    if isinstance(value, float):
        return [value]
    if isinstance(value, dict):
        return [found for item in value.values() for found in floats_in(item)]
    if isinstance(value, list | tuple):
        return [found for item in value for found in floats_in(item)]
    return []


any_float = st.floats(allow_nan=True, allow_infinity=True)
non_finite = st.sampled_from([math.nan, math.inf, -math.inf])
leaves = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | any_float
    | st.text(max_size=4)
    | st.decimals(allow_nan=False, allow_infinity=False, places=2)
)
held = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


def _models(value: Any) -> list[Any]:
    """Models holding ``value`` where text belongs (as ``model_construct`` may make them)."""
    request = ToolRequest.model_construct(name=value, arguments="{}", id="call-1")
    return [
        request,
        Message(role="assistant", tool_calls=(request,)),
        Message(role="assistant", tool_calls=(ToolRequest(name="a"), request)),
        Note.model_construct(text=value, tag=""),
        Notes.model_construct(title="t", notes=(Note.model_construct(text=value, tag=""),)),
        Note.model_construct(text=cast(Any, Wide.model_construct(value=value)), tag=""),
        Own.model_construct(text=value),
        {"held": [Note.model_construct(text=value, tag="")]},
        Message(
            role="assistant",
            tool_calls=(
                ToolRequest.model_construct(name=cast(Any, Wide.model_construct(value=value))),
            ),
        ),
    ]


@settings(max_examples=300, deadline=None)
@given(value=held, which=st.integers(0, 8))
def test_no_float_leaves_the_codec_untagged(value: Any, which: int) -> None:
    """Whatever a model holds, its encoding has no float but tagged ones."""
    model = _models(value)[which]
    try:
        encoded = _encode(model)
    except (TypeError, ValueError):
        return  # refused: nothing written
    assert floats_in(encoded) == []


@settings(max_examples=300, deadline=None)
@given(value=held, which=st.sampled_from([0, 3, 4, 5]))
def test_a_text_model_encodes_as_its_plain_dump_encodes(value: Any, which: int) -> None:
    """The TEXT plan's short way (the JSON-mode dump) gives what the long way gives,
    ``_encode(model_dump())``, for a model holding anything (or refuses as it does)."""
    model = _models(value)[which]

    def outcome(encode: Any) -> tuple[str, Any]:
        try:
            return "ok", fingerprint(encode())
        except (TypeError, ValueError) as error:
            return "error", type(error)

    assert outcome(lambda: _encode(model)) == outcome(
        lambda: _encode(model.model_dump(warnings=False))
    )


@given(
    texts=st.lists(st.text(max_size=6), min_size=1, max_size=4),
    calls=st.lists(st.tuples(st.text(max_size=4), st.text(max_size=4)), max_size=3),
)
def test_validated_models_take_the_short_way_unchanged(
    texts: list[str], calls: list[tuple[str, str]]
) -> None:
    """Validated text models and messages encode as their JSON-mode dump."""
    notes = Notes(title=texts[0], notes=tuple(Note(text=text) for text in texts))
    assert _encode(notes) == notes.model_dump(mode="json")
    requests = tuple(ToolRequest(name=name, arguments=args) for name, args in calls)
    message = Message(role="assistant", content=texts[0], tool_calls=requests)
    assert _encode(message) == message.model_dump(mode="json")


# --- the dumper and the saver ------------------------------------------------------------

# A model made without validation holding a float where text belongs: pydantic warns as
# it dumps it (the codec's long way for models of scalars), as it did before.
unexpected = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")


@read_tool
async def probe(args: CityArgs) -> dict[str, object]:
    """Read something."""
    return {"city": args.city}


AGENT: Agent[Any] = Agent(name="floats", tools=[probe])
SPENT = Spend(tokens=1, cost=Decimal("0.01"), tool_calls=0, model_calls=1)


def _phases(where: int, reading: float) -> list[Any]:
    """Two phases of one run, the second holding ``reading`` at place ``where``."""
    value: Any = reading  # where text belongs too (a model made without validation)
    call = probe.call({"city": "Lisbon"})
    request = ToolRequest.model_construct(name="probe", arguments=value, id="call-1")
    said = Message(role="assistant", tool_calls=(request,))
    first = hand_built(
        Planning, agent=AGENT, ctx=Measured(), spent=SPENT, step=1, transcript=Transcript()
    )
    fields: dict[str, Any] = {"agent": AGENT, "ctx": Measured(), "spent": SPENT, "step": 2}
    if where == 0:  # a context's float field
        fields["ctx"] = Measured(reading=reading)
    if where == 1:  # a context made without validation, text field holding the float
        fields["ctx"] = Measured.model_construct(reading=0.0, label=value)
    if where == 2:  # the model's call, made without validation, in the transcript
        fields["transcript"] = Transcript([said])
    output: Any = {"city": "Lisbon"}
    if where == 3:  # a tool's output: a model whose JSON mode writes infinities bare
        output = Note.model_construct(text=cast(Any, Wide.model_construct(value=value)), tag="")
    if where == 4:  # a tool's output of plain values
        output = {"readings": [1, value]}
    if where == 5:  # a tool's output with a model_dump of its own
        output = Own.model_construct(text=value)
    if where == 6:  # pending calls made without validation
        return [first, hand_built(Planning, **fields, pending=(request,))]
    second = hand_built(Observing, **fields, call=call, call_id="call-1", output=output)
    return [first, second]


@unexpected
@settings(max_examples=60, deadline=None)
@given(where=st.integers(0, 6), value=any_float)
def test_the_dumper_s_ops_hold_no_float(where: int, value: float) -> None:
    """The dumper's ops are FiniteOps, and hold no float at all (each is tagged), or the
    phase is refused as the codec refuses it."""
    first, second = _phases(where, value)
    dumper = PhaseDumper()
    dumper.dump(first)
    try:
        document, ops = dumper.dump(second)
    except SetupError:
        with pytest.raises(SetupError):
            dump_phase(second)
        return
    assert type(ops) is FiniteOps
    assert floats_in(ops) == []
    assert floats_in(document) == []
    assert dumps(document) == dumps(dump_phase(second))


class _Clock:
    """A clock that reads 0, then ``last`` from its third reading on."""

    def __init__(self, last: float) -> None:
        self.readings = 0
        self.last = last

    def __call__(self) -> float:
        self.readings += 1
        return 0.0 if self.readings < 3 else self.last


async def _saved(where: int, value: float, clock: float) -> tuple[str, Any, Any]:
    """Save the two phases through the runner's saver into a real store: ``("refused",
    error type, None)`` or ``("stored", the document given, the document loaded)``."""
    first, second = _phases(where, value)
    store = MemoryCheckpointer()
    rt = Runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate(), clock=_Clock(clock))
    saver = _Saver(store, rt, AGENT.name, None)
    await saver.save(first, first=True)
    handed: list[Any] = []
    save = store.save

    async def spying(*args: Any, **kwargs: Any) -> Any:
        handed.append({**kwargs, "document": args[2]})
        return await save(*args, **kwargs)

    store.save = spying  # type: ignore[method-assign]
    try:
        await saver.save(second)
    except (ValueError, SetupError) as error:
        return "refused", type(error), None
    finally:
        del store.save
    (kwargs,) = handed
    ops = kwargs["ops"]
    if type(ops) is FiniteOps:  # vouched: nothing in it is a float but a finite elapsed
        assert all(math.isfinite(found) for found in floats_in(ops))
    seq, loaded = await store.load("r")
    assert seq == 1
    return "stored", kwargs, loaded


@unexpected
@settings(max_examples=60, deadline=None)
@given(where=st.integers(0, 6), value=any_float, clock=any_float)
def test_a_non_finite_float_anywhere_is_stored_exactly_or_refused(
    where: int, value: float, clock: float
) -> None:
    """Through the runner's saver into a real store: a NaN or an infinity in any field
    the model or a tool can reach, or read from the clock, is stored exactly (tagged,
    and the loaded document is the document saved) or the save is refused; never a
    ``null`` in its place."""
    outcome, handed, loaded = anyio.run(_saved, where, value, clock)
    if outcome == "refused":
        assert not math.isfinite(clock) or not math.isfinite(value)
        return
    document = handed["document"]
    assert floats_in(document["fields"]) == []
    assert math.isfinite(document["elapsed"])
    assert dumps(loaded) == dumps(document)
    assert loads(dumps(loaded)) == loads(dumps(document))


@unexpected
@pytest.mark.parametrize("clock", [math.nan, math.inf, -math.inf])
def test_a_clock_that_is_not_finite_hands_a_plain_list_and_is_refused(clock: float) -> None:
    """The saver vouches for the dumper's ops only with a finite clock: else it hands a
    plain list, which the store reads back and refuses."""
    outcome, error, _ = anyio.run(_saved, 0, 1.5, clock)
    assert (outcome, error) == ("refused", ValueError)


@unexpected
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("where", range(7))
def test_each_place_stores_exactly_or_refuses(where: int, value: float) -> None:
    """Every place of the Hypothesis test above, with each non-finite value."""
    outcome, handed, loaded = anyio.run(_saved, where, value, 2.5)
    if outcome == "stored":
        assert dumps(loaded) == dumps(handed["document"])
        assert type(handed["ops"]) is FiniteOps


json_plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "$float", "$decimal", "$object", "$x"]), inner)
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(value=json_plain | held)
def test_a_plain_output_is_given_back_equal_without_the_look(value: Any) -> None:
    """``_plain_json`` (which spares a tool's output the decode-and-compare look) holds
    only of values the look passes: ``_decode(_encode(value)) == value``."""
    from statemachine.persist._chunks import _decode
    from statemachine.persist._codec import _plain_json

    if _plain_json(value):
        assert _decode(_encode(value)) == value
