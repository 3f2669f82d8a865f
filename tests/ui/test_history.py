"""The window over a store whose finished jobs were archived (issue 10).

The store keeps only its hot set in memory; the panes show the archived jobs after the
hot ones, a page at a time as the view scrolls, filtered by the archive's index, and an
archived job shows its timeline and can be retried like a hot one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QModelIndex

from desktop_queue.core import Outcome, Queue
from desktop_queue.core.model import State
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.ui.commands import Command
from desktop_queue.ui.models import (
    DeadLetterModel,
    JobFilterProxy,
    JobRole,
    QueueModel,
    RefreshCoordinator,
    TimelineRole,
)
from desktop_queue.ui.models.refresh import Pace
from desktop_queue.ui.panes import select_job

JOBS = 60
KEEP = 5
ROOT = QModelIndex()


def build_store(data_dir: Path) -> dict[str, list[str]]:
    """60 demo jobs run to the end (every sixth dead, titles "pear …" or "apple …"), then compacted
    with a hot set of 5: the others are archived. Returns the ids per state and per fruit."""
    ids: dict[str, list[str]] = {"succeeded": [], "dead": [], "pear": [], "apple": [], "all": []}
    queue = Queue.open(data_dir, {"demo": DemoProvider()}, keep_finished=KEEP, background_compaction=False)
    try:
        for i in range(JOBS):
            fruit = "pear" if i % 3 == 0 else "apple"
            job_id = queue.submit("demo", {"prompt": f"job {i}"}, title=f"{fruit} {i}").job.id
            lease = queue.lease("w")
            assert lease is not None and lease.job_id == job_id
            if i % 6 == 0:
                queue.fail(lease, Outcome.failure("fatal", f"demo: simulated invalid request {i}"))
                ids["dead"].append(job_id)
            else:
                queue.complete(lease, {"text": f"ok {i}"})
                ids["succeeded"].append(job_id)
            ids[fruit].append(job_id)
            ids["all"].append(job_id)
        queue.store.compact_now()
        assert len(queue.raw_jobs()) == KEEP
        assert len(queue.history(limit=1000)) == JOBS - KEEP
    finally:
        queue.close()
    return ids


def all_ids(model: Any) -> list[str]:
    return [model.index(r, 0).data(JobRole.ID) for r in range(model.rowCount())]


def fetch_all(model: Any) -> None:
    while model.canFetchMore(ROOT):
        model.fetchMore(ROOT)


@pytest.fixture
def store(data_dir: Path) -> dict[str, list[str]]:
    return build_store(data_dir)


@pytest.fixture
def queue(data_dir: Path, store: dict[str, list[str]]) -> Any:
    q = Queue.open(data_dir, {"demo": DemoProvider()}, keep_finished=KEEP, background_compaction=False)
    yield q
    q.close()


def test_every_job_is_reachable_a_page_at_a_time_and_once(
    qtmodeltester: Any, queue: Queue, store: dict[str, list[str]]
) -> None:
    model = QueueModel(history=queue, page_size=10)
    RefreshCoordinator(queue, [model]).refresh()
    assert model.hot_count() == KEEP and model.archived_count() == 0
    assert model.canFetchMore(ROOT)
    model.fetchMore(ROOT)
    assert model.archived_count() == 10  # one page, not the archive
    qtmodeltester.check(model)
    fetch_all(model)
    ids = all_ids(model)
    assert len(ids) == JOBS and set(ids) == set(store["all"])
    # archived rows come after the hot ones, newest first
    seqs = [model.job_at(r)["seq"] for r in range(KEEP, JOBS)]
    assert seqs == sorted(seqs, reverse=True)
    archived = model.job_at(KEEP)
    assert archived["archived"] and archived["attempts"] == 1  # the whole job, read from its segment


def test_a_job_the_hot_set_lets_go_of_stays_once_and_becomes_archived(queue: Queue) -> None:
    for i in range(3):
        queue.submit("demo", {"prompt": f"late {i}"}, title=f"late {i}")
        lease = queue.lease("w")
        assert lease is not None
        queue.complete(lease, {"text": "ok"})
    model = QueueModel(history=queue)
    refresher = RefreshCoordinator(queue, [model])
    refresher.refresh()
    fetch_all(model)
    assert model.hot_count() == KEEP + 3
    queue.store.compact_now()  # 3 more jobs archived: changed_since names none of them
    refresher.refresh()
    fetch_all(model)
    assert sorted(all_ids(model)) == sorted(set(all_ids(model))) and model.rowCount() == JOBS + 3
    refresher.version = -1  # a full reload: the hot part is the store's again
    refresher.refresh()
    fetch_all(model)
    assert model.hot_count() == KEEP and model.rowCount() == JOBS + 3
    assert len(set(all_ids(model))) == JOBS + 3


def test_the_filter_is_the_archive_index_query(queue: Queue, store: dict[str, list[str]]) -> None:
    model = QueueModel(history=queue, page_size=1000)
    proxy = JobFilterProxy()
    proxy.setSourceModel(model)
    RefreshCoordinator(queue, [model]).refresh()
    proxy.set_text("PEAR")
    fetch_all(model)
    assert set(proxy.job_ids()) == set(store["pear"])
    # only matching archived rows were read: the others never left the index
    assert all("pear" in model.job_at(r)["title"] for r in range(model.hot_count(), model.rowCount()))
    proxy.set_text("")
    proxy.set_state("dead")
    fetch_all(model)
    assert set(proxy.job_ids()) == set(store["dead"])
    assert all(model.job_at(r)["state"] == "dead" for r in range(model.hot_count(), model.rowCount()))


def test_the_dead_letter_model_lists_archived_dead_letters(
    qtmodeltester: Any, queue: Queue, store: dict[str, list[str]]
) -> None:
    model = DeadLetterModel(history=queue, page_size=4)
    RefreshCoordinator(queue, [model]).refresh()
    fetch_all(model)
    qtmodeltester.check(model)
    assert sorted(all_ids(model)) == sorted(store["dead"])
    assert model.archived_ids() == [model.job_at(r)["id"] for r in range(model.hot_count(), model.rowCount())]


@pytest.fixture
def window_on_archive(open_session: Any, data_dir: Path, store: dict[str, list[str]]) -> Any:
    session = open_session(data_dir, lease=False)
    assert not isinstance(session, int)
    for model in (session.controller.queue_model, session.controller.dead_model):
        model.page_size = 8  # a few pages for 60 jobs
    session.window.show()
    return session


def test_the_queue_pane_loads_more_as_it_scrolls(qtbot: Any, window_on_archive: Any) -> None:
    window = window_on_archive.window
    model, view = window.controller.queue_model, window.queue_pane.view
    qtbot.waitUntil(lambda: model.archived_count() > 0, timeout=3000)  # the view filled its viewport
    assert model.rowCount() < JOBS
    for _ in range(JOBS):
        if not model.canFetchMore(ROOT):
            break
        before = model.rowCount()
        view.scrollToBottom()
        qtbot.waitUntil(lambda before=before: model.rowCount() > before, timeout=3000)
    assert model.rowCount() == JOBS and len(set(all_ids(model))) == JOBS


def test_counts_include_archived_jobs(qtbot: Any, window_on_archive: Any) -> None:
    window = window_on_archive.window
    qtbot.waitUntil(lambda: window.queue_pane.state_filter.itemText(0) == f"All states ({JOBS})", timeout=3000)
    assert window.queue_pane.state_filter.itemText(4) == "Dead (10)"
    assert window.tabs.tabText(1) == "&Dead letters (10)"
    assert window.status.state_labels["succeeded"].text() == "50 succeeded"
    assert window.dead_pane.retry_all_button.text() == "Retr&y all matching (10)"  # loaded or not


def test_the_search_field_narrows_archived_rows(
    qtbot: Any, window_on_archive: Any, store: dict[str, list[str]]
) -> None:
    pane = window_on_archive.window.queue_pane
    pane.search.setText("pear 1")  # pear 12, 15, 18 (and none of the apples)
    # the hot rows at once; the archive's index once typing pauses
    qtbot.waitUntil(lambda: pane.model.archive_filter == (None, "pear 1"), timeout=3000)
    qtbot.waitUntil(lambda: not pane.model.canFetchMore(ROOT), timeout=3000)
    titles = sorted(pane.proxy.index(r, 1).data() for r in range(pane.proxy.rowCount()))
    assert titles == ["pear 12", "pear 15", "pear 18"]
    assert pane.model.archived_count() <= 3


def test_an_archived_row_shows_its_timeline(qtbot: Any, window_on_archive: Any, store: dict[str, list[str]]) -> None:
    window = window_on_archive.window
    old = store["succeeded"][0]  # the first job: archived, and on the last page
    assert select_job(window.queue_pane.view, old)
    qtbot.waitUntil(lambda: window.timeline_model.job is not None and window.timeline_model.job.id == old, timeout=3000)
    model = window.timeline_model
    events = [model.index(r).data(TimelineRole.EVENT) for r in range(model.rowCount())]
    assert [e.type for e in events if e is not None] == ["submitted", "leased", "succeeded"]
    assert old in window.timeline_pane.heading.text()


def test_retrying_an_archived_dead_letter_brings_it_back_once(
    qtbot: Any, window_on_archive: Any, store: dict[str, list[str]]
) -> None:
    window = window_on_archive.window
    dead, queue_model = window.controller.dead_model, window.controller.queue_model
    window.tabs.setCurrentWidget(window.dead_pane)
    oldest = store["dead"][0]
    assert select_job(window.dead_pane.view, oldest)
    assert dead.job_at(dead.row_of(oldest))["archived"]
    fetch_all(queue_model)
    assert window.action(Command.RETRY).isEnabled()
    window.dead_pane.retry_button.click()
    qtbot.waitUntil(lambda: dead.row_of(oldest) is None, timeout=3000)
    qtbot.waitUntil(lambda: queue_model.row_of(oldest) is not None, timeout=3000)
    row = queue_model.row_of(oldest)
    assert row is not None and row < queue_model.hot_count()
    assert queue_model.job_at(row)["state"] == State.QUEUED
    assert all_ids(queue_model).count(oldest) == 1
    assert window.controller.queue.get(oldest).state != State.DEAD  # queued again (a driver may run it)
    qtbot.waitUntil(lambda: window.tabs.tabText(1) == "&Dead letters (9)", timeout=3000)


def test_retry_all_matching_includes_archived_dead_letters_not_loaded(
    qtbot: Any, window_on_archive: Any, prompts: Any, store: dict[str, list[str]]
) -> None:
    window = window_on_archive.window
    window.tabs.setCurrentWidget(window.dead_pane)
    assert sorted(window.dead_pane.matching_ids()) == sorted(store["dead"])
    window.dead_pane.search.setText("pear")  # every dead job is a pear (i % 6 == 0)
    window.retry_all_matching()
    assert prompts.confirms and "Retry 10 dead jobs" in prompts.confirms[-1]
    qtbot.waitUntil(lambda: window.controller.queue.counts()["dead"] == 0, timeout=5000)


def test_the_jobs_done_in_the_last_minute_count_the_archived_ones(queue: Queue, store: dict[str, list[str]]) -> None:
    """The status bar's figure starts from the store, not from the hot set (which holds 5 here)."""
    refresher = RefreshCoordinator(queue, [])
    refresher.refresh()
    assert refresher.tally.done_since(queue.clock.now() - 60) == len(store["succeeded"]) == 50
    job_id = queue.submit("demo", {"prompt": "one more"}).job.id
    lease = queue.lease("w")
    assert lease is not None and lease.job_id == job_id
    queue.complete(lease, {"text": "ok"})
    refresher.refresh()  # a change: counted on top
    assert refresher.tally.done_since(queue.clock.now() - 60) == 51
    queue.store.compact_now()
    refresher.version = -1  # a full reload counts them again, from the store
    refresher.refresh()
    assert refresher.tally.done_since(queue.clock.now() - 60) == 51


def _run_jobs(queue: Queue, n: int, tag: str) -> list[str]:
    ids = []
    for i in range(n):
        job_id = queue.submit("demo", {"prompt": f"{tag} {i}"}, title=f"{tag} {i}").job.id
        lease = queue.lease("w")
        assert lease is not None and lease.job_id == job_id
        queue.complete(lease, {"text": "ok"})
        ids.append(job_id)
    return ids


def test_the_tables_let_go_of_the_rows_the_store_archived_and_find_them_below(
    qtmodeltester: Any, queue: Queue, store: dict[str, list[str]]
) -> None:
    """A window open for weeks held a row for every job it saw run, long after the store
    archived it: the rows of archived jobs go, and come back as archived rows."""
    model = QueueModel(history=queue, page_size=1000)
    refresher = RefreshCoordinator(queue, [model])
    refresher.refresh()
    late = _run_jobs(queue, 12, "late")
    refresher.refresh()
    assert model.hot_count() == KEEP + 12
    queue.store.compact_now()  # the store keeps 5 of them: the window still has 17
    refresher.refresh()
    assert model.hot_count() == KEEP + 12
    kept = late[3]
    model.pinned = lambda: [kept]  # (selected in a view)
    refresher.pace = Pace.UNFOCUSED
    assert refresher.release() == 12 - 1
    assert model.hot_count() == KEEP + 1 and model.row_of(kept) is not None
    qtmodeltester.check(model)
    fetch_all(model)
    ids = all_ids(model)
    assert len(ids) == JOBS + 12 and set(ids) == set(store["all"]) | set(late)
    assert refresher.release() == 0  # (nothing more to let go of)


def test_a_window_in_front_lets_go_of_rows_rarely_and_not_under_a_reader(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("desktop_queue.ui.models.refresh.RELEASE_AT_LEAST", 10)
    model = QueueModel(history=queue, page_size=4)
    refresher = RefreshCoordinator(queue, [model])
    refresher.refresh()
    _run_jobs(queue, 6, "few")
    refresher.refresh()
    queue.store.compact_now()
    assert refresher.pace == Pace.FOCUSED
    assert refresher.release() == 0 and model.hot_count() == KEEP + 6  # fewer than ten: kept
    _run_jobs(queue, 6, "more")
    refresher.refresh()
    queue.store.compact_now()
    model.in_use = lambda: True  # someone reads the table scrolled down
    assert refresher.release() == 0
    model.in_use = None
    model.fetchMore(ROOT)  # someone scrolled down to the history
    assert model.archived_count() == 4
    assert refresher.release() == 0  # not while the archived rows are read
    refresher.pace = Pace.UNFOCUSED
    assert refresher.release() == 0  # (behind another application: the same)
    refresher.pace = Pace.HIDDEN
    assert refresher.release() == 12  # out of sight: the archived rows start again, too
    assert model.archived_count() == 0 and model.canFetchMore(ROOT)
    fetch_all(model)
    assert len(set(all_ids(model))) == model.rowCount() == JOBS + 12


def test_a_selected_row_stays_when_the_others_go(qtbot: Any, window_on_archive: Any) -> None:
    window = window_on_archive.window
    queue = window.controller.queue
    late = _run_jobs(queue, 8, "late")
    model, refresher = window.controller.queue_model, window.controller.refresher
    qtbot.waitUntil(lambda: all(model.row_of(i) is not None for i in late), timeout=3000)
    assert select_job(window.queue_pane.view, late[2])
    queue.store.keep_finished = KEEP
    queue.store.compact_now()
    bar = window.queue_pane.view.verticalScrollBar()
    bar.setValue(bar.maximum())  # read scrolled down, in sight: nothing changes under the reader
    assert model.in_use() and bar.maximum() > 0
    refresher.pace = Pace.UNFOCUSED
    assert refresher.release() == 0
    refresher.pace = Pace.HIDDEN
    assert refresher.release() >= 7
    assert [j["id"] for j in window.queue_pane.selected()] == [late[2]]
    qtbot.waitUntil(lambda: window.timeline_model.job is not None, timeout=3000)
    assert window.timeline_model.job.id == late[2]
