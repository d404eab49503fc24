"""The README's example is the file that mypy checks and this test runs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_readme_example_is_the_checked_file() -> None:
    """The code block under 'Build your own agent' equals agents/readme_example.py."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Build your own agent", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert block is not None
    assert block.group(1) == (ROOT / "agents" / "readme_example.py").read_text()


def test_readme_example_runs_and_buys_once(capsys: Any) -> None:
    """The example agent finds the book, waits for approval, buys it and answers."""
    from agents.readme_example import main

    anyio.run(main)
    assert capsys.readouterr().out.strip() == (
        "Idle -> Planning -> ToolCalling -> Observing -> Planning -> AwaitApproval"
        " -> ToolCalling -> Observing -> Planning -> Responding -> Done"
    )


def test_readme_set_up_commands_exist_in_the_makefile() -> None:
    """The two set-up commands the README gives are Makefile targets."""
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo", "test"):
        assert f"make {target}" in readme
        assert re.search(rf"^{target}:", makefile, re.MULTILINE)


def test_readme_reference_section_runs_as_one_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reference section's code blocks, run in order, budget, pause, resume and buy."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Reference: the pieces you write against", 1)[1]
    section = section.split("\n## ", 1)[0]
    program = "\n".join(re.findall(r"```python\n(.*?)```", section, re.DOTALL))
    monkeypatch.chdir(tmp_path)  # where the program's runs.sqlite3 goes
    exec(compile(program, "README.md (reference)", "exec"), {"__name__": "readme_reference"})
    assert capsys.readouterr().out.splitlines() == [
        "done 39.9504",
        "paused - approval of buy_book",
        "done 39.9504",
    ]
