"""``python -m statemachine COMMAND ...``, and the ``statemachine`` console script.

The command line itself is :mod:`statemachine.cli`: one argparse tree for ``runs``,
``stats``, ``diagram`` and ``worker``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .cli import main as _main


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command (``sys.argv[1:]`` by default); return its exit code.

    A command line that cannot be read exits 2 (``SystemExit``), after one line on stderr.
    """
    return _main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
