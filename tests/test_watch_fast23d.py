# pyright: reportPrivateUsage=false, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false
"""A pair's function reads a reply in the transcript's last full chunk in its own frame.

When a transcript's tail holds only tool messages (the reply that asked for them is in
the chunk before: every 16 tool calls of a run, the tail starts again with the last
answer), ``accept``'s short way (``_pair_code``'s function) looks for the reply in the
last chunk, that chunk and the tail being the transcript's last messages, instead of
``_exact_reply`` reading the whole transcript through its ``__getitem__``: only for a
``Transcript`` whose ``_chunks`` is exactly a tuple whose last chunk is exactly a tuple
of ``_CHUNK`` items; anything else (a chunk kept as text, a chunk of another length, the
tool messages running back past the chunk) still goes to ``_exact_reply``. The same
messages are read in the same order, so the verdict is the same as ``Watch._quick``'s
(the plain form) and ``accept``'s the same as the reference's, for replies of every
kind, ids answered or not, and messages changed in place with ``object.__setattr__``.
"""

from __future__ import annotations

from typing import Any

import pytest
import test_fast_runner4 as runner4
import test_watch_quick as quick_cases
from hypothesis import given, settings
from hypothesis import strategies as st
from test_watch_fast16 import _judged
from test_watch_fast17 import _request
from test_watch_fast18 import _three_ways

from statemachine import Message, Planning, Transcript, _watch
from statemachine._model import _CHUNK

_IDS = st.sampled_from(["c1", "c2", "c3", "zz"])
_PAIRS = runner4._SHORT_PAIRS[1:4]  # Planning -> ToolCalling -> Observing -> Planning
_put = object.__setattr__


def _seen(pair: tuple[str, str]) -> Any:
    run = quick_cases._recorded(1)
    return next(s for s in run if (type(s[3]).__name__, type(s[4]).__name__) == pair)


def _answer(call_id: str) -> Message:
    return Message(role="tool", content="{}", tool_call_id=call_id, name="lookup")


def _nothing() -> None:
    return None


def _placed(
    after: Any, messages: list[Any], reply: Any, answers: tuple[Any, ...], back: int
) -> Any:
    """The transcript of ``after``'s messages, padding, ``reply`` and ``answers``, padded
    so that ``back`` of the answers end the last chunk and the rest are the tail (none
    when ``back`` is all of them: a full tail, the reply in the chunk before)."""
    pad = -(len(messages) + 1 + back) % _CHUNK
    return Transcript((*messages, *[Message(role="user", content="pad")] * pad, reply, *answers))


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the pair functions' calls of ``_exact_reply``."""
    calls = [0]
    plain = _watch._exact_reply

    def counted(transcript: Any) -> Any:
        calls[0] += 1
        return plain(transcript)

    monkeypatch.setitem(_watch._PAIR_NAMES, "_exact_reply", counted)
    return calls


@settings(max_examples=300, deadline=None)
@given(
    pair=st.sampled_from(_PAIRS),
    asked=st.lists(_IDS, min_size=0, max_size=3),
    answered=st.lists(_IDS, min_size=1, max_size=3),
    back=st.integers(0, 3),
    role=st.sampled_from(["assistant", "assistant", "user", "system"]),
    extra=st.integers(0, 2),
)
def test_a_reply_in_the_last_chunk_is_judged_alike(
    pair: tuple[str, str],
    asked: list[str],
    answered: list[str],
    back: int,
    role: str,
    extra: int,
) -> None:
    """A reply (an assistant's asking for ``asked``, or a user's or system message) then
    tool messages answering ``answered``, ``back`` of which end the chunk the reply is in
    (the tail all tool messages), with ``extra`` more tool messages before the reply's
    answers' chunk end sometimes: the pair's function answers as ``_quick`` does, and
    ``accept`` as the reference and the whole check do."""
    seen = _seen(pair)
    after = seen[4]
    if role == "assistant":
        reply = Message(role="assistant", tool_calls=tuple(map(_request, asked)))
    else:
        reply = Message(role=role, content="hi")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    answers = tuple(_answer("".join(list(name))) for name in [*answered, *["c1"] * extra])
    back = min(back, len(answers))
    if type(after) is not Planning and asked:
        _put(after, "call_id", "".join(list(asked[-1])))
    _put(after, "transcript", _placed(after, list(after.transcript), reply, answers, back))
    accepted = _three_ways(seen, _nothing)
    took = _judged(seen, "fast")[0]
    assert took == ("answer", accepted[0] == ("accepted", True))


def test_the_reply_last_of_a_chunk_is_read_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reply ending a chunk, its answer the whole tail (a run's shape every 16 calls):
    accepted by the pair's function without ``_exact_reply``; the same with the reply
    earlier in the chunk; and with more tool messages than a chunk, or the chunk kept as
    text, ``_exact_reply`` judges (and accepts the same)."""
    calls = _counting(monkeypatch)
    for back in (0, 1, 2):
        seen = _seen(("Observing", "Planning"))
        after = seen[4]
        asked = tuple(_request(f"c{n}") for n in range(back + 1))
        answers = tuple(_answer(f"c{n}") for n in range(back + 1))
        transcript = _placed(
            after,
            list(after.transcript),
            Message(role="assistant", tool_calls=asked),
            answers,
            back,
        )
        assert len(transcript._tail) == 1
        assert transcript._tail[0].role == "tool"
        _put(after, "transcript", transcript)
        assert _judged(seen, "fast")[0] == ("answer", True)
        assert _judged(seen, "plain")[0] == ("answer", True)
        assert calls[0] == 0
    # The tool messages run back past the last chunk: _exact_reply reads them.
    seen = _seen(("Observing", "Planning"))
    after = seen[4]
    ids = [f"c{n}" for n in range(_CHUNK + 2)]
    reply = Message(role="assistant", tool_calls=tuple(map(_request, ids)))
    transcript = _placed(after, list(after.transcript), reply, tuple(map(_answer, ids)), _CHUNK + 1)
    assert len(transcript._tail) == 1
    assert all(message.role == "tool" for message in transcript._chunks[-1])
    _put(after, "transcript", transcript)
    assert _judged(seen, "fast")[0] == ("answer", True)
    assert calls[0] == 1


def _hostile_chunks(transcript: Any, how: str) -> None:
    chunks = transcript._chunks
    last = chunks[-1]
    if how == "list":
        _put(transcript, "_chunks", list(chunks))
    elif how == "short":
        _put(transcript, "_chunks", (*chunks[:-1], last[1:]))
    elif how == "long":
        _put(transcript, "_chunks", (*chunks[:-1], (last[0], *last)))
    elif how == "text":
        _put(transcript, "_chunks", (*chunks[:-1], "[]"))
    elif how == "list chunk":
        _put(transcript, "_chunks", (*chunks[:-1], list(last)))
    elif how == "no chunks":
        _put(transcript, "_chunks", ())
    elif how == "counted chunks":
        _put(transcript, "_chunks", _Counted(chunks))


class _Counted(tuple[Any, ...]):
    """Chunks that count their reads (a tuple subclass: not exactly a tuple)."""

    reads = 0

    def __getitem__(self, at: Any) -> Any:
        type(self).reads += 1
        return super().__getitem__(at)


class _Asking:
    """Not a Message: a reply-like object whose role is read as the plain way reads it."""

    def __init__(self, role: str, calls: Any) -> None:
        self.reads = 0
        self._role, self.tool_calls = role, calls

    @property
    def role(self) -> str:
        self.reads += 1
        return self._role


@pytest.mark.parametrize("pair", _PAIRS)
@pytest.mark.parametrize(
    "how",
    [
        "none",
        "list",
        "short",
        "long",
        "text",
        "list chunk",
        "no chunks",
        "counted chunks",
        "ids changed",
        "role changed",
        "calls a list",
        "answer changed",
        "not a message",
        "not a message, user",
    ],
)
def test_hostile_chunks_and_changed_messages_are_judged_alike(
    pair: tuple[str, str], how: str
) -> None:
    """The last chunk not as the library makes it (a list of chunks, a chunk one short or
    one long, kept as text with no reader, a list, no chunks at all), or its reply
    changed in place with ``object.__setattr__`` after it was made (other ids, another
    role, its calls a list), or the tail's answer's id changed, or a reply that is not a
    ``Message`` (its role read as often as the plain way reads it): judged alike, a
    changed id refused by each way."""
    seen = _seen(pair)
    after = seen[4]
    holds = type(after) is not Planning
    asked = ("c1", "c2") if holds else ("c1",)
    reply: Any = Message(role="assistant", tool_calls=tuple(map(_request, asked)))
    if how.startswith("not a message"):
        reply = _Asking(
            "user" if how.endswith("user") else "assistant", tuple(map(_request, asked))
        )
    if holds:
        _put(after, "call_id", "c2")
    answers = (_answer("c1"),)
    transcript = _placed(after, list(after.transcript), reply, answers, 0)
    assert len(transcript._tail) == 1
    if how == "ids changed":
        _put(reply, "tool_calls", tuple(map(_request, ("zz", *asked[1:]))))
    elif how == "role changed":
        _put(reply, "role", "user")
    elif how == "calls a list":
        _put(reply, "tool_calls", list(reply.tool_calls))
    elif how == "answer changed":
        _put(transcript._tail[0], "tool_call_id", "zz")
    else:
        _hostile_chunks(transcript, how)
    _put(after, "transcript", transcript)
    _Counted.reads = 0
    fast = _judged(seen, "fast")
    reads = reply.reads if isinstance(reply, _Asking) else 0
    chunk_reads = _Counted.reads
    plain = _judged(seen, "plain")
    assert fast == plain
    if isinstance(reply, _Asking):
        assert reply.reads == 2 * reads  # as many reads of its role each way
    assert _Counted.reads == 2 * chunk_reads  # and of the chunks
    if how == "counted chunks":
        assert chunk_reads > 0
    accepted = runner4._answer(seen, "accept")
    assert accepted == runner4._answer(seen, "reference")
    if how in ("ids changed", "answer changed"):
        assert fast[0] == ("answer", False)
        assert accepted[0] != ("accepted", True)
