"""The durable dump's two shortcuts of round 25 give what their plain ways give (issue 23).

- ``_saving._rounded`` is ``round(seconds, 6)`` (the clock's reading as a checkpoint
  saves it) for an exact ``float`` in (0, 1e9) by float arithmetic: compared here with
  ``round`` on any float, on the halves between two microseconds and the floats next to
  them (where the arithmetic cannot tell and ``round`` itself answers), and on readings
  of other types; a saver's documents hold what ``round`` gives.
- ``_delta._chunked_change`` takes a full tail made a chunk by one item appended (a
  transcript's 32nd message then one more, an action log's 32nd record then one more)
  without ``_chunked_plain``'s walk: the new item encoded, the tail's encodings packed
  into the chunk's text, an ``append`` op and a ``pack`` op. Compared with
  ``_chunked_plain`` on logs and transcripts of every length around the chunks' edges
  (the same encoding, JSON for JSON and type for type, the same ops), shown taken where
  it applies, and whole runs dump and store the same with it turned off.
"""

from __future__ import annotations

import json
import math
import random
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_delta_fast import encoding_of, exact, log_of, records, settled
from test_save_fast import Runtime
from test_save_fast5 import phases_of, save_run

from statemachine import MemoryCheckpointer
from statemachine._actions import _RECORD_FIELDS, CHUNK, ActionLog, ActionRecord
from statemachine._model import Message, ToolRequest, Transcript
from statemachine._saving import _rounded, _Saver
from statemachine.persist import _delta
from statemachine.persist._chunks import _MESSAGE_KEYS, _packed
from statemachine.persist._codec import _encode, dump_phase
from statemachine.persist._delta import PhaseDumper, _chunked_change, _chunked_plain

# --- the clock's reading, rounded -----------------------------------------------------


def same_float(got: Any, want: Any) -> bool:
    """The same value of the same type, a zero's sign and a NaN included."""
    if type(got) is not type(want):
        return False
    if isinstance(want, float):
        if math.isnan(want):
            return math.isnan(got)
        return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)
    return bool(got == want)


def halves(micros: int) -> list[float]:
    """The float nearest the half between two microseconds, and the floats around it."""
    middle = (micros + 0.5) / 1e6
    near = [middle]
    for direction in (0.0, math.inf):
        step = middle
        for _ in range(3):
            step = math.nextafter(step, direction)
            near.append(step)
    return near


@settings(max_examples=2000)
@given(st.floats())
def test_any_float_rounds_as_round_does(seconds: float) -> None:
    assert same_float(_rounded(seconds), round(seconds, 6))


@settings(max_examples=2000)
@given(st.floats(0.0, 2e9) | st.floats(0.0, 10.0) | st.floats(-1.0, 1.0))
def test_a_run_s_readings_round_as_round_does(seconds: float) -> None:
    assert same_float(_rounded(seconds), round(seconds, 6))


@pytest.mark.parametrize("low", [1e8, 4.5e9, 9e9, 1e11, 1e13, 1e15])
def test_large_readings_round_as_round_does(low: float) -> None:
    # Past 2**52 / 1e6 (~4.5e9) the float product holds no half: ``round`` answers.
    spread = random.Random(low)
    for _ in range(20_000):
        seconds = spread.uniform(low, 2 * low)
        assert same_float(_rounded(seconds), round(seconds, 6))


@settings(max_examples=1000)
@given(st.integers(0, 2 * 10**15) | st.integers(0, 10**7))
def test_the_halves_between_two_microseconds_round_as_round_does(micros: int) -> None:
    for seconds in halves(micros):
        assert same_float(_rounded(seconds), round(seconds, 6))


@pytest.mark.parametrize(
    "seconds",
    [
        0.0,
        -0.0,
        5e-324,
        4.9999e-7,
        5e-7,
        1.5e-6,
        2.5e-6,
        0.1234565,
        0.1234575,
        999999.9999995,
        math.nextafter(1e6, 0.0),
        1e6,
        1e6 + 0.5e-6,
        123456789.0000005,
        999999999.9999995,
        math.nextafter(1e9, 0.0),
        1e9,
        4503599627.3704965,
        9007199254.740993,
        9097867655.663723,
        1350284483705749.5,
        -0.0000005,
        -1.5,
        math.inf,
        -math.inf,
        math.nan,
        0,
        7,
        -3,
        True,
        Decimal("1.23456789"),
    ],
)
def test_edges_and_other_types_round_as_round_does(seconds: Any) -> None:
    assert same_float(_rounded(seconds), round(seconds, 6))
    for near in (
        halves(int(abs(seconds) * 1e6)) if type(seconds) is float and math.isfinite(seconds) else []
    ):
        assert same_float(_rounded(near), round(near, 6))


class Readings(Runtime):
    """A runtime whose clock reads the given values in turn."""

    def __init__(self, values: list[Any]) -> None:
        super().__init__()
        self.values = values

    def elapsed(self) -> Any:
        self.ticks += 1
        return self.values[self.ticks - 1]


@settings(max_examples=20, deadline=None)
@given(
    st.lists(
        st.floats(0.0, 2e6) | st.sampled_from([0.0, -0.0, 1.5e-6, 7, 0.1234565]),
        min_size=8,
        max_size=8,
    )
)
def test_a_saver_s_documents_hold_the_reading_round_gives(values: list[Any]) -> None:
    states = phases_of(3)[:8]

    async def go() -> list[Any]:
        saver = _Saver(MemoryCheckpointer(), Readings(values), "a", None)  # type: ignore[arg-type]
        held = []
        for at, state in enumerate(states):
            await saver.save(state, first=at == 0)
            assert saver._saved is not None
            held.append(saver._saved["elapsed"])
        return held

    for got, value in zip(anyio.run(go), values, strict=True):
        assert same_float(got, round(value, 6))


# --- a full tail made a chunk ---------------------------------------------------------


def message(at: int, size: int) -> Message:
    """The ``at``-th message of a run's kind: a request, a call, a tool's result."""
    if at == 0:
        return Message(role="user", content="go")
    if at % 2:
        call = ToolRequest(name="lookup", arguments=json.dumps({"key": f"k{at}"}), id=f"c{at}")
        return Message(role="assistant", content="", tool_calls=(call,))
    return Message(
        role="tool", content="r" * size + str(at), tool_call_id=f"c{at - 1}", name="lookup"
    )


def transcript_of(messages: list[Message]) -> Transcript:
    made = Transcript()
    for item in messages:
        made = made.appended(item)
    return made


def transcript_encoding(transcript: Transcript) -> list[Any]:
    chunks = [
        _packed([_encode(item) for item in chunk], _MESSAGE_KEYS) for chunk in transcript._chunks
    ]
    return chunks + [_encode(item) for item in transcript._tail]


def both(old: Any, new: Any, encoded: list[Any], path: list[str], keys: tuple[str, ...]) -> Any:
    """``_chunked_change`` and ``_chunked_plain`` of one change, each on its own copies."""
    parts = ((old._chunks, old._tail), (new._chunks, new._tail))
    fast = _chunked_change(*parts, new, list(encoded), list(path), keys)
    plain = _chunked_plain(*parts, new, list(encoded), list(path), keys)
    return fast, plain


@settings(max_examples=300, deadline=None)
@given(data=st.data(), size=st.sampled_from([0, 1, 30, 31, 32, 33, 63, 64, 65, 95, 96]))
def test_a_log_that_fills_a_chunk_gives_the_plain_walk_s_encoding_and_ops(
    data: Any, size: int
) -> None:
    items = [data.draw(records()) for _ in range(size)]
    old = log_of(items)
    how = data.draw(st.sampled_from(["append", "append", "two", "settle", "copied"]))
    if how == "append":
        new = old.appended(data.draw(records()))
    elif how == "two":
        new = old.appended(data.draw(records())).appended(data.draw(records()))
    elif how == "settle" and size:
        new = old.replaced(size - 1, data.draw(settled(old[size - 1])))
    elif how == "copied":  # the same records, another log of them: compared one by one
        new = ActionLog._of(tuple(tuple(chunk) for chunk in old._chunks), tuple(old._tail))
        new = new.appended(data.draw(records()))
    else:
        new = old
    encoded = encoding_of(old)
    fast, plain = both(old, new, encoded, ["fields", "loop", "actions"], _RECORD_FIELDS)
    assert exact(fast) == exact(plain)
    assert exact(fast[0]) == exact(encoding_of(new))


@settings(max_examples=300, deadline=None)
@given(
    size=st.sampled_from([0, 1, 31, 32, 33, 63, 64, 65, 96]),
    width=st.integers(0, 40),
    how=st.sampled_from(["append", "append", "two", "fresh chunk", "other item", "short"]),
)
def test_a_transcript_that_fills_a_chunk_gives_the_plain_walk_s_encoding_and_ops(
    size: int, width: int, how: str
) -> None:
    messages = [message(at, width) for at in range(size)]
    old = transcript_of(messages)
    encoded = transcript_encoding(old)
    if how == "append":
        new = old.appended(message(size, width))
    elif how == "two":
        new = old.appended(message(size, width), message(size + 1, width))
    elif how == "fresh chunk" and old._chunks:  # an equal chunk, other messages: a splice
        chunks = (*old._chunks[:-1], tuple(m.model_copy() for m in old._chunks[-1]))
        new = Transcript._of((), chunks, old._tail).appended(message(size, width))
    elif how == "other item" and len(old._tail) == CHUNK:  # the tail's first replaced
        tail = (message(0, width + 1), *old._tail[1:])
        new = Transcript._of((), old._chunks, tail).appended(message(size, width))
    elif how == "short":  # an encoding of another length: the plain walk
        encoded = encoded[:-1]
        new = old.appended(message(size, width)) if encoded else old
    else:
        new = old.appended(message(size, width))
    path = ["fields", "transcript"]
    if how == "short" and not encoded:
        return
    fast, plain = both(old, new, encoded, path, _MESSAGE_KEYS)
    assert exact(fast) == exact(plain)
    if how != "short":
        assert exact(fast[0]) == exact(transcript_encoding(new))


def test_the_shortcut_is_taken_where_a_full_tail_fills(monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[int] = []
    plain = _delta._chunked_plain

    def spy(*args: Any) -> Any:
        walked.append(1)
        return plain(*args)

    monkeypatch.setattr(_delta, "_chunked_plain", spy)
    for size in (CHUNK, 2 * CHUNK):
        old = transcript_of([message(at, 3) for at in range(size)])
        new = old.appended(message(size, 3))
        made, ops = _chunked_change(
            (old._chunks, old._tail),
            (new._chunks, new._tail),
            new,
            transcript_encoding(old),
            ["fields", "transcript"],
            _MESSAGE_KEYS,
        )
        assert [op[0] for op in ops] == ["append", "pack"]
        assert ops[1][2:] == [size // CHUNK - 1, CHUNK, list(_MESSAGE_KEYS)]
        assert exact(made) == exact(transcript_encoding(new))
        log = log_of([record(at) for at in range(size)])
        grown = log.appended(record(size))
        _chunked_change(
            (log._chunks, log._tail),
            (grown._chunks, grown._tail),
            grown,
            encoding_of(log),
            ["fields", "loop", "actions"],
            _RECORD_FIELDS,
        )
    assert walked == []
    # A tail of 31 grown by one, or a full one by two: not this shortcut.
    old = transcript_of([message(at, 3) for at in range(CHUNK)])
    new = old.appended(message(CHUNK, 3), message(CHUNK + 1, 3))
    parts = ((old._chunks, old._tail), (new._chunks, new._tail))
    _chunked_change(*parts, new, transcript_encoding(old), ["t"], _MESSAGE_KEYS)
    assert walked == [1]


def record(at: int) -> ActionRecord:
    return ActionRecord(
        call_id=f"c{at}",
        tool="lookup",
        effect="read",
        exact=f"e{at}",
        key=f"k{at}",
        text=f"lookup({at})",
        outcome="ok",
        result=str(at),
        gain=at / 7,
    )


def _no_shortcut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_delta, "_full", lambda chunk, tail: False)


def test_whole_runs_dump_as_without_the_shortcut(monkeypatch: pytest.MonkeyPatch) -> None:
    phases = phases_of(50)  # 150 transitions: three chunks of messages, one of records
    fast = PhaseDumper()
    got = [fast.dump(phase) for phase in phases]
    with monkeypatch.context() as patched:
        _no_shortcut(patched)
        slow = PhaseDumper()
        want = [slow.dump(phase) for phase in phases]
    packs = 0
    for phase, (document, ops), (document2, ops2) in zip(phases, got, want, strict=True):
        assert exact(document) == exact(document2)
        assert exact(ops) == exact(ops2)
        assert type(ops) is type(ops2)
        assert exact(document) == exact(dump_phase(phase))
        packs += sum(op[0] == "pack" for op in ops or ())
    assert packs >= 4


@settings(max_examples=6, deadline=None)
@given(calls=st.integers(15, 45), every=st.integers(2, 40))
def test_whole_runs_store_the_same_rows_without_the_shortcut(calls: int, every: int) -> None:
    states = phases_of(calls)
    with tempfile.TemporaryDirectory() as folder:
        fast = anyio.run(save_run, Path(folder) / "fast.db", "r", states, {"snapshot_every": every})
        with pytest.MonkeyPatch.context() as patched:
            _no_shortcut(patched)
            plain = anyio.run(
                save_run, Path(folder) / "plain.db", "r", states, {"snapshot_every": every}
            )
    assert fast == plain
