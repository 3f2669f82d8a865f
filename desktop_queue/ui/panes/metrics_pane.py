"""The Metrics pane: the last hour, day or week of the queue as charts.

The charts (:mod:`.charts`, pyqtgraph's) are made when the pane is first shown. Every
figure comes from :class:`~desktop_queue.core.windowed.WindowFigures`, computed off the
GUI thread by :class:`~desktop_queue.ui.models.metrics_model.MetricsSource`; the pane
only draws. Times on the x axes are local; each y axis says its unit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, QTimer, Slot
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QButtonGroup,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core.present import seconds
from desktop_queue.core.windowed import WindowFigures
from desktop_queue.core.wording import counted
from desktop_queue.ui.models.metrics_model import MetricsSource

if TYPE_CHECKING:
    import numpy as np

    from desktop_queue.ui.panes.charts import Chart

#: window -> (button text, what the empty state says)
WINDOW_TEXT = {"1h": ("1 h", "the last hour"), "24h": ("24 h", "the last 24 hours"), "7d": ("7 d", "the last 7 days")}
#: how often a shown pane asks for new figures
REFRESH_MS = 5000
#: one colour per series name, readable on white and told apart without relying on red/green alone
COLOURS = {
    "queued": "#1f77b4",
    "running": "#ff7f0e",
    "dead": "#d62728",
    "succeeded": "#2ca02c",
    "cancelled": "#7f7f7f",
    "wait": "#1f77b4",
    "run": "#9467bd",
    "retries": "#ff7f0e",
    "throttled": "#9467bd",
    "lease_expiries": "#8c564b",
}
_CYCLE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


class MetricsPane(QWidget):
    """Charts of one window of the queue's figures, with a 1 h / 24 h / 7 d selector.

    Args:
        source: computes the figures in the background.
        parent: the Qt parent.
    """

    # (made on the first show: see _make_charts)
    depth_chart: Chart
    finished_chart: Chart
    success_chart: Chart
    times_chart: Chart
    trouble_chart: Chart
    dead_chart: Chart
    profiles_chart: Chart

    def __init__(self, source: MetricsSource, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("metricsPane")
        self.source = source
        self.chosen = "1h"
        self.figures: WindowFigures | None = None
        source.ready.connect(self.show_figures)
        source.failed.connect(self._failed)

        top = QHBoxLayout()
        top.addWidget(QLabel("Window:"))
        self.window_buttons = QButtonGroup(self)
        self.buttons: dict[str, QToolButton] = {}
        for window, (text, what) in WINDOW_TEXT.items():
            button = QToolButton()
            button.setText(text)
            button.setCheckable(True)
            button.setToolTip(f"The figures of {what}")
            button.setObjectName(f"window_{window}")
            button.clicked.connect(lambda _c=False, w=window: self.set_window(w))
            self.window_buttons.addButton(button)
            self.buttons[window] = button
            top.addWidget(button)
        self.buttons[self.chosen].setChecked(True)
        self.summary = QLabel()
        self.summary.setObjectName("metricsSummary")
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.summary.setWordWrap(True)  # (cut at the pane's edge otherwise, at the window's first size)
        top.addSpacing(12)
        top.addWidget(self.summary, 1)

        self.empty = QLabel()
        self.empty.setObjectName("metricsEmpty")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.setWordWrap(True)
        # the charts come with the first show (_make_charts): most sessions never open the tab
        self.charts: QScrollArea | None = None
        self.stack = QStackedWidget()
        self.stack.addWidget(self.empty)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.stack, 1)
        self._set_empty("Computing the metrics…")

        self.timer = QTimer(self)
        self.timer.setObjectName("metricsRefreshTimer")
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh)

    # ----------------------------------------------------------------- the charts

    def _make_charts(self) -> QScrollArea:
        """The seven charts, in their scroll area, made the first time (importing pyqtgraph and
        numpy then: see :mod:`.charts`)."""
        if self.charts is not None:
            return self.charts
        from desktop_queue.ui.panes.charts import Chart

        self.depth_chart = Chart("Queue depth", "jobs")
        self.finished_chart = Chart("Finished per minute", "jobs / min")
        self.success_chart = Chart("Success rate", "% of finished")
        self.times_chart = Chart("Queue wait and run time", "seconds")
        self.trouble_chart = Chart("Retries, throttles (429) and lease expiries", "per hour")
        self.dead_chart = Chart("Dead letters by error class", "dead letters", times=False)
        self.profiles_chart = Chart("Requests per profile against its limit", "requests / min")
        grid_host = QWidget()
        grid = QGridLayout(grid_host)
        grid.setContentsMargins(0, 0, 0, 0)
        charts = [
            self.depth_chart,
            self.finished_chart,
            self.success_chart,
            self.times_chart,
            self.trouble_chart,
            self.dead_chart,
            self.profiles_chart,
        ]
        for i, chart in enumerate(charts[:-1]):
            grid.addWidget(chart, i // 2, i % 2)
        grid.addWidget(self.profiles_chart, 3, 0, 1, 2)  # (as wide as two: a line per profile and its limit)
        # scrolled: seven charts never make the window taller than a small screen
        scroll = QScrollArea()
        scroll.setObjectName("metricsCharts")
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(grid_host)
        self.charts = scroll
        self.stack.insertWidget(0, scroll)
        self.stack.setCurrentWidget(self.empty)
        return scroll

    # ----------------------------------------------------------------- refreshing

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt API
        super().showEvent(event)
        self._make_charts()
        self.refresh()
        self.timer.start()

    def hideEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        self.timer.stop()  # a hidden pane costs nothing
        super().hideEvent(event)

    @Slot()
    def refresh(self) -> None:
        """Asks for the current window's figures (they arrive in :meth:`show_figures`)."""
        self.source.request(self.chosen)

    def set_window(self, window: str) -> None:
        self.chosen = window
        self.buttons[window].setChecked(True)
        self.refresh()

    def _set_empty(self, text: str) -> None:
        self.empty.setText(text)
        self.stack.setCurrentWidget(self.empty)

    @Slot(str)
    def _failed(self, message: str) -> None:
        self.summary.setText(message)

    # ----------------------------------------------------------------- drawing

    @Slot(object)
    def show_figures(self, figures: WindowFigures) -> None:
        """Draws ``figures`` (those of another window than the one chosen now are dropped)."""
        if figures.window != self.chosen:
            return
        self.figures = figures
        what = WINDOW_TEXT[figures.window][1]
        if figures.empty:
            self.summary.setText("")
            self._set_empty(f"No jobs in {what}.\nThe charts fill in as jobs run.")
            return
        self.stack.setCurrentWidget(self._make_charts())
        from desktop_queue.ui.panes.charts import draw_bars, values

        t = figures.totals
        rate = "–" if t["success_rate"] is None else f"{100 * t['success_rate']:.0f} %"
        done = sum(t["finished"].values())

        def sec(v: float | None) -> str:
            # hundredths tell short attempts apart; a long wait reads "109 min", not "6540.88 s"
            return "–" if v is None else f"{v:.2f} s" if v < 10 else seconds(v)

        self.summary.setText(
            f"In {what}: {done:,} finished ({t['finished_per_min']:,.2f} / min), success {rate}, "
            f"wait p95 {sec(t['wait_p95_s'])}, run p95 {sec(t['run_p95_s'])}, {counted(t['dead_letters'], 'dead letter')}"
        )
        x = figures.times
        # a step's depth is taken at its end; drawn at its start, the line would lead by a step
        ends = [s + figures.step_s for s in x]
        self.depth_chart.lines(
            ends,
            {
                "queued": (values(figures.depth["queued"]), COLOURS["queued"], False),
                "running": (values(figures.depth["running"]), COLOURS["running"], False),
                "dead letters": (values(figures.depth["dead"]), COLOURS["dead"], True),
            },
        )
        per_min = 60.0 / figures.step_s
        self.finished_chart.lines(
            x,
            {
                "succeeded": (values(figures.finished["succeeded"], per_min), COLOURS["succeeded"], False),
                "dead": (values(figures.finished["dead"], per_min), COLOURS["dead"], True),
                "cancelled": (values(figures.finished["cancelled"], per_min), COLOURS["cancelled"], False),
            },
        )
        self.success_chart.lines(
            x, {"success rate": (values(figures.success_rate, 100.0), COLOURS["succeeded"], False)}, dots=True
        )
        self.success_chart.setYRange(0, 105)
        self.times_chart.lines(
            x,
            {
                "wait p50": (values(figures.wait_p50_s), COLOURS["wait"], False),
                "wait p95": (values(figures.wait_p95_s), COLOURS["wait"], True),
                "run p50": (values(figures.run_p50_s), COLOURS["run"], False),
                "run p95": (values(figures.run_p95_s), COLOURS["run"], True),
            },
            dots=True,
        )
        per_hour = 3600.0 / figures.step_s
        self.trouble_chart.lines(
            x,
            {
                "retries": (values(figures.retries, per_hour), COLOURS["retries"], False),
                "throttles (429)": (values(figures.throttled, per_hour), COLOURS["throttled"], True),
                "lease expiries": (values(figures.lease_expiries, per_hour), COLOURS["lease_expiries"], False),
            },
        )
        draw_bars(self.dead_chart, figures.dead_letters_by_class, COLOURS["dead"])
        series: dict[str, tuple[np.ndarray[Any, Any], str, bool]] = {}
        for i, prof in enumerate(figures.profiles):
            colour = _CYCLE[i % len(_CYCLE)]
            breaker = f", breaker {prof.breaker.replace('_', ' ')}" if prof.breaker else ""
            series[f"{prof.profile}{breaker}"] = (values(prof.requests_per_min), colour, False)
            if prof.limit_rpm is not None:
                series[f"{prof.profile} limit"] = (values([prof.limit_rpm] * len(x)), colour, True)
        self.profiles_chart.lines(x, series)
