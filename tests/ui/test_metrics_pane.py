"""The Metrics pane: figures computed off the GUI thread, drawn as labelled charts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.outcome import Outcome
from desktop_queue.core.windowed import WindowedMetrics
from desktop_queue.ui.models.metrics_model import MetricsSource
from desktop_queue.ui.panes.metrics_pane import MetricsPane


def _pane(qtbot: Any, queue: Queue) -> MetricsPane:
    pane = MetricsPane(MetricsSource(WindowedMetrics(queue)))
    qtbot.addWidget(pane)
    pane.resize(1100, 900)
    return pane


def _wait_drawn(qtbot: Any, pane: MetricsPane, window: str) -> None:
    qtbot.waitUntil(
        lambda: pane.figures is not None and pane.figures.window == window and not pane.source.busy, timeout=10_000
    )
    assert pane.source.shutdown(5000)


def test_empty_store_says_so(qtbot: Any, data_dir: Path) -> None:
    with Queue.open(data_dir, clock=FakeClock()) as queue:
        pane = _pane(qtbot, queue)
        with qtbot.waitSignal(pane.source.ready, timeout=10_000):
            pane.show()
        assert pane.source.shutdown(5000)
        assert pane.stack.currentWidget() is pane.empty
        assert pane.empty.text().startswith("No jobs in the last hour")
        pane.timer.stop()


def test_the_charts_come_with_the_first_show(qtbot: Any, data_dir: Path) -> None:
    with Queue.open(data_dir, clock=FakeClock()) as queue:
        pane = _pane(qtbot, queue)
        assert pane.charts is None
        with qtbot.waitSignal(pane.source.ready, timeout=10_000):
            pane.show()
        assert pane.source.shutdown(5000)
        assert pane.charts is not None and pane.stack.indexOf(pane.charts) >= 0
        assert pane.depth_chart.getAxis("left").labelText == "jobs"
        charts = pane.charts
        pane.hide()
        pane.show()
        assert pane.charts is charts  # made once
        pane.timer.stop()


def test_the_window_imports_no_chart_library() -> None:
    """pyqtgraph and numpy wait for the Metrics tab (a fresh interpreter: this one has them)."""
    code = (
        "import json, sys; import desktop_queue.app, desktop_queue.ui.main_window; "
        "print(json.dumps([m for m in ('pyqtgraph', 'numpy') if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_charts_show_the_window_with_units_and_legends(qtbot: Any, data_dir: Path, tmp_path: Path) -> None:
    clock = FakeClock()
    with Queue.open(data_dir, clock=clock) as queue:
        for i in range(6):
            queue.submit("demo", {"i": i}, max_attempts=1)
        for i in range(4):
            clock.advance(90.0)
            lease = queue.lease()
            assert lease is not None
            clock.advance(1.5 + i)
            if i == 3:
                queue.fail(lease, Outcome(ok=False, error_class="fatal", message="bad"))  # type: ignore[arg-type]
            else:
                queue.complete(lease, {"text": "ok"})
        pane = _pane(qtbot, queue)
        pane.show()
        _wait_drawn(qtbot, pane, "1h")
        assert pane.stack.currentIndex() == 0
        assert "4 finished" in pane.summary.text() and "success 75 %" in pane.summary.text()
        # waits of minutes read in minutes, a run of seconds in hundredths of a second
        assert re.search(r"wait p95 \d+ min, run p95 \d\.\d\d s,", pane.summary.text()), pane.summary.text()
        assert pane.summary.text().endswith(", 1 dead letter")  # (it said "1 dead letters")
        assert pane.depth_chart.names() == ["queued", "running", "dead letters"]
        assert pane.depth_chart.getAxis("left").labelText == "jobs"
        assert pane.depth_chart.getAxis("bottom").labelText == "local time"
        assert pane.dead_chart.getAxis("bottom")._tickLevels[0][0][1].startswith("fatal")  # noqa: SLF001
        depth = pane.depth_chart.getPlotItem().listDataItems()[0].getData()[1]
        assert depth[-1] == 2  # two jobs still queued
        # a percentile of one bucket is a lone point: p95's marks differ from p50's of its colour
        marks = {item.name(): item.opts["symbol"] for item in pane.times_chart.getPlotItem().listDataItems()}
        assert marks["wait p50"] != marks["wait p95"] and marks["run p50"] != marks["run p95"]
        pane.grab().save(str(tmp_path / "metrics.png"))
        pane.grab().save("/tmp/metrics.png")
        pane.buttons["7d"].click()
        _wait_drawn(qtbot, pane, "7d")
        assert pane.figures is not None and pane.figures.step_s == 3600
        assert len(pane.depth_chart.getPlotItem().listDataItems()[0].getData()[0]) == 168
        pane.timer.stop()


def test_requests_coalesce_while_one_runs(qtbot: Any, data_dir: Path) -> None:
    """A timer faster than the figures never piles up work: the latest window wins."""
    with Queue.open(data_dir, clock=FakeClock()) as queue:
        queue.submit("demo", {"x": 1})
        source = MetricsSource(WindowedMetrics(queue))
        seen: list[str] = []
        source.ready.connect(lambda f: seen.append(f.window))
        source.request("1h")
        source.request("24h")
        source.request("7d")
        qtbot.waitUntil(lambda: bool(seen) and seen[-1] == "7d" and not source.busy, timeout=10_000)
        assert source.shutdown(5000)
        assert seen == ["1h", "7d"]


def test_figures_are_computed_off_the_gui_thread(qtbot: Any, data_dir: Path) -> None:
    """The store may hold a million jobs: the pane's thread never folds or reads them."""
    import threading

    with Queue.open(data_dir, clock=FakeClock()) as queue:
        queue.submit("demo", {"x": 1})
        metrics = WindowedMetrics(queue)
        threads: list[threading.Thread] = []
        real = metrics.figures

        def spy(window: str, now: float | None = None) -> Any:
            threads.append(threading.current_thread())
            return real(window, now)

        metrics.figures = spy  # type: ignore[method-assign]
        pane = MetricsPane(MetricsSource(metrics))
        qtbot.addWidget(pane)
        with qtbot.waitSignal(pane.source.ready, timeout=10_000):
            pane.show()
        assert pane.source.shutdown(5000)
        assert threads and all(t is not threading.main_thread() for t in threads)
        assert pane.figures is not None and pane.figures.depth["queued"][-1] == 1
        pane.timer.stop()


def test_charts_take_their_paper_and_ink_from_the_palette(qtbot: Any) -> None:
    """In a dark window every chart was a white block with near-black text."""
    from PySide6.QtGui import QColor, QPalette

    from desktop_queue.ui.panes.charts import Chart

    chart = Chart("Queue depth", "jobs")
    qtbot.addWidget(chart)
    light = chart.palette()
    assert chart.paper == light.color(QPalette.ColorRole.Base).name()
    dark = QPalette(light)
    dark.setColor(QPalette.ColorRole.Base, QColor("#1e1e1e"))
    dark.setColor(QPalette.ColorRole.Text, QColor("#e6e6e6"))

    chart.setPalette(dark)  # (as a dark theme does, at start or later)

    assert (chart.paper, chart.ink) == ("#1e1e1e", "#e6e6e6")
    assert chart.backgroundBrush().color().name() == "#1e1e1e"
    assert chart.getAxis("left").textPen().color().name() == "#e6e6e6"
    chart.show()
    image = chart.grab().toImage()
    assert QColor(image.pixel(image.width() - 3, image.height() // 2)).lightness() < 64  # dark paper, painted
