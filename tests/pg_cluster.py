"""A throwaway PostgreSQL cluster for the tests: initdb into a temporary folder, then pg_ctl.

The server refuses to run as root, so under root it runs as the ``postgres`` user
(Debian's package creates it) through ``runuser``; otherwise as the current user. It
listens on a free TCP port on 127.0.0.1 and on a Unix socket in its own folder, with
fsync off (the data is thrown away). Each test gets its own schema
(:meth:`Cluster.fresh_dsn`), so run ids never meet across tests. ``stop()`` ends the
server and deletes the folder; if the test process is killed before it can, a small
watchdog process does it.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

import psycopg

INSTALL: Final = (
    "PostgreSQL server binaries (initdb, pg_ctl) were not found on PATH, in `pg_config "
    "--bindir` or in /usr/lib/postgresql/*/bin. Install Debian's PostgreSQL: "
    "apt-get install -y postgresql (`.ci/run` does this)"
)


# argv: the pid to outlive, the folder to delete, then the command that stops the server.
_WATCHDOG: Final = """
import os, shutil, subprocess, sys, time
pid, folder, stop = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
while True:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        break
    time.sleep(1)
subprocess.run(stop, capture_output=True, check=False)
shutil.rmtree(folder, ignore_errors=True)
"""


def find_bindir() -> Path | None:
    """The folder holding initdb and pg_ctl, or None when PostgreSQL is not installed."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        found = subprocess.run(
            [pg_config, "--bindir"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if found:
            candidates.append(Path(found))
    on_path = shutil.which("initdb")
    if on_path is not None:
        candidates.append(Path(on_path).resolve().parent)
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Cluster:
    """One PostgreSQL server in a temporary folder; ``stop()`` ends it and deletes the folder."""

    def __init__(self) -> None:
        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError(INSTALL)
        self.bindir = bindir
        self.folder = Path(tempfile.mkdtemp(prefix="statemachine-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            # /tmp/<folder> is root's and 0700: hand it to the unprivileged server user.
            try:
                shutil.chown(self.folder, "postgres", "postgres")
            except LookupError:
                shutil.rmtree(self.folder, ignore_errors=True)
                raise RuntimeError(
                    "the tests run as root, and PostgreSQL refuses to; there is no "
                    "'postgres' user to run it as. Install Debian's PostgreSQL (apt-get "
                    "install -y postgresql creates that user), or run the tests as another user"
                ) from None
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self._schemas = itertools.count()
        self._watchdog: subprocess.Popen[bytes] | None = None
        self.started = False

    def _run(self, *command: str) -> None:
        done = subprocess.run(
            [*self._as_user, *command], capture_output=True, text=True, check=False, timeout=120
        )
        if done.returncode != 0:
            log = self.folder / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(
                f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n"
                f"{done.stderr}\n{tail}"
            )

    def start(self) -> None:
        self._run(
            str(self.bindir / "initdb"),
            "-D", str(self.data), "-U", "postgres", "-A", "trust",
            "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions",
        )  # fmt: skip
        settings = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D", str(self.data), "-l", str(self.folder / "server.log"),
            "-o", settings, "-w", "-t", "60", "start",
        )  # fmt: skip
        self.started = True
        # If this process is killed outright (SIGKILL, a CI timeout), no finaliser runs:
        # a watchdog in its own session stops the server and deletes the folder then.
        self._watchdog = subprocess.Popen(
            [
                sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(self.folder),
                *self._as_user, str(self.bindir / "pg_ctl"), "-D", str(self.data),
                "-m", "immediate", "stop",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

    def stop(self) -> None:
        """Stop the server (at once: its data is thrown away) and delete its folder."""
        try:
            if self.started:
                self._run(
                    str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"
                )
                self.started = False
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
            if self._watchdog is not None:
                self._watchdog.kill()
                self._watchdog.wait()
                self._watchdog = None

    @property
    def dsn(self) -> str:
        """The cluster's ``postgres`` database over the Unix socket, as the ``postgres`` role."""
        return f"host={self.folder} port={self.port} dbname=postgres user=postgres"

    def fresh_dsn(self, prefix: str = "t") -> str:
        """A DSN whose tables go into a new, empty schema (its search_path)."""
        schema = f"{prefix}_{next(self._schemas)}"
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            connection.execute(f'CREATE SCHEMA "{schema}"')
        return f"{self.dsn} options='-c search_path={schema}'"
