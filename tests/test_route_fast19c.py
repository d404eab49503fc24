# pyright: reportPrivateUsage=false, reportUnknownVariableType=false
"""``ToolRegistry.route`` scanning any text of a known tool, and reading what it kept of a
name in one unpacking, against the plain way (``_route``).

route no longer asks whether the text starts with ``{`` before scanning it: a text the
scanner reads whole as a dict starts with ``{``, and any other (another JSON value, a
text with a leading space or byte-order mark, a text the scanner refuses, an empty one)
goes through ``_route`` as before. What it kept of a name (``_known``) is read in one
unpacking, a name it has not seen reading ``_UNKNOWN``: a name never routed is learnt, an
entry of another tool or arguments class is learnt again, and a class it could not keep
is looked up at every call. Every call gives the plain way's result: the same class
exactly, arguments, hash, canonical text and tool, or the same ``InvalidCall``.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import read_tool, write_tool
from statemachine._tools import _UNKNOWN, InvalidCall, ReadCall, ToolRegistry, WriteCall


class _Args(BaseModel):
    key: str
    count: int = 0
    price: Decimal | None = None


class _OtherArgs(BaseModel):
    key: str


@read_tool
async def look(args: _Args) -> str:
    """Look."""
    return args.key


@write_tool
async def put(args: _Args) -> str:
    """Put."""
    return args.key


@read_tool
async def other(args: _OtherArgs) -> str:
    """Another tool, of another arguments class."""
    return args.key


def _seen(call: object) -> tuple[object, ...]:
    """What a routed call holds, its class exactly first."""
    if type(call) in (ReadCall, WriteCall):
        made: Any = call
        return (
            type(made),
            type(made.args),
            made.args.model_dump(),
            made.args_hash,
            made._canonical,
            made.tool,
        )
    assert type(call) is InvalidCall
    assert isinstance(call, InvalidCall)
    return (type(call), call.name, call.arguments, call.problems, call.feedback)


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
_OBJECTS = st.fixed_dictionaries(
    {"key": st.text(max_size=8) | st.integers()},
    optional={
        "count": st.integers() | st.text(max_size=3),
        "price": st.decimals(places=2, allow_nan=False, allow_infinity=False) | st.none(),
        "extra": _JSON,
    },
).map(lambda value: json.dumps(value, default=str))
_TEXTS = st.one_of(
    _OBJECTS,
    _JSON.map(json.dumps),  # any JSON value: lists, numbers, strings, null
    st.text(max_size=20),
    st.tuples(
        st.sampled_from(["", " ", "\n", "\ufeff", "x", "[", "1", '"', "{}", "{"]), _OBJECTS
    ).map("".join),
    st.tuples(_OBJECTS, st.sampled_from(["", " ", "x", "}", ",{}"])).map("".join),
    st.integers(min_value=0, max_value=80).map(lambda depth: "[" * depth + "]" * depth),
    st.integers(min_value=0, max_value=80).map(
        lambda depth: '{"key": "k", "extra": ' + "[" * depth + "]" * depth + "}"
    ),
    st.sampled_from(
        ["", "{", "}", "{}", "[]", "null", "1e999999", "NaN", '{"key": NaN}', '{"key": "\\ud800"}']
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(_TEXTS, min_size=1, max_size=4),
    name=st.sampled_from(["look", "put", "other", "missing"]),
)
def test_route_is_the_plain_way_for_any_text(texts: list[str], name: str) -> None:
    """Any text, of a tool of either kind or of none: route's result is ``_route``'s, at
    the first call (the name learnt) and at the next ones (read from what was kept)."""
    registry = ToolRegistry([look, put, other])
    plain = ToolRegistry([look, put, other])
    for text in texts:
        assert _seen(registry.route(name, text)) == _seen(plain._route(name, text))


_CHANGES = (
    "none",
    "swap tool",
    "swap kind",
    "foreign entry",
    "other class entry",
    "plain entry",
    "forget",
)


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(_CHANGES), st.sampled_from(["look", "put"]), _OBJECTS),
        min_size=1,
        max_size=6,
    )
)
def test_what_route_kept_is_read_only_for_its_own_tool_and_class(
    steps: list[tuple[str, str, str]],
) -> None:
    """What route kept of a name, changed between calls (the name's tool swapped for one
    of another arguments class, or of the other kind and the same class, an entry of
    another tool or arguments class put in its place, an entry marked plain, the entry
    forgotten), never lets it read another tool's class: every call is the plain way's,
    and a wrong entry is learnt again."""
    registry = ToolRegistry([look, put, other])
    for change, name, text in steps:
        if change == "swap tool":
            registry._tools[name] = other if registry._tools[name] is not other else look
        elif change == "swap kind":  # the other tool of the same arguments class
            registry._tools[name] = put if registry._tools[name] is look else look
        elif change == "foreign entry":
            registry.route("other", '{"key": "k"}')
            registry._known[name] = registry._known["other"]
        elif change == "other class entry":
            kept = registry._known.get(name)
            if kept is not None:
                registry._known[name] = (kept[0], _OtherArgs, *kept[2:])
        elif change == "plain entry":
            kept = registry._known.get(name)
            if kept is not None:
                registry._known[name] = (kept[0], kept[1], None, None, None)
        elif change == "forget":
            registry._known.pop(name, None)
        tool = registry._tools[name]
        plain = ToolRegistry([look, put, other])
        plain._tools = dict(registry._tools)
        assert _seen(registry.route(name, text)) == _seen(plain._route(name, text))
        kept = registry._known.get(name)
        if type(registry.route(name, text)) is not InvalidCall:
            # After a valid call the entry is this tool's own, of its own class.
            assert kept is not None
            assert kept[0] is tool
            assert kept[1] is tool.args_model


def test_a_name_not_seen_reads_no_tool() -> None:
    """``_UNKNOWN`` holds no tool and no class, so a name route kept nothing for is learnt."""
    assert _UNKNOWN == (None, None, None, None, None)
    registry = ToolRegistry([look])
    assert "look" not in registry._known
    call: Any = registry.route("look", '{"key": "k"}')
    assert type(call) is ReadCall
    assert registry._known["look"][0] is look
    assert registry._known["look"][1] is _Args
    assert registry._known["look"][2] is not None
