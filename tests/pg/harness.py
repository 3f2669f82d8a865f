"""The PostgreSQL server of a test session, and a fresh schema for each test.

``DESKTOP_QUEUE_TEST_PG`` (a DSN) names a server to use; without it one is made with
``scripts/pg-test-server`` (``initdb`` into a temp dir, a Unix socket there) and stopped
at the end of the session. Tests that need it skip only when no PostgreSQL binaries are
installed, and never when ``DESKTOP_QUEUE_REQUIRE_PG`` is set (``.ci/run`` sets it).

Two conftests use it (``tests/core``: the ``pg`` backend of ``any_queue``;
``tests/pg``): both load this file as the one module ``dq_pg_harness`` (their
``_harness()``), so a session starts one server.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import sys
import tempfile
from collections.abc import Iterator
from importlib.machinery import SourceFileLoader
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV_DSN = "DESKTOP_QUEUE_TEST_PG"
ENV_REQUIRE = "DESKTOP_QUEUE_REQUIRE_PG"


def _script() -> Any:
    """``scripts/pg-test-server`` as a module (its name has no ``.py``)."""
    name = "dq_pg_test_server"
    if name not in sys.modules:
        path = ROOT / "scripts" / "pg-test-server"
        loader = SourceFileLoader(name, str(path))
        spec = importlib.util.spec_from_loader(name, loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        loader.exec_module(module)
    return sys.modules[name]


class Session:
    """The session's server: made on first use, stopped when the last user lets go."""

    def __init__(self) -> None:
        self.server: Any = None
        self.dsn: str | None = None
        self.users = 0

    def acquire(self) -> str:
        self.users += 1
        if self.dsn is None:
            given = os.environ.get(ENV_DSN, "").strip()
            if given:
                self.dsn = given
            else:
                script = _script()
                if script.find_bin() is None:
                    self.users -= 1
                    reason = f"PostgreSQL is not installed (no initdb/pg_ctl on PATH or in /usr/lib/postgresql/*/bin) and {ENV_DSN} is not set"
                    if os.environ.get(ENV_REQUIRE):
                        pytest.fail(f"{ENV_REQUIRE} is set but {reason}")
                    pytest.skip(reason)
                self.server = script.PgServer(Path(tempfile.mkdtemp(prefix="dq-pg-")))
                self.server.init()
                self.server.start()
                self.dsn = self.server.dsn
        return self.dsn

    def release(self) -> None:
        self.users -= 1
        if self.users <= 0 and self.server is not None:
            self.server.stop()
            self.server = None
            self.dsn = None


#: one per process (both conftests share it through sys.modules)
SESSION = Session()


def schema_dsn(dsn: str, schema: str) -> str:
    """``dsn`` with ``schema`` first on the search path (the queue's tables go there)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(dsn)
    return make_conninfo(dsn, options=f"{params.get('options', '') or ''} -c search_path={schema}".strip())


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """The DSN of the session's server (and the :class:`PgServer` when this session made it)."""
    dsn = SESSION.acquire()
    try:
        yield SESSION
    finally:
        SESSION.release()
    assert dsn


@pytest.fixture
def pg_dsn(pg_server: Session, opened_queues: list[Any]) -> Iterator[str]:
    """A DSN whose tables land in a new, empty schema; dropped after the test (its queues closed first)."""
    import psycopg

    assert pg_server.dsn is not None
    schema = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema_dsn(pg_server.dsn, schema)
    finally:
        for queue in opened_queues:
            if not queue.store.closed:
                queue.close()
        with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def as_uri(dsn: str) -> str:
    """``dsn`` as a ``postgresql://`` URI (what ``--store`` and ``DESKTOP_QUEUE_STORE`` take)."""
    from urllib.parse import quote, urlencode

    from psycopg.conninfo import conninfo_to_dict

    params = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    user = quote(params.pop("user", ""), safe="")
    password = params.pop("password", None)
    dbname = quote(params.pop("dbname", ""), safe="")
    auth = f"{user}:{quote(password, safe='')}@" if password else (f"{user}@" if user else "")
    host = params.get("host", "")
    netloc = ""
    if host and not host.startswith("/"):
        netloc = quote(params.pop("host"), safe="")
        if "port" in params:
            netloc += f":{params.pop('port')}"
    query = urlencode(params, quote_via=quote)
    return f"postgresql://{auth}{netloc}/{dbname}" + (f"?{query}" if query else "")
