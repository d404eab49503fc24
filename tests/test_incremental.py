"""Incremental checkpoints: a phase dumped from the one before, and its delta handed over.

The runner's saver dumps each phase from the phase saved before it (reusing what did
not change) and gives the library's stores the delta ops with the document, so a save
costs what changed. These tests hold that shortcut to the slow path it replaces: on
every transition of every demo agent's runs the incremental document is exactly what
``dump_phase`` gives and its ops rebuild it exactly from the document before; a store
uses the ops only against the document it saved itself, and otherwise diffs; the C
JSON writer reads back exactly as the pure-Python one; and the bytes per transition
stay flat over a long run.
"""

from __future__ import annotations

import copy
import json
import shutil
import sqlite3
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import agents.research._scenarios as research_scenarios
import agents.support._scenarios as support_scenarios
import agents.travel._handoff as travel_handoff
import agents.travel._scenarios as travel_scenarios
from agents.research.__main__ import main as research_main
from agents.support.__main__ import main as support_main
from agents.travel.__main__ import main as travel_main
from statemachine import (
    Agent,
    Budget,
    Checkpointer,
    CheckpointOrderError,
    MemoryCheckpointer,
    Model,
    ModelReply,
    ModelRequest,
    Phase,
    Runner,
    SQLiteCheckpointer,
    dump_phase,
    read_tool,
)
from statemachine._json import dumps, dumps_fast, dumps_reusing, loads
from statemachine.persist._delta import PhaseDumper, _apply
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

pytestmark = pytest.mark.anyio


def exact(document: Any) -> str:
    """Exact text, in key order: 1, 1.0, True and Decimal('1.00') all differ."""
    return json.dumps(document, default=lambda d: f"{type(d).__name__}({d})")


class CheckedStore(MemoryCheckpointer):
    """A memory store that checks every delta a caller hands it against the document."""

    def __init__(self) -> None:
        super().__init__()
        self.deltas = 0

    async def save(
        self,
        run_id: str,
        seq: int,
        document: Mapping[str, Any],
        *,
        base: Mapping[str, Any] | None = None,
        ops: list[list[Any]] | None = None,
        **row: Any,
    ) -> Any:
        if ops is not None:
            assert base is not None
            rebuilt = copy.deepcopy(dict(base))
            _apply(rebuilt, copy.deepcopy(ops))
            assert exact(rebuilt) == exact(document)
            self.deltas += 1
        return await super().save(run_id, seq, document, base=base, ops=ops, **row)


class Chains:
    """Every transition of the runs made while it records, as chains of phases."""

    def __init__(self) -> None:
        self.chains: list[list[Phase[Any]]] = []

    def seen(self, before: Phase[Any], after: Phase[Any]) -> None:
        if not self.chains or self.chains[-1][-1] is not before:
            self.chains.append([before])  # a new run, or a resumed one
        self.chains[-1].append(after)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> tuple[Chains, list[CheckedStore]]:
    """The demo scenarios' runners, each recording its transitions and, when it has no
    store of its own, checkpointing to a store that checks every delta."""
    chains = Chains()
    stores: list[CheckedStore] = []

    def recording_runner(*args: Any, **kwargs: Any) -> Runner[Any]:
        given = kwargs.get("on_transition")

        def both(before: Phase[Any], after: Phase[Any]) -> None:
            chains.seen(before, after)
            if given is not None:
                given(before, after)

        kwargs["on_transition"] = both
        if kwargs.get("checkpointer") is None:
            stores.append(CheckedStore())
            kwargs["checkpointer"] = stores[-1]
        return Runner(*args, **kwargs)

    for module in (travel_scenarios, travel_handoff, support_scenarios, research_scenarios):
        monkeypatch.setattr(module, "Runner", recording_runner)
    return chains, stores


def check_chain(chain: Sequence[Phase[Any]]) -> int:
    """Dump a run's phases one after the other; return how many came with ops."""
    dumper = PhaseDumper()
    before: dict[str, Any] | None = None
    with_ops = 0
    for phase in chain:
        document, ops = dumper.dump(phase)
        assert exact(document) == exact(dump_phase(phase)), phase.kind
        if before is None:
            assert ops is None
        else:
            assert ops is not None
            rebuilt = copy.deepcopy(before)
            _apply(rebuilt, copy.deepcopy(ops))
            assert exact(rebuilt) == exact(document), phase.kind
            with_ops += 1
        before = copy.deepcopy(document)  # a later dump must not have changed it
    return with_ops


async def test_every_demo_transition_dumps_incrementally_exactly_as_in_full(
    recorded: tuple[Chains, list[CheckedStore]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Travel (approvals, denials, retries, a failed API, the budget stop, the handoff),
    support (refunds approved, suppressed, denied, resumed after a wait) and research
    (suppressed duplicates, plateau, budget, a cyclic plan): on every transition the
    incremental document is dump_phase's, and its ops rebuild it from the one before."""
    chains, stores = recorded
    await travel_main()
    await support_main()
    await research_main()
    capsys.readouterr()
    kinds = {phase.kind for chain in chains.chains for phase in chain}
    assert {"AwaitApproval", "Retrying", "Failed", "Done", "Observing"} <= kinds
    checked = sum(check_chain(chain) for chain in chains.chains)
    assert checked == sum(len(chain) - 1 for chain in chains.chains) > 100
    # The saver handed the stores their deltas in the runs themselves, checked there.
    assert sum(store.deltas for store in stores) > 100


# --- a long run of one read tool ------------------------------------------------------


class LookupArgs(BaseModel):
    key: str


@read_tool
async def lookup(args: LookupArgs) -> dict[str, object]:
    """Look a key up."""
    return {"key": args.key, "value": 42, "price": Decimal("1.50")}


def loop_runner(store: Checkpointer, model: Model) -> Runner[None]:
    agent = Agent[None](name="loop", tools=[lookup], budget=Budget(), max_steps=10**9)
    return Runner(agent, model=model, gate=AutoDenyGate(), checkpointer=store, keep_states=True)


async def test_bytes_per_transition_stay_flat_over_a_long_run() -> None:
    """1,500 transitions: the deltas of the last 100 are no larger than those of 100
    early ones (after the first snapshot period) but for the digits their counters gained.

    A transition's delta holds its new message or action, the step, the spend and the
    clock: what changed, never the run's history. The run ids, keys and step numbers
    grow by at most 3 digits (k60 -> k499, call-180 -> call-1499, step 150 -> 1500), a
    handful of times per delta: 5% of a delta of about 600 bytes covers them.
    """
    store = CheckedStore()
    result = await loop_runner(store, ScriptedModel(loop_turns(500))).run(None, "go", run_id="long")
    history = await store.history("long")
    assert len(history) > 1500
    deltas = {entry.seq: entry.size for entry in history if not entry.snapshot}
    early = [deltas[seq] for seq in range(60, 160) if seq in deltas]
    late = [deltas[seq] for seq in range(len(history) - 101, len(history) - 1) if seq in deltas]
    assert len(early) > 90
    assert len(late) > 90
    assert sum(late) <= sum(early) * 1.05
    assert store.deltas == len(history) - 1  # every save after the first came with ops
    seq, document = await store.load("long")
    assert exact(document["fields"]) == exact(dump_phase(result.final)["fields"])
    assert seq == len(history) - 1


# --- stores that did not save the document the ops start from ---------------------------


async def save_chain(
    store: Checkpointer, run_id: str, documents: Sequence[dict[str, Any]], start: int = 0
) -> None:
    for seq, document in enumerate(documents, start=start):
        await store.save(run_id, seq, document, agent="a", status="running", phase="Planning")


def document(step: int, items: int) -> dict[str, Any]:
    return {
        "kind": "Planning",
        "fields": {
            "step": step,
            "items": [{"n": n, "cost": Decimal("1.10")} for n in range(items)],
        },
    }


async def test_ops_on_a_document_the_store_did_not_save_are_not_used(
    store: Checkpointer,
) -> None:
    """A base that is not the store's own last document (an equal copy, a stale one):
    the store diffs what it holds instead, so even wrong ops store the right document."""
    first, second, third = document(1, 2), document(2, 3), document(3, 1)
    await save_chain(store, "r", [first])
    wrong: list[list[Any]] = [["set", ["fields", "step"], 99]]
    for seq, (base, new) in enumerate([(copy.deepcopy(first), second), (first, third)], 1):
        await store.save(
            "r", seq, new, agent="a", status="running", phase="Planning", base=base, ops=wrong
        )
        assert exact((await store.load("r"))[1]) == exact(new)


async def test_ops_on_the_store_s_own_last_document_are_what_it_stores(
    store: Checkpointer,
) -> None:
    """Given with the very document the store saved last, the ops are the delta: the run
    loads back as those ops make it, also past a snapshot."""
    documents = [document(step, step % 5) for step in range(60)]
    await save_chain(store, "r", documents[:1])
    for seq in range(1, 60):
        base, new = documents[seq - 1], documents[seq]
        ops = [["set", ["fields"], copy.deepcopy(new["fields"])]]
        await store.save(
            "r", seq, new, agent="a", status="running", phase="Planning", base=base, ops=ops
        )
    entries = await store.history("r")
    assert [entry.snapshot for entry in entries].count(True) == 2  # seq 0 and 50
    assert exact((await store.load("r"))[1]) == exact(documents[-1])


async def test_two_sqlite_stores_on_one_file_keep_the_order_and_the_deltas(
    tmp_path: Path,
) -> None:
    """One store saves with ops, another connection saves the next checkpoint, then the
    first goes on: it sees the other's checkpoint (no stale row, no stale delta base)."""
    path = tmp_path / "runs.sqlite3"
    documents = [document(step, step) for step in range(8)]
    async with SQLiteCheckpointer(path) as one, SQLiteCheckpointer(path) as other:
        await save_chain(one, "r", documents[:1])
        for seq in (1, 2):
            await one.save(
                "r",
                seq,
                documents[seq],
                agent="a",
                status="running",
                phase="Planning",
                base=documents[seq - 1],
                ops=[
                    ["append", ["fields", "items"], [documents[seq]["fields"]["items"][-1]]],
                    ["set", ["fields", "step"], seq],
                ],
            )
        await save_chain(other, "r", documents[3:4], start=3)
        with pytest.raises(CheckpointOrderError):
            await one.save("r", 3, documents[3], agent="a", status="running", phase="Planning")
        await one.save(
            "r",
            4,
            documents[4],
            agent="a",
            status="running",
            phase="Planning",
            base=documents[3],  # equal to what the other saved, but not this store's own
            ops=[["set", ["fields", "step"], -1]],
        )
        assert exact((await other.load("r"))[1]) == exact(documents[4])
        await one.set_status("r", "cancelled")
        assert (await other.record("r")).status == "cancelled"
    async with SQLiteCheckpointer(path) as restarted:
        await restarted.save(
            "r",
            5,
            documents[5],
            agent="a",
            status="cancelled",
            phase="Planning",
            base=documents[4],
            ops=[["set", ["fields", "step"], -1]],
        )
        assert exact((await restarted.load("r"))[1]) == exact(documents[5])


class CrashesAt:
    """The loop's script, except that turn ``at`` raises: the process died there."""

    def __init__(self, turns: list[Any], at: int) -> None:
        self.scripted = ScriptedModel(turns)
        self.at = at
        self.asked = 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.asked += 1
        if self.asked == self.at:
            raise RuntimeError("the process died here")
        return await self.scripted.complete(request)


def loop_turns(calls: int) -> list[ModelReply]:
    return [tool_call("lookup", {"key": f"k{n}"}) for n in range(calls)] + [reply("done")]


async def test_a_resumed_run_continues_its_deltas(store: Checkpointer) -> None:
    """A run that died half way, resumed by a new runner: the resumed part's first save is
    diffed against what is stored, the rest come with ops, and the last checkpoint is
    the final phase."""
    crashing = CrashesAt(loop_turns(30), at=15)
    with pytest.raises(RuntimeError, match="the process died here"):
        await loop_runner(store, crashing).run(None, "go", run_id="r")
    resumed = await loop_runner(store, ScriptedModel(loop_turns(30)[14:])).resume("r")
    assert resumed.final.kind == "Done"
    assert resumed.final.spent.tool_calls == 30
    _, document = await store.load("r")
    assert exact(document["fields"]) == exact(dump_phase(resumed.final)["fields"])


# --- the C writer ---------------------------------------------------------------------

numbers = st.one_of(
    st.integers(),
    st.integers(min_value=10**399, max_value=10**402),
    st.floats(allow_nan=False, allow_infinity=False),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.sampled_from([Decimal("1E+500"), Decimal("-0"), Decimal("0E-600"), 1e16, 1e-7, -0.0]),
)
texts = st.text(max_size=8) | st.sampled_from(['"\x005"', "\x001.5", "1e+5", "\\u0000"])
json_values = st.recursive(
    st.none() | st.booleans() | numbers | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_the_c_writer_reads_back_exactly_as_dumps(value: Any) -> None:
    """Decimals in every spelling, floats, ints past 400 digits, text that looks like the
    writer's marks: what loads reads back from dumps_fast is what it reads from dumps."""
    assert exact(loads(dumps_fast(value))) == exact(loads(dumps(value)))


LEGACY: Final = Path(__file__).parent / "data" / "legacy-runs.db"


async def test_a_store_written_before_incremental_checkpoints_loads_and_resumes(
    tmp_path: Path,
) -> None:
    """tests/data/legacy-runs.db was written by the store as it was before (commit
    9da6286, blobs in the pure-Python JSON writer, deltas diffed by the store): this
    loop's run that died at its 21st model call, 62 checkpoints with snapshots at 0 and
    50. It loads, and the new saver resumes it to the end on top of the old deltas."""
    path = tmp_path / "runs.sqlite3"
    shutil.copyfile(LEGACY, path)
    async with SQLiteCheckpointer(path) as store:
        record = await store.record("legacy")
        assert (record.status, record.phase, record.seq) == ("failed_resumable", "Planning", 61)
        resumed = await loop_runner(store, ScriptedModel(loop_turns(25)[20:])).resume("legacy")
        assert resumed.final.kind == "Done"
        assert resumed.final.spent.tool_calls == 25
        assert resumed.states[0].loop.tool_iterations == 20
        history = await store.history("legacy")
        assert [entry.seq for entry in history if entry.snapshot] == [0, 50]
        _, document = await store.load("legacy")
    assert exact(document["fields"]) == exact(dump_phase(resumed.final)["fields"])


@settings(max_examples=200, deadline=None)
@given(first=json_values, second=json_values)
def test_a_snapshot_reusing_the_texts_of_items_reads_back_exactly_as_dumps(
    first: Any, second: Any
) -> None:
    """Items an earlier snapshot wrote are written from their kept text, the same objects
    in a new list: the document reads back as dumps writes it, and items gone are let go."""
    items = [first, {"n": first}, [second]]
    text, texts = dumps_reusing({"kind": "full", "items": items}, {})
    assert exact(loads(text)) == exact(loads(dumps({"kind": "full", "items": items})))
    later: dict[str, Any] = {"kind": "full", "items": [*items[1:], {"m": second}]}
    text, kept = dumps_reusing(later, texts)
    assert exact(loads(text)) == exact(loads(dumps(later)))
    assert set(kept) == {id(item) for item in later["items"] if isinstance(item, dict | list)}
    assert kept[id(items[1])][1] is texts[id(items[1])][1]  # written once, reused


async def test_the_store_stores_the_callers_delta_as_given(store: Checkpointer) -> None:
    """With its own last document as the base, the store keeps the caller's ops (here
    wordier than its own diff) instead of diffing: the same run saved without ops stores
    smaller deltas, and both load back the same."""
    documents = [document(step, 20) for step in range(5)]
    for run_id, with_ops in (("given", True), ("diffed", False)):
        await save_chain(store, run_id, documents[:1])
        for seq in range(1, 5):
            ops = [["set", ["fields"], copy.deepcopy(documents[seq]["fields"])]]
            extra: dict[str, Any] = {"base": documents[seq - 1], "ops": ops} if with_ops else {}
            await store.save(
                run_id, seq, documents[seq], agent="a", status="running", phase="P", **extra
            )
    given_sizes = [entry.size for entry in await store.history("given")][1:]
    diffed_sizes = [entry.size for entry in await store.history("diffed")][1:]
    assert all(g > d for g, d in zip(given_sizes, diffed_sizes, strict=True))
    assert exact((await store.load("given"))[1]) == exact((await store.load("diffed"))[1])


async def test_a_save_waits_in_a_thread_for_another_connection_s_write_lock(
    tmp_path: Path,
) -> None:
    """A save that would wait for another connection's write lock does not wait on the
    event loop: it goes to a thread, so the task holding the lock gets to release it."""
    path = tmp_path / "runs.sqlite3"
    first, second = document(1, 1), document(2, 2)
    async with SQLiteCheckpointer(path) as store:
        await save_chain(store, "r", [first])
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        released = anyio.Event()

        async def release() -> None:
            await anyio.sleep(0.05)
            other.execute("COMMIT")
            released.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(release)
            ops = [["set", ["fields"], second["fields"]]]
            await store.save(
                "r", 1, second, agent="a", status="running", phase="P", base=first, ops=ops
            )
        other.close()
        assert released.is_set()
        assert exact((await store.load("r"))[1]) == exact(second)
