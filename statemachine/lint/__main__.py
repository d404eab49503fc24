"""``python -m statemachine.lint PATH [PATH ...]``: see :mod:`statemachine.lint`."""

from __future__ import annotations

import sys

from ._command import main

if __name__ == "__main__":
    sys.exit(main())
