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

The stores are populated with ``os.fsync`` made a no-op in this process (the files
written are the same, only their per-commit flush is skipped): 50,000 durable submits
would take minutes and measure the disk, not the window.

Usage::

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/ui.py
    .venv/bin/python benchmarks/ui.py --sizes 1000,10000 --rounds 5
    .venv/bin/python benchmarks/ui.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
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
from PySide6.QtCore import QSortFilterProxyModel, Qt  # noqa: E402
from PySide6.QtGui import QStandardItem, QStandardItemModel  # noqa: E402
from PySide6.QtWidgets import QApplication, QTableView  # noqa: E402

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", type=parse_sizes, default=DEFAULT_SIZES, help="e.g. 1000,10000,50000")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure (median); default 3")
    parser.add_argument("--json", metavar="FILE", help="also write the raw figures to FILE")
    parser.add_argument("--workdir", type=Path, default=None, help="where the temporary stores live")
    args = parser.parse_args(argv)

    guard_binding()  # PySide6 6.12.0 on CPython 3.11 leaks None on every void call
    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication(sys.argv[:1])
    app.setStyle("Fusion")
    root = Path(tempfile.mkdtemp(prefix="dq-bench-ui-", dir=args.workdir))
    results = []
    try:
        for size in args.sizes:
            log(f"{size:,} jobs …")
            results.append(bench_size(root, size, max(1, args.rounds)))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    env = {
        "python": platform.python_version(),
        "pyside6": PYSIDE_VERSION,
        "platform": platform.platform(),
        "qpa": os.environ.get("QT_QPA_PLATFORM"),
        "rounds": args.rounds,
    }
    print(f"Queue pane model vs QStandardItemModel, same view, offscreen ({env['python']}, PySide6 {env['pyside6']})")
    print("Times: median of rounds (scroll: one pass). Ratio < 1: ours is faster.\n")
    print(format_report(results))
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": env, "results": results}, indent=2))
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
