"""Any sequence of a store's operations gives the same answers on SQLite (format 1: runs
ending with a marker row) as on the memory store (issue 23).

A SQLite run's seq, phase and moment are read from its end marker, its moment as the
later of its row's and its marker's, its head from the marker alone; a save that changes
only those writes the marker, not the run's row, in one statement when it can. Here
Hypothesis draws sequences of saves (next deltas given as ops, plain documents, changes
of status), changes of status, holds, stop requests, decisions, claims and purges on two
runs, made through two SQLite connections (each save's shortcut refused when the other wrote
last) and through one memory store, on clocks that read alike; after every
step the results, each run's record, the registry, the loads and the histories agree.
"""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st
from test_save_fast import Clock  # one second a reading; shared by a side's stores

from statemachine import MemoryCheckpointer, SQLiteCheckpointer
from statemachine.persist._base import _Store
from statemachine.persist._delta import _diff, _seen_of

RUNS = ("a", "b")
STATUSES = ("running", "interrupted", "completed", "cancelled", "failed_resumable")


def document(seq: int, run_id: str) -> dict[str, Any]:
    return {"run": run_id, "n": seq, "items": [f"item {i}" for i in range(seq % 7)]}


_save = st.tuples(
    st.just("save"),
    st.sampled_from(RUNS),
    st.sampled_from(("running",) * 8 + ("interrupted", "completed")),
    st.sampled_from(("Planning", "ToolCalling", "Observing")),
    st.booleans(),  # given as ops on the document saved last
)
_other = st.one_of(
    st.tuples(st.just("set_status"), st.sampled_from(RUNS), st.sampled_from(STATUSES)),
    st.tuples(st.just("hold"), st.sampled_from(RUNS)),
    st.tuples(st.just("request_stop"), st.sampled_from(RUNS)),
    st.tuples(st.just("submit_decision"), st.sampled_from(RUNS)),
    st.tuples(st.just("take_decision"), st.sampled_from(RUNS)),
    st.tuples(st.just("claim"), st.sampled_from(RUNS)),
    st.tuples(st.just("release"), st.sampled_from(RUNS)),
    st.tuples(st.just("claim_next")),
    st.tuples(st.just("purge")),
)
# Saves two steps in three.
_operation = st.integers(0, 2).flatmap(lambda n: _other if n == 0 else _save)


class Side:
    """One kind of store and what its runs saved last."""

    def __init__(self, stores: list[_Store], reader: _Store, clock: Clock, where: str) -> None:
        self.stores = stores
        self.reader = reader
        self.clock = clock
        self.where = where
        self.seqs: dict[str, int] = {}
        self.saved: dict[str, dict[str, Any]] = {}

    async def step(self, connection: int, operation: tuple[Any, ...]) -> Any:
        store = self.stores[connection]
        name, *rest = operation
        if name == "save":
            run_id, status, phase, with_ops = rest
            seq = self.seqs.get(run_id, -1) + 1
            made = document(seq, run_id)
            base = self.saved.get(run_id)
            options: dict[str, Any] = {}
            if with_ops and base is not None:
                # The store's own diff of the two: a save gives the same bytes whether it
                # uses these ops (its next delta) or diffs the document itself (a store
                # that did not save the run last).
                ops: list[list[Any]] = []
                _diff(_seen_of(base), made, [], ops)
                options = {"base": base, "ops": ops}
            record = await store.save(
                run_id,
                seq,
                made,
                agent="a",
                status=status,
                phase=phase,
                waiting_for="approval" if status == "interrupted" else "",
                **options,
            )
            self.seqs[run_id] = seq
            self.saved[run_id] = made
            return record
        if name == "set_status":
            return await store.set_status(rest[0], rest[1])
        if name == "hold":
            return await store.hold(rest[0], reason="look")
        if name == "request_stop":
            return await store.request_stop(rest[0])
        if name == "submit_decision":
            return await store.submit_decision(rest[0], {"approve": True})
        if name == "take_decision":
            return await store.take_decision(rest[0])
        if name == "claim":
            return await store.claim(rest[0], "w", lease=timedelta(seconds=30))
        if name == "release":
            return await store.release(rest[0], "w")
        if name == "claim_next":
            return await store.claim_next("w", lease=timedelta(seconds=30))
        assert name == "purge"
        return await store.purge(timedelta(seconds=5), now=self.clock.now)

    async def outcome(self, connection: int, operation: tuple[Any, ...]) -> Any:
        try:
            return ("ok", await self.step(connection, operation))
        except Exception as exc:  # compared as the other store's (a refused save: its seq stays)
            return ("error", type(exc).__name__, str(exc).replace(self.where, "<store>"))

    async def state(self, *, load: bool) -> Any:
        """Each run's record and history, and the registry; with ``load``, each run loads
        as the document it saved last (a load makes a store forget what it saved last:
        the memory store loads at the end only)."""
        store = self.reader
        runs: list[Any] = []
        for run_id in RUNS:
            try:
                record = await store.record(run_id)
            except Exception as exc:  # an unknown run, or one purged
                runs.append(type(exc).__name__)
                continue
            if load:
                assert await store.load(run_id) == (record.seq, self.saved[run_id])
                assert await store.verify(run_id) == record.seq
            history = [
                (e.seq, e.phase, e.snapshot, e.size, e.at) for e in await store.history(run_id)
            ]
            runs.append((record, history))
        return runs, await store.registry()


async def compare(operations: list[tuple[int, tuple[Any, ...]]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.db"
        sqlite_clock, memory_clock = Clock(), Clock()
        first = SQLiteCheckpointer(path, snapshot_every=8, clock=sqlite_clock)
        second = SQLiteCheckpointer(path, snapshot_every=8, clock=sqlite_clock)
        # A third connection reads (a load makes a store forget what it saved last, so
        # that its next save takes the plain path): the writers' next deltas keep their
        # one statement. The memory store reads itself.
        reader = SQLiteCheckpointer(path, snapshot_every=8, clock=Clock())
        sqlite = Side([first, second], reader, sqlite_clock, repr(str(path)))
        alone = MemoryCheckpointer(snapshot_every=8, clock=memory_clock)
        memory = Side([alone, alone], alone, memory_clock, "")
        try:
            for connection, operation in operations:
                on_sqlite = await sqlite.outcome(connection, operation)
                on_memory = await memory.outcome(connection, operation)
                if on_memory[0] == "error":  # the stores name themselves: compare the kind
                    assert on_sqlite[:2] == on_memory[:2], (operation, on_sqlite, on_memory)
                else:
                    assert on_sqlite == on_memory, (operation, on_sqlite, on_memory)
                mine = await sqlite.state(load=True)
                assert mine == await memory.state(load=False), operation
            assert await sqlite.state(load=True) == await memory.state(load=True)
        finally:
            for store in (first, second, reader):
                await store.aclose()


# Each step made through the first connection, or now and then through the second.
_steps = st.lists(st.tuples(st.sampled_from((0, 0, 0, 1)), _operation), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(operations=_steps)
def test_sqlite_answers_as_the_memory_store_does(
    operations: list[tuple[int, tuple[Any, ...]]],
) -> None:
    anyio.run(compare, operations)
