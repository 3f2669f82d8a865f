"""The item models: Qt's model tester, incremental updates, filters, and 10,000 jobs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QIcon

from desktop_queue.core import Outcome, Queue
from desktop_queue.core.model import EventType, State
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.ui.models import (
    DeadLetterModel,
    JobFilterProxy,
    JobRole,
    QueueModel,
    RefreshCoordinator,
    TimelineModel,
    TimelineRole,
)


@pytest.fixture
def queue(data_dir: Path) -> Any:
    """A queue with a job in every state (and a replay)."""
    q = Queue.open(data_dir, {"demo": DemoProvider()})
    ids = {}
    for name in ("queued", "running", "succeeded", "dead", "cancelled"):
        ids[name] = q.submit("demo", {"prompt": name}, title=f"{name} job").job.id
    q.cancel(ids["cancelled"])
    for name, outcome in (
        ("succeeded", Outcome.success({"text": "ok"})),
        ("dead", Outcome.failure("fatal", "demo: simulated invalid request (400)", status=400)),
        ("running", None),
    ):
        while True:
            lease = q.lease("w1")
            assert lease is not None
            if lease.job_id == ids[name]:
                break
            q.release(lease)
        if outcome is None:
            continue
        if outcome.ok:
            q.complete(lease, outcome.result)
        else:
            q.fail(lease, outcome)
    ids["replay"] = q.replay(ids["succeeded"]).id
    q.ids = ids  # type: ignore[attr-defined]
    yield q
    q.close()


def test_queue_model_passes_the_model_tester(qtmodeltester: Any, queue: Any) -> None:
    model = QueueModel()
    model.reset_jobs(queue.raw_jobs())
    assert model.rowCount() == 6
    qtmodeltester.check(model)
    proxy = JobFilterProxy()
    proxy.setSourceModel(model)
    proxy.sort(0, Qt.SortOrder.AscendingOrder)
    qtmodeltester.check(proxy)


def test_dead_letter_model_passes_the_model_tester_and_holds_only_dead_jobs(qtmodeltester: Any, queue: Any) -> None:
    model = DeadLetterModel()
    model.reset_jobs(queue.raw_jobs())
    assert [model.job_at(r)["id"] for r in range(model.rowCount())] == [queue.ids["dead"]]
    qtmodeltester.check(model)
    index = model.index(0, 3)
    assert "HTTP 400" in index.data(Qt.ItemDataRole.ToolTipRole)


def test_timeline_model_passes_the_model_tester(qtmodeltester: Any, queue: Any) -> None:
    model = TimelineModel()
    model.show_job(queue.get(queue.ids["dead"]))
    qtmodeltester.check(model)
    categories = [model.index(r).data(TimelineRole.CATEGORY) for r in range(model.rowCount())]
    assert categories[-1] == "failure"


def test_state_column_is_icon_and_text(queue: Any) -> None:
    model = QueueModel()
    model.reset_jobs(queue.raw_jobs())
    row = model.row_of(queue.ids["dead"])
    index = model.index(row, 0)
    assert index.data() == "dead"
    assert index.data(Qt.ItemDataRole.DecorationRole) is not None


def test_updates_are_incremental_never_a_reset(qtbot: Any, queue: Any) -> None:
    queue_model, dead_model = QueueModel(), DeadLetterModel()
    refresher = RefreshCoordinator(queue, [queue_model, dead_model], interval_ms=300)
    refresher.refresh()
    assert queue_model.rowCount() == 6 and dead_model.rowCount() == 1
    with qtbot.assertNotEmitted(queue_model.modelReset), qtbot.assertNotEmitted(dead_model.modelReset):
        with qtbot.waitSignal(queue_model.rowsInserted, timeout=1000) as inserted:
            new_id = queue.submit("demo", {"prompt": "new"}).job.id
            refresher.refresh()
        assert inserted.args[1:] == [6, 6]
        with qtbot.waitSignal(queue_model.dataChanged, timeout=1000) as changed:
            queue.cancel(new_id)
            refresher.refresh()
        assert changed.args[0].row() == queue_model.row_of(new_id)
        with qtbot.waitSignal(dead_model.rowsRemoved, timeout=1000):
            queue.retry(queue.ids["dead"])
            refresher.refresh()
    assert dead_model.rowCount() == 0
    assert queue_model.job_at(queue_model.row_of(new_id))["state"] == State.CANCELLED
    assert refresher.timer.objectName() == "refreshTimer"
    assert 250 <= refresher.timer.interval() <= 500


def test_timeline_grows_by_ranged_inserts(qtbot: Any, queue: Any) -> None:
    model = TimelineModel()
    job_id = queue.ids["cancelled"]
    model.show_job(queue.get(job_id))
    before = model.rowCount()
    with qtbot.assertNotEmitted(model.modelReset), qtbot.waitSignal(model.rowsInserted, timeout=1000) as blocker:
        queue.retry(job_id)
        model.update_job(queue.get(job_id))
    assert blocker.args[1:] == [before, before]
    assert model.index(before).data(TimelineRole.EVENT).type == EventType.RETRIED


def test_replay_events_link_both_ways(queue: Any) -> None:
    model = TimelineModel()
    model.show_job(queue.get(queue.ids["replay"]))
    assert model.index(0).data(TimelineRole.LINK) == queue.ids["succeeded"]
    model.show_job(queue.get(queue.ids["succeeded"]))
    links = [model.index(r).data(TimelineRole.LINK) for r in range(model.rowCount())]
    assert queue.ids["replay"] in links
    assert "replayed as" in model.as_text().lower()


def test_proxy_filters_by_text_and_state(queue: Any) -> None:
    model = QueueModel()
    model.reset_jobs(queue.raw_jobs())
    proxy = JobFilterProxy()
    proxy.setSourceModel(model)
    proxy.set_state("dead")
    assert proxy.job_ids() == [queue.ids["dead"]]
    proxy.set_state(None)
    proxy.set_text("CANCELLED job")
    assert proxy.job_ids() == [queue.ids["cancelled"]]
    proxy.set_text("http 400")
    assert proxy.job_ids() == [queue.ids["dead"]]


def test_ten_thousand_jobs_load_into_the_queue_model(qtbot: Any, queue: Any) -> None:
    template = next(j for j in queue.raw_jobs() if j["state"] == State.QUEUED)
    jobs = [{**template, "id": f"{i:010x}", "seq": i, "title": f"job {i}"} for i in range(10_000)]
    model = QueueModel()
    proxy = JobFilterProxy()
    proxy.setSourceModel(model)
    started = time.perf_counter()
    model.reset_jobs(jobs)
    proxy.sort(6, Qt.SortOrder.DescendingOrder)
    loaded = time.perf_counter() - started
    assert proxy.rowCount() == 10_000
    started = time.perf_counter()
    with qtbot.assertNotEmitted(model.modelReset):
        model.apply([{**j, "state": "cancelled"} for j in jobs[::100]])
        model.tick()
    updated = time.perf_counter() - started
    print(
        f"\n10,000 jobs: load+sort {loaded * 1000:.0f} ms, 100 scattered updates + clock tick {updated * 1000:.0f} ms"
    )
    assert proxy.index(0, 0).data(JobRole.ID) == f"{9999:010x}"


# --------------------------------------------------------------------------- sorting in the model


def _jobs(n: int, **fields: Any) -> list[dict[str, Any]]:
    """Plain job dicts (what ``Queue.raw_jobs`` returns), titles out of order and mixed case."""
    words = ["pear", "Apple", "fig", "banana", "Cherry", "date", "elder", "grape"]
    return [
        {
            "id": f"{i:04x}",
            "seq": i,
            "title": f"{words[i % len(words)]} {i}",
            "kind": "demo",
            "state": "queued",
            "priority": "background",
            "attempts": 0,
            "max_attempts": 3,
            "created_at": 1_000.0 + i,
            **fields,
        }
        for i in range(n)
    ]


def _column(model: QueueModel, key: str) -> int:
    return [c.key for c in model.columns].index(key)


def _titles(model: QueueModel) -> list[str]:
    return [j["title"] for j in model.jobs()]


def _sorted_titles(model: QueueModel, descending: bool = False) -> list[str]:
    jobs = sorted(model.jobs(), key=lambda j: (j["title"].casefold(), j["seq"]), reverse=descending)
    return [j["title"] for j in jobs]


def test_the_source_model_sorts_and_the_proxy_only_filters(qtbot: Any, qtmodeltester: Any) -> None:
    model = QueueModel(clock=lambda: 2_000.0)
    model.reset_jobs(_jobs(40))
    qtmodeltester.check(model)  # the tester stays attached: every signal below is checked too
    proxy = JobFilterProxy()
    proxy.setSourceModel(model)
    title = _column(model, "title")
    with qtbot.assertNotEmitted(model.modelReset), qtbot.waitSignal(model.layoutChanged, timeout=1000):
        proxy.sort(title, Qt.SortOrder.AscendingOrder)  # what the header does
    assert (model.sort_column, model.sort_order) == (title, Qt.SortOrder.AscendingOrder)
    assert proxy.sortColumn() == -1  # the proxy never asks Python for sort keys
    assert _titles(model) == _sorted_titles(model)
    assert [proxy.index(r, title).data() for r in range(proxy.rowCount())] == _titles(model)
    model.sort(title, Qt.SortOrder.DescendingOrder)
    assert _titles(model) == _sorted_titles(model, descending=True)
    model.sort(-1)  # submission order
    assert [j["seq"] for j in model.jobs()] == list(range(40))
    assert [model.row_of(j["id"]) for j in model.jobs()] == list(range(40))


def test_the_selection_survives_a_sort(qtbot: Any) -> None:
    from PySide6.QtCore import QItemSelectionModel

    model = QueueModel(clock=lambda: 2_000.0)
    model.reset_jobs(_jobs(30))
    proxy = JobFilterProxy()
    proxy.setSourceModel(model)
    selection = QItemSelectionModel(proxy)
    chosen = {"0003", "000b", "0014"}
    for job_id in chosen:
        row = proxy.mapFromSource(model.index(model.row_of(job_id), 0)).row()
        selection.select(
            proxy.index(row, 0), QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
        )
    for column, order in (
        (_column(model, "title"), Qt.SortOrder.AscendingOrder),
        (_column(model, "created"), Qt.SortOrder.DescendingOrder),
    ):
        proxy.sort(column, order)
        assert {index.data(JobRole.ID) for index in selection.selectedRows(0)} == chosen
    proxy.set_text("apple")  # filtered, then sorted: still the same jobs (those the filter shows)
    proxy.sort(_column(model, "title"), Qt.SortOrder.DescendingOrder)
    assert {index.data(JobRole.ID) for index in selection.selectedRows(0)} <= chosen


def test_new_jobs_are_inserted_where_they_sort(qtbot: Any, qtmodeltester: Any) -> None:
    model = QueueModel(clock=lambda: 2_000.0)
    jobs = _jobs(20)
    model.reset_jobs(jobs[:12])
    qtmodeltester.check(model)
    model.sort(_column(model, "title"), Qt.SortOrder.AscendingOrder)
    inserted: list[tuple[int, int]] = []
    model.rowsInserted.connect(lambda _p, first, last: inserted.append((first, last)))
    with qtbot.assertNotEmitted(model.modelReset), qtbot.assertNotEmitted(model.layoutChanged):
        model.apply(jobs[12:])
    assert _titles(model) == _sorted_titles(model)
    assert sum(last - first + 1 for first, last in inserted) == 8
    assert [model.row_of(j["id"]) for j in model.jobs()] == list(range(20))
    # newest first (the pane's default): new jobs arrive on top, in one ranged insert
    model.sort(_column(model, "created"), Qt.SortOrder.DescendingOrder)
    inserted.clear()
    model.apply(_jobs(23)[20:])
    assert inserted == [(0, 2)]
    assert [j["seq"] for j in model.jobs()][:4] == [22, 21, 20, 19]


def test_a_changed_job_moves_to_where_it_now_sorts(qtbot: Any, qtmodeltester: Any) -> None:
    model = QueueModel(clock=lambda: 2_000.0)
    jobs = _jobs(20)
    model.reset_jobs(jobs)
    qtmodeltester.check(model)
    state = _column(model, "state")
    model.sort(state, Qt.SortOrder.AscendingOrder)  # running, queued, dead, cancelled, succeeded
    with (
        qtbot.assertNotEmitted(model.modelReset),
        qtbot.assertNotEmitted(model.layoutChanged),
        qtbot.waitSignal(model.rowsMoved, timeout=1000),
    ):
        model.apply([{**jobs[7], "state": "running"}])
    assert model.row_of(jobs[7]["id"]) == 0 and model.job_at(0)["state"] == "running"
    with qtbot.assertNotEmitted(model.rowsMoved):  # a change that keeps the key stays put
        model.apply([{**jobs[3], "attempts": 1}])
    # several keys change at once: one coalesced re-sort, never a reset
    changed = [{**j, "state": "succeeded"} for j in jobs[:10]]
    with qtbot.assertNotEmitted(model.modelReset), qtbot.waitSignal(model.layoutChanged, timeout=1000):
        model.apply(changed)
    order = [model.job_at(r)["state"] for r in range(model.rowCount())]
    assert order == ["queued"] * 10 + ["succeeded"] * 10
    assert [model.row_of(j["id"]) for j in model.jobs()] == list(range(20))


def test_cells_are_formatted_once_and_again_after_a_change(queue: Any) -> None:
    model = QueueModel()
    model.reset_jobs(queue.raw_jobs())
    title = _column(model, "title")
    job_id = queue.ids["queued"]
    index = model.index(model.row_of(job_id), title)
    assert index.data() == "queued job"
    raw = dict(model.job_at(index.row()))
    model.apply([{**raw, "title": "renamed"}])
    assert model.index(model.row_of(job_id), title).data() == "renamed"
    assert model.search_text(model.row_of(job_id)).startswith(job_id)
    assert "renamed" in model.search_text(model.row_of(job_id))


def comparable(value: Any) -> Any:
    return value.cacheKey() if isinstance(value, QIcon) else value


@pytest.mark.parametrize("text", ["", "apple"])
def test_the_proxy_shows_exactly_the_source_data_filtered_or_not(text: str) -> None:
    model = QueueModel(clock=lambda: 2_000.0)
    model.reset_jobs(_jobs(16, last_error={"class": "fatal", "message": "boom"}))
    proxy = JobFilterProxy()
    proxy.setSourceModel(model)
    proxy.set_text(text)
    assert proxy.rowCount() == (16 if not text else 2)
    roles = (
        Qt.ItemDataRole.DisplayRole,
        Qt.ItemDataRole.DecorationRole,
        Qt.ItemDataRole.ToolTipRole,
        Qt.ItemDataRole.FontRole,
        JobRole.ID,
        Qt.ItemDataRole.TextAlignmentRole,
    )
    for row in range(proxy.rowCount()):
        for column in range(proxy.columnCount()):
            index = proxy.index(row, column)
            source = proxy.mapToSource(index)
            assert proxy.flags(index) == model.flags(source)
            for role in roles:
                assert comparable(index.data(role)) == comparable(source.data(role)), (row, column, role)


# --------------------------------------------------------------------------- painting


def test_the_look_role_carries_what_the_display_roles_say() -> None:
    model = QueueModel(clock=lambda: 2_000.0)
    model.reset_jobs(
        _jobs(8, last_error={"class": "fatal", "message": "boom"})
        + [{**_jobs(1)[0], "id": "dead", "seq": 99, "state": "dead", "replayed_as": ["x"]}]
    )
    proxy = JobFilterProxy()
    proxy.setSourceModel(model)
    for text in ("", "dead"):
        proxy.set_text(text)
        for row in range(proxy.rowCount()):
            for column in range(proxy.columnCount()):
                index = proxy.index(row, column)
                look = index.data(JobRole.LOOK)
                assert proxy.cell_look(index) == look
                assert look.text == index.data()
                assert comparable(look.icon) == comparable(index.data(Qt.ItemDataRole.DecorationRole))
                assert look.bold == (index.data(Qt.ItemDataRole.FontRole) is not None)
    dead = model.cell_look(model.row_of("dead"), _column(model, "state"))
    assert dead is not None and dead.bold and dead.icon is not None
    assert model.cell_look(model.rowCount(), 0) is None


@pytest.mark.parametrize("dark", [False, True])
def test_the_queue_delegate_paints_exactly_like_qt_s_own(qtbot: Any, dark: bool) -> None:
    """One role per cell, the same pixels: icons, bold dead rows, selection, eliding, dark palette."""
    from PySide6.QtCore import QItemSelectionModel
    from PySide6.QtGui import QColor, QPalette
    from PySide6.QtWidgets import QStyledItemDelegate

    from desktop_queue.ui.delegates import JobCellDelegate
    from desktop_queue.ui.panes import QueuePane

    states = ["queued", "running", "succeeded", "dead", "cancelled"]
    jobs = [
        {
            **j,
            "state": states[i % 5],
            "run_after": 2_010.0 + i,
            "started_at": 1_500.0,
            "title": f"{j['title']} with a title long enough to be elided somewhere",
            **({"last_error": {"class": "fatal", "message": "demo: simulated HTTP 400"}} if i % 3 == 0 else {}),
            **({"replayed_as": ["abc"]} if i % 4 == 0 else {}),
        }
        for i, j in enumerate(_jobs(30))
    ]
    images = []
    for ours in (True, False):
        model = QueueModel(clock=lambda: 2_000.0)
        model.reset_jobs(jobs)
        pane = QueuePane(model)
        qtbot.addWidget(pane)
        if dark:
            palette = pane.view.palette()
            for role, colour in (
                (QPalette.ColorRole.Base, "#1e1e20"),
                (QPalette.ColorRole.AlternateBase, "#26262a"),
                (QPalette.ColorRole.Text, "#e6e6e6"),
                (QPalette.ColorRole.Highlight, "#2f6fbf"),
            ):
                palette.setColor(role, QColor(colour))
            pane.view.setPalette(palette)
        assert isinstance(pane.view.itemDelegate(), JobCellDelegate)
        if not ours:
            pane.view.setItemDelegate(QStyledItemDelegate(pane.view))
        pane.resize(1000, 500)
        pane.view.setCurrentIndex(pane.proxy.index(2, 1))
        for row in (1, 2, 3):
            pane.view.selectionModel().select(
                pane.proxy.index(row, 0),
                QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows,
            )
        images.append(pane.view.viewport().grab().toImage())
    assert images[0] == images[1]


def test_every_event_type_has_its_own_label_and_icon() -> None:
    """A new kind of timeline entry gets words of its own, not its raw type name."""
    from desktop_queue.core.model import EventType
    from desktop_queue.ui.models.timeline_model import EVENT_LOOK

    assert set(EventType) - set(EVENT_LOOK) == set()
