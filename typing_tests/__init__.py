"""Typing tests: programs that mypy and pyright check and nobody runs.

Every illegal line carries ``# type: ignore[<code>]`` for mypy and, beside it,
``# pyright: ignore[<rule>]`` for pyright (which is told to read only its own
comments). Both checkers report an ignore that is not needed (mypy's
``warn_unused_ignores``, pyright's ``reportUnnecessaryTypeIgnoreComment``), so a rule
that stops holding under either one (a transition that becomes legal) fails
``make typecheck``. Each illegal line is preceded by a comment naming the rule it
proves; the one line only mypy rejects says so.
"""
