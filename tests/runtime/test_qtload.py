"""PySide6 reads no module's source once ``desktop_queue.qtload`` is imported.

Each case runs in a fresh interpreter: PySide6's import hook lives for the whole
process, and the test process imported PySide6 long ago.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

#: a module that names no Qt at all, and one that selects a PySide ``__feature__``
PROBE = "def answer():\n    return 42\n"
SNAKE = textwrap.dedent(
    """
    from __feature__ import snake_case  # noqa: F401
    from PySide6.QtCore import QObject

    def name():
        probe = QObject()
        probe.set_object_name("snake")
        return probe.object_name()
    """
)
CAMEL = textwrap.dedent(
    """
    from PySide6.QtCore import QObject

    def name():
        probe = QObject()
        probe.setObjectName("camel")
        return probe.objectName()
    """
)


def _run(code: str, where: Path) -> Any:
    """Runs ``code`` in a fresh interpreter with ``where`` on its path; returns the JSON it prints last."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(where), "QT_QPA_PLATFORM": "offscreen"},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _read_sources(tmp_path: Path, first: str) -> list[str]:
    """The files in ``linecache`` after ``first`` and then the probe module were imported."""
    (tmp_path / "probe_module.py").write_text(PROBE)
    out = _run(
        f"""
        import json, linecache
        {first}
        import probe_module
        print(json.dumps({{"read": sorted(linecache.cache)}}))
        """,
        tmp_path,
    )
    return [Path(p).name for p in out["read"]]


def test_pyside_alone_reads_each_later_module(tmp_path: Path) -> None:
    """The cost qtload removes, on the PySide6 the project installs. Without it the tests
    below would pass with qtload doing nothing: a release that stops scanning fails here,
    and qtload can then go."""
    read = _read_sources(tmp_path, "import PySide6.QtCore")
    assert "probe_module.py" in read, "this PySide6 no longer reads later modules' source: qtload is not needed"


def test_after_qtload_no_later_module_is_read(tmp_path: Path) -> None:
    read = _read_sources(tmp_path, "import desktop_queue.qtload")
    assert "probe_module.py" not in read
    assert not [name for name in read if name.startswith("probe")]


def test_the_window_modules_are_not_read(tmp_path: Path) -> None:
    """``desktop_queue.app`` imports Qt, then every module of the window: none is read."""
    out = _run(
        """
        import json, linecache
        import desktop_queue.app
        print(json.dumps({"read": sorted(p for p in linecache.cache if "desktop_queue" in p)}))
        """,
        tmp_path,
    )
    assert out["read"] == []


def test_a_module_selecting_a_feature_still_gets_it(tmp_path: Path) -> None:
    (tmp_path / "snake_module.py").write_text(SNAKE)
    (tmp_path / "camel_module.py").write_text(CAMEL)
    out = _run(
        """
        import json
        import desktop_queue.qtload
        import camel_module, snake_module
        print(json.dumps([snake_module.name(), camel_module.name(), snake_module.name(), camel_module.name()]))
        """,
        tmp_path,
    )
    assert out == ["snake", "camel", "snake", "camel"]
