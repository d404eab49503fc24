"""statemachine.persist: the role protocols, records and stores, the same objects as at the top."""

from __future__ import annotations

import subprocess
import sys

import statemachine
import statemachine.persist as persist


def test_every_name_is_the_top_level_one_or_a_role() -> None:
    """A name both places export is one object; the role protocols are new here."""
    roles = {"Decisions", "Leases", "Registry", "RunStore", "DEFAULT_RETENTION"}
    for name in persist.__all__:
        value = getattr(persist, name)
        if name not in roles:
            assert value is getattr(statemachine, name), name


def test_the_checkpointer_is_every_role() -> None:
    """Checkpointer extends the five role protocols (the core's EffectLedger among them)."""
    roles = (persist.RunStore, persist.Registry, persist.Leases, persist.Decisions)
    assert set(persist.Checkpointer.__mro__) >= {*roles, persist.EffectLedger}


def test_importing_it_loads_neither_psycopg_nor_cryptography() -> None:
    """The PostgreSQL store and the cipher load on first use."""
    code = (
        "import sys, statemachine.persist; "
        "print(sorted(m for m in ('psycopg', 'cryptography') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
