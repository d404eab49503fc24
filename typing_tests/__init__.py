"""Typing tests: programs that mypy checks and nobody runs.

Every illegal line carries ``# type: ignore[<code>]``. Under ``strict`` and
``warn_unused_ignores`` an ignore that stops being needed is itself an error, so a
rule that stops holding (a transition that becomes legal) fails ``make typecheck``.
Each illegal line is preceded by a comment naming the rule it proves.
"""
