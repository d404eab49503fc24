"""An agent's graph is its phases' advance annotations; bad ones fail where it is defined."""

from __future__ import annotations

import os
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import attrs
import pytest

from agents.research import approved_contract, research_agent
from agents.support import support_agent
from agents.travel import FakeProvider, travel_agent
from statemachine import (
    Agent,
    AgentGraph,
    Approval,
    AwaitApproval,
    Done,
    Failed,
    Idle,
    ModelRetrying,
    Observing,
    Phases,
    Planning,
    Responding,
    Retrying,
    Runtime,
    SetupError,
    ToolCalling,
    agent_graph,
)
from statemachine.cli import main
from statemachine.cli._diagram import _load

ROOT = Path(__file__).resolve().parent.parent


@attrs.frozen
class Ctx:
    customer: str


# Written out by hand from the table in the README, not read from the code.
DEFAULT_EDGES = {
    ("Idle", "Planning"),
    ("Planning", "ToolCalling"),
    ("Planning", "AwaitApproval"),
    ("Planning", "Responding"),
    ("Planning", "Planning"),
    ("Planning", "Failed"),
    ("AwaitApproval", "ToolCalling"),
    ("AwaitApproval", "Planning"),
    ("AwaitApproval", "AwaitApproval"),
    ("ToolCalling", "Observing"),
    ("ToolCalling", "Retrying"),
    ("ToolCalling", "Failed"),
    ("Observing", "Planning"),
    ("Retrying", "ToolCalling"),
    ("Retrying", "Failed"),
    ("Planning", "ModelRetrying"),
    ("ModelRetrying", "Planning"),
    ("ModelRetrying", "Failed"),
    ("Responding", "Done"),
}

DEFAULT_MERMAID = """\
stateDiagram-v2
    [*] --> Idle
    Idle --> Planning
    Planning --> Planning
    Planning --> AwaitApproval
    Planning --> ToolCalling
    Planning --> ModelRetrying
    Planning --> Responding
    Planning --> Failed
    AwaitApproval --> Planning
    AwaitApproval --> AwaitApproval
    AwaitApproval --> ToolCalling
    ToolCalling --> Observing
    ToolCalling --> Retrying
    ToolCalling --> Failed
    Observing --> Planning
    Retrying --> ToolCalling
    Retrying --> Failed
    ModelRetrying --> Planning
    ModelRetrying --> Failed
    Responding --> Done
    Failed --> [*]
    Done --> [*]
"""


class PromptApproval(AwaitApproval[Ctx]):
    """Approval that never waits: a gate with no decision yet counts as a denial."""

    async def advance(self, rt: Runtime) -> ToolCalling[Ctx] | Planning[Ctx]:
        decision = await rt.gate.decide(self.request(rt.run_id))
        if isinstance(decision, Approval) and decision.key == self.call.key:
            return self.approve(decision)
        return self.deny("no person approved it at once")


class ShopPlanning(Planning[Ctx]):
    """Planning with its own instructions; its advance is Planning's."""

    def instructions(self) -> str:
        return f"You sell books to {self.ctx.customer}."


class ReturnsText(Planning[Ctx]):
    async def advance(self, rt: Runtime) -> str:  # type: ignore[override]
        return "no phase"


class Misspelt(Observing[Ctx]):
    async def advance(self, rt: Runtime) -> Planing[Ctx]:  # type: ignore[name-defined]  # noqa: F821
        raise NotImplementedError


class Unannotated(Observing[Ctx]):
    async def advance(self, rt):  # type: ignore[no-untyped-def]
        raise NotImplementedError


class MaybeNothing(Responding[Ctx]):
    async def advance(self, rt: Runtime) -> Done[Ctx] | None:  # type: ignore[override]
        return None


class ToShop(Observing[Ctx]):
    """Names a Planning subclass: legal only for an agent that runs that subclass."""

    async def advance(self, rt: Runtime) -> ShopPlanning:
        raise NotImplementedError


def test_the_default_agent_has_the_documented_edges() -> None:
    """An agent with the library's phases has exactly the edges the README's table lists."""
    graph = agent_graph(Agent[Ctx](name="plain"))
    assert set(graph.edges) == DEFAULT_EDGES
    assert len(graph.edges) == len(DEFAULT_EDGES)
    assert graph.successors("Done") == ()
    assert graph.successors("Retrying") == ("ToolCalling", "Failed")
    assert graph.successors("ModelRetrying") == ("Planning", "Failed")


@pytest.mark.parametrize(
    "phase",
    [Idle, Planning, AwaitApproval, ToolCalling, Observing, Retrying, ModelRetrying, Responding],
)
def test_each_phases_edges_are_its_advance_annotation(phase: type[Any]) -> None:
    """Every member of a phase's advance return annotation is an edge, and nothing else is."""
    returned = typing.get_type_hints(phase.advance)["return"]
    union = typing.get_origin(returned) in (typing.Union, types.UnionType)
    members = typing.get_args(returned) if union else (returned,)
    annotated = {(typing.get_origin(member) or member).kind for member in members}
    graph = agent_graph(Phases())
    assert set(graph.successors(phase.kind)) == annotated


def test_the_default_agent_draws_as_mermaid() -> None:
    """The drawing starts at Idle, ends Failed and Done, in the phases' order."""
    assert agent_graph(Agent[Ctx](name="plain")).mermaid() == DEFAULT_MERMAID


def test_a_subclass_that_narrows_advance_narrows_the_graph() -> None:
    """An overriding advance that drops AwaitApproval's self-loop drops that edge only."""
    phases = Phases(planning=ShopPlanning, await_approval=PromptApproval)
    graph = agent_graph(Agent(name="shop", phases=phases))
    assert set(graph.edges) == (DEFAULT_EDGES - {("AwaitApproval", "AwaitApproval")})
    assert graph.successors("AwaitApproval") == ("Planning", "ToolCalling")
    drawn = graph.mermaid()
    assert drawn.startswith(
        "stateDiagram-v2\n"
        "    Planning : ShopPlanning\n"
        "    AwaitApproval : PromptApproval\n"
        "    [*] --> Idle\n"
    )
    assert "AwaitApproval --> AwaitApproval" not in drawn
    assert "AwaitApproval --> ToolCalling" in drawn


def test_a_phase_subclass_named_in_advance_must_be_the_one_the_agent_runs() -> None:
    """Returning ShopPlanning is legal when the agent runs ShopPlanning, a SetupError if not."""
    graph = agent_graph(Phases(planning=ShopPlanning, observing=ToShop))
    assert graph.successors("Observing") == ("Planning",)
    with pytest.raises(SetupError) as raised:
        Phases(observing=ToShop)
    assert str(raised.value) == (
        f"{__name__}.ToShop.advance may return ShopPlanning, but this agent runs "
        "Planning as its Planning phase: annotate Planning[...] (the agent's own class is "
        "used), or build the agent with Phases(planning=ShopPlanning)"
    )


def test_a_return_that_is_not_a_phase_fails_where_the_agent_is_defined() -> None:
    """The error comes from building the agent, before it could run."""
    with pytest.raises(SetupError) as raised:
        Agent(name="bad", phases=Phases(planning=ReturnsText))
    assert str(raised.value) == (
        f"{__name__}.ReturnsText.advance may return str, which is not a phase; it "
        "may return only phases (Idle, Planning, AwaitApproval, ToolCalling, Observing, "
        "Retrying, ModelRetrying, Responding, Failed, Done) or subclasses of them"
    )
    assert isinstance(raised.value, TypeError)


def test_none_in_the_union_is_not_a_phase() -> None:
    """A union is read member by member; None among them is refused by name."""
    with pytest.raises(SetupError, match=r"MaybeNothing\.advance may return None, which"):
        Phases(responding=MaybeNothing)


def test_a_name_the_module_does_not_define_is_a_setup_error() -> None:
    """A typo in the annotation names the missing name and the module to define it in."""
    with pytest.raises(SetupError) as raised:
        Phases(observing=Misspelt)
    assert str(raised.value) == (
        f"{__name__}.Misspelt.advance is annotated -> Planing[Ctx], and 'Planing' "
        f"is not defined in module {__name__}; import it there at run time (not "
        "only under TYPE_CHECKING), or define the phase class at module level"
    )


def test_an_advance_without_a_return_annotation_is_a_setup_error() -> None:
    """The graph cannot be read from nothing; the message shows the annotation to write."""
    with pytest.raises(SetupError) as raised:
        Phases(observing=Unannotated)
    assert str(raised.value) == (
        f"{__name__}.Unannotated.advance has no return annotation; annotate it "
        "with the phases it may go to, e.g. -> Planning[C] | Failed[C]"
    )


def test_the_shipped_agents_graphs_are_those_of_the_classes_their_packages_export() -> None:
    """What the README draws for each package is the graph of the agent it builds."""
    built: dict[str, Agent[Any]] = {
        "agents.travel": travel_agent(FakeProvider()),
        "agents.support": support_agent(),
        "agents.research": research_agent(approved_contract()),
    }
    for module, agent in built.items():
        ((label, found),) = _load(module)
        assert label == module
        assert agent_graph(found).edges == agent_graph(agent).edges
        for (name, drawn), (_, runs) in zip(
            agent_graph(found).phases, agent_graph(agent).phases, strict=True
        ):
            assert issubclass(runs, drawn), (module, name)


def test_a_module_with_an_agent_value_draws_that_agent(capsys: pytest.CaptureFixture[str]) -> None:
    """The README example's module holds `shop`; both spellings print its graph."""
    from agents.readme_example import shop

    for target in ("agents.readme_example", "agents.readme_example:shop"):
        assert main(["diagram", target]) == 0
        assert capsys.readouterr().out == agent_graph(shop).mermaid()


def test_a_target_that_is_not_an_agent_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A factory that needs arguments, an unknown attribute, a module that cannot import."""
    cases = {
        "agents.travel:travel_agent": (
            "diagram: agents.travel:travel_agent needs arguments (provider); name an Agent, "
            "a Phases, or a function that takes no arguments and returns an Agent"
        ),
        "agents.travel:nothing": (
            "diagram: agents.travel:nothing: agents.travel has no attribute nothing"
        ),
        "agents.nowhere": "diagram: cannot import agents.nowhere: No module named 'agents.nowhere'",
    }
    for target, message in cases.items():
        assert main(["diagram", target]) == 2
        captured = capsys.readouterr()
        assert (captured.out, captured.err) == ("", message + "\n")


def test_check_refuses_an_unclosed_block_and_a_file_without_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both are one line and exit 1: a check that checks nothing must not pass."""
    empty = tmp_path / "empty.md"
    empty.write_text("# nothing here\n")
    assert main(["diagram", "--check", str(empty)]) == 1
    assert capsys.readouterr().err == (
        f"diagram: {empty} has no diagram block (<!-- diagram: MODULE --> ... <!-- /diagram -->)\n"
    )
    open_ = tmp_path / "open.md"
    open_.write_text("intro\n<!-- diagram: agents.travel -->\n```mermaid\n")
    assert main(["diagram", "--write", str(open_)]) == 1
    assert capsys.readouterr().err == (
        f"{open_}:2: the diagram block has no <!-- /diagram --> line to close it\n"
    )
    assert open_.read_text() == "intro\n<!-- diagram: agents.travel -->\n```mermaid\n"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statemachine", "diagram", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
        timeout=120,
    )


def test_the_command_prints_the_travel_agents_diagram() -> None:
    """`python -m statemachine diagram agents.travel` prints the graph, TripPlanning named."""
    done = _cli("agents.travel")
    assert (done.returncode, done.stderr) == (0, "")
    drawn = agent_graph(travel_agent(FakeProvider())).mermaid()
    assert done.stdout == drawn
    assert drawn.startswith("stateDiagram-v2\n    Planning : TripPlanning\n    [*] --> Idle\n")


def test_the_command_says_so_when_a_module_defines_no_agent() -> None:
    """One line on stderr, exit code 2, nothing on stdout."""
    done = _cli("json")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "diagram: json defines no agent (no Agent, Phases or phase subclass at module "
        "level); name one as json:ATTRIBUTE\n"
    )


def test_check_passes_on_the_readme() -> None:
    """The README's diagrams are what the code draws today."""
    done = _cli("--check", "README.md")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "README.md: 3 diagram(s) match the code\n"


def test_check_fails_on_a_changed_diagram_and_write_repairs_it(tmp_path: Path) -> None:
    """A hand-edited diagram is one line naming the file, line and agent; --write restores it."""
    original = (ROOT / "README.md").read_text()
    readme = tmp_path / "README.md"
    lines = original.splitlines(keepends=True)
    marker = lines.index("<!-- diagram: agents.support -->\n")
    edge = lines.index("    Observing --> Planning\n", marker)
    lines[edge] = "    Observing --> Done\n"
    readme.write_text("".join(lines))

    done = _cli("--check", str(readme))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"{readme}:{marker + 1}: the diagram of agents.support does not match the code; "
        f"run: python -m statemachine diagram --write {readme}\n"
    )

    done = _cli("--write", str(readme))
    assert (done.returncode, done.stdout) == (0, f"{readme}: 1 of 3 diagram(s) rewritten\n")
    assert readme.read_text() == original


def test_agent_graph_is_a_value() -> None:
    """Two reads of the same agent give equal graphs (the README check relies on it)."""
    first = agent_graph(Agent[Ctx](name="a"))
    assert isinstance(first, AgentGraph)
    assert first == agent_graph(Phases()) == agent_graph(Agent[Ctx](name="b"))
    assert Failed.kind not in dict(first.phases)
