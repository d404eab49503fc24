"""The command line: the ``.py`` files under the paths given, their findings, the exit code."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from ._facts import Finding
from ._file import check_source

__all__ = ["check_paths", "main"]


def _python_files(paths: Iterable[str]) -> Iterator[Path]:
    for name in paths:
        path = Path(name)
        if path.is_dir():
            for found in sorted(path.rglob("*.py")):
                parts = found.relative_to(path).parts
                if not any(part.startswith(".") or part == "__pycache__" for part in parts):
                    yield found
        elif path.is_file():
            yield path
        else:
            raise FileNotFoundError(f"statemachine.lint: {name}: no such file or directory")


def check_paths(paths: Iterable[str]) -> list[Finding]:
    """The findings in every ``.py`` file under ``paths`` (files or directories).

    Raises :class:`FileNotFoundError` for a path that does not exist and
    :class:`SyntaxError` for a file that does not parse.
    """
    findings: list[Finding] = []
    for path in _python_files(paths):
        findings.extend(check_source(path.read_text(encoding="utf-8"), str(path)))
    return findings


def main(argv: Sequence[str] | None = None) -> int:
    """Check ``argv``'s paths; print the findings; 1 if any, 0 if none, 2 on bad input."""
    paths = list(sys.argv[1:] if argv is None else argv)
    if not paths:
        print("usage: python -m statemachine.lint PATH [PATH ...]", file=sys.stderr)
        return 2
    try:
        findings = check_paths(paths)
    except FileNotFoundError as error:
        print(f"{error}; pass existing files or directories", file=sys.stderr)
        return 2
    except SyntaxError as error:
        print(
            f"statemachine.lint: {error.filename}:{error.lineno}:{error.offset}: "
            f"cannot parse: {error.msg}; fix the syntax error first",
            file=sys.stderr,
        )
        return 2
    for finding in findings:
        print(finding)
    return 1 if findings else 0
