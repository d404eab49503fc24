"""statemachine.lint finds a phase used after a transition left it, and nothing else.

Each flagged snippet lists its exact findings as (line, col, variable, transition,
line of the transition); each clean snippet must have none. The snippets are whole
files (the checker reads source; nothing here is run).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import statemachine.lint
from statemachine.lint import TRANSITIONS, Finding, check_paths, check_source, main

ROOT = Path(__file__).resolve().parent.parent

HEADER = """\
from statemachine import (
    Active, Agent, AwaitApproval, Failed, Observing, Phase, Planning, Retrying, Runtime,
    ToolCalling,
)
"""
# The snippets' line numbers count from the first line after HEADER.
OFFSET = HEADER.count("\n")

Expected = tuple[int, int, str, str, int]

FLAGGED: dict[str, tuple[str, list[Expected]]] = {
    "ctx_read_after_execute": (
        """
        async def f(tc: ToolCalling[str], rt: Runtime) -> str:
            after = await tc.execute(rt)
            return tc.ctx
        """,
        [(3, 12, "tc", "execute", 2)],
    ),
    "second_call_tool": (
        """
        def f(planning: Planning[str], a, b):
            first = planning.call_tool(a)
            second = planning.call_tool(b)
        """,
        [(3, 14, "planning", "call_tool", 2)],
    ),
    "loop_reuses_the_old_variable": (
        """
        def f(planning: Planning[str], calls):
            for call in calls:
                nxt = planning.call_tool(call)
        """,
        [(3, 15, "planning", "call_tool", 3)],
    ),
    "while_loop_advances_without_rebinding": (
        """
        async def f(state: Active[str], rt: Runtime):
            while True:
                nxt = await state.advance(rt)
                if nxt.kind == "Done":
                    break
        """,
        [(3, 21, "state", "advance", 3)],
    ),
    "fail_after_respond": (
        """
        def f(planning: Planning[str]):
            responding = planning.respond("hello")
            return planning.fail("changed my mind")
        """,
        [(3, 12, "planning", "respond", 2)],
    ),
    "branch_that_falls_through": (
        """
        def f(planning: Planning[str], bad: bool):
            if bad:
                planning.fail("bad")
            return planning.respond("ok")
        """,
        [(4, 12, "planning", "fail", 3)],
    ),
    "attempt_read_after_retry": (
        """
        async def f(retrying: Retrying[str], rt: Runtime) -> int:
            again = await retrying.retry(rt)
            return retrying.attempt
        """,
        [(3, 12, "retrying", "retry", 2)],
    ),
    "output_read_after_observe": (
        """
        def f(observing: Observing[str]):
            planning = observing.observe()
            print(observing.output)
            return planning
        """,
        [(3, 11, "observing", "observe", 2)],
    ),
    "deny_after_approve": (
        """
        def f(waiting: AwaitApproval[str], approval):
            running = waiting.approve(approval)
            waiting.deny("no")
            return running
        """,
        [(3, 5, "waiting", "approve", 2)],
    ),
    "started_run_received_twice": (
        """
        def f(agent: Agent[str]):
            idle = agent.start("ctx", "hi")
            planning = idle.receive("hi")
            again = idle.receive("hello")
        """,
        [(4, 13, "idle", "receive", 3)],
    ),
    "narrowed_by_isinstance": (
        """
        def f(state: object) -> str:
            if isinstance(state, Planning):
                failed = state.fail("stop")
                return state.kind
            return ""
        """,
        [(4, 16, "state", "fail", 3)],
    ),
    "narrowed_by_match": (
        """
        async def f(tc: ToolCalling[str], rt: Runtime):
            after = await tc.execute(rt)
            match after:
                case Observing():
                    planning = after.observe()
                    return after.output
        """,
        [(6, 20, "after", "observe", 5)],
    ),
    "transition_in_a_comprehension": (
        """
        def f(planning: Planning[str], calls):
            return [planning.call_tool(call) for call in calls]
        """,
        [(2, 13, "planning", "call_tool", 2)],
    ),
    "annotated_local": (
        """
        def f(make) -> int:
            planning: Planning[str] = make()
            planning.fail("x")
            return planning.step
        """,
        [(4, 12, "planning", "fail", 3)],
    ),
    "self_in_a_phase_subclass": (
        """
        class ShopPlanning(Planning[str]):
            async def advance(self, rt: Runtime):
                nxt = self.respond("hi")
                print(self.step)
                return nxt
        """,
        [(4, 15, "self", "respond", 3)],
    ),
    "left_phase_passed_on": (
        """
        async def f(tc: ToolCalling[str], rt: Runtime, save):
            after = await tc.execute(rt)
            save(tc)
            return after
        """,
        [(3, 10, "tc", "execute", 2)],
    ),
    "executed_again_in_the_handler": (
        """
        async def f(tc: ToolCalling[str], rt: Runtime):
            try:
                return await tc.execute(rt)
            except TimeoutError:
                return await tc.execute(rt)
        """,
        [(5, 22, "tc", "execute", 3)],
    ),
    "phase_from_a_transition": (
        """
        async def f(planning: Planning[str], call, rt: Runtime):
            tc = planning.call_tool(call)
            after = await tc.execute(rt)
            return tc.call
        """,
        [(4, 12, "tc", "execute", 3)],
    ),
    "subclass_in_an_annotation": (
        """
        class ShopPlanning(Planning[str]):
            pass

        def f(planning: "ShopPlanning"):
            done = planning.respond("x").finish()
            return planning.transcript
        """,
        [(6, 12, "planning", "respond", 5)],
    ),
    "two_uses_after_one_transition": (
        """
        async def f(state: Active[str], rt: Runtime):
            nxt = await state.advance(rt)
            print(state.kind, state.step)
        """,
        [(3, 11, "state", "advance", 2), (3, 23, "state", "advance", 2)],
    ),
}

CLEAN: dict[str, str] = {
    "rebinding_in_a_while_loop": """
        async def f(state: Phase[str], rt: Runtime) -> Phase[str]:
            while isinstance(state, Active):
                state = await state.advance(rt)
            return state
        """,
    "rebinding_in_a_for_loop": """
        async def f(state: Active[str], rt: Runtime):
            for _ in range(3):
                state = await state.advance(rt)
        """,
    "arguments_read_before_the_transition": """
        def f(planning: Planning[str]):
            return planning.call_tool(planning.agent.tools.call("lookup", {}))
        """,
    "one_transition_per_branch": """
        def f(planning: Planning[str], ok: bool):
            if ok:
                nxt = planning.respond("yes")
            else:
                nxt = planning.fail("no")
            return nxt
        """,
    "early_return": """
        def f(planning: Planning[str], ok: bool):
            if not ok:
                return planning.fail("no")
            return planning.respond("yes")
        """,
    "match_on_the_result": """
        async def f(tc: ToolCalling[str], rt: Runtime):
            after = await tc.execute(rt)
            match after:
                case Observing():
                    return after.observe()
                case Retrying():
                    return await after.retry(rt)
                case Failed():
                    return after
        """,
    "fields_read_before_the_transition": """
        def f(planning: Planning[str]):
            kind = planning.kind
            return planning.respond(kind)
        """,
    "chained_transitions": """
        def f(planning: Planning[str]):
            return planning.respond("done").finish()
        """,
    "not_a_phase": """
        def f(connection):
            cursor = connection.cursor()
            cursor.execute("select 1")
            cursor.execute("select 2")
            return cursor.fetchall()
        """,
    "loop_body_always_returns": """
        def f(planning: Planning[str], calls):
            for call in calls:
                return planning.call_tool(call)
            return planning.fail("no calls")
        """,
    "break_right_after_the_transition": """
        def f(planning: Planning[str], calls):
            for call in calls:
                nxt = planning.call_tool(call)
                break
            else:
                nxt = planning.fail("no calls")
            return nxt
        """,
    "rebound_to_another_phase": """
        def f(planning: Planning[str], other: Planning[str]):
            planning.fail("x")
            planning = other
            return planning.kind
        """,
    "two_variables": """
        def f(a: Planning[str], b: Planning[str]):
            a.fail("x")
            return b.fail("y")
        """,
    "transition_only_in_the_handler": """
        def f(planning: Planning[str], compute):
            try:
                text = compute()
            except ValueError as error:
                return planning.fail(str(error))
            return planning.respond(text)
        """,
    "self_before_the_transition": """
        class ShopPlanning(Planning[str]):
            async def advance(self, rt: Runtime):
                if self.step > 3:
                    return self.respond("enough")
                return self.fail("no")
        """,
    "walrus_rebinding": """
        async def f(state: Active[str], rt: Runtime):
            while isinstance(state := await state.advance(rt), Active):
                pass
            return state
        """,
    "comprehension_binds_its_own_phase": """
        def f(plannings: list[Planning[str]]):
            return [planning.fail("x") for planning in plannings]
        """,
    "allowed_on_its_line": """
        async def f(before: Active[str], rt: Runtime):
            after = await before.advance(rt)
            print(before.kind, after.kind)  # statemachine: allow-reuse
        """,
}


def _source(body: str) -> str:
    return HEADER + textwrap.dedent(body).lstrip("\n")


def _message(name: str, method: str, where: int, line: int) -> str:
    again = " (in an earlier pass of the loop)" if where >= line else ""
    return (
        f"'{name}' is used after {name}.{method}() on line {where}{again} left its phase; "
        f"a phase is single-use: use the phase that {method}() returned"
    )


def test_the_corpus_is_large_enough() -> None:
    """The issue asks for at least 15 flagged and 15 clean snippets."""
    assert len(FLAGGED) >= 15
    assert len(CLEAN) >= 15


@pytest.mark.parametrize("name", sorted(FLAGGED))
def test_flagged(name: str) -> None:
    """Each flagged snippet has exactly the findings listed for it."""
    body, expected = FLAGGED[name]
    findings = check_source(_source(body), "snippet.py")
    assert findings == [
        Finding(
            "snippet.py",
            line + OFFSET,
            col,
            _message(variable, method, where + OFFSET, line + OFFSET),
        )
        for line, col, variable, method, where in expected
    ]


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_clean(name: str) -> None:
    """Each clean snippet has no finding."""
    assert check_source(_source(CLEAN[name]), "snippet.py") == []


def test_transitions_are_read_from_the_phases() -> None:
    """The transition names are the phases' public methods that return a phase."""
    assert sorted(TRANSITIONS) == [
        "advance",
        "approve",
        "call_tool",
        "deny",
        "execute",
        "fail",
        "finish",
        "observe",
        "pause",
        "receive",
        "reject_call",
        "reject_input",
        "request_approval",
        "respond",
        "resume",
        "retry",
        "suppress",
        "wait",
    ]


def test_public_surface() -> None:
    """The module's public names are pinned."""
    assert set(statemachine.lint.__all__) == {
        "PHASE_CLASSES",
        "TRANSITIONS",
        "Finding",
        "check_paths",
        "check_source",
        "main",
    }


def test_main_prints_findings_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A finding is one ``file:line:col: message`` line, and the exit code is 1."""
    path = tmp_path / "agent.py"
    path.write_text(_source(FLAGGED["ctx_read_after_execute"][0]))
    assert main([str(path)]) == 1
    out = capsys.readouterr().out
    assert out == f"{path}:{3 + OFFSET}:12: {_message('tc', 'execute', 2 + OFFSET, 3 + OFFSET)}\n"


def test_main_exits_0_on_clean_directories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory is searched for .py files; hidden folders are skipped; clean is 0."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "ok.py").write_text(_source(CLEAN["early_return"]))
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "bad.py").write_text(_source(FLAGGED["second_call_tool"][0]))
    assert main([str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""


def test_main_exits_2_on_a_missing_path(capsys: pytest.CaptureFixture[str]) -> None:
    """A path that does not exist is bad input: exit 2, with what to do on stderr."""
    assert main(["no/such/file.py"]) == 2
    assert capsys.readouterr().err == (
        "statemachine.lint: no/such/file.py: no such file or directory; "
        "pass existing files or directories\n"
    )


def test_main_exits_2_on_a_syntax_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file that does not parse is bad input: exit 2, naming the file and the line."""
    path = tmp_path / "broken.py"
    path.write_text("def f(:\n    pass\n")
    assert main([str(path)]) == 2
    assert capsys.readouterr().err == (
        f"statemachine.lint: {path}:1:7: cannot parse: invalid syntax; fix the syntax error first\n"
    )


def test_main_without_paths_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """No path at all is bad input too."""
    assert main([]) == 2
    assert capsys.readouterr().err == "usage: python -m statemachine.lint PATH [PATH ...]\n"


def test_agents_and_the_readme_example_are_clean() -> None:
    """The shipped agents and the README example pass, run as users run it."""
    result = subprocess.run(
        [sys.executable, "-m", "statemachine.lint", "agents", "agents/readme_example.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_check_paths_reads_every_file(tmp_path: Path) -> None:
    """check_paths gathers the findings of all files, each under its own path."""
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(_source(FLAGGED["second_call_tool"][0]))
    findings = check_paths([str(tmp_path)])
    assert [(Path(f.path).name, f.line) for f in findings] == [
        ("a.py", 3 + OFFSET),
        ("b.py", 3 + OFFSET),
    ]
