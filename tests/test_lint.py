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
    # In the snippets above, a transition on or after the use's line is in an earlier pass.
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
        "retry_model",
        "skip_pending",
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


# -- aliases, closures, self attributes, helpers, and the loop wording ------------------
# Each snippet below is a whole file that imports what it uses, so the line numbers in
# the expected findings are the snippet's own.


def _report(source: str) -> list[str]:
    return [str(finding) for finding in check_source(textwrap.dedent(source), "snippet.py")]


def test_a_transition_through_an_alias_leaves_the_original() -> None:
    """After ``b = a``, a transition through ``b`` makes a later use of ``a`` a finding too."""
    assert _report(
        """\
        from statemachine import Planning


        def f(a: Planning[str]):
            b = a
            b.fail("x")
            return a.kind, b.kind
        """
    ) == [
        "snippet.py:7:12: 'a' is used after b.fail() on line 6 left its phase (b was the same "
        "phase); a phase is single-use: use the phase that fail() returned",
        "snippet.py:7:20: 'b' is used after b.fail() on line 6 left its phase; a phase is "
        "single-use: use the phase that fail() returned",
    ]


def test_a_transition_through_the_original_leaves_the_alias() -> None:
    """``x = y = agent.start(...)`` binds one phase to two names: transitioning one leaves both."""
    assert _report(
        """\
        from statemachine import Agent


        def f(agent: Agent[str]):
            first = second = agent.start("ctx", "hi")
            planning = first.receive("hi")
            return second.ctx
        """
    ) == [
        "snippet.py:7:12: 'second' is used after first.receive() on line 6 left its phase "
        "(first was the same phase); a phase is single-use: use the phase that receive() "
        "returned",
    ]


def test_a_reassigned_alias_is_no_longer_the_same_phase() -> None:
    """Binding an alias anew ends it: transitioning the new phase leaves the old name alone."""
    assert (
        _report(
            """\
            from statemachine import Planning


            def f(a: Planning[str], other: Planning[str]):
                b = a
                b = other
                b.fail("x")
                return a.respond("ok")
            """
        )
        == []
    )


def test_calling_a_closure_transitions_the_phase_it_captures() -> None:
    """A nested def that transitions a captured phase counts as that transition where called."""
    assert _report(
        """\
        from statemachine import Planning


        def f(planning: Planning[str]):
            def give_up():
                return planning.fail("x")

            failed = give_up()
            return planning.kind
        """
    ) == [
        "snippet.py:9:12: 'planning' is used after give_up() on line 8 left its phase "
        "(give_up() transitions 'planning' by planning.fail()); a phase is single-use: use "
        "the phase that fail() returned",
    ]


def test_a_lambda_called_twice_is_reported_at_the_second_call() -> None:
    """The second call of a lambda that transitions a captured phase uses the left phase."""
    assert _report(
        """\
        from statemachine import Planning


        def f(planning: Planning[str]):
            give_up = lambda: planning.fail("x")
            first = give_up()
            second = give_up()
        """
    ) == [
        "snippet.py:7:14: 'planning' is used by give_up() after give_up() on line 6 left its "
        "phase (give_up() transitions 'planning' by planning.fail()); a phase is single-use: "
        "use the phase that fail() returned",
    ]


def test_calling_a_closure_that_reads_a_left_phase_is_a_use() -> None:
    """A closure that reads a captured phase, called after the phase was left, is a finding."""
    assert _report(
        """\
        from statemachine import Planning


        def f(planning: Planning[str]):
            show = lambda: print(planning.step)
            responding = planning.respond("ok")
            show()
        """
    ) == [
        "snippet.py:7:5: 'planning' is used by show() after planning.respond() on line 6 left "
        "its phase; a phase is single-use: use the phase that respond() returned",
    ]


def test_a_closure_never_called_changes_nothing() -> None:
    """Defining a closure that transitions a captured phase is not a transition: only calls are."""
    assert (
        _report(
            """\
            from statemachine import Planning


            def f(planning: Planning[str]):
                give_up = lambda: planning.fail("x")
                show = lambda: print(planning.step)
                show()
                return planning.respond("ok")
            """
        )
        == []
    )


def test_a_closure_body_tracks_the_phase_it_captures() -> None:
    """Inside a nested def, a captured phase is tracked like a variable of its own."""
    assert _report(
        """\
        from statemachine import Planning


        def f(planning: Planning[str]):
            def give_up():
                failed = planning.fail("x")
                return planning.kind

            return give_up
        """
    ) == [
        "snippet.py:7:16: 'planning' is used after planning.fail() on line 6 left its phase; "
        "a phase is single-use: use the phase that fail() returned",
    ]


def test_a_closure_called_in_a_loop_is_found_on_the_second_pass() -> None:
    """A closure call that transitions a captured phase in a loop body is found on pass two."""
    assert _report(
        """\
        from statemachine import Planning


        def f(planning: Planning[str], calls):
            call_one = lambda call: planning.call_tool(call)
            for call in calls:
                call_one(call)
        """
    ) == [
        "snippet.py:7:9: 'planning' is used by call_one() after call_one() on line 7 (in an "
        "earlier pass of the loop) left its phase (call_one() transitions 'planning' by "
        "planning.call_tool()); a phase is single-use: use the phase that call_tool() returned",
    ]


def test_a_self_attribute_annotated_with_a_phase_is_tracked() -> None:
    """``self.state`` annotated in the class is left by ``self.state.advance(rt)`` in a method."""
    assert _report(
        """\
        from statemachine import Active, Runtime


        class Driver:
            state: Active[str]

            async def step(self, rt: Runtime):
                await self.state.advance(rt)
                return self.state.ctx
        """
    ) == [
        "snippet.py:9:16: 'self.state' is used after self.state.advance() on line 8 left its "
        "phase; a phase is single-use: use the phase that advance() returned",
    ]


def test_a_self_attribute_assigned_a_phase_in_init_is_tracked_in_other_methods() -> None:
    """An attribute ``__init__`` assigns ``agent.start(...)`` holds a phase in every method."""
    assert _report(
        """\
        from statemachine import Agent


        class Chat:
            def __init__(self, agent: Agent[str]):
                self.idle = agent.start("ctx", "hi")

            def go(self, text: str):
                planning = self.idle.receive(text)
                self.idle.receive(text)
                return planning
        """
    ) == [
        "snippet.py:10:9: 'self.idle' is used after self.idle.receive() on line 9 left its "
        "phase; a phase is single-use: use the phase that receive() returned",
    ]


def test_a_self_attribute_reassigned_to_the_result_is_clean() -> None:
    """``self.state = await self.state.advance(rt)`` rebinds it, also across ``self.step()``."""
    assert (
        _report(
            """\
            from statemachine import Active, Runtime


            class Driver:
                state: Active[str]

                async def step(self, rt: Runtime):
                    self.state = await self.state.advance(rt)
                    return self.state.ctx

                async def run(self, rt: Runtime):
                    await self.step(rt)
                    await self.step(rt)
                    return self.state.ctx
            """
        )
        == []
    )


def test_a_method_that_transitions_a_self_attribute_leaves_it_at_the_call() -> None:
    """A ``self.m()`` that transitions ``self.state`` leaves it, and one that reads it uses it."""
    assert _report(
        """\
        from statemachine import Active, Runtime


        class Driver:
            state: Active[str]

            async def push(self, rt: Runtime):
                return await self.state.advance(rt)

            def log(self):
                print(self.state.step)

            async def run(self, rt: Runtime):
                nxt = await self.push(rt)
                self.log()
                return self.state.ctx
        """
    ) == [
        "snippet.py:15:9: 'self.state' is used by self.log() after self.push() on line 14 left "
        "its phase (self.push() transitions 'self.state' by self.state.advance()); a phase is "
        "single-use: use the phase that advance() returned",
        "snippet.py:16:16: 'self.state' is used after self.push() on line 14 left its phase "
        "(self.push() transitions 'self.state' by self.state.advance()); a phase is "
        "single-use: use the phase that advance() returned",
    ]


def test_a_helper_that_transitions_its_parameter_leaves_the_argument() -> None:
    """A function transitioning its parameter leaves the argument passed by position or keyword."""
    assert _report(
        """\
        from statemachine import Planning


        def give_up(phase, reason):
            return phase.fail(reason)


        def f(planning: Planning[str]):
            failed = give_up(planning, "no")
            return planning.kind


        def g(planning: Planning[str]):
            failed = give_up(reason="no", phase=planning)
            return planning.kind
        """
    ) == [
        "snippet.py:10:12: 'planning' is used after give_up() on line 9 left its phase "
        "(give_up() transitions its parameter 'phase' by phase.fail()); a phase is "
        "single-use: use the phase that fail() returned",
        "snippet.py:15:12: 'planning' is used after give_up() on line 14 left its phase "
        "(give_up() transitions its parameter 'phase' by phase.fail()); a phase is "
        "single-use: use the phase that fail() returned",
    ]


def test_a_helper_calling_a_helper_counts_too() -> None:
    """A helper passing its parameter to one that transitions it counts, in any definition order."""
    assert _report(
        """\
        from statemachine import Planning


        def f(planning: Planning[str]):
            stop(planning)
            return planning.kind


        def stop(phase):
            give_up(phase)


        def give_up(phase):
            phase.fail("no")
        """
    ) == [
        "snippet.py:6:12: 'planning' is used after stop() on line 5 left its phase (stop() "
        "transitions its parameter 'phase' by give_up()); a phase is single-use: use the "
        "phase that fail() returned",
    ]


def test_a_helper_that_does_not_transition_is_clean() -> None:
    """A helper that only reads its phase, or transitions a non-phase argument, leaves nothing."""
    assert (
        _report(
            """\
            from statemachine import Planning


            def describe(phase):
                return f"{phase.kind} at step {phase.step}"


            def give_up(phase):
                return phase.fail("no")


            def f(planning: Planning[str], cursor):
                print(describe(planning))
                give_up(cursor)
                return planning.respond(cursor.fetchone())
            """
        )
        == []
    )


def test_a_use_on_the_transitions_line_outside_a_loop_is_not_an_earlier_pass() -> None:
    """Outside a loop, a use on (or before) the transition's line does not say "earlier pass"."""
    assert _report(
        """\
        from statemachine import Planning


        def f(planning: Planning[str]):
            print(planning.fail("x"), planning.kind)


        def g(planning: Planning[str]):
            planning.ctx = (
                planning.fail("x")
            )
        """
    ) == [
        "snippet.py:5:31: 'planning' is used after planning.fail() on line 5 left its phase; "
        "a phase is single-use: use the phase that fail() returned",
        "snippet.py:9:5: 'planning' is used after planning.fail() on line 10 left its phase; "
        "a phase is single-use: use the phase that fail() returned",
    ]


def test_only_a_use_inside_the_loop_says_earlier_pass() -> None:
    """Uses in the loop's second pass say "earlier pass"; the use after the loop does not."""
    assert _report(
        """\
        from statemachine import Planning


        def f(planning: Planning[str], calls):
            for call in calls:
                print(planning.step, planning.call_tool(call))
            return planning.kind
        """
    ) == [
        "snippet.py:6:15: 'planning' is used after planning.call_tool() on line 6 (in an "
        "earlier pass of the loop) left its phase; a phase is single-use: use the phase that "
        "call_tool() returned",
        "snippet.py:6:30: 'planning' is used after planning.call_tool() on line 6 (in an "
        "earlier pass of the loop) left its phase; a phase is single-use: use the phase that "
        "call_tool() returned",
        "snippet.py:7:12: 'planning' is used after planning.call_tool() on line 6 left its "
        "phase; a phase is single-use: use the phase that call_tool() returned",
    ]


def test_allow_reuse_accepts_a_deliberate_read_of_an_alias() -> None:
    """The escape comment accepts the findings on its line only, alias findings included."""
    assert _report(
        """\
        from statemachine import Active, Runtime


        async def f(state: Active[str], rt: Runtime, log):
            before = state
            state = await state.advance(rt)
            log(before, state)  # statemachine: allow-reuse
            return before.kind
        """
    ) == [
        "snippet.py:8:12: 'before' is used after state.advance() on line 6 left its phase "
        "(state was the same phase); a phase is single-use: use the phase that advance() "
        "returned",
    ]
