"""Fixtures for the command-line tests: the real entry point, in a subprocess or in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from desktop_queue import cli

#: Generous: a cold ``python -m desktop_queue`` start is a fraction of a second, CI machines are slow.
SUBPROCESS_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Run:
    """One finished command: exit code and both streams."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


class Cli:
    """Runs ``desktop-queue --data-dir DIR ...`` the way a script would.

    Args:
        data_dir: the data directory every command is pointed at.
        capsys: pytest's capture fixture (for in-process runs).
    """

    def __init__(self, data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.data_dir = data_dir
        self._capsys = capsys

    def argv(self, *args: str) -> list[str]:
        return ["--data-dir", str(self.data_dir), *args]

    def sub(self, *args: str, stdin: str | bytes | None = None, env: dict[str, str] | None = None) -> Run:
        """The real console entry, ``python -m desktop_queue``, in a child process."""
        data = stdin.encode() if isinstance(stdin, str) else stdin
        proc = subprocess.run(
            [sys.executable, "-m", "desktop_queue", *self.argv(*args)],
            input=data if data is not None else b"",
            capture_output=True,
            timeout=SUBPROCESS_TIMEOUT_S,
            env={**os.environ, **(env or {})},
            check=False,
        )
        return Run(proc.returncode, proc.stdout.decode(), proc.stderr.decode())

    def run(self, *args: str) -> Run:
        """``desktop_queue.cli.main`` in this process (argparse exits become exit codes)."""
        self._capsys.readouterr()
        try:
            code = cli.main(self.argv(*args))
        except SystemExit as exc:  # argparse usage errors and --version
            code = exc.code if isinstance(exc.code, int) else 1
        captured = self._capsys.readouterr()
        return Run(code, captured.out, captured.err)

    def submit(self, payload: Any, *extra: str) -> dict[str, Any]:
        """Submits a demo job in-process and returns the printed job (asserting success)."""
        result = self.run("submit", "demo", "--input", json.dumps(payload), "--json", *extra)
        assert result.code == 0, result.err
        doc: dict[str, Any] = result.json()
        return doc

    def jobs(self, *extra: str) -> list[dict[str, Any]]:
        result = self.run("list", "--json", *extra)
        assert result.code == 0, result.err
        docs: list[dict[str, Any]] = result.json()
        return docs


@pytest.fixture
def dq(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    """The command line pointed at a fresh data dir."""
    return Cli(data_dir, capsys)
