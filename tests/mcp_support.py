"""Real MCP servers for tests/test_mcp*.py: processes whose pids are known, killed at the end.

A server started over stdio is run through ``sh -c 'echo $$ > PIDFILE; exec ...'`` so the
test knows the pid of the very process the client spoke to (a restart writes a new one)
and can kill it mid-run or in teardown. The HTTP server is started by the test on a free
loopback port and waited for until it answers.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from statemachine.mcp import Effect, MCPTools

NOTES_SERVER = Path(__file__).resolve().parent / "mcp_notes_server.py"


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` and return its output."""
    done = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    )
    return done.stdout


def scratch_repository(path: Path) -> Path:
    """A git repository with one commit and one unstaged change to ``notes.txt``."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "tests@statemachine.example")
    git(path, "config", "user.name", "statemachine tests")
    (path / "notes.txt").write_text("first line\n")
    git(path, "add", "notes.txt")
    git(path, "commit", "-q", "-m", "first")
    (path / "notes.txt").write_text("first line\nsecond line\n")
    return path


def commits(repo: Path) -> list[str]:
    """The subjects of the repository's commits, newest first."""
    return git(repo, "log", "--format=%s").splitlines()


def through_pidfile(pidfile: Path, *command: str) -> tuple[str, list[str]]:
    """``command`` run by a shell that first writes its pid (kept by exec) to ``pidfile``."""
    script = 'echo $$ > "$0"; exec "$@"'
    return "sh", ["-c", script, str(pidfile), *command]


def git_tools(
    repo: Path,
    pidfile: Path,
    *,
    overrides: dict[str, Effect] | None = None,
    dangerously_allow_less_caution: bool = False,
    **options: object,
) -> MCPTools:
    """mcp-server-git (from PyPI) over stdio, confined to ``repo``."""
    command, args = through_pidfile(
        pidfile, sys.executable, "-m", "mcp_server_git", "--repository", str(repo)
    )
    return MCPTools.stdio(
        "git",
        command,
        args,
        overrides=overrides,
        dangerously_allow_less_caution=dangerously_allow_less_caution,
        **options,  # type: ignore[arg-type]
    )


def notes_stdio(notes: Path, pidfile: Path, **options: object) -> MCPTools:
    """The notes server of tests/mcp_notes_server.py over stdio."""
    command, args = through_pidfile(pidfile, sys.executable, str(NOTES_SERVER), str(notes))
    return MCPTools.stdio("notes", command, args, **options)  # type: ignore[arg-type]


def pid_of(pidfile: Path) -> int:
    """The pid the server wrote."""
    return int(pidfile.read_text().strip())


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def kill(pid: int) -> None:
    """SIGKILL ``pid`` if it runs, and wait until it is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(200):
        if not alive(pid):
            return
        time.sleep(0.01)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class NotesHTTPServer:
    """tests/mcp_notes_server.py over streamable HTTP on a loopback port, as a process."""

    def __init__(self, notes: Path, log: Path) -> None:
        self.notes = notes
        self.log = log
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The MCP endpoint."""
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        """Start the process and wait (10 s at most) until it answers on its port."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(NOTES_SERVER), str(self.notes), "--http", str(self.port)],
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the notes server exited: {self.log.read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"http://127.0.0.1:{self.port}/", timeout=0.5)
                return
            time.sleep(0.05)
        raise RuntimeError(f"the notes server did not answer in 10 s: {self.log.read_text()}")

    def stop(self) -> None:
        """Kill the process (teardown, or a test's crash) and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            self.process.wait(timeout=10)

    def exit_code(self) -> int:
        """The exit code of the process, once it ended by itself (10 s at most)."""
        assert self.process is not None
        return self.process.wait(timeout=10)

    def tools(self, **options: object) -> MCPTools:
        """An MCPTools on this server."""
        return MCPTools.http("notes", self.url, **options)  # type: ignore[arg-type]


@contextlib.contextmanager
def notes_http(tmp: Path) -> Iterator[NotesHTTPServer]:
    """A started notes HTTP server, killed when the block ends."""
    server = NotesHTTPServer(tmp / "notes.txt", tmp / "server.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def crash_run(*args: str) -> dict[str, Any]:
    """Run tests/mcp_crash_run.py with ``args``: its exit code, last JSON line and stderr."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parent / "mcp_crash_run.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    out = json.loads(lines[-1]) if lines else None
    return {"code": done.returncode, "out": out, "err": done.stderr}


def effects(notes: Path) -> list[str]:
    """The effects the notes server made, one a line."""
    return notes.read_text().splitlines() if notes.exists() else []
