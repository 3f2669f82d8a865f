"""``--store postgresql://...`` and ``DESKTOP_QUEUE_STORE``: real ``desktop-queue`` processes sharing one queue."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "DESKTOP_QUEUE_STORE"}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "desktop_queue", *args], capture_output=True, text=True, cwd=REPO, env=full, timeout=60
    )


def test_two_processes_share_one_queue_through_the_store_option(pg_dsn: str, pg_harness: Any, tmp_path: Path) -> None:
    uri = pg_harness.as_uri(pg_dsn)
    made = _run(
        "--data-dir", str(tmp_path / "a"), "--store", uri, "submit", "demo", "--input", '{"prompt": "hi"}', "--json"
    )
    assert made.returncode == 0, made.stderr
    job = json.loads(made.stdout)
    # another process, another data dir, the store from the environment: the same queue
    seen = _run("--data-dir", str(tmp_path / "b"), "list", "--json", env={"DESKTOP_QUEUE_STORE": uri})
    assert seen.returncode == 0, seen.stderr
    assert [j["id"] for j in json.loads(seen.stdout)] == [job["id"]]
    again = _run("--store", uri, "submit", "demo", "--input", '{"prompt": "hi"}', "--json")
    assert json.loads(again.stdout)["duplicate"] is True


def test_a_store_that_is_not_postgresql_is_a_usage_error(tmp_path: Path) -> None:
    bad = _run("--store", "mysql://x/y", "list")
    assert bad.returncode == 2
    assert "must be a postgresql://... URI" in bad.stderr
    env_bad = _run("--data-dir", str(tmp_path), "list", env={"DESKTOP_QUEUE_STORE": "sqlite:///x"})
    assert env_bad.returncode == 2
    assert env_bad.stderr.strip().splitlines() == [
        "desktop-queue: DESKTOP_QUEUE_STORE: a store is a postgresql://... URI, not 'sqlite'"
    ]


def test_an_unreachable_store_is_one_line_and_exit_1(tmp_path: Path) -> None:
    gone = _run(
        "--data-dir", str(tmp_path), "--store", f"postgresql://postgres@/postgres?host={tmp_path}&port=1", "list"
    )
    assert gone.returncode == 1
    lines = gone.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("desktop-queue: cannot connect to the PostgreSQL queue: ")


def test_the_json_store_imports_nothing_of_psycopg(tmp_path: Path) -> None:
    """The default store works without the postgres extra installed: psycopg is imported only for --store."""
    data = str(tmp_path)
    submit = ["--data-dir", data, "submit", "demo", "--input", '{"prompt": "hi"}']
    code = (
        "import sys\n"
        "from desktop_queue import cli\n"
        f"assert cli.main({submit!r}) == 0\n"
        f"assert cli.main({['--data-dir', data, 'list']!r}) == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg', 'psycopg_pool')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DESKTOP_QUEUE_STORE"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
