# pyright: reportPrivateUsage=false
"""Round 19's shortcuts in the messages, the transcript and the spend, against the plain way.

- ``_message``, ``_request``, ``_model_request`` make their object by calling a making
  class whose ``__init__`` is ``object``'s (``_called``): the same object as before, of
  the class itself; the public constructors still check what they checked.
- ``_model_request`` copies one set of the five field names (``set(_REQUEST_FIELDS)``
  before): each request its own set, equal to it.
- ``_told`` makes its message in its own frame (``_message``'s stores).
- ``_result_text`` runs ``_plain_json``'s dict loop in its own frame.
- ``Transcript.prefixed`` makes its transcript in its own frame (``_of``'s stores).
- ``Spend.add`` makes its spend in its own frame (``_spend``'s stores) and knows a zero
  cost it has seen (``_budget._zero``) by identity while the spend's cost is ``_kept``.
"""

from __future__ import annotations

import pickle
from decimal import Decimal, DecimalException
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from statemachine import _budget, _json
from statemachine._budget import Spend, _spend, _zero_added
from statemachine._fast import _messages
from statemachine._fast._canonical import _plain_json
from statemachine._fast._messages import (
    _REQUEST_FIELDS,
    _c_writes_as_dumps,
    _message,
    _model_request,
    _request,
    _result_text,
    _told,
)
from statemachine._model import NO_SETTINGS, Message, ModelRequest, ToolRequest, Transcript
from statemachine._money import money_sum

_TEXT = st.text(max_size=12)


# --- messages -----------------------------------------------------------------------


@settings(max_examples=200)
@given(_TEXT, _TEXT, _TEXT)
def test_told_is_the_plain_message(content: str, call_id: str, name: str) -> None:
    made = _told(content, call_id, name)
    plain = Message(role="tool", content=content, tool_call_id=call_id, name=name)
    assert type(made) is Message
    assert made == plain
    assert hash(made) == hash(plain)
    assert made.content is content
    assert made.tool_call_id is call_id
    assert made.name is name
    assert made.tool_calls == ()
    assert type(made.tool_calls) is tuple
    assert made.model_dump() == plain.model_dump()
    assert pickle.loads(pickle.dumps(made)) == plain
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(made, "content", "x")  # noqa: B010


class _Text(str):
    pass


@settings(max_examples=50)
@given(_TEXT, _TEXT, _TEXT)
def test_told_takes_the_plain_way_for_other_values(content: str, call_id: str, name: str) -> None:
    made = _told(_Text(content), call_id, name)
    assert type(made) is Message
    assert made == Message(role="tool", content=_Text(content), tool_call_id=call_id, name=name)
    three: Any = 3
    with pytest.raises((TypeError, ValueError)):
        _told(three, call_id, name)


@settings(max_examples=100)
@given(_TEXT, _TEXT, _TEXT, _TEXT)
def test_message_and_request_are_the_plain_ones(
    role_text: str, name: str, arguments: str, call_id: str
) -> None:
    request = _request(name, arguments, call_id)
    plain_request = ToolRequest(name=name, arguments=arguments, id=call_id)
    assert type(request) is ToolRequest
    assert request == plain_request
    assert request.model_fields_set == plain_request.model_fields_set
    assert request.model_dump() == plain_request.model_dump()
    message = _message("assistant", role_text, (request,), "", "")
    plain = Message(role="assistant", content=role_text, tool_calls=(plain_request,))
    assert type(message) is Message
    assert message == plain
    assert hash(message) == hash(plain)


def test_the_constructors_still_check() -> None:
    # The making classes' __init__ is object's; the public classes' own are untouched.
    init: object = object.__init__
    assert Message.__init__ is not init
    assert Spend.__init__ is not init
    nobody: Any = "nobody"
    three: Any = 3
    with pytest.raises((TypeError, ValueError)):
        Message(role=nobody)
    with pytest.raises(ValidationError):
        ToolRequest(name=three, arguments="{}", id="x")
    with pytest.raises(ValidationError):
        ModelRequest(messages=Transcript(), tools=three)
    with pytest.raises(TypeError):
        Spend(tokens=True)
    with pytest.raises(TypeError):
        Spend.model_validate({"tool_calls": 1.5})
    with pytest.raises(ValueError, match="no field"):
        Spend.model_validate({"other": 1})


def test_model_request_has_its_own_field_set() -> None:
    messages = Transcript((Message(role="user", content="hi"),))
    first = _model_request(messages, (), None, None, NO_SETTINGS)
    second = _model_request(messages, ({"a": 1},), 2.5, {"type": "object"}, NO_SETTINGS)
    plain = ModelRequest.model_construct(
        messages=messages, tools=(), timeout=None, output_schema=None, settings=NO_SETTINGS
    )
    for made in (first, second):
        assert type(made) is ModelRequest
        assert type(made.__pydantic_fields_set__) is set
        assert made.__pydantic_fields_set__ == set(_REQUEST_FIELDS) == plain.model_fields_set
    assert first == plain
    assert first.__pydantic_fields_set__ is not second.__pydantic_fields_set__
    assert first.__pydantic_fields_set__ is not _messages._REQUEST_FIELD_SET
    first.__pydantic_fields_set__.discard("tools")  # a model changing what it was handed
    third = _model_request(messages, (), None, None, NO_SETTINGS)
    assert third.model_fields_set == set(_REQUEST_FIELDS)
    assert (second.tools, second.timeout, second.output_schema) == (
        ({"a": 1},),
        2.5,
        {"type": "object"},
    )
    assert second.messages is messages
    assert second.settings is NO_SETTINGS


# --- a result's text ----------------------------------------------------------------


def _plain_result_text(value: Any) -> str:
    """``_result_text`` as it was: ``_plain_json(value)`` called."""
    if type(value) is dict and _messages._plain_c is not None and _plain_json(value):
        dumps = _messages._orjson_dumps or _messages._load_orjson()
        try:
            return dumps(value).decode()
        except TypeError:
            return "".join(_messages._plain_c(value, 0))
    if _c_writes_as_dumps(value):
        return _json.dumps_fast(value)
    return _json.dumps(value)


class _Int(int):
    pass


_SCALAR = st.one_of(
    st.text(max_size=6),
    st.booleans(),
    st.none(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.sampled_from((10**15, 10**16, -(10**16), 10**16 - 1, 2**63, -(2**63) - 1)),
    st.floats(allow_nan=False, allow_infinity=False),
    st.builds(_Int, st.integers(-5, 5)),
    st.builds(Decimal, st.integers(-100, 100)),
)
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=4), inner, max_size=3),
    ),
    max_leaves=8,
)
_KEY = st.one_of(st.text(max_size=4), st.integers(-3, 3), st.booleans(), st.none())


def _outcome(write: Any, value: Any) -> tuple[str, Any]:
    try:
        return ("text", write(value))
    except Exception as error:
        return (type(error).__name__, str(error))


@settings(max_examples=400)
@given(st.dictionaries(_KEY, _VALUE, max_size=5))
def test_result_text_is_the_plain_way(value: dict[Any, Any]) -> None:
    assert _outcome(_result_text, value) == _outcome(_plain_result_text, value)


@settings(max_examples=100)
@given(_VALUE)
def test_result_text_of_any_value(value: Any) -> None:
    assert _outcome(_result_text, value) == _outcome(_plain_result_text, value)


def test_result_text_edges() -> None:
    for value in (
        {"key": "k0", "value": 42, "unit": "widgets"},
        {"a": 10**16},
        {"a": 10**16 - 1},
        {"a": -(10**16) + 1},
        {1: "a"},
        {"a": "\ud800"},
        {"a": [1, {"b": 10**17}]},
        {"a": _Int(1)},
        {"a": 1.5},
        {},
    ):
        assert _outcome(_result_text, value) == _outcome(_plain_result_text, value), value
    looped: dict[str, Any] = {}
    looped["a"] = [looped]
    assert _outcome(_result_text, looped)[0] == _outcome(_plain_result_text, looped)[0]


# --- the transcript's prefix ----------------------------------------------------------


def _user(text: str) -> Message:
    return Message(role="user", content=text)


_MESSAGES = st.lists(st.builds(_user, st.text(max_size=3)), max_size=70)


@settings(max_examples=100)
@given(_MESSAGES, _MESSAGES, st.integers(0, 3))
def test_prefixed_is_of(messages: list[Message], more: list[Message], before: int) -> None:
    transcript = Transcript(messages).appended(*more) if more else Transcript(messages)
    if before:
        transcript = transcript.prefixed(*messages[:before])
    put = tuple(more[:2])
    made = transcript.prefixed(*put)
    plain = Transcript._of(put + transcript._head, transcript._chunks, transcript._tail)
    assert type(made) is Transcript
    assert made is not transcript
    assert made._head == plain._head
    assert type(made._head) is tuple
    assert made._chunks is transcript._chunks
    assert made._tail is transcript._tail
    assert made._grown is None
    assert made == plain == (*put, *transcript)
    assert len(made) == len(put) + len(transcript)


# --- the spend ----------------------------------------------------------------------


class _Money(Decimal):
    pass


# A pool of objects drawn again and again, so that the same zero meets add twice.
_ZEROS = (
    Decimal(0),
    Decimal("0"),
    Decimal("0E+2"),
    Decimal("0E-3"),
    Decimal("-0"),
    Decimal("-0E+1"),
    _Money(0),
)
_COSTS = (*_ZEROS, Decimal("1.5"), Decimal("1E+2"), Decimal("0.001"), Decimal("1E+30"))
_WAS = (
    Decimal(0),
    Decimal("0.00"),
    Decimal("1E+2"),
    Decimal("2.50"),
    Decimal("-0"),
    Decimal("12345678901234567890123456789012345678901"),
    Decimal("0E-1000000"),
)


def _plain_add(spent: Spend, tokens: int, cost: Decimal, tool_calls: int, model_calls: int) -> Any:
    """``Spend.add`` as it was (before the identity test and the inline spend)."""
    was = spent.cost
    if type(cost) is not Decimal or cost:
        try:
            total = _budget._exact_add(was, cost)
        except DecimalException:
            total = money_sum(was, cost)
    elif was is _budget._kept and cost.adjusted() >= 0:
        total = was
    else:
        total = _zero_added(was, cost)
    return _spend(
        spent.tokens + tokens,
        total,
        spent.tool_calls + tool_calls,
        spent.model_calls + model_calls,
    )


def _spent_outcome(make: Any) -> tuple[Any, ...]:
    made: Any
    try:
        made = make()
    except Exception as error:
        return ("error", type(error).__name__, str(error))
    kind: object = made.__class__
    cost: object = made.cost
    return (
        kind,
        made.tokens,
        made.tool_calls,
        made.model_calls,
        type(cost),
        cost.as_tuple() if isinstance(cost, Decimal) else cost,
        cost,
    )


def _both(
    spent: Spend, tokens: int, cost: Decimal | None, tool_calls: int, model_calls: int
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The plain way's outcome and add's (``cost`` None: add's own default), from the
    same ``_kept``."""
    kept = _budget._kept
    given = Decimal(0) if cost is None else cost
    plain = _spent_outcome(lambda: _plain_add(spent, tokens, given, tool_calls, model_calls))
    _budget._kept = kept
    if cost is None:
        made = _spent_outcome(
            lambda: spent.add(tokens=tokens, tool_calls=tool_calls, model_calls=model_calls)
        )
    else:
        made = _spent_outcome(
            lambda: spent.add(
                tokens=tokens, cost=cost, tool_calls=tool_calls, model_calls=model_calls
            )
        )
    return plain, made


@settings(max_examples=400)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(_WAS),
            st.one_of(st.none(), st.sampled_from(_COSTS)),
            st.integers(0, 3),
            st.integers(0, 2),
            st.integers(0, 2),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_add_is_the_plain_way(
    steps: list[tuple[Decimal, Decimal | None, int, int, int]],
) -> None:
    for was, cost, tokens, tool_calls, model_calls in steps:
        spent = _spend(1, was, 2, 3)  # any cost, even one Spend(...) refuses
        plain, made = _both(spent, tokens, cost, tool_calls, model_calls)
        assert made == plain
        # What add knows by identity is an exact Decimal zero of exponent 0 or more.
        zero = _budget._zero
        assert type(zero) is Decimal
        assert not zero
        assert zero.adjusted() >= 0


@settings(max_examples=200)
@given(st.sampled_from(_WAS), st.sampled_from(_COSTS), st.integers(1, 4))
def test_add_on_the_kept_cost(was: Decimal, cost: Decimal, times: int) -> None:
    # The kept cost (a run's) added to the same zero again and again: the identity path.
    spent = _spend(0, was, 0, 0).add(cost=Decimal(0))  # may make its cost the kept cost
    for _ in range(times):
        plain, made = _both(spent, 0, cost, 0, 1)
        assert made == plain
        if made[0] is not Spend:
            break
        # The same object kept where the plain way keeps it.
        assert (spent.add(cost=cost).cost is spent.cost) is (
            _plain_add(spent, 0, cost, 0, 0).cost is spent.cost
        )
        spent = spent.add(cost=cost, model_calls=1)


def test_add_keeps_the_kept_cost_by_identity() -> None:
    kept = Spend(cost=Decimal("2.50")).add(cost=Decimal(0)).cost
    assert _budget._kept is kept
    zero = Decimal(0)
    once = Spend(cost=kept).add(cost=zero, model_calls=1)
    assert once.cost is kept
    assert _budget._zero is zero
    twice = once.add(cost=zero, model_calls=1)
    assert twice.cost is kept
    assert twice.model_calls == 2
    # A subclass's zero is summed, never known by identity.
    sub = _Money(0)
    assert type(Spend(cost=kept).add(cost=sub).cost) is Decimal
    assert _budget._zero is zero
    # A zero of a negative exponent is summed and never known.
    other = Decimal("0E-2")
    made = Spend(cost=kept).add(cost=other)
    assert made.cost.as_tuple() == money_sum(kept, other).as_tuple()
    assert _budget._zero is zero
    # A negative zero of exponent 0 is what the rule allows: known, and the cost kept.
    negative = Decimal("-0")
    assert Spend(cost=kept).add(cost=negative).cost is kept
    assert _budget._zero is negative
    assert Spend(cost=kept).add(cost=negative).cost is kept


def test_spend_constructed_and_added_are_spends() -> None:
    spent = Spend.model_construct(tokens=1, cost=Decimal(1))
    made = spent.add(tokens=2, cost=Decimal("0.5"), tool_calls=1, model_calls=1)
    assert type(made) is Spend
    assert made == Spend(tokens=3, cost=Decimal("1.5"), tool_calls=1, model_calls=1)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(made, "tokens", 4)  # noqa: B010
    assert pickle.loads(pickle.dumps(made)) == made
