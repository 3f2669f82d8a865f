"""Fixtures for the core engine tests: a fake clock, a seeded rng and a queue in ``tmp_path``.

Nothing here may touch the real user profile: every data dir lives under
``tmp_path``, and the profile locations themselves (``DESKTOP_QUEUE_DATA_DIR``,
``HOME``, ``XDG_DATA_HOME``) are pointed at ``tmp_path`` for the test and every
subprocess it starts.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import FakeClock, Queue, RetryPolicy
from desktop_queue.core.memory import MemoryBackend


@pytest.fixture(autouse=True)
def _no_real_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Points every way of finding the user's data dir at ``tmp_path``."""
    profile = tmp_path / "profile"
    monkeypatch.setenv("DESKTOP_QUEUE_DATA_DIR", str(profile / "data"))
    monkeypatch.setenv("HOME", str(profile / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(profile / "xdg-data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(profile / "xdg-config"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def policy() -> RetryPolicy:
    return RetryPolicy()


@pytest.fixture
def open_queue(
    data_dir: Path, clock: FakeClock, policy: RetryPolicy, opened_queues: list[Queue]
) -> Callable[..., Queue]:
    """Opens queues on ``data_dir`` (fake clock, seeded rng); closes them all at teardown."""

    def _open(path: Path | None = None, **kwargs: Any) -> Queue:
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("policy", policy)
        kwargs.setdefault("rng", random.Random(1234))
        queue = Queue.open(path or data_dir, **kwargs)
        opened_queues.append(queue)
        return queue

    return _open


@pytest.fixture
def queue(open_queue: Callable[..., Queue]) -> Queue:
    return open_queue()


#: every backend the queue's verbs run over (see desktop_queue.core.backend)
BACKENDS = ("json", "memory", "pg")


def _pg_harness() -> Any:
    """tests/pg/harness.py, loaded once for both conftests that use it (one server a session)."""
    name = "dq_pg_harness"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "pg" / "harness.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


pg_server = _pg_harness().pg_server
pg_dsn = _pg_harness().pg_dsn


@pytest.fixture(params=BACKENDS)
def any_queue(request: pytest.FixtureRequest, open_queue: Callable[..., Queue]) -> Queue:
    """A queue over each backend in turn: the JSON store in ``data_dir``, memory, PostgreSQL
    (a schema of its own on the session's server; skipped only when PostgreSQL is not installed)."""
    if request.param == "memory":
        return open_queue(backend=MemoryBackend())
    if request.param == "pg":
        from desktop_queue.core.pg import PgBackend

        return open_queue(backend=PgBackend(request.getfixturevalue("pg_dsn")))
    return open_queue()
