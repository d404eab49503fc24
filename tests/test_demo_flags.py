"""The support and research demos' ``--trace`` and ``--log``, run as a user runs them.

The travel demo's flags are tested in tests/test_capture.py; all three share agents/_demo.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any


def demo(name: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", f"agents.{name}", *flags],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )


def spans_in(stdout: str) -> list[dict[str, Any]]:
    """The spans the console exporter printed: one indented JSON object each."""
    return [json.loads(block) for block in re.findall(r"^\{\n.*?^\}$", stdout, re.S | re.M)]


def assert_each_transition_is_in_a_run(spans: list[dict[str, Any]], run: str) -> None:
    runs = {span["context"]["span_id"] for span in spans if span["name"] == run}
    transitions = [span for span in spans if span["name"] != run]
    assert all(" -> " in span["name"] for span in transitions)
    assert {span["parent_id"] for span in transitions} == runs


def test_the_support_demo_prints_spans_with_the_console_exporter() -> None:
    """`--trace`: a span per run and per transition; the scenarios are still printed."""
    done = demo("support", "--trace")
    spans = spans_in(done.stdout)
    names = [span["name"] for span in spans]
    assert len(spans) == 61  # 5 runs (four scenarios, one resumed) and 56 transitions
    assert names.count("run support") == 5
    assert names.count("Planning -> ToolCalling") == 9
    assert_each_transition_is_in_a_run(spans, "run support")
    refunds = [span for span in spans if span["name"] == "AwaitApproval -> ToolCalling"]
    assert [span["attributes"]["statemachine.tool"] for span in refunds] == ["refund"] * 3
    assert done.stdout.count("states:") == 4
    assert done.stderr == ""


def test_the_support_demo_logs_readable_lines_and_prints_the_same_scenarios() -> None:
    """`--log`: one console line per transition on stderr; stdout as without the flag."""
    done = demo("support", "--log")
    lines = done.stderr.splitlines()
    assert len(lines) == 56  # one per transition span of --trace
    assert all(" [info     ] transition " in line for line in lines)
    assert "agent=support" in lines[0]
    assert "from=Idle" in lines[0]
    assert "to=Planning" in lines[0]
    plain = demo("support")
    assert done.stdout == plain.stdout
    assert plain.stderr == ""


def test_the_research_demo_prints_spans_with_the_console_exporter() -> None:
    """`--trace`: a span per run and per transition; the scenarios are still printed."""
    done = demo("research", "--trace")
    spans = spans_in(done.stdout)
    names = [span["name"] for span in spans]
    assert len(spans) == 49  # 5 runs and 44 transitions
    assert names.count("run research") == 5
    assert names.count("Planning -> ToolCalling") == 9
    assert_each_transition_is_in_a_run(spans, "run research")
    searches = [
        span["attributes"]["statemachine.tool"]
        for span in spans
        if span["name"] == "Planning -> ToolCalling"
    ]
    assert sorted(set(searches)) == ["fetch", "run_searches", "search"]
    assert done.stdout.count("states:") == 5
    assert done.stderr == ""


def test_the_research_demo_logs_readable_lines_and_prints_the_same_scenarios() -> None:
    """`--log`: one console line per transition on stderr; stdout as without the flag."""
    done = demo("research", "--log")
    lines = done.stderr.splitlines()
    assert len(lines) == 44  # one per transition span of --trace
    assert all(" [info     ] transition " in line for line in lines)
    assert "agent=research" in lines[0]
    assert "from=Idle" in lines[0]
    assert "to=Planning" in lines[0]
    plain = demo("research")
    assert done.stdout == plain.stdout
    assert plain.stderr == ""


def test_the_demos_write_money_with_cents_exactly_and_counts_in_the_singular_for_one() -> None:
    """Every amount has at least two decimal places and is never rounded; 1 is singular."""
    from decimal import Decimal

    from agents._demo import count, dollars, spent_line
    from statemachine import Spend

    shown = [dollars(Decimal(text)) for text in ("800", "800.00", "0", "0E-6", "0.0030", "137.32")]
    assert shown == ["$800.00", "$800.00", "$0.00", "$0.00", "$0.0030", "$137.32"]
    assert [count(n, "tool call") for n in (0, 1, 2)] == [
        "0 tool calls",
        "1 tool call",
        "2 tool calls",
    ]
    spend = Spend(cost=Decimal("800.0030"), tool_calls=1)
    assert spent_line(spend, [Decimal("800.00")]) == (
        "1 tool call, $800.0030 (tools $800.00, model $0.0030)"
    )
