"""The pyright messages a user reads when dependencies do not fit, pinned exactly.

The mypy side of the same cases is tests/test_deps_messages.yml; the wider rules are
typing_tests/test_run_context.py. pyright runs once, over one small file per case, in
strict mode as ``make typecheck`` runs it (pinned: messages change between releases).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

Diagnostic = tuple[int, str, str]  # (line, rule, message)

_SHOP_AND_BANK = """
    import attrs
    from pydantic import BaseModel

    from statemachine import Agent, RunContext, Runner, read_tool


    @attrs.frozen
    class Shop:
        dsn: str


    @attrs.frozen
    class Bank:
        iban: str


    class Args(BaseModel):
        sku: str
    """

CASES: dict[str, str] = {
    "tool_needs_other_dependencies": _SHOP_AND_BANK
    + """

    @read_tool
    async def balance(args: Args, ctx: RunContext[Bank]) -> str:
        return ctx.deps.iban


    shop: Agent[str, Shop] = Agent(name="shop", deps_type=Shop, tools=[balance])
    """,
    "run_given_other_dependencies": _SHOP_AND_BANK
    + """

    async def run(runner: Runner[str, Shop]) -> None:
        await runner.run("ctx", "hello", deps=Bank("NO93"))
    """,
    "context_field_missing": _SHOP_AND_BANK
    + """

    def read(ctx: RunContext[Shop]) -> str:
        return ctx.approver
    """,
}


@pytest.fixture(scope="module")
def diagnostics(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Diagnostic]]:
    """Every case's diagnostics but unused imports, from one pyright run over the cases."""
    folder = tmp_path_factory.mktemp("pyright-deps")
    for name, source in CASES.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source).lstrip("\n"))
    config = {
        "typeCheckingMode": "strict",
        "pythonVersion": "3.11",
        "extraPaths": [str(ROOT)],
        "reportUnusedImport": "none",  # the cases share one block of imports
    }
    (folder / "pyrightconfig.json").write_text(json.dumps(config))
    pyright = Path(sys.executable).parent / "pyright"
    result = subprocess.run(
        [str(pyright), "--outputjson", "--pythonpath", sys.executable, "-p", str(folder)],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYRIGHT_PYTHON_IGNORE_WARNINGS": "1"},
    )
    report = json.loads(result.stdout)
    found: dict[str, list[Diagnostic]] = {name: [] for name in CASES}
    for item in report["generalDiagnostics"]:
        line = item["range"]["start"]["line"] + 1
        message = item["message"].replace("\xa0", " ")
        found[Path(item["file"]).stem].append((line, item.get("rule", ""), message))
    assert report["summary"]["filesAnalyzed"] == len(CASES)
    return found


def test_a_tool_asking_for_other_dependencies_is_refused(
    diagnostics: dict[str, list[Diagnostic]],
) -> None:
    """A tool's RunContext[Bank] does not fit an agent whose dependencies are a Shop."""
    assert diagnostics["tool_needs_other_dependencies"] == [
        (
            26,
            "reportUnknownVariableType",
            'Type of "shop" is partially unknown\n  Type of "shop" is "Agent[Unknown, Shop]"',
        ),
        (
            26,
            "reportArgumentType",
            'Argument of type "list[ReadTool[Args, Bank]]" cannot be assigned to parameter '
            '"tools" of type "ToolRegistry[D@Agent] | Iterable[ReadTool[Any, D@Agent] | '
            'WriteTool[Any, D@Agent]]" in function "__init__"\n'
            '  Type "ReadTool[Args, Bank]" is not assignable to type "ReadTool[Any, Shop] | '
            'WriteTool[Any, Shop]"\n'
            '    "ReadTool[Args, Bank]" is not assignable to "ReadTool[Any, Shop]"\n'
            '      Type parameter "D@ReadTool" is contravariant, but "Bank" is not a '
            'supertype of "Shop"\n'
            '        "Shop" is not assignable to "Bank"\n'
            '    "ReadTool[Args, Bank]" is not assignable to "WriteTool[Any, Shop]"',
        ),
    ]


def test_a_run_given_other_dependencies_is_refused(
    diagnostics: dict[str, list[Diagnostic]],
) -> None:
    """A runner of a Shop agent is not given a Bank."""
    assert diagnostics["run_given_other_dependencies"] == [
        (
            22,
            "reportArgumentType",
            'Argument of type "Bank" cannot be assigned to parameter "deps" of type '
            '"Shop | None" in function "run"\n'
            '  Type "Bank" is not assignable to type "Shop | None"\n'
            '    "Bank" is not assignable to "Shop"\n'
            '    "Bank" is not assignable to "None"',
        )
    ]


def test_a_field_the_context_does_not_have_is_refused(
    diagnostics: dict[str, list[Diagnostic]],
) -> None:
    """A RunContext has no approver (nor any way to approve)."""
    assert diagnostics["context_field_missing"] == [
        (22, "reportUnknownMemberType", 'Type of "approver" is unknown'),
        (22, "reportUnknownVariableType", "Return type is unknown"),
        (
            22,
            "reportAttributeAccessIssue",
            'Cannot access attribute "approver" for class "RunContext[Shop]"\n'
            '  Attribute "approver" is unknown',
        ),
    ]
