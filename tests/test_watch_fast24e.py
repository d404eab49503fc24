# pyright: reportPrivateUsage=false, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false
"""A pair's function reads a run's usual reply without its loop (``_USUAL_REPLY``).

No pending calls; the transcript's tail ends with the reply (a class holding a call:
``ToolCalling``, ``Observing``) or with the reply and one tool message (``Planning``);
each exactly a ``Message`` whose role is the very ``str`` of the library's literal
(``"assistant"``, ``"tool"``, by identity: no ``__eq__`` runs), the reply's
``tool_calls`` exactly a tuple of one call. Then the one id is compared as the loop
compares it. For every other shape (an equal role that is another ``str`` or a ``str``
subclass, a ``Message`` subclass, ``tool_calls`` a list or a tuple subclass, calls of
any number, answers of any number, pending calls, ids equal but not the same object, or
not equal) the pair's function answers as ``Watch._quick`` (the plain form) does, with
the same ``__eq__`` calls made, and ``accept`` as the reference and the whole check do.
"""

from __future__ import annotations

import sys
from typing import Any

import test_watch_quick as quick_cases
from hypothesis import given, settings
from hypothesis import strategies as st
from test_watch_fast16 import _fast_of, _judged
from test_watch_fast18 import _three_ways

from statemachine import Message, Planning, ToolRequest, Transcript, _watch

_Seen = quick_cases._Seen
_PAIRS = [("Planning", "ToolCalling"), ("ToolCalling", "Observing"), ("Observing", "Planning")]
_IDS = st.sampled_from(["c1", "c2", "zz"])
_put = object.__setattr__


class _Said(str):
    """A role or id equal to a ``str``, counting the ``==`` asked of it."""

    __slots__ = ()
    asked: list[int] = [0]  # noqa: RUF012 - one counter for the class

    def __eq__(self, other: object) -> bool:
        type(self).asked[0] += 1
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        type(self).asked[0] += 1
        return str.__ne__(self, other)

    __hash__ = str.__hash__


class _SubMessage(Message):  # type: ignore[misc]  # pyright: ignore[reportGeneralTypeIssues]
    """A message of another class (it reads the same)."""


class _Calls(tuple[ToolRequest, ...]):
    """Calls that are not exactly a tuple."""


def _text(text: str, form: str) -> str:
    """``text`` as the library's literal (interned), an equal copy, or a ``_Said``."""
    if form == "same":
        return sys.intern(text)
    if form == "copy":
        made = "".join(list(text))
        assert made is not sys.intern(text)
        return made
    return _Said(text)


def _message(cls: type[Message], role: str, **fields: Any) -> Message:
    made = cls(role="user", **fields)
    _put(made, "role", role)  # a role of any form, put in place
    return made


def _seen(pair: tuple[str, str]) -> _Seen:
    run = quick_cases._recorded(1)
    return next(s for s in run if (type(s[3]).__name__, type(s[4]).__name__) == pair)


def _judged_alike(seen: _Seen) -> tuple[object, ...]:
    """The pair's function and ``_quick``: the same answer, records and ``==`` asked;
    ``accept``, the reference and ``_checked``: the same (``_three_ways``)."""
    _Said.asked[0] = 0
    fast = _judged(seen, "fast")
    asked_fast = _Said.asked[0]
    _Said.asked[0] = 0
    plain = _judged(seen, "plain")
    assert fast == plain
    assert asked_fast == _Said.asked[0]
    return _three_ways(seen, lambda: None)


def _shaped(
    seen: _Seen,
    *,
    asked: list[str],
    answered: list[str],
    reply_role: str = "same",
    reply_cls: type[Message] = Message,
    calls: str = "tuple",
    told_role: str = "same",
    told_cls: type[Message] = Message,
    ids: str = "same",
    held: str | None = None,
    pending: bool = False,
    role: str = "assistant",
) -> _Seen:
    """``seen`` with its later phase's transcript ending with a reply (``role``) asking
    for ``asked``, then tool messages answering ``answered``, its held call ``held``
    (for a class holding one) and a pending call or none."""
    after = seen[4]
    requests = tuple(ToolRequest(id=sys.intern(name), name="lookup") for name in asked)
    made: Any = {"tuple": requests, "list": list(requests), "sub": _Calls(requests)}[calls]
    reply = _message(reply_cls, _text(role, reply_role))
    _put(reply, "tool_calls", made)
    answers = [
        _message(told_cls, _text("tool", told_role), content="{}", tool_call_id=_text(name, ids))
        for name in answered
    ]
    messages = list(after.transcript)
    _put(after, "transcript", Transcript((*messages, reply, *answers)))
    if type(after) is not Planning and held is not None:
        _put(after, "call_id", _text(held, ids))
    if pending:
        _put(after, "pending", (ToolRequest(id="p1", name="lookup"),))
    return seen


@settings(max_examples=400, deadline=None)
@given(
    pair=st.sampled_from(_PAIRS),
    asked=st.lists(_IDS, min_size=0, max_size=2),
    answered=st.lists(_IDS, min_size=0, max_size=2),
    reply_role=st.sampled_from(["same", "same", "copy", "said"]),
    reply_cls=st.sampled_from([Message, Message, _SubMessage]),
    calls=st.sampled_from(["tuple", "tuple", "list", "sub"]),
    told_role=st.sampled_from(["same", "same", "copy", "said"]),
    told_cls=st.sampled_from([Message, Message, _SubMessage]),
    ids=st.sampled_from(["same", "copy", "said"]),
    held=st.one_of(st.none(), _IDS),
    pending=st.booleans(),
    role=st.sampled_from(["assistant", "assistant", "user", "tool"]),
)
def test_any_reply_is_judged_as_the_plain_form_does(
    pair: tuple[str, str],
    asked: list[str],
    answered: list[str],
    reply_role: str,
    reply_cls: type[Message],
    calls: str,
    told_role: str,
    told_cls: type[Message],
    ids: str,
    held: str | None,
    pending: bool,
    role: str,
) -> None:
    seen = _shaped(
        _seen(pair),
        asked=asked,
        answered=answered,
        reply_role=reply_role,
        reply_cls=reply_cls,
        calls=calls,
        told_role=told_role,
        told_cls=told_cls,
        ids=ids,
        held=held,
        pending=pending,
        role=role,
    )
    _judged_alike(seen)


def _usual(pair: tuple[str, str], **changes: Any) -> _Seen:
    """The usual shape of ``pair``: one call asked, answered by the tool message after
    the reply (``Planning``) or held (the others)."""
    holds = pair[1] != "Planning"
    shape: dict[str, Any] = {"asked": ["c1"], "answered": [] if holds else ["c1"], "held": "c1"}
    shape.update(changes)
    return _shaped(_seen(pair), **shape)


def _loop_line(seen: _Seen) -> tuple[Any, int]:
    """The pair's function of ``seen`` and the line where its loop starts."""
    watch, _counters, _pending, before, after, _parent = seen
    fast = _fast_of(watch, before, after)
    assert fast is not None
    if fast.__name__ == "first":  # made at its first call: made now
        _judged(seen, "fast")
        fast = _fast_of(watch, before, after)
    _, (holds, runs, queued, _counted), index = _watch._FAST[type(before)][1][type(after)]
    sources: list[str] = []
    plain = _watch._placed_code

    def kept(source: str, filename: str, placeholders: int) -> Any:
        sources.append(source)
        return plain(source, filename, placeholders)

    _watch._placed_code = kept  # type: ignore[assignment]
    try:
        code = _watch._pair_code.__wrapped__(  # type: ignore[attr-defined]
            index >= 2,
            index % 2 == 1,
            holds,
            runs,
            queued,
            watch._keys,
            _watch._RAW_KINDS[len(watch._raw or ())],
        )
    finally:
        _watch._placed_code = plain  # type: ignore[assignment]
    assert code.co_code == fast.__code__.co_code
    lines = sources[0].splitlines()
    return fast, 1 + lines.index("        end = start = len(last)")


def _lines_run(seen: _Seen) -> set[int]:
    """The lines of the pair's function that judging ``seen`` runs."""
    lines: set[int] = set()

    def trace(frame: Any, event: str, _arg: Any) -> Any:
        if frame.f_code.co_filename != "<statemachine accept>":
            return None

        def local(frame: Any, event: str, _arg: Any) -> Any:
            if event == "line":
                lines.add(frame.f_lineno)
            return local

        return local

    sys.settrace(trace)
    try:
        answer = _judged(seen, "fast")
    finally:
        sys.settrace(None)
    assert answer[0] == ("answer", True)
    return lines


def test_the_usual_reply_is_read_without_the_loop() -> None:
    """A run's usual transitions take the usual reply's branch (the loop's first line
    never runs), and accept; a reply of two calls, or an equal role of another ``str``,
    take the loop, and accept the same."""
    for pair in _PAIRS:
        seen = _usual(pair)
        _fast, loop = _loop_line(seen)
        assert loop not in _lines_run(seen)
        _judged_alike(seen)
    for pair in _PAIRS:
        holds = pair[1] != "Planning"
        two = _usual(pair, asked=["c1", "c2"], answered=["c1"] if holds else ["c1", "c2"])
        if holds:
            _put(two[4], "call_id", "c2")
        shapes = [two, _usual(pair, reply_role="copy")]
        if not holds:
            shapes.append(_usual(pair, told_role="copy"))
        for seen in shapes:
            _fast, loop = _loop_line(seen)
            assert loop in _lines_run(seen)
            _judged_alike(seen)


def test_the_usual_reply_refuses_what_the_plain_form_refuses() -> None:
    """The usual shape with the id answered or held another one, or a role other than
    the reply's: refused by the pair's function as by ``_quick``."""
    for pair in _PAIRS:
        holds = pair[1] != "Planning"
        wrong = _usual(pair, held="zz") if holds else _usual(pair, answered=["zz"])
        assert _judged(wrong, "fast")[0] == ("answer", False)
        _judged_alike(wrong)
        for role in ("user", "tool"):
            other = _usual(pair, role=role, held="zz", answered=[] if holds else ["zz"])
            _judged_alike(other)


def _one_change(pair: tuple[str, str]) -> list[dict[str, Any]]:
    """Each way the usual shape of ``pair`` can differ by one thing."""
    holds = pair[1] != "Planning"
    changes: list[dict[str, Any]] = [
        {"reply_role": "copy"},
        {"reply_role": "said"},
        {"reply_cls": _SubMessage},
        {"calls": "list"},
        {"calls": "sub"},
        {"ids": "copy"},
        {"ids": "said"},
        {"pending": True},
        {"role": "user"},
        {"role": "tool"},
        {"asked": []},
        {"asked": ["c1", "c2"]},
        {"asked": ["zz"]},
    ]
    if holds:
        changes += [{"held": "zz"}, {"answered": ["c1"]}, {"held": "zz", "answered": ["c1"]}]
    else:
        changes += [
            {"told_role": "copy"},
            {"told_role": "said"},
            {"told_cls": _SubMessage},
            {"answered": ["zz"]},
            {"answered": []},
            {"answered": ["c1", "c1"]},
            {"asked": ["c1", "c2"], "answered": ["c1", "c2"]},
        ]
    return changes


def test_each_one_change_of_the_usual_reply_is_judged_as_the_plain_form_does() -> None:
    """The usual shape of each pair, and each shape differing from it by one thing
    (a role, class, call, id, answer or pending call): the pair's function answers as
    ``_quick``, with the same ``==`` asked, and ``accept`` as the whole check."""
    for pair in _PAIRS:
        _judged_alike(_usual(pair))
        for change in _one_change(pair):
            _judged_alike(_usual(pair, **change))
