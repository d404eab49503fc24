"""``python -m statemachine COMMAND ...``: the operators' command line.

Each command lives in its own module, imported only when it is asked for, so that
``python -m statemachine diagram`` does not pay for the worker's imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Final

# command -> (module, one line of help)
_COMMANDS: Final[dict[str, tuple[str, str]]] = {
    "runs": ("statemachine._cli", "list, show, approve, deny, resume, stop, abort, purge runs"),
    "stats": ("statemachine._cli", "time in each phase, retry and fallback rates"),
    "diagram": ("statemachine._diagram", "print an agent's graph as Mermaid; --check the README"),
    "worker": ("statemachine._worker", "process runs from a shared store until stopped"),
}


def _usage() -> str:
    lines = ["usage: python -m statemachine COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<8} {help_}" for name, (_, help_) in _COMMANDS.items()]
    lines += ["", "python -m statemachine COMMAND --help tells more."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code (2 for a command line it cannot read)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in _COMMANDS:
        print(f"statemachine: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(_COMMANDS[name][0])
    code: int = module.main([name, *rest])
    return code


if __name__ == "__main__":
    sys.exit(main())
