"""The messages the library makes by plain slot stores, against the plain path.

``_message`` (and ``_told``, ``_system``, ``_asking`` through it: the model's calls asked,
a tool's result told, the system prompt) makes its ``Message`` as an instance of a private
subclass whose slots are stored as ``object`` stores them, then gives it ``Message``'s own
class (``__class__`` assignment): the same object as ``Message(...)`` makes, of the class
itself, frozen as it, copied, pickled, dumped and evolved as it. ``_request`` makes its
``ToolRequest`` (a call given an id of the run's) the same way: the request
``model_construct`` and validation make.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from statemachine._fast._messages import (
    _asking,
    _message,
    _model_request,
    _request,
    _system,
    _told,
)
from statemachine._model import NO_SETTINGS, Message, ModelRequest, ToolRequest, Transcript

_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name")
_TEXT = st.text(max_size=16)
_ROLE = st.sampled_from(("system", "user", "assistant", "tool"))


def _tool_request(name: str, arguments: str, call_id: str) -> ToolRequest:
    return ToolRequest(name=name, arguments=arguments, id=call_id)


_REQUEST = st.builds(_tool_request, _TEXT, _TEXT, _TEXT)
_CALLS = st.lists(_REQUEST, max_size=3).map(tuple)


def _same(made: Any, plain: Message, values: tuple[Any, ...]) -> None:
    """``made`` is ``plain``'s equal of its very class, each slot the very value given,
    frozen to setting and deleting, and copied, pickled, dumped and evolved as ``plain``."""
    assert type(made) is Message
    assert made.__class__ is Message
    assert not hasattr(made, "__dict__")
    assert made == plain
    assert hash(made) == hash(plain)
    for name, value in zip(_FIELDS, values, strict=True):
        assert getattr(made, name) is value
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(made, name, value)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            delattr(made, name)
        assert getattr(made, name) is value
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(made, "other", 1)  # noqa: B010
    for twin in (copy.copy(made), copy.deepcopy(made), pickle.loads(pickle.dumps(made))):
        assert type(twin) is Message
        assert twin == plain
        assert attrs.astuple(twin, recurse=False) == attrs.astuple(plain, recurse=False)
    assert repr(made) == repr(plain)
    assert attrs.asdict(made) == attrs.asdict(plain)
    assert made.model_dump() == plain.model_dump()
    assert made.model_dump(mode="json") == plain.model_dump(mode="json")
    assert made.model_dump_json() == plain.model_dump_json()
    assert Message.model_validate(made.model_dump()) == plain
    changed = made.model_copy(update={"content": "changed"})
    assert type(changed) is Message
    assert changed == plain.model_copy(update={"content": "changed"})
    assert made.model_copy() == plain


@settings(max_examples=120, deadline=None)
@given(_ROLE, _TEXT, _CALLS, _TEXT, _TEXT)
def test_message_is_the_plain_message(
    role: str, content: str, calls: tuple[ToolRequest, ...], call_id: str, name: str
) -> None:
    values = (role, content, calls, call_id, name)
    made = _message(*values)
    fields: dict[str, Any] = dict(zip(_FIELDS, values, strict=True))
    plain = Message(**fields)
    _same(made, plain, values)
    # A request validates the made messages as it validates the plain ones.
    asked = ModelRequest(messages=Transcript((made,)))
    assert asked.messages[0] is made
    assert asked.model_dump_json() == ModelRequest(messages=Transcript((plain,))).model_dump_json()


@settings(max_examples=80, deadline=None)
@given(_TEXT, _TEXT, _TEXT)
def test_told_system_and_asking_are_the_plain_messages(
    content: str, call_id: str, name: str
) -> None:
    told = _told(content, call_id, name)
    _same(
        told,
        Message(role="tool", content=content, tool_call_id=call_id, name=name),
        ("tool", content, (), call_id, name),
    )
    system = _system(content)
    _same(system, Message(role="system", content=content), ("system", content, (), "", ""))
    asking = _asking(name, content, call_id)
    plain = Message(
        role="assistant", tool_calls=(ToolRequest(name=name, arguments=content, id=call_id),)
    )
    assert type(asking) is Message
    assert asking == plain
    assert asking.tool_calls[0].model_fields_set == plain.tool_calls[0].model_fields_set
    _same(asking, plain, ("assistant", "", asking.tool_calls, "", ""))


class _Text(str):
    pass


def test_text_of_a_subclass_takes_the_plain_way() -> None:
    """A ``str`` subclass given to ``_told`` or ``_system`` goes through ``Message(...)``
    (its converter makes it plain text), as before; ``_message`` is not reached."""
    told = _told(_Text("result"), "call-1", "lookup")
    assert type(told) is Message
    assert type(told.content) is str
    system = _system(_Text("be brief"))
    assert type(system) is Message
    assert type(system.content) is str


def test_the_making_class_never_escapes() -> None:
    """Every message made is of ``Message`` itself: nothing made shows the making class."""
    made = [_message("user", "hi", (), "", ""), _told("x", "c", "n"), _system("s")]
    made.append(_asking("lookup", "{}", "call-1"))
    for message in made:
        assert type(message) is Message
        assert isinstance(message, Message)
        assert type(copy.copy(message)) is Message


@settings(max_examples=120, deadline=None)
@given(_TEXT, _TEXT, _TEXT)
def test_request_is_the_plain_request(name: str, arguments: str, call_id: str) -> None:
    """``_request`` makes the ``ToolRequest`` that ``model_construct`` (and validation) of
    the same three texts makes: of the class itself, its fields the very texts, in order,
    all three set, nothing extra or private, frozen, copied, pickled and dumped alike."""
    made = _request(name, arguments, call_id)
    plain = ToolRequest(name=name, arguments=arguments, id=call_id)
    built = ToolRequest.model_construct(name=name, arguments=arguments, id=call_id)
    assert type(made) is ToolRequest
    assert made.__class__ is ToolRequest
    assert type(made.__dict__) is dict
    assert list(made.__dict__) == ["name", "arguments", "id"]
    assert made.name is name
    assert made.arguments is arguments
    assert made.id is call_id
    assert (
        made.__pydantic_fields_set__
        == built.__pydantic_fields_set__
        == {
            "name",
            "arguments",
            "id",
        }
    )
    assert made.__pydantic_extra__ is None
    assert made.__pydantic_private__ is None
    assert made == plain == built
    assert hash(made) == hash(plain)
    assert repr(made) == repr(plain)
    assert made.model_dump() == plain.model_dump()
    assert made.model_dump_json() == plain.model_dump_json()
    with pytest.raises(ValidationError):
        setattr(made, "name", "other")  # noqa: B010
    refusals: list[type[BaseException]] = []
    for frozen in (made, plain):
        with pytest.raises(ValidationError):
            setattr(frozen, "other", 1)  # noqa: B010
        with pytest.raises((AttributeError, ValidationError)) as deleting:
            delattr(frozen, "name")
        assert frozen.name is name
        refusals.append(deleting.type)
    assert refusals[0] is refusals[1]
    assert made.name is name
    for twin in (
        copy.copy(made),
        copy.deepcopy(made),
        pickle.loads(pickle.dumps(made)),
        made.model_copy(),
    ):
        assert type(twin) is ToolRequest
        assert twin == plain
        assert twin.model_fields_set == plain.model_fields_set
    changed = made.model_copy(update={"id": "x"})
    assert type(changed) is ToolRequest
    assert changed == plain.model_copy(update={"id": "x"})
    assert ToolRequest.model_validate(made.model_dump()) == plain
    # A message carrying it checks it as a ToolRequest itself (no validation again).
    assert Message(role="assistant", tool_calls=(made,)).tool_calls[0] is made


_SCHEMA = st.one_of(st.none(), st.dictionaries(_TEXT, st.integers(), max_size=2))


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.builds(_told, _TEXT, _TEXT, _TEXT), max_size=3),
    st.lists(st.dictionaries(_TEXT, _TEXT, max_size=2), max_size=2).map(tuple),
    st.one_of(st.none(), st.floats(min_value=0, max_value=1e6)),
    _SCHEMA,
)
def test_model_request_is_the_constructed_request(
    messages: list[Message],
    tools: tuple[dict[str, Any], ...],
    timeout: float | None,
    schema: dict[str, Any] | None,
) -> None:
    """``_model_request`` makes the ``ModelRequest`` that ``model_construct`` of the same
    five values makes: of the class itself, each field the very value, all five set (a
    set of its own), nothing extra or private, frozen, copied, pickled and dumped alike."""
    transcript = Transcript(messages)
    made = _model_request(transcript, tools, timeout, schema, NO_SETTINGS)
    plain = ModelRequest.model_construct(
        messages=transcript,
        tools=tools,
        timeout=timeout,
        output_schema=schema,
        settings=NO_SETTINGS,
    )
    assert type(made) is ModelRequest
    assert made.__class__ is ModelRequest
    assert type(made.__dict__) is dict
    assert list(made.__dict__) == list(plain.__dict__)
    for name, value in plain.__dict__.items():
        assert getattr(made, name) is value
    assert made.__pydantic_fields_set__ == plain.__pydantic_fields_set__
    assert type(made.__pydantic_fields_set__) is set
    again = _model_request(transcript, tools, timeout, schema, NO_SETTINGS)
    assert again.__pydantic_fields_set__ is not made.__pydantic_fields_set__
    assert made.__pydantic_extra__ is None
    assert made.__pydantic_private__ is None
    assert made == plain
    assert repr(made) == repr(plain)
    assert made.model_dump_json() == plain.model_dump_json()
    with pytest.raises(ValidationError):
        setattr(made, "timeout", 1.0)  # noqa: B010
    assert made.timeout is timeout
    for twin in (copy.copy(made), copy.deepcopy(made), pickle.loads(pickle.dumps(made))):
        assert type(twin) is ModelRequest
        assert twin == plain
    assert ModelRequest.model_validate_json(
        made.model_dump_json()
    ) == ModelRequest.model_validate_json(plain.model_dump_json())
