"""What a command loads and starts before it does its work: real subprocesses.

A fresh interpreter runs the command the way ``python -m desktop_queue`` does, with an
audit hook (:pep:`578`) that records every child process Python starts, and reports the
modules it imported. The properties: parsing a command (``--help``, a refused flag)
imports no engine; ``work`` imports no web server, no cron parser, no plotting, no
OpenAI SDK and no Qt beyond QtCore; ``work --until-idle`` on an empty data dir starts
no child process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from desktop_queue import cli_migrate
from desktop_queue.core import migrate

from .conftest import SUBPROCESS_TIMEOUT_S

#: packages no command-line start-up may import: the API's web stack, croniter (its import
#: runs `file` as a child process), the window's plots, the OpenAI SDK and its HTTP client
NEVER_AT_START = {"fastapi", "uvicorn", "starlette", "pydantic", "croniter", "dateutil", "pyqtgraph", "openai", "httpx"}
#: the engine's heavy parts, which only the commands that open a queue need
ENGINE = {"desktop_queue.core.queue", "desktop_queue.core.store.archive", "desktop_queue.core.present"}
#: the audit events of a child process started from Python
CHILD_EVENTS = {"subprocess.Popen", "os.posix_spawn", "os.exec", "os.fork", "os.forkpty", "os.spawn", "os.system"}

PROBE = """
import json, sys
children = []
events = set(json.loads(sys.argv[2]))
sys.addaudithook(lambda event, args: children.append([event, repr(args)[:200]]) if event in events else None)
order = []
class Recorder:
    # first on the meta path: sees every import's name, in order, and finds nothing itself
    def find_spec(self, name, path=None, target=None):
        order.append(name)
        return None
sys.meta_path.insert(0, Recorder())
code = None
argv = json.loads(sys.argv[3])
if argv is not None:
    from desktop_queue.cli import main
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
else:
    import desktop_queue.cli
import linecache
read = sorted(f for f in linecache.cache if "desktop_queue" in f)  # (sources PySide6 read: see qtload)
with open(sys.argv[1], "w") as fh:
    json.dump({"code": code, "modules": sorted(sys.modules), "children": children, "order": order, "read": read}, fh)
"""


def _probe(tmp_path: Path, argv: list[str] | None) -> dict[str, Any]:
    """Runs ``desktop_queue.cli.main(argv)`` (or only imports the CLI) in a fresh interpreter."""
    report = tmp_path / "probe.json"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(report), json.dumps(sorted(CHILD_EVENTS)), json.dumps(argv)],
        capture_output=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env=dict(os.environ),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    doc: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    return doc


def _top_level(modules: list[str], names: set[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in names]


def test_importing_the_cli_loads_no_engine_and_no_optional_package(tmp_path: Path) -> None:
    found = _probe(tmp_path, None)
    assert _top_level(found["modules"], NEVER_AT_START | {"PySide6", "sqlite3", "zstandard"}) == []
    assert sorted(ENGINE & set(found["modules"])) == []
    assert found["children"] == []


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["work", "--help"], ["list", "--help"], ["work", "--max-seconds", "-5"], ["--version"]],
    ids=["help", "work-help", "list-help", "refused-flag", "version"],
)
def test_parsing_a_command_loads_no_engine(tmp_path: Path, argv: list[str]) -> None:
    found = _probe(tmp_path, ["--data-dir", str(tmp_path / "data"), *argv])
    assert found["code"] == (2 if "-5" in argv else 0)
    assert _top_level(found["modules"], NEVER_AT_START | {"PySide6", "sqlite3", "zstandard"}) == []
    assert sorted(ENGINE & set(found["modules"])) == []
    assert found["children"] == []
    assert not (tmp_path / "data").exists()  # parsing wrote nothing


def test_work_on_an_empty_data_dir_loads_only_what_it_runs_and_starts_no_child(tmp_path: Path) -> None:
    found = _probe(tmp_path, ["--data-dir", str(tmp_path / "data"), "work", "--until-idle", "--json"])
    assert found["code"] == 0
    modules = found["modules"]
    assert _top_level(modules, NEVER_AT_START) == []
    # the worker's event loop is QtCore's: no GUI, widget, network or chart module
    qt = {m.split(".")[1] for m in modules if m.startswith("PySide6.") and not m.startswith("PySide6.support")}
    assert qt == {"QtCore"}
    assert "desktop_queue.api.app" not in modules and "desktop_queue.ui" not in modules
    assert found["children"] == []


def test_work_has_pyside_read_none_of_its_modules(tmp_path: Path) -> None:
    # PySide6's import hook would read the source of every module imported after it
    found = _probe(tmp_path, ["--data-dir", str(tmp_path / "data"), "work", "--until-idle", "--json"])
    order: list[str] = found["order"]
    assert found["code"] == 0
    assert "desktop_queue.runtime.driver" in order and order.index("PySide6") < order.index("desktop_queue.runtime")
    assert found["read"] == []


def test_a_cron_schedule_still_loads_croniter_when_it_is_read(tmp_path: Path) -> None:
    # the deferred import is still there for the commands that need it
    argv = ["schedule", "add", "hourly", "--cron", "0 * * * *", "--kind", "demo", "--input", '{"prompt": "x"}']
    found = _probe(tmp_path, ["--data-dir", str(tmp_path / "data"), *argv])
    assert found["code"] == 0
    assert "croniter" in found["modules"]


def test_the_migrate_parsers_default_batch_is_the_migrations() -> None:
    assert cli_migrate.BATCH == migrate.BATCH
