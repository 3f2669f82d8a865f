"""The window on a PostgreSQL store: it opens, shows another process's jobs, runs them; the Store preference."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keyring
import pytest
from keyring.backend import KeyringBackend
from PySide6.QtCore import QSettings, QThreadPool

from desktop_queue.core.model import State
from desktop_queue.providers.demo import DemoProvider

REPO = Path(__file__).resolve().parents[2]
#: the offscreen platform warns about this on every top-level show; it is not our bug
OFFSCREEN_NOISE = r"This plugin does not support propagateSizeHints\(\)"
WAIT_MS = 10_000


class _MemoryKeyring(KeyringBackend):
    """A keyring in a dict: the tests never touch the user's real one."""

    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.store: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.store.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.store[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.store.pop((service, username), None)


@pytest.fixture
def ring() -> Iterator[_MemoryKeyring]:
    previous = keyring.get_keyring()
    memory = _MemoryKeyring()
    keyring.set_keyring(memory)
    yield memory
    keyring.set_keyring(previous)


@pytest.fixture
def errors(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The error boxes the window asked for (no modal loop in tests)."""
    from desktop_queue.ui import dialogs

    shown: list[tuple[str, str]] = []
    monkeypatch.setattr(dialogs, "show_error", lambda _parent, title, text: shown.append((title, text)))
    monkeypatch.setattr(dialogs, "confirm", lambda *_args, **_kw: True)
    return shown


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DESKTOP_QUEUE_STORE"}
    return subprocess.run(
        [sys.executable, "-m", "desktop_queue", *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=60
    )


@pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)
def test_the_window_opens_on_postgresql_and_runs_a_job_another_process_submitted(
    qtbot: Any, pg_dsn: str, pg_harness: Any, tmp_path: Path, errors: list[tuple[str, str]]
) -> None:
    from desktop_queue.app import start
    from desktop_queue.core.pg import PgBackend

    uri = pg_harness.as_uri(pg_dsn)
    session = start(tmp_path / "window", {"demo": DemoProvider(tick_s=0.01)}, store=uri, refresh_ms=100, tick_ms=50)
    assert not isinstance(session, int), errors
    qtbot.addWidget(session.window)
    session.window.shutdown_timeout_ms = 3000
    try:
        session.window.show()
        assert isinstance(session.queue.store, PgBackend)
        model = session.controller.queue_model
        # another process, another data dir, the same queue
        made = _cli(
            "--data-dir", str(tmp_path / "cli"), "--store", uri, "submit", "demo", "--input",
            '{"prompt": "from elsewhere", "duration_s": 0.05}', "--json",
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        job_id = json.loads(made.stdout)["id"]
        qtbot.waitUntil(lambda: model.row_of(job_id) is not None, timeout=WAIT_MS)  # a refresh showed it
        # the window's own driver leased and ran it, and the view follows it to the end
        qtbot.waitUntil(
            lambda: (row := model.row_of(job_id)) is not None and model.job_at(row)["state"] == State.SUCCEEDED,
            timeout=WAIT_MS,
        )
        shown = _cli("--data-dir", str(tmp_path / "cli"), "--store", uri, "show", job_id, "--json")
        assert '"succeeded"' in shown.stdout
        payload = {"prompt": "from the window", "duration_s": 0.05}
        own = session.controller.submit("demo", payload, title="mine", priority="interactive", max_attempts=3).job.id
        qtbot.waitUntil(lambda: session.queue.get(own).state == State.SUCCEEDED, timeout=WAIT_MS)
        assert errors == []
    finally:
        session.close()
    assert QThreadPool.globalInstance().waitForDone(5000)


def test_an_unreachable_store_is_one_clear_error_and_nothing_opens(
    tmp_path: Path, errors: list[tuple[str, str]]
) -> None:
    from desktop_queue.app import start

    url = f"postgresql://dq:s3cret-pw@/none?host={tmp_path}&port=1"
    assert start(tmp_path / "data", {}, store=url) == 1
    ((title, text),) = errors
    assert title == "The job store cannot be opened"
    assert "cannot connect to the PostgreSQL queue" in text and "Nothing was changed" in text
    assert "s3cret-pw" not in text  # (the password is never shown)


def test_the_store_preference_keeps_its_password_in_the_keyring(
    ring: _MemoryKeyring, monkeypatch: pytest.MonkeyPatch
) -> None:
    from desktop_queue.app import chosen_store
    from desktop_queue.ui.settings import APPLICATION, ORGANIZATION, load_store, save_store

    url = "postgresql://dq:pa%40ss@db.lan:5433/queue?sslmode=require"
    save_store(url)
    saved = QSettings(ORGANIZATION, APPLICATION).value("preferences/store")
    assert saved == "postgresql://dq@db.lan:5433/queue?sslmode=require"
    assert ring.store == {("desktop-queue", f"store:{saved}"): "pa%40ss"}
    assert load_store() == url
    monkeypatch.delenv("DESKTOP_QUEUE_STORE", raising=False)
    assert chosen_store() == url  # Preferences, when neither --store nor the environment says
    monkeypatch.setenv("DESKTOP_QUEUE_STORE", "postgresql://env@/q")
    assert chosen_store() == "postgresql://env@/q"
    assert chosen_store("postgresql://flag@/q") == "postgresql://flag@/q"
    # a password given as a query parameter goes to the keyring too
    save_store("postgresql://dq@/queue?host=/run/pg&password=p%26w")
    assert QSettings(ORGANIZATION, APPLICATION).value("preferences/store") == "postgresql://dq@/queue?host=/run/pg"
    assert load_store() == "postgresql://dq:p%26w@/queue?host=/run/pg"


@pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)
def test_the_preferences_store_field_tests_the_url_and_saves_it_for_the_next_start(
    qtbot: Any, pg_dsn: str, pg_harness: Any, ring: _MemoryKeyring
) -> None:
    from desktop_queue.ui.dialogs import PreferencesDialog
    from desktop_queue.ui.settings import Preferences, load_store

    dialog = PreferencesDialog(Preferences())
    qtbot.addWidget(dialog)
    assert dialog.store.text() == "" and "restart" in dialog.store_note.text().lower()
    dialog.store.setText("mysql://x/y")
    dialog.store_test.click()
    assert "postgresql://" in dialog.store_status.text()
    dialog.accept()
    assert dialog.result() == 0  # refused, and said why below the field
    assert "postgresql://" in dialog.store_status.text()
    assert load_store() == ""
    uri = pg_harness.as_uri(pg_dsn)
    dialog.store.setText(uri)
    dialog.store_test.click()
    assert dialog.store_status.text().startswith("Connected to PostgreSQL")
    dialog.accept()
    assert dialog.result() == 1
    assert load_store() == uri


def test_the_window_on_postgresql_keeps_its_limits_and_spend_in_the_database(
    qtbot: Any, pg_dsn: str, pg_harness: Any, tmp_path: Path, errors: list[tuple[str, str]]
) -> None:
    """Built by the app itself (no providers handed in): the window's flow control and
    spend ledger are the database's, shared with every machine's workers."""
    from desktop_queue.app import start
    from desktop_queue.core.pg.ledger import PgSpendStore

    session = start(tmp_path / "window", None, store=pg_harness.as_uri(pg_dsn), refresh_ms=100, tick_ms=50)
    assert not isinstance(session, int), errors
    qtbot.addWidget(session.window)
    session.window.shutdown_timeout_ms = 3000
    try:
        flow = session.controller.flow
        assert flow is not None and flow.ledger is not None
        assert isinstance(flow.ledger.store, PgSpendStore)
        assert not (tmp_path / "window" / "flow" / "state.json").exists()
    finally:
        session.window.close()
        QThreadPool.globalInstance().waitForDone(5000)


#: an hour: no fallback read happens within the test (a job that shows came by the feed)
NEVER_MS = 3_600_000


@pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)
def test_the_window_shows_another_connections_job_within_a_second_by_listen_notify(
    qtbot: Any, pg_dsn: str, pg_harness: Any, tmp_path: Path, errors: list[tuple[str, str]]
) -> None:
    """The window's refresh follows LISTEN/NOTIFY: no store read while nothing happens, a job at once."""
    import threading

    from desktop_queue.app import start
    from desktop_queue.core import Queue
    from desktop_queue.core.pg import PgBackend

    session = start(
        tmp_path / "window", {"demo": DemoProvider()}, store=pg_harness.as_uri(pg_dsn),
        lease=False, refresh_ms=50, fallback_ms=NEVER_MS,
    )  # fmt: skip
    assert not isinstance(session, int), errors
    qtbot.addWidget(session.window)
    session.window.shutdown_timeout_ms = 3000
    other = Queue.open(tmp_path / "other", {"demo": DemoProvider()}, backend=PgBackend(pg_dsn))
    try:
        session.window.show()
        refresher = session.controller.refresher
        qtbot.waitUntil(lambda: refresher.following and refresher.fed_refreshes >= 1, timeout=WAIT_MS)
        watcher = refresher.watcher
        assert watcher is not None
        gui, reads, real = threading.get_ident(), [0], session.queue.changed_since

        def counted(version: int) -> tuple[int, set[str] | None]:
            reads[0] += threading.get_ident() == gui
            return real(version)

        session.queue.changed_since = counted  # type: ignore[method-assign]
        ticks = [0]
        refresher.refreshed.connect(lambda: ticks.__setitem__(0, ticks[0] + 1))
        # (the start-up's own reads settle first: the notices' outbox reads once after the first refresh)
        qtbot.waitUntil(lambda: ticks[0] >= 40, timeout=WAIT_MS)  # (past DELIVER_MS)
        reads[0], ticks[0], watcher_reads = 0, 0, watcher.reads
        qtbot.waitUntil(lambda: ticks[0] >= 20, timeout=WAIT_MS)  # a second of 50 ms ticks
        assert (reads[0], watcher.reads - watcher_reads) == (0, 0), "no query while nothing changed"
        # another connection (another process's, or machine's) submits: shown within a second
        job_id = other.submit("demo", {"prompt": "from another connection", "duration_s": 0}).job.id
        model = session.controller.queue_model
        qtbot.waitUntil(lambda: model.row_of(job_id) is not None, timeout=1000)
        assert watcher.reads - watcher_reads >= 1 and reads[0] >= 1  # one read each for it, by the feed
    finally:
        other.close()
        session.close()
    assert QThreadPool.globalInstance().waitForDone(5000)
