"""The dead-letter pane and the history commands: groups, resolve, bulk actions, replay preview,
search, delete and export, on a store whose older jobs are archived."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtWidgets import QPushButton

from desktop_queue.core import Outcome, Queue
from desktop_queue.core.model import State
from desktop_queue.core.queue import DeadGroup
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.ui import history_dialogs
from desktop_queue.ui.history_actions import HistoryCommand, history_actions_for
from desktop_queue.ui.models import DeadGroupModel, JobRole
from desktop_queue.ui.panes import select_job

KEEP = 4
ROOT = QModelIndex()


def build(data_dir: Path) -> dict[str, list[str]]:
    """8 dead letters refused with HTTP 401, 4 rate-limited ones, 6 successes; the oldest archived."""
    ids: dict[str, list[str]] = {"auth": [], "limit": [], "ok": []}
    queue = Queue.open(data_dir, {"demo": DemoProvider()}, keep_finished=KEEP, background_compaction=False)
    try:
        for i in range(18):
            group = "auth" if i % 3 != 2 and len(ids["auth"]) < 8 else ("limit" if len(ids["limit"]) < 4 else "ok")
            prompt = f"write a poem about the {('otter', 'heron', 'badger')[i % 3]} number {i}"
            job_id = queue.submit("demo", {"prompt": prompt}, title=f"poem {i}").job.id
            lease = queue.lease("w")
            assert lease is not None and lease.job_id == job_id
            if group == "auth":
                queue.fail(lease, Outcome.failure("fatal", f"demo: unauthorized (request req_{i}x9f3a)", status=401))
            elif group == "limit":
                queue.fail(lease, Outcome.failure("fatal", "demo: rate limited", status=429))
            else:
                queue.complete(lease, {"text": f"ok {i}"})
            ids[group].append(job_id)
        queue.store.compact_now()
    finally:
        queue.close()
    return ids


@pytest.fixture
def store(data_dir: Path) -> dict[str, list[str]]:
    return build(data_dir)


@pytest.fixture
def win(open_session: Any, data_dir: Path, store: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch) -> Any:
    session = open_session(data_dir, lease=False)
    assert not isinstance(session, int)
    session.window.show()
    session.window.tabs.setCurrentWidget(session.window.dead_pane)
    notes: list[int] = []

    def ask_note(_parent: Any, count: int) -> str:
        notes.append(count)
        return "handled by hand"

    monkeypatch.setattr(history_dialogs, "ask_note", ask_note)
    session.notes = notes
    return session


def all_rows(pane: Any) -> list[str]:
    while pane.model.canFetchMore(ROOT):
        pane.model.fetchMore(ROOT)
    return pane.proxy.job_ids()


def wait_task(qtbot: Any, task: Any) -> Any:
    qtbot.waitUntil(lambda: task.done, timeout=10_000)
    return task.result


def test_group_model_passes_the_model_tester_and_updates_in_place(qtmodeltester: Any) -> None:
    model = DeadGroupModel()
    a, b, c = (
        DeadGroup("fatal 401 x", 5, "fatal", "e"),
        DeadGroup("fatal 429 y", 3, "fatal", "e"),
        DeadGroup("z", 1, None, ""),
    )
    model.set_groups([a, b])
    qtmodeltester.check(model)
    changed: list[int] = []
    model.dataChanged.connect(lambda first, _last: changed.append(first.row()))
    resets: list[int] = []
    model.modelReset.connect(lambda: resets.append(1))
    model.set_groups([a, DeadGroup("fatal 429 y", 4, "fatal", "e")])
    assert changed == [1] and not resets
    model.set_groups([a, DeadGroup("fatal 429 y", 4, "fatal", "e"), c])  # one added: an insert
    assert model.rowCount() == 3 and not resets
    assert model.index(0, 0).data() == "fatal 401 x ×5"
    assert model.index(2, 0).data(DeadGroupModel.SIGNATURE) == "z"
    qtmodeltester.check(model)


@pytest.mark.parametrize(
    ("jobs", "allowed"),
    [
        ([], {"delete_before", "export"}),
        ([{"state": "dead"}], {"resolve", "delete", "delete_before", "export"}),
        ([{"state": "dead", "resolved_at": 1.0}], {"delete", "delete_before", "export"}),
        ([{"state": "queued"}], {"delete_before", "export"}),
        ([{"state": "succeeded"}, {"state": "running"}], {"delete", "delete_before", "export"}),
    ],
)
def test_history_actions_for(jobs: list[dict[str, Any]], allowed: set[str]) -> None:
    assert {str(c) for c in history_actions_for(jobs)} == allowed


def test_groups_count_hot_and_archived_and_a_group_is_resolved_at_once(
    qtbot: Any, win: Any, store: dict[str, list[str]]
) -> None:
    window = win.window
    pane = window.dead_pane
    pane.group_toggle.setChecked(True)
    assert pane.group_panel.isVisible()
    labels = [pane.group_model.index(r, 0).data() for r in range(pane.group_model.rowCount())]
    assert labels == ["fatal 401 demo: unauthorized (request req_…) ×8", "fatal 429 demo: rate limited ×4"]
    assert pane.group_heading.text() == "Errors (2 kinds, 12 dead letters)"
    assert pane.select_group(pane.group_model.index(1, 0).data(DeadGroupModel.SIGNATURE))
    assert sorted(all_rows(pane)) == sorted(store["limit"])  # archived ones included
    assert pane.group_resolve.isEnabled()
    pane.group_resolve.click()
    assert win.notes == [4]
    task = window.history.progress.task
    result = wait_task(qtbot, task)
    assert sorted(result.done) == sorted(store["limit"])
    qtbot.waitUntil(lambda: window.tabs.tabText(1) == "&Dead letters (8)", timeout=3000)
    qtbot.waitUntil(lambda: pane.group_model.rowCount() == 1, timeout=3000)
    assert pane.group_heading.text() == "Errors (1 kind, 8 dead letters)"  # not "1 kinds"
    assert not pane.group_view.selectionModel().selectedRows()  # the group went: all dead letters again
    assert sorted(all_rows(pane)) == sorted(store["auth"])
    pane.show_resolved.setChecked(True)
    assert sorted(all_rows(pane)) == sorted(store["auth"] + store["limit"])
    job = win.queue.get(store["limit"][0])
    assert job.resolved_at is not None and job.events[-1].detail["note"] == "handled by hand"


def test_resolve_the_selection_from_the_button(qtbot: Any, win: Any, store: dict[str, list[str]]) -> None:
    window = win.window
    pane = window.dead_pane
    target = store["auth"][-1]  # a hot one
    assert select_job(pane.view, target)
    assert pane.resolve_button.isEnabled()
    assert window.history.action(HistoryCommand.RESOLVE).isEnabled()
    pane.resolve_button.click()
    assert win.notes == [1]
    qtbot.waitUntil(lambda: target not in pane.proxy.job_ids(), timeout=3000)
    assert win.queue.get(target).state == State.DEAD
    assert "resolved" in [e.type for e in win.queue.get(target).events]
    model = win.controller.queue_model
    qtbot.waitUntil(lambda: model.index(model.row_of(target), 0).data() == "dead (resolved)", timeout=3000)
    title = model.index(model.row_of(target), 1)
    assert "closed without a retry" in title.data(Qt.ItemDataRole.ToolTipRole)
    assert title.data(Qt.ItemDataRole.DecorationRole) is not None
    # the queue pane lists resolved dead letters among the dead, and counts them so
    qtbot.waitUntil(lambda: window.queue_pane.state_filter.itemText(4) == "Dead (12)", timeout=3000)
    assert window.tabs.tabText(1) == "&Dead letters (11)"


def test_retry_all_matching_runs_off_the_gui_thread_with_progress(
    qtbot: Any, win: Any, prompts: Any, store: dict[str, list[str]]
) -> None:
    window = win.window
    pane = window.dead_pane
    pane.search.setText("heron")  # a word of the prompt, not of the title
    pane.proxy.filter_archive()
    matching = all_rows(pane)
    assert matching and all("heron" in win.queue.get(i).input["prompt"] for i in matching)
    threads: list[Any] = []
    real = win.queue.retry_many

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread())
        return real(*args, **kwargs)

    win.queue.retry_many = spy  # type: ignore[method-assign]
    window.retry_all_matching()
    assert f"Retry {len(matching)} dead jobs matching “heron”" in prompts.confirms[-1]
    dialog = window.history.progress
    assert dialog is not None and dialog.isVisible() and dialog.windowTitle() == "Retrying"
    wait_task(qtbot, dialog.task)
    assert threads and threads[0] is not threading.main_thread()
    assert sorted(dialog.task.result.done) == sorted(matching)
    assert all(win.queue.get(i).run == 2 for i in matching)  # retried (the window may run them now)
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=3000)


def test_a_bulk_action_stops_between_chunks_when_asked(qtbot: Any, win: Any) -> None:
    controller = win.controller
    gate = threading.Event()
    steps: list[int] = []

    def work(progress: Any, stop: Any) -> int:
        for i in range(3):
            if stop():
                return i
            steps.append(i)
            progress(i + 1, 3)
            gate.wait(5)
            gate.clear()
        return 3

    task = controller.start_bulk("Testing", 3, work)
    dialog = history_dialogs.BulkProgressDialog(task, win.window)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.value() == 1, timeout=3000)
    stop = dialog.findChild(QPushButton)
    assert stop is not None and stop.text() == "&Stop"
    stop.click()
    assert "stopping" in dialog.labelText()
    gate.set()
    assert wait_task(qtbot, task) == 1 and steps == [0]
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=3000)


def test_bulk_replay_of_a_group_makes_linked_jobs(
    qtbot: Any, win: Any, prompts: Any, store: dict[str, list[str]]
) -> None:
    pane = win.window.dead_pane
    pane.group_toggle.setChecked(True)
    pane.select_group(pane.group_model.index(1, 0).data(DeadGroupModel.SIGNATURE))
    pane.group_replay.click()
    assert "Replay 4 dead jobs with the error" in prompts.confirms[-1]
    result = wait_task(qtbot, win.window.history.progress.task)
    assert set(result.created) == set(store["limit"])
    for original, new in result.created.items():
        assert win.queue.get(new).replay_of == original


def test_the_replay_dialog_says_what_will_happen(qtbot: Any, win: Any, store: dict[str, list[str]]) -> None:
    window = win.window
    pane = window.dead_pane
    target = store["auth"][-1]
    assert select_job(pane.view, target)
    dialog = window.replay_selected()
    assert dialog is not None
    text = dialog.preview.text()
    assert "likely to fail again" in text and "HTTP 401" in text
    assert "poem " in text  # the new job's title
    edited = {"prompt": "An otter poem, take two\nwith rhyme"}
    dialog.editor.setPlainText(json.dumps(edited))
    assert "An otter poem, take two" in dialog.preview.text()
    assert dialog.current_preview.edited
    assert win.queue.counts()["queued"] == 0  # nothing queued by the preview
    dialog.reject()


def test_search_finds_prompts_says_no_matches_and_esc_clears(qtbot: Any, win: Any, store: dict[str, list[str]]) -> None:
    window = win.window
    window.tabs.setCurrentWidget(window.queue_pane)
    pane = window.queue_pane
    pane.search.setText("badger")
    pane.proxy.filter_archive()
    found = set(all_rows(pane))
    expected = {i for ids in store.values() for i in ids if "badger" in win.queue.get(i).input["prompt"]}
    assert found == expected and found
    win.controller.set_paused(True)  # (nothing may start it meanwhile)
    waiting = win.queue.submit("demo", {"prompt": "a zebra crossing at dusk"}, title="queued one").job.id
    win.controller.refresher.refresh()
    pane.search.setText("zebra cross")  # a queued row carries its input: found while typing
    assert pane.proxy.job_ids() == [waiting]
    pane.search.setText("state:dead badger")
    pane.proxy.filter_archive()
    assert set(all_rows(pane)) == {i for i in expected if win.queue.get(i).state == State.DEAD}
    pane.search.setText("no such animal")
    pane.proxy.filter_archive()
    all_rows(pane)
    qtbot.waitUntil(lambda: pane.empty_state.isVisible(), timeout=3000)
    assert "No jobs match “no such animal”" in pane.empty_state.text()
    pane.view.setFocus()
    qtbot.keyClick(pane.view, Qt.Key.Key_Escape)
    assert pane.search.text() == ""
    qtbot.waitUntil(lambda: not pane.empty_state.isVisible(), timeout=3000)
    pane.search.setText("after:someday")
    assert "after:" in (pane.proxy.query_error or "")


def test_delete_selected_finished_jobs_after_a_confirmation(
    qtbot: Any, win: Any, prompts: Any, store: dict[str, list[str]]
) -> None:
    window = win.window
    window.tabs.setCurrentWidget(window.queue_pane)
    target = store["ok"][-1]
    assert select_job(window.queue_pane.view, target)
    assert window.history.action(HistoryCommand.DELETE).isEnabled()
    window.history.action(HistoryCommand.DELETE).trigger()
    assert "Delete 1 finished job with their results" in prompts.confirms[-1]
    assert wait_task(qtbot, window.history.progress.task) == 1
    assert target not in {j.id for j in win.queue.list()}


def test_delete_finished_before_a_date_names_the_count(
    qtbot: Any, win: Any, prompts: Any, store: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    when = win.queue.clock.now() + 60
    monkeypatch.setattr(history_dialogs, "ask_delete_before", lambda _p: history_dialogs.DeleteBefore(when, ["dead"]))
    win.window.history.action(HistoryCommand.DELETE_BEFORE).trigger()
    assert "Delete 12 finished jobs (dead)" in prompts.confirms[-1]
    assert wait_task(qtbot, win.window.history.progress.task) == 12
    assert win.queue.counts()["dead"] == 0 and win.queue.counts()["succeeded"] == 6


def test_export_writes_the_filtered_jobs_without_prompts(
    qtbot: Any, win: Any, store: dict[str, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "dead.jsonl"
    monkeypatch.setattr(
        history_dialogs, "ask_export", lambda _p, what: history_dialogs.ExportChoice(target, "jsonl", False)
    )
    win.window.dead_pane.search.setText("otter")
    task = win.window.history.export()
    assert task is not None
    assert wait_task(qtbot, task) == len(target.read_text().splitlines())
    docs = [json.loads(line) for line in target.read_text().splitlines()]
    expected = {i for i in store["auth"] + store["limit"] if "otter" in win.queue.get(i).input["prompt"]}
    assert {d["id"] for d in docs} == expected
    assert all("input" not in d and d["events"] for d in docs)
    assert not list(tmp_path.glob(".*.partial"))


def test_the_export_dialog_leaves_prompts_out_by_default(qtbot: Any) -> None:
    dialog = history_dialogs.ExportDialog("the dead letters")
    qtbot.addWidget(dialog)
    assert not dialog.with_inputs.isChecked() and not dialog.with_results.isChecked()
    dialog.format.setCurrentIndex(1)
    assert dialog.choice().fmt == "jsonl" and dialog.choice().path.suffix == ".jsonl"
    dialog.with_results.setChecked(True)
    assert dialog.choice().with_results


def test_an_export_with_results_carries_each_answer(
    qtbot: Any, win: Any, store: dict[str, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "done.jsonl"
    monkeypatch.setattr(
        history_dialogs,
        "ask_export",
        lambda _p, what: history_dialogs.ExportChoice(target, "jsonl", False, with_results=True),
    )
    window = win.window
    window.tabs.setCurrentWidget(window.queue_pane)
    pane = window.queue_pane
    pane.state_filter.setCurrentIndex(pane.state_filter.findData("succeeded"))
    task = window.history.export()
    assert task is not None
    assert wait_task(qtbot, task) == len(store["ok"])
    docs = [json.loads(line) for line in target.read_text().splitlines()]
    assert sorted((d["id"], d["result"]["text"]) for d in docs) == sorted(
        (i, win.queue.results.get(win.queue.get(i).idempotency_key)["result"]["text"]) for i in store["ok"]
    )


def test_dead_model_shows_resolved_rows_only_when_asked(qtmodeltester: Any, win: Any) -> None:
    pane = win.window.dead_pane
    qtmodeltester.check(pane.proxy)
    rows = pane.model.rowCount()
    assert rows >= pane.proxy.rowCount()
    assert pane.model.index(0, 0).data(JobRole.STATE) == State.DEAD
