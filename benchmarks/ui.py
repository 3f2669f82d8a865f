#!/usr/bin/env python3
"""Benchmark of the queue pane's model, with a QStandardItemModel measured alongside.

For stores holding 1,000 / 10,000 / 50,000 jobs (created through the real ``Queue``
API in a temporary data dir, in every state), this prints, per size:

* **load**: the jobs (``Queue.raw_jobs()``, fetched once and shared) become a model
  behind a sort/filter proxy in a ``QTableView``, sorted newest first, and the first
  screen is painted;
* **sort**: ``sortByColumn`` on the Title column (case-insensitive text), until the
  first screen is repainted;
* **100 changes**: 100 scattered jobs are changed by the real ``Queue`` API (cancelled),
  then timed: ``changed_since`` → ``raw_jobs(ids)`` → the model's update (ours:
  ``RefreshCoordinator.refresh`` → ``JobTableModel.apply`` → ``dataChanged``; the
  reference: ``setData`` on each cell of each changed row) → proxy re-sort → repaint.
  Median of ``--rounds`` rounds, 100 different jobs each;
* **scroll**: the vertical scroll bar stepped a page at a time from top to bottom, the
  viewport repainted synchronously at each step (every row is painted once);

for **ours** (``QueueModel`` + ``JobFilterProxy``, the queue pane's models, painted by the
pane's ``JobCellDelegate``) and for a
**reference** built in the same run: a ``QStandardItemModel`` holding the same rows
(the same display text, state icons and sort keys per cell, filled before it is
attached, its best case) behind a plain ``QSortFilterProxyModel`` with the same sort
role. Both are shown in identically configured ``QTableView`` s of the same size (the
pane's settings: fixed row height, no word wrap, alternating rows), offscreen, in the
same process. The last column is the ratio ours/reference (below 1: ours is faster).
Timing never changes the exit status.

Then **the whole window** (``MainWindow`` on a ``Controller``, offscreen) at
``--window-size`` stored jobs (default 100,000: 90 % succeeded, most of them in the
archive, 4 % dead, 1 % cancelled, 5 % queued or running), each figure against its goal:

* **idle CPU**: process CPU time / wall time over 10 s with the window in front
  (300 ms ticks) and nothing changing, once paused and once with the worker on (its
  queued jobs belong to a kind another process runs); also without the worker's
  ``Queue.lease`` calls, and per refresh tick. Goal: under 2 % of a core;
* **filter keystroke**: each key typed into the queue pane's search box
  (``QTest.keyClicks``) to the table repainted (95th percentile; goal 50 ms), and the
  archive search that follows a pause in typing;
* **launch**: a fresh process (``python benchmarks/ui.py launch-child DIR``) runs
  ``desktop_queue.app.start`` as ``python -m desktop_queue`` does, to the first paint
  of the queue table (median; goal 1 s);
* **select**: selecting a row to the timeline repainted (95th percentile; goal 50 ms).

``--only window`` runs only these; ``--keep DIR`` keeps their store for the next run.

The stores are populated with ``os.fsync`` made a no-op in this process (the files
written are the same, only their per-commit flush is skipped): 50,000 durable submits
would take minutes and measure the disk, not the window.

Usage::

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/ui.py
    .venv/bin/python benchmarks/ui.py --sizes 1000,10000 --rounds 5
    .venv/bin/python benchmarks/ui.py --json out.json
    .venv/bin/python benchmarks/ui.py --only window --keep /tmp/dq-bench
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from PySide6 import __version__ as PYSIDE_VERSION  # noqa: E402
from PySide6.QtCore import QEvent, QEventLoop, QObject, QSortFilterProxyModel, Qt, QTimer  # noqa: E402
from PySide6.QtGui import QStandardItem, QStandardItemModel  # noqa: E402
from PySide6.QtWidgets import QApplication, QTableView, QWidget  # noqa: E402

from desktop_queue import qtload  # noqa: E402, F401  (as the app imports Qt: see there)
from desktop_queue.core import Outcome, Queue  # noqa: E402
from desktop_queue.providers.demo import DemoProvider  # noqa: E402
from desktop_queue.runtime.qtcompat import install as guard_binding  # noqa: E402
from desktop_queue.ui.delegates import JobCellDelegate  # noqa: E402
from desktop_queue.ui.icons import state_icon  # noqa: E402
from desktop_queue.ui.models import (  # noqa: E402
    QUEUE_COLUMNS,
    JobFilterProxy,
    JobRole,
    QueueModel,
    RefreshCoordinator,
)
from desktop_queue.ui.panes import configure_job_table  # noqa: E402

DEFAULT_SIZES = (1_000, 10_000, 50_000)
#: stored jobs of the window cases
WINDOW_SIZE = 100_000
CHANGES = 100
VIEW_SIZE = (1200, 700)
TITLE_COLUMN = next(i for i, c in enumerate(QUEUE_COLUMNS) if c.key == "title")
CREATED_COLUMN = next(i for i, c in enumerate(QUEUE_COLUMNS) if c.key == "created")
SORT_ROLE = int(JobRole.SORT)
WORDS = (
    "blog post",
    "Release notes",
    "alt text",
    "Podcast intro",
    "storyboard",
    "FAQ",
    "summary",
    "Cover letter",
    "newsletter",
    "translation",
    "Image: lighthouse",
    "outline",
    "haiku",
)

JobDict = dict[str, Any]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the store


def populate(data_dir: Path, size: int, seed: int = 7) -> None:
    """``size`` jobs through the real API: ~50 % succeeded, 35 % queued, 8 % dead, 5 % cancelled, 2 % running.

    The states are scattered over the jobs: a job that finishes is submitted with
    interactive priority and leased at once (it is the only interactive one waiting),
    the others wait as background jobs; the oldest of those are leased last (running).
    """
    rng = random.Random(seed)
    fates = rng.choices(["succeeded", "queued", "dead", "cancelled", "running"], [50, 35, 8, 5, 2], k=size)
    real_fsync = os.fsync
    os.fsync = lambda fd: None
    try:
        with Queue.open(data_dir, {"demo": DemoProvider()}) as queue:
            for i, fate in enumerate(fates):
                title = f"{rng.choice(WORDS)} {rng.randrange(10_000)}"
                finishes = fate in ("succeeded", "dead")
                job = queue.submit(
                    "demo",
                    {"prompt": f"{title} #{i}"},
                    title=title,
                    priority="interactive" if finishes else "background",
                ).job
                if fate == "cancelled":
                    queue.cancel(job.id)
                elif finishes:
                    lease = queue.lease("bench-worker")
                    assert lease is not None and lease.job_id == job.id
                    if fate == "succeeded":
                        queue.complete(lease, {"text": "ok"})
                    else:
                        queue.fail(lease, Outcome.failure("fatal", "demo: simulated invalid request (400)", status=400))
            for _ in range(fates.count("running")):
                queue.lease("bench-worker")
    finally:
        os.fsync = real_fsync
        if hasattr(os, "sync"):
            os.sync()


# --------------------------------------------------------------------------- the two sides


def configure_view(view: QTableView) -> None:
    """The queue pane's table settings (``desktop_queue.ui.panes``), for both sides."""
    configure_job_table(view)
    view.resize(*VIEW_SIZE)


def settle(view: QTableView) -> None:
    """Lets pending layout run, then paints the viewport now."""
    QApplication.processEvents()
    view.viewport().repaint()


class Ours:
    """The queue pane's model stack: QueueModel → JobFilterProxy → view."""

    name = "ours"

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.model = QueueModel()
        self.proxy = JobFilterProxy()
        self.proxy.setSourceModel(self.model)
        self.view = QTableView()
        configure_view(self.view)
        self.view.setItemDelegate(JobCellDelegate(self.view))  # as the pane does (one role per cell)
        self.view.setModel(self.proxy)
        self.view.sortByColumn(CREATED_COLUMN, Qt.SortOrder.DescendingOrder)
        self.view.show()
        self.refresher = RefreshCoordinator(queue, [self.model], interval_ms=300)

    def load(self, jobs: list[JobDict]) -> None:
        self.model.reset_jobs(jobs)
        settle(self.view)

    def rows(self) -> int:
        return self.proxy.rowCount()

    def apply_changes(self, version: int) -> int:
        self.refresher.version = version
        self.refresher.refresh()  # changed_since → raw_jobs(ids) → apply → dataChanged
        settle(self.view)
        return self.refresher.version


class Reference:
    """QStandardItemModel (same rows, text, icons, sort keys) → QSortFilterProxyModel → view."""

    name = "reference"

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.model = QStandardItemModel()
        self.proxy = QSortFilterProxyModel()
        self.proxy.setSortRole(SORT_ROLE)
        self.proxy.setDynamicSortFilter(True)
        self.view = QTableView()
        configure_view(self.view)
        self.view.setModel(self.proxy)
        self.view.sortByColumn(CREATED_COLUMN, Qt.SortOrder.DescendingOrder)
        self.view.show()
        self.items: dict[str, list[QStandardItem]] = {}
        self.version = -1

    @staticmethod
    def _fill(item: QStandardItem, column: int, job: JobDict, now: float) -> None:
        spec = QUEUE_COLUMNS[column]
        text = spec.display(job, now)
        item.setText(text)
        item.setData(spec.sort(job, now) if spec.sort is not None else text.casefold(), SORT_ROLE)
        if spec.key == "state":
            item.setIcon(state_icon(str(job.get("state"))))

    def _row(self, job: JobDict, now: float) -> list[QStandardItem]:
        row = []
        for column in range(len(QUEUE_COLUMNS)):
            item = QStandardItem()
            item.setEditable(False)
            self._fill(item, column, job, now)
            row.append(item)
        return row

    def load(self, jobs: list[JobDict]) -> None:
        now = time.time()
        model = QStandardItemModel(0, len(QUEUE_COLUMNS))  # filled detached: its best case
        model.setHorizontalHeaderLabels([c.header for c in QUEUE_COLUMNS])
        items: dict[str, list[QStandardItem]] = {}
        root = model.invisibleRootItem()
        for job in sorted(jobs, key=lambda j: j.get("seq", 0)):
            row = self._row(job, now)
            items[job["id"]] = row
            root.appendRow(row)
        self.items = items
        self.proxy.setSourceModel(model)
        self.model = model
        settle(self.view)

    def rows(self) -> int:
        return self.proxy.rowCount()

    def apply_changes(self, version: int) -> int:
        new_version, ids = self.queue.changed_since(version)
        now = time.time()
        for job in self.queue.raw_jobs(ids or set()):
            row = self.items.get(job["id"])
            if row is None:  # (the benchmark only changes known jobs)
                continue
            for column, item in enumerate(row):
                self._fill(item, column, job, now)
        settle(self.view)
        return new_version


Side = Ours | Reference


# --------------------------------------------------------------------------- measurements


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure_sort(side: Side, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        side.view.sortByColumn(CREATED_COLUMN, Qt.SortOrder.DescendingOrder)
        settle(side.view)

        def sort() -> None:
            side.view.sortByColumn(TITLE_COLUMN, Qt.SortOrder.AscendingOrder)
            settle(side.view)

        samples.append(timed(sort))
    return statistics.median(samples)


def measure_scroll(side: Side) -> tuple[float, int]:
    bar = side.view.verticalScrollBar()
    bar.setValue(0)
    settle(side.view)
    steps = 0
    start = time.perf_counter()
    value = 0
    while True:
        bar.setValue(value)
        side.view.viewport().repaint()
        steps += 1
        if value >= bar.maximum():
            break
        value = min(bar.maximum(), value + bar.pageStep())
    return time.perf_counter() - start, steps


def first_visible_ok(side: Side) -> bool:
    """Sanity: both sides show the same job at the top after the same sort."""
    return bool(side.proxy.index(0, TITLE_COLUMN).data())


def bench_size(root: Path, size: int, rounds: int) -> dict[str, Any]:
    data_dir = root / f"store-{size}"
    t0 = time.perf_counter()
    populate(data_dir, size)
    log(f"  {size:,} jobs created through the Queue API in {time.perf_counter() - t0:.1f} s")
    queue = Queue.open(data_dir, {"demo": DemoProvider()})
    try:
        fetch = []
        jobs: list[JobDict] = []
        for _ in range(3):
            start = time.perf_counter()
            jobs = queue.raw_jobs()
            fetch.append(time.perf_counter() - start)
        sides: list[Side] = [Ours(queue), Reference(queue)]
        figures: dict[str, dict[str, float]] = {side.name: {} for side in sides}
        # load: alternate the sides, median of the rounds
        loads: dict[str, list[float]] = {side.name: [] for side in sides}
        for _ in range(rounds):
            for side in sides:
                loads[side.name].append(timed(lambda s=side: s.load(jobs)))  # type: ignore[misc]
        for side in sides:
            assert side.rows() == size, (side.name, side.rows(), size)
            figures[side.name]["load_s"] = statistics.median(loads[side.name])
        for side in sides:
            figures[side.name]["sort_s"] = measure_sort(side, rounds)
            assert first_visible_ok(side)
        top = [s.proxy.index(0, TITLE_COLUMN).data() for s in sides]
        assert top[0] == top[1], f"the two sides sort differently: {top}"
        # 100 scattered changes per round, the same for both sides
        queued = [j["id"] for j in jobs if j.get("state") == "queued"]
        rng = random.Random(size)
        rng.shuffle(queued)
        changes: dict[str, list[float]] = {side.name: [] for side in sides}
        version = queue.refresh()
        for side in sides:  # both start from the same version, once loaded
            side.apply_changes(version)
        for r in range(rounds):
            batch = queued[r * CHANGES : (r + 1) * CHANGES]
            if len(batch) < CHANGES:
                break
            version = queue.refresh()
            for job_id in batch:
                queue.cancel(job_id)
            for side in sides:
                changes[side.name].append(timed(lambda s=side, v=version: s.apply_changes(v)))  # type: ignore[misc]
        for side in sides:
            figures[side.name]["changes_s"] = (
                statistics.median(changes[side.name]) if changes[side.name] else float("nan")
            )
        for side in sides:
            elapsed, steps = measure_scroll(side)
            figures[side.name]["scroll_s"] = elapsed
            figures[side.name]["scroll_steps"] = steps
        return {
            "size": size,
            "fetch_s": statistics.median(fetch),
            "figures": figures,
            "change_rounds": len(changes["ours"]),
        }
    finally:
        queue.close()


# --------------------------------------------------------------------------- the whole window at 100,000 jobs

#: the window cases' store: mostly history, a few active jobs (fractions of the size)
WINDOW_FATES = {"succeeded": 0.90, "dead": 0.04, "cancelled": 0.01, "queued": 0.045, "running": 0.005}
#: the kind of the queued jobs "nothing changes" measures with: another process runs it, not the window
REMOTE_KIND = "remote"
#: how many queued jobs the window itself would run (cancelled before "nothing changes")
WINDOW_OWN_QUEUED = 100
IDLE_SECONDS = 10.0
GOALS = {"idle_cpu": 0.02, "keystroke_p95_s": 0.050, "launch_s": 1.0, "select_s": 0.050}


def populate_window(data_dir: Path, size: int, seed: int = 11) -> dict[str, int]:
    """``size`` jobs through the real API: 90 % succeeded, 4 % dead, 1 % cancelled, 4.5 % queued, 0.5 % running.

    The first :data:`WINDOW_OWN_QUEUED` queued jobs are ``demo`` jobs (the window runs
    them: "paused" keeps them waiting), the others of a kind only another process runs
    (:data:`REMOTE_KIND`: "nothing changes" with the window's worker running). The
    running ones are leased by a worker that then goes away (the window's start-up
    reconciles them: queued again). Finished jobs beyond the hot set end in the archive
    as they would after months of use.
    """
    rng = random.Random(seed)
    names = list(WINDOW_FATES)
    fates = rng.choices(names, [WINDOW_FATES[n] for n in names], k=size)
    real_fsync = os.fsync
    os.fsync = lambda fd: None
    start = time.perf_counter()
    try:
        providers = {"demo": DemoProvider(), REMOTE_KIND: DemoProvider()}
        with Queue.open(data_dir, providers) as queue:
            queued = 0
            for i, fate in enumerate(fates):
                title = f"{rng.choice(WORDS)} {rng.randrange(10_000)}"
                if fate in ("succeeded", "dead"):
                    job = queue.submit("demo", {"prompt": f"{title} #{i}"}, title=title, priority="interactive").job
                    lease = queue.lease("bench-worker", kinds={"demo"}, accept=lambda j, i=job.id: j["id"] == i)
                    assert lease is not None and lease.job_id == job.id, (lease, job.id)
                    if fate == "succeeded":
                        queue.complete(lease, {"text": f"ok {i}"})
                    else:
                        queue.fail(lease, Outcome.failure("fatal", "demo: simulated invalid request (400)", status=400))
                elif fate == "cancelled":
                    queue.cancel(queue.submit("demo", {"prompt": f"{title} #{i}"}, title=title).job.id)
                else:
                    queued += 1
                    kind = "demo" if queued <= WINDOW_OWN_QUEUED else REMOTE_KIND
                    queue.submit(kind, {"prompt": f"{title} #{i}"}, title=title, priority="background")
                if (i + 1) % 20_000 == 0:
                    log(f"    {i + 1:,}/{size:,} jobs, {time.perf_counter() - start:.0f} s")
            for _ in range(fates.count("running")):
                queue.lease("bench-worker", kinds={REMOTE_KIND})
    finally:
        os.fsync = real_fsync
        if hasattr(os, "sync"):
            os.sync()
    return {name: fates.count(name) for name in names}


class PaintProbe(QObject):
    """Counts the paint events of a widget (the time of the last one in ``at``)."""

    def __init__(self, widget: QWidget) -> None:
        super().__init__(widget)
        self.count = 0
        self.at = 0.0
        widget.installEventFilter(self)

    def eventFilter(self, _obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if event.type() == QEvent.Type.Paint:
            self.count += 1
            self.at = time.perf_counter()
        return False

    def wait(self, before: int, timeout_s: float = 5.0) -> float:
        """Runs the event loop until a paint after ``before`` paints; its time."""
        deadline = time.perf_counter() + timeout_s
        while self.count <= before and time.perf_counter() < deadline:
            QApplication.processEvents()
        return self.at


def run_loop(seconds_: float) -> None:
    loop = QEventLoop()
    QTimer.singleShot(int(seconds_ * 1000), loop.quit)
    loop.exec()


def idle_cpu(window: Any, seconds_: float) -> dict[str, float]:
    """Process CPU time / wall time while the event loop runs ``seconds_`` with nothing to do."""
    refresher = window.controller.refresher
    ticks = {"n": 0}

    def count() -> None:
        ticks["n"] += 1

    refresher.refreshed.connect(count)
    queue = window.controller.queue
    leasing = {"s": 0.0}
    real_lease = queue.lease

    def lease(*args: Any, **kwargs: Any) -> Any:  # the worker looking for a job: timed apart
        start = time.process_time()
        try:
            return real_lease(*args, **kwargs)
        finally:
            leasing["s"] += time.process_time() - start

    queue.lease = lease
    try:
        run_loop(0.5)  # let what the start left settle
        wall0, cpu0 = time.perf_counter(), time.process_time()
        ticks["n"] = 0
        leasing["s"] = 0.0
        run_loop(seconds_)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    finally:
        del queue.lease
        refresher.refreshed.disconnect(count)
    return {
        "cpu_share": cpu / wall,
        "lease_share": leasing["s"] / wall,
        "ticks": ticks["n"],
        "cpu_per_tick_s": (cpu - leasing["s"]) / max(1, ticks["n"]),
    }


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def keystrokes(window: Any, words: Sequence[str]) -> tuple[list[float], list[float]]:
    """Seconds from each key typed into the queue pane's search box to the table repainted
    with the rows it filters in memory; and, per word, from the pause after typing
    (the archive's index asked, ``ARCHIVE_SEARCH_DELAY_MS`` later) to the table
    repainted with the archived matches.

    The repaint is forced (``repaint()``, synchronous): a key that leaves the visible
    rows as they were would otherwise not paint at all, and the figure would wait for
    the next unrelated paint.
    """
    from PySide6.QtTest import QTest

    pane = window.queue_pane
    viewport = pane.view.viewport()
    keys: list[float] = []
    pauses: list[float] = []

    def shown(start: float) -> float:
        QApplication.processEvents()  # the view's delayed layout after the filter changed
        viewport.repaint()
        return time.perf_counter() - start

    for word in words:
        pane.search.setFocus()
        for char in word:
            start = time.perf_counter()
            QTest.keyClicks(pane.search, char)
            keys.append(shown(start))
        start = time.perf_counter()
        pane.proxy.filter_archive()  # what the pause after typing does
        pauses.append(shown(start))
        for _ in word:
            start = time.perf_counter()
            QTest.keyClick(pane.search, Qt.Key.Key_Backspace)
            keys.append(shown(start))
        pane.proxy.filter_archive()
        QApplication.processEvents()
    return keys, pauses


def selections(window: Any, rows: Sequence[int]) -> list[float]:
    """Seconds from selecting a row of the queue pane to the timeline's repaint."""
    pane = window.queue_pane
    probe = PaintProbe(window.timeline_pane.view.viewport())
    samples = []
    for row in rows:
        window.queue_pane.view.clearSelection()
        QApplication.processEvents()
        before = probe.count
        start = time.perf_counter()
        pane.view.selectRow(row)
        samples.append(probe.wait(before) - start)
    return samples


def launch(data_dir: Path, rounds: int) -> list[dict[str, float]]:
    """A fresh ``python benchmarks/ui.py launch-child DIR`` per round: the app's own start-up to the first paint."""
    out = []
    for _ in range(rounds):
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        spawned = time.time()
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "launch-child", str(data_dir), repr(spawned)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"launch child failed: {proc.stderr[-2000:]}")
        out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def launch_child(data_dir: str, spawned: float) -> int:
    """The launched process: ``desktop_queue.app.start`` as ``python -m desktop_queue`` runs it, to the first paint."""
    imports_done = time.time()
    from desktop_queue import app as dq_app

    qapp = QApplication(sys.argv[:1])
    dq_app.configure_application(qapp)
    imported = time.time()
    session = dq_app.start(data_dir, {"demo": DemoProvider()}, lease=False)
    assert not isinstance(session, int), session
    built = time.time()
    viewport = session.window.queue_pane.view.viewport()
    probe = PaintProbe(viewport)
    session.window.show()
    probe.wait(0, timeout_s=60)
    painted = time.time()
    rows = session.window.queue_pane.proxy.rowCount()
    print(
        json.dumps(
            {
                "interpreter_s": imports_done - spawned,
                "imports_s": imported - spawned,
                "open_and_build_s": built - imported,
                "first_paint_s": painted - spawned,
                "rows": rows,
            }
        ),
        flush=True,
    )
    session.close()
    return 0


def bench_window(root: Path, size: int, rounds: int, keep: Path | None) -> dict[str, Any]:
    """The window's own figures at ``size`` stored jobs (see :func:`format_window`)."""
    from desktop_queue.ui.controller import Controller
    from desktop_queue.ui.main_window import MainWindow

    data_dir = (keep or root) / f"window-{size}"
    if not (data_dir / "store").exists() and not any(data_dir.glob("*")):
        t0 = time.perf_counter()
        fates = populate_window(data_dir, size)
        log(f"  {size:,} jobs created in {time.perf_counter() - t0:.0f} s: {fates}")
    else:
        log(f"  reusing the store in {data_dir}")
    figures: dict[str, Any] = {"size": size}
    figures["launch"] = launch(data_dir, rounds)
    log("  launch measured")
    os.environ.setdefault("HOME", str(root))
    queue = Queue.open(data_dir, {"demo": DemoProvider()})
    controller = Controller(queue, {"demo": DemoProvider()}, refresh_ms=300)
    window = MainWindow(controller)
    try:
        controller.start(lease=True)
        window.resize(1200, 720)
        window.show()
        window.activateWindow()
        QApplication.processEvents()
        figures["hot_rows"] = controller.queue_model.hot_count()
        figures["counts"] = queue.counts()
        pace = getattr(controller.refresher, "set_pace", None)
        if callable(pace):
            pace("focused")  # the worst case: the window in front, refreshing at its fastest
        figures["interval_ms"] = controller.refresher.timer.interval()
        controller.set_paused(True)
        figures["idle_paused"] = idle_cpu(window, IDLE_SECONDS)
        log(f"  idle (paused): {figures['idle_paused']}")
        controller.set_paused(False)
        # the window's interactive demo jobs would run: cancel them, the remote kind's stay queued
        demo_queued = [j["id"] for j in controller.queue_model.jobs() if j["state"] == "queued" and j["kind"] == "demo"]
        for job_id in demo_queued:
            queue.cancel(job_id)
        run_loop(1.0)
        figures["idle_running"] = idle_cpu(window, IDLE_SECONDS)
        log(f"  idle (worker on, nothing changes): {figures['idle_running']}")
        words = ["blog", "haiku 12", "state:dead", "lighthouse"][: max(2, rounds + 1)]
        figures["keystroke_s"], figures["search_pause_s"] = keystrokes(window, words)
        rows = window.queue_pane.proxy.rowCount()
        rng = random.Random(size)
        picks = [rng.randrange(min(rows, 300)) for _ in range(10 * rounds)]
        figures["select_s"] = selections(window, picks)
    finally:
        controller.shutdown(2000)
        window.deleteLater()
        QApplication.processEvents()
        queue.close()
    return figures


def format_window(result: dict[str, Any]) -> str:
    lines = [f"The window at {result['size']:,} stored jobs ({result['hot_rows']:,} in memory, the rest archived)"]
    lines.append(f"  counts: {result['counts']}")
    header = f"  {'measure':<46}  {'figure':>12}  {'goal':>10}  {'fig/goal':>8}"
    lines += [header, "  " + "-" * (len(header) - 2)]

    def row(label: str, value: float, goal: float, unit: str) -> None:
        text = f"{value * 100:.2f} %" if unit == "%" else ms(value)
        goal_text = f"{goal * 100:.0f} %" if unit == "%" else ms(goal)
        lines.append(f"  {label:<46}  {text:>12}  {goal_text:>10}  {value / goal:>8.2f}")

    for key, label in (("idle_paused", "idle CPU, paused"), ("idle_running", "idle CPU, worker on, nothing changes")):
        fig = result[key]
        row(f"{label} ({result['interval_ms']} ms ticks)", fig["cpu_share"], GOALS["idle_cpu"], "%")
        row("    without the worker's lease calls", fig["cpu_share"] - fig["lease_share"], GOALS["idle_cpu"], "%")
        lines.append(
            f"  {'    CPU per refresh tick (without leasing)':<46}  {ms(fig['cpu_per_tick_s']):>12}  "
            f"({fig['ticks']} ticks)"
        )
    keys = result["keystroke_s"]
    row("filter keystroke to repaint, p95", percentile(keys, 0.95), GOALS["keystroke_p95_s"], "s")
    lines.append(
        f"  {'    median / max':<46}  {ms(statistics.median(keys)):>12}  {ms(max(keys)):>10}  ({len(keys)} keys)"
    )
    pauses = result["search_pause_s"]
    lines.append(
        f"  {'archive search after typing pauses, median':<46}  {ms(statistics.median(pauses)):>12}  "
        f"{'':>10}  ({len(pauses)} words; max {ms(max(pauses))})"
    )
    launches = result["launch"]
    first = statistics.median(x["first_paint_s"] for x in launches)
    row("launch to a painted queue (fresh process), median", first, GOALS["launch_s"], "s")
    lines.append(
        f"  {'    of which interpreter + imports':<46}  {ms(statistics.median(x['imports_s'] for x in launches)):>12}"
    )
    lines.append(
        f"  {'    of which store open + window built':<46}  "
        f"{ms(statistics.median(x['open_and_build_s'] for x in launches)):>12}"
    )
    sel = result["select_s"]
    row("select a job to its timeline painted, p95", percentile(sel, 0.95), GOALS["select_s"], "s")
    lines.append(f"  {'    median':<46}  {ms(statistics.median(sel)):>12}  ({len(sel)} selections)")
    return "\n".join(lines)


# --------------------------------------------------------------------------- report


ROWS = (
    ("load_s", "load + first paint"),
    ("sort_s", "sort by Title"),
    ("changes_s", f"{CHANGES} scattered changes"),
    ("scroll_s", "scroll all rows (page steps)"),
)


def ms(value: float) -> str:
    return f"{value * 1000:,.1f} ms"


def format_report(results: Sequence[dict[str, Any]]) -> str:
    lines = []
    header = f"{'jobs':>7}  {'measure':<30}  {'ours':>12}  {'reference':>12}  {'ours/ref':>8}"
    lines.append(header)
    lines.append("-" * len(header))
    for result in results:
        ours, ref = result["figures"]["ours"], result["figures"]["reference"]
        for key, label in ROWS:
            ratio = ours[key] / ref[key] if ref[key] else float("nan")
            lines.append(f"{result['size']:>7,}  {label:<30}  {ms(ours[key]):>12}  {ms(ref[key]):>12}  {ratio:>8.2f}")
        steps = int(result["figures"]["ours"]["scroll_steps"])
        lines.append(
            f"{'':>7}  {'  per scroll step':<30}  {ms(ours['scroll_s'] / steps):>12}  "
            f"{ms(ref['scroll_s'] / steps):>12}  ({steps} steps)"
        )
        lines.append(f"{'':>7}  {'  Queue.raw_jobs() (shared)':<30}  {ms(result['fetch_s']):>12}")
        lines.append("")
    return "\n".join(lines)


def parse_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part.replace("_", "").replace(",", "")) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of sizes: {text!r}") from None
    if not sizes or min(sizes) <= 0:
        raise argparse.ArgumentTypeError("sizes must be positive")
    return sizes


def private_profile(root: Path) -> None:
    """Points HOME, the XDG dirs and so QSettings at ``root``: a benchmark never touches the user's profile."""
    for name, sub in (("HOME", "home"), ("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "share")):
        (root / sub).mkdir(parents=True, exist_ok=True)
        os.environ[name] = str(root / sub)


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["launch-child"]:
        guard_binding()
        return launch_child(args_in[1], float(args_in[2]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", type=parse_sizes, default=DEFAULT_SIZES, help="e.g. 1000,10000,50000")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure (median); default 3")
    parser.add_argument("--json", metavar="FILE", help="also write the raw figures to FILE")
    parser.add_argument("--workdir", type=Path, default=None, help="where the temporary stores live")
    parser.add_argument(
        "--only", choices=("models", "window", "all"), default="all", help="the model cases, the window's, or both"
    )
    parser.add_argument("--window-size", type=int, default=WINDOW_SIZE, help="stored jobs of the window cases")
    parser.add_argument("--keep", type=Path, default=None, help="keep the window cases' store in DIR and reuse it")
    args = parser.parse_args(args_in)

    guard_binding()  # PySide6 6.12.0 on CPython 3.11 leaks None on every void call
    root = Path(tempfile.mkdtemp(prefix="dq-bench-ui-", dir=args.workdir))
    private_profile(root / "profile")
    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication(sys.argv[:1])
    app.setStyle("Fusion")
    results = []
    window: dict[str, Any] | None = None
    try:
        if args.only in ("models", "all"):
            for size in args.sizes:
                log(f"{size:,} jobs …")
                results.append(bench_size(root, size, max(1, args.rounds)))
        if args.only in ("window", "all"):
            log(f"the window at {args.window_size:,} jobs …")
            window = bench_window(root, args.window_size, max(1, args.rounds), args.keep)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    env = {
        "python": platform.python_version(),
        "pyside6": PYSIDE_VERSION,
        "platform": platform.platform(),
        "qpa": os.environ.get("QT_QPA_PLATFORM"),
        "rounds": args.rounds,
    }
    if results:
        print(
            f"Queue pane model vs QStandardItemModel, same view, offscreen ({env['python']}, PySide6 {env['pyside6']})"
        )
        print("Times: median of rounds (scroll: one pass). Ratio < 1: ours is faster.\n")
        print(format_report(results))
    if window is not None:
        print(format_window(window))
        print("fig/goal < 1: the goal is met.")
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": env, "results": results, "window": window}, indent=2))
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
