"""The loop governor's checks with 10 and with 10,000 prior actions.

Each row is one check, measured on a call that the check itself decides (the bench
asserts the decision before it times anything): an exact and a canonical duplicate
(dictionary look-ups), a semantic near-duplicate of the oldest failed call in the
semantic window (every failure in the window compared), a cycle, a new call that
passes every tier, the convergence gain of a new result, ``begin_step``, and the
state updates of one call (``record``, then ``after_action``). Every timed call gets
a text of its own, so that no cache holds its answer already (the semantic row's calls
are the failed query with other spacing and case: the same words, whose trigram masks
the line's lexical signer made once, as a real retry of a failed call would reuse them).

No check walks the run's actions. Exact and canonical checks are look-ups in the index
kept up as calls are recorded and settled; the semantic check looks up the failed calls
of the same tool and anchors (identifiers and amounts: each query here has its own
number, so one) and compares signatures made once per call; convergence compares the
new result's trigram mask with those the last ``evidence_window`` results keep; cycle
detection reads the last ``cycle_window`` calls. ``record`` and ``after_action`` copy
one chunk of the action log (``ActionLog``), not the run's actions.

:func:`embedding_checks` times the semantic tier with ``EmbeddingSimilarity`` (the
``embeddings`` extra): a reworded call of a failed one, whose embedding is made in the
timed call (the model's cost), and the same call asked again (its embedding kept).
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import statistics
import time
from collections.abc import Callable
from decimal import Decimal

from pydantic import BaseModel

from statemachine import (
    ActionRecord,
    Budget,
    Decision,
    EmbeddingSimilarity,
    LoopGovernor,
    LoopState,
    Spend,
    Verdict,
    read_tool,
)

SIZES = (10, 10_000)
REPEATS = 200
# The history ends in search, fetch, search, fetch: one more search repeats the block.
TAIL = ("search", "fetch", "search", "fetch")
# The state updates run on from the history for this many calls, then start again.
RUN_ON = 10

VOCABULARY = """
    refund order parcel invoice delivery address account password billing card
    warranty return exchange shipping tracking label customs voucher discount
    subscription cancel upgrade plan receipt payment bank transfer courier damaged
    missing late early store pickup locker size colour stock restock preorder
    gift wrap loyalty points newsletter privacy data export delete login email
"""
WORDS = tuple(VOCABULARY.split())


class SearchArgs(BaseModel):
    query: str


@read_tool
async def search(args: SearchArgs) -> str:
    return args.query


@read_tool
async def fetch(args: SearchArgs) -> str:
    return args.query


TOOLS = {"search": search, "fetch": fetch}


def query(seed: int) -> str:
    """A help-desk query of four to seven words and a number, its own for each seed."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 7))) + f" {seed}"


def result(seed: int) -> str:
    """A tool result of its own (its words differ from other results')."""
    rng = random.Random(-1 - seed)
    return f"result {seed}: " + " ".join(rng.choice(WORDS) for _ in range(12))


def act(
    governor: LoopGovernor, text: str, call_id: str, *, tool: str = "search", raw: str = ""
) -> ActionRecord:
    """The record of a call of ``tool`` with ``text`` as its query (``raw``: as sent)."""
    call = TOOLS[tool].call({"query": text})
    return governor.action(call, raw or json.dumps({"query": text}), call_id)


def history(governor: LoopGovernor, size: int) -> LoopState:
    """A loop state with ``size`` settled calls, grown as a run grows it.

    One search in ten failed (the semantic tier's window); the others went through
    ``after_action`` (gain and evidence). The last four calls are search, fetch,
    search, fetch, the last of them a result with news (no cycle yet).
    """
    loop = LoopState()
    for n in range(size):
        tail = n - (size - len(TAIL))
        tool = TAIL[tail] if tail >= 0 else "search"
        loop = loop.record(act(governor, query(n), f"call-{n}", tool=tool))
        if tail >= 0 and n == size - 1:
            loop = loop.settle(f"call-{n}", "ok", result(n), gain=1.0)
        elif tail < 0 and n % 10 == 0:
            loop = loop.settle(f"call-{n}", "failed", f"error {n}: the index is down")
        else:
            loop = governor.after_action(
                loop, call_id=f"call-{n}", effect="read", result=result(n), ctx=None, step=n
            )
    return loop


def timed(
    prepare: Callable[[int], Callable[[], object]],
    expect: Callable[[object], object] = lambda answer: None,
) -> float:
    """Median microseconds of ``prepare(i)()`` over REPEATS.

    ``prepare`` and ``expect`` (which asserts on each answer) are not timed; ``expect``
    runs after the timed call, so that no cache holds the answer before it.
    """
    samples: list[float] = []
    for i in range(REPEATS):
        check = prepare(i)
        started = time.perf_counter()
        answer = check()
        samples.append(time.perf_counter() - started)
        expect(answer)
    return statistics.median(samples) * 1e6


# Whether the checks ran once already: the first size measured runs slower (a cold
# process and processor), so the first call of measure runs them on a short history first.
_WARM: list[bool] = []
_ROUNDS = itertools.count(1)


def measure(governor: LoopGovernor, loop: LoopState, size: int) -> dict[str, float]:
    """Median microseconds of each check against ``loop`` (a :func:`history` of ``size``)."""
    if not _WARM:
        _WARM.append(True)
        checks(governor, history(governor, SIZES[0]), SIZES[0])
    return checks(governor, loop, size)


def checks(governor: LoopGovernor, loop: LoopState, size: int) -> dict[str, float]:
    """What :func:`measure` returns, every time."""
    assert len(loop.actions) == size
    budget = Budget(cost=Decimal("100"))
    # Seeds of texts no history, earlier round or other row used (each row its own).
    round_ = next(_ROUNDS)
    fresh = 1_000_000 * round_
    ok = next(a for a in loop.actions if a.outcome == "ok" and a.tool == "search")
    asked = _query_of(ok)
    oldest = loop.actions[loop.failures[-governor.semantic_window :][0]]
    # The same calls, then the last fetch's result gaining nothing: a search now repeats
    # the block search -> fetch with nothing new.
    last = loop.actions[-1]
    cycling = loop.settle(last.call_id, "ok", last.result, gain=0.0)

    def before(state: LoopState, action: ActionRecord) -> Decision:
        return governor.before_action(
            state, action, spent=Spend(), budget=budget, elapsed=0.0, price=Decimal(0)
        )

    def deciding(
        make: Callable[[int], ActionRecord],
        check: str,
        *,
        state: LoopState = loop,
        of: str = "",
    ) -> float:
        """Median microseconds of before_action on each repeat's call from ``make``,
        asserted to be decided by ``check`` (of the earlier call ``of``)."""

        def expect(decision: object) -> None:
            assert isinstance(decision, Decision)
            expected = Verdict.CONTINUE if check == "" else Verdict.SUPPRESS
            assert (decision.verdict, decision.check) == (expected, check), decision
            assert of in decision.reason, (of, decision.reason)

        return timed(lambda i: functools.partial(before, state, make(i)), expect)

    def respelled(i: int) -> str:
        """The arguments of ``ok`` with i + 1 spaces after the opening brace."""
        return "{" + " " * (i + 1) + json.dumps({"query": asked})[1:]

    def spaced(text: str, i: int) -> str:
        """``text`` upper-cased, with i + 2 spaces after one of its words, a word of its own
        for each round (the warm-up's round asked the same query at 10 prior actions)."""
        words = text.upper().split(" ")
        words[round_ % (len(words) - 1)] += " " * (i + 1)
        return " ".join(words)

    def begin() -> Decision:
        return governor.begin_step(
            loop,
            ctx=None,
            spent=Spend(),
            budget=budget,
            elapsed=0.0,
            max_steps=50,
            max_tool_iterations=None,
        )

    assert begin().verdict is Verdict.CONTINUE

    def gained(gain: object) -> None:
        assert isinstance(gain, float)
        assert 0.0 < gain <= 1.0

    return {
        "before_action, new call (all tiers)": deciding(
            lambda i: act(governor, query(fresh + i), "call-new"), ""
        ),
        "before_action, exact duplicate": deciding(
            lambda i: act(governor, asked, "call-repeat"), "exact", of=ok.call_id
        ),
        "before_action, canonical duplicate": deciding(
            # The same arguments, spelled with other spacing: other bytes, same call.
            lambda i: act(governor, asked, "call-respelled", raw=respelled(i)),
            "canonical",
            of=ok.call_id,
        ),
        "before_action, semantic duplicate": deciding(
            lambda i: act(governor, spaced(_query_of(oldest), i), "call-near"),
            "semantic",
            of=oldest.call_id,
        ),
        "before_action, cycle": deciding(
            lambda i: act(governor, query(fresh + REPEATS + i), "call-again"),
            "cycle",
            state=cycling,
        ),
        "gain (convergence)": timed(
            lambda i: functools.partial(governor.gain, loop, result(fresh + 2 * REPEATS + i)),
            gained,
        ),
        "begin_step": timed(lambda i: begin),
        **updates(governor, loop, fresh + 3 * REPEATS),
    }


def updates(governor: LoopGovernor, loop: LoopState, fresh: int) -> dict[str, float]:
    """Median microseconds of a call's two state updates, as a run makes them.

    Each repeat records a new call into the state the repeat before left, then settles
    it with its result (``after_action``): the run grows by one call a repeat, and
    goes back to (a copy of) ``loop`` every ``RUN_ON`` repeats, not timed.
    """
    recorded: list[float] = []
    observed: list[float] = []
    state = loop
    for i in range(REPEATS):
        if i % RUN_ON == 0:
            # Back to ``loop``, as a copy whose index is made here (a state that records
            # where another already did makes one of its own, in the timed call).
            state = loop.model_copy(update={"actions": loop.actions})
            state.earlier("")
        action = act(governor, query(fresh + i), f"call-new-{i}")
        text = result(fresh + i)
        started = time.perf_counter()
        pending = state.record(action)
        middle = time.perf_counter()
        state = governor.after_action(
            pending, call_id=action.call_id, effect="read", result=text, ctx=None, step=i
        )
        recorded.append(middle - started)
        observed.append(time.perf_counter() - middle)
        assert state.actions[-1].call_id == action.call_id
        assert state.actions[-1].outcome == "ok"
    assert len(state.actions) <= len(loop.actions) + RUN_ON
    return {
        "record (a new call)": statistics.median(recorded) * 1e6,
        "after_action (settle, gain, evidence)": statistics.median(observed) * 1e6,
    }


_LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"


def varied(seed: int) -> str:
    """A tool result whose words are tokens of its own (an id and ten random tokens).

    :func:`result` draws its words from :data:`WORDS`, so a run of them keeps a small
    trigram vocabulary; results like these keep bringing new trigrams, as a real run's do.
    """
    rng = random.Random(seed)
    tokens = ("".join(rng.choice(_LETTERS) for _ in range(rng.randint(4, 9))) for _ in range(10))
    return json.dumps({"id": seed, "items": list(tokens)})


def varied_checks(calls: int) -> dict[str, dict[str, float]]:
    """Microseconds of ``after_action`` when every result brings new tokens, by prior actions.

    Not a ``governor_us`` row (those keep the issue's method): a run of ``size`` calls
    settled with :func:`varied` results, then ``calls`` more recorded and settled in turn
    (the run grows from ``size`` to ``size + calls``), each ``after_action`` timed; the
    median and the mean (a restart of the gain's vocabulary shows in the mean).
    """
    governor = LoopGovernor()
    median: dict[str, float] = {}
    mean: dict[str, float] = {}
    for size in SIZES:
        loop = LoopState()
        samples: list[float] = []
        for n in range(size + calls):
            action = act(governor, query(n), f"call-{n}")
            pending = loop.record(action)
            started = time.perf_counter()
            loop = governor.after_action(
                pending, call_id=action.call_id, effect="read", result=varied(n), ctx=None, step=n
            )
            if n >= size:
                samples.append(time.perf_counter() - started)
        median[str(size)] = statistics.median(samples) * 1e6
        mean[str(size)] = statistics.fmean(samples) * 1e6
    return {
        "after_action, varied results (median)": median,
        "after_action, varied results (mean)": mean,
    }


def embedding_checks(repeats: int) -> dict[str, dict[str, float]]:
    """Median microseconds of the semantic tier with the embedding model, by prior actions.

    ``repeats`` calls a row; the model is loaded (and the failed call embedded) before the
    timing starts.
    """
    model = EmbeddingSimilarity()
    rules = LoopGovernor(similarity=model)
    budget = Budget(cost=Decimal("100"))
    rows: dict[str, dict[str, float]] = {}
    for size in SIZES:
        loop = history(rules, size)
        oldest = loop.actions[loop.failures[-rules.semantic_window :][0]]
        words = _query_of(oldest).split()
        number = words.pop()  # the anchor: kept as it is

        def asked(i: int, words: list[str] = words, number: str = number) -> ActionRecord:
            """The failed query reworded: its words turned about, a word of its own added."""
            reworded = " ".join([*reversed(words), WORDS[i % len(WORDS)], number])
            return act(rules, reworded, "call-near")

        def before(action: ActionRecord, loop: LoopState = loop) -> Decision:
            return rules.before_action(
                loop, action, spent=Spend(), budget=budget, elapsed=0.0, price=Decimal(0)
            )

        before(asked(-1))  # loads the model, embeds the failed call
        made: list[float] = []
        kept: list[float] = []
        for i in range(repeats):
            action = asked(i + size)  # a text no earlier repeat embedded
            for samples in (made, kept):  # its embedding made, then kept
                started = time.perf_counter()
                decision = before(action)
                samples.append(time.perf_counter() - started)
                assert decision.check in ("semantic", ""), decision
        rows.setdefault("semantic tier, embedding made (the model)", {})[str(size)] = (
            statistics.median(made) * 1e6
        )
        rows.setdefault("semantic tier, embedding kept", {})[str(size)] = (
            statistics.median(kept) * 1e6
        )
    return rows


def _query_of(action: ActionRecord) -> str:
    """The query an action of :func:`history` was made with."""
    arguments: dict[str, str] = json.loads(action.text[len(action.tool) + 1 : -1])
    return arguments["query"]


def main() -> None:
    governor = LoopGovernor()
    print(f"loop governor, median of {REPEATS} checks (microseconds)")
    print(f"  {'check':40s}" + "".join(f"{size:>12,d} prior" for size in SIZES))
    rows: dict[str, list[float]] = {}
    for size in SIZES:
        for name, value in measure(governor, history(governor, size), size).items():
            rows.setdefault(name, []).append(value)
    for name, values in rows.items():
        print(f"  {name:40s}" + "".join(f"{value:18.1f}" for value in values))
    for name, by_size in varied_checks(REPEATS).items():
        print(f"  {name:40s}" + "".join(f"{value:18.1f}" for value in by_size.values()))
    print("the semantic tier with EmbeddingSimilarity (microseconds)")
    for name, by_size in embedding_checks(50).items():
        print(f"  {name:40s}" + "".join(f"{value:18.1f}" for value in by_size.values()))


if __name__ == "__main__":
    main()
