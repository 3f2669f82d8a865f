"""Fixtures of the PostgreSQL backend's tests: the session's server, a schema per test, queues on it."""

from __future__ import annotations

import importlib.util
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import FakeClock, Queue, RetryPolicy


def _load(name: str, path: Path) -> Any:
    """The module of the file ``path``, loaded once as ``name`` (its directory need not be on sys.path)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _harness() -> Any:
    return _load("dq_pg_harness", Path(__file__).with_name("harness.py"))


pg_server = _harness().pg_server
pg_dsn = _harness().pg_dsn


@pytest.fixture
def core_tests() -> Callable[[str], Any]:
    """Loads a module of tests/core by file name (whose machines and references these tests reuse)."""
    core = Path(__file__).resolve().parents[1] / "core"
    return lambda filename: _load(f"dq_core_{Path(filename).stem}", core / filename)


@pytest.fixture
def pg_harness() -> Any:
    """tests/pg/harness.py (``as_uri``, the server script)."""
    return _harness()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_pg(pg_dsn: str, data_dir: Path, clock: FakeClock, opened_queues: list[Queue]) -> Callable[..., Queue]:
    """Opens queues on the test's schema (a fake clock unless given ``clock=``); closed at teardown."""
    from desktop_queue.core.pg import PgBackend

    def _open(dsn: str | None = None, **kwargs: Any) -> Queue:
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("policy", RetryPolicy())
        kwargs.setdefault("rng", random.Random(1234))
        backend = kwargs.pop("backend", None) or PgBackend(dsn or pg_dsn)
        queue = Queue.open(data_dir, backend=backend, **kwargs)
        opened_queues.append(queue)
        return queue

    return _open


@pytest.fixture
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A server of this test's own (to restart without disturbing the others), stopped after it."""
    import os
    import tempfile

    harness = _harness()
    script = harness._script()
    if script.find_bin() is None:
        reason = "PostgreSQL is not installed (no initdb/pg_ctl): cannot start a server to restart"
        if os.environ.get(harness.ENV_REQUIRE):
            pytest.fail(reason)
        pytest.skip(reason)
    server = script.PgServer(Path(tempfile.mkdtemp(prefix="dq-pg-own-")))
    server.init()
    server.start()
    try:
        yield server
    finally:
        server.stop()
