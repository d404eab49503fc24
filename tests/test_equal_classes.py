"""What the library works out once per class is found by the class itself.

A class whose metaclass makes it equal to, and hash as, a library class (``Planning``,
``Usage``) is not given that class's answer by a dict, an ``lru_cache`` or a weak map
keyed by the class, and its own answer never takes that class's place for what is asked
after it: the phase built, the successors judged, the fields a checkpoint writes, the
plan a model is encoded by, the phase table of a document. Each test asks for the
hostile class first, then for the library's class, and the other way round.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from pydantic import BaseModel
from pydantic._internal._model_construction import ModelMetaclass

from statemachine import Agent, Failed, Phases, Planning, Runner
from statemachine._fast._by_class import by_class
from statemachine._graph import _successors_of
from statemachine._model import Usage
from statemachine._phases import _ORDER
from statemachine.persist import _codec, _delta
from statemachine.testing import AutoDenyGate, ScriptedModel, reply


class _LikePlanning(type):
    def __eq__(cls, other: object) -> bool:
        return True

    def __hash__(cls) -> int:
        return hash(Planning)


@attrs.frozen(kw_only=True)
class _Wider(Planning[None], metaclass=_LikePlanning):
    """A Planning subclass equal to Planning, with a field of its own."""

    extra: str = "x"


class _Narrow(Planning[None], metaclass=_LikePlanning):
    """A Planning subclass equal to Planning, whose advance names only Failed."""

    async def advance(self, rt: Any) -> Failed[None]:
        return await super().advance(rt)  # type: ignore[return-value]


class _LikeUsage(ModelMetaclass):
    def __eq__(cls, other: object) -> bool:
        return True

    def __hash__(cls) -> int:
        return hash(Usage)


class _Loud(BaseModel, metaclass=_LikeUsage):
    """A model equal to Usage, of a text field (Usage is of numbers)."""

    s: str = ""


def test_by_class_answers_each_class_by_itself() -> None:
    asked: list[type[Any]] = []

    @by_class
    def name(cls: type[Any]) -> str:
        asked.append(cls)
        return cls.__name__

    assert name(_Wider) == "_Wider"
    assert name(Planning) == "Planning"
    assert name(_Wider) == "_Wider"
    assert name(Planning) == "Planning"
    assert asked == [_Wider, Planning]


def test_a_class_made_and_dropped_is_not_kept() -> None:
    import gc
    import weakref

    @by_class
    def fields(cls: type[Any]) -> int:
        return len(attrs.fields(cls))

    made = attrs.make_class("Made", ["a", "b"])
    gone = weakref.ref(made)
    assert fields(made) == 2
    del made
    gc.collect()
    assert gone() is None


@pytest.mark.parametrize("first", ["hostile", "library"])
def test_the_checkpoint_fields_of_a_phase_class_are_its_own(first: str) -> None:
    order = [_Wider, Planning] if first == "hostile" else [Planning, _Wider]
    for cls in order:
        _codec._field_names(cls)
        _delta._dumped_fields(cls)
    assert "extra" in _codec._field_names(_Wider)
    assert "extra" not in _codec._field_names(Planning)
    assert "extra" in {f.name for f in _delta._dumped_fields(_Wider)}
    assert "extra" not in {f.name for f in _delta._dumped_fields(Planning)}


@pytest.mark.parametrize("first", ["hostile", "library"])
def test_the_encoding_plan_of_a_model_class_is_its_own(first: str) -> None:
    order = [_Loud, Usage] if first == "hostile" else [Usage, _Loud]
    plans = [_codec._plan(cls) for cls in order]
    usage, loud = plans if first == "library" else plans[::-1]
    assert _codec._plan(Usage) is usage is _codec._Plan.FLAT
    assert _codec._plan(_Loud) is loud is _codec._Plan.TEXT


def test_the_phase_table_of_an_agent_names_its_own_classes() -> None:
    plain, hostile = Phases[None](), Phases[None](planning=_Wider)
    assert plain == hostile  # by the metaclass's __eq__: the reason for the test
    assert _codec._phase_table(hostile)["Planning"][0].endswith(":_Wider")
    assert _codec._phase_table(plain)["Planning"][0].endswith(":Planning")
    assert _codec._phase_table(hostile)["Planning"][0].endswith(":_Wider")


@pytest.mark.parametrize("first", ["hostile", "library"])
def test_the_successors_of_a_phase_class_are_read_from_its_own_annotation(first: str) -> None:
    order = [_Narrow, Planning] if first == "hostile" else [Planning, _Narrow]
    for cls in order:
        _successors_of(cls, _ORDER)
    assert _successors_of(_Narrow, _ORDER) == (Failed,)
    assert Failed in _successors_of(Planning, _ORDER)
    assert len(_successors_of(Planning, _ORDER)) > 1


@pytest.mark.anyio
async def test_a_run_builds_the_very_class_its_agent_names() -> None:
    """Another agent's Planning is built as Planning, and this agent's as _Wider, whatever
    ran first: the builders of the next phase are found by the class itself."""
    plain = Agent[None](name="plain")
    hostile = Agent[None](name="hostile", phases=Phases(planning=_Wider))
    for agent in (plain, hostile, plain):
        result = await Runner(
            agent, model=ScriptedModel([reply("hi")]), gate=AutoDenyGate(), keep_states=True
        ).run(None, "hi")
        planned = [type(state) for state in result.states if isinstance(state, Planning)]
        expected = _Wider if agent is hostile else Planning
        # By identity: the classes are equal by _LikePlanning's __eq__.
        assert len(planned) == 1
        assert planned[0] is expected, planned[0].__name__
