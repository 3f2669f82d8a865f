"""The Metrics pane: the last hour, day or week of the queue as charts.

The charts are pyqtgraph's (pure Python over QtWidgets: it runs on the PySide6-Essentials
wheel the app ships with; QtCharts would need PySide6-Addons). Every figure comes from
:class:`~desktop_queue.core.windowed.WindowFigures`, computed off the GUI thread by
:class:`~desktop_queue.ui.models.metrics_model.MetricsSource`; the pane only draws.
Times on the x axes are local; each y axis says its unit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QTimer, Slot
from PySide6.QtGui import QColor, QPalette, QShowEvent
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


def _values(series: Sequence[float | int | None], scale: float = 1.0) -> np.ndarray[Any, Any]:
    """A series as floats, a missing value as NaN (drawn as a gap)."""
    return np.array([math.nan if v is None else float(v) * scale for v in series], dtype=float)


class Chart(pg.PlotWidget):
    """One titled chart with a legend, local time below and a unit on the left.

    It takes its paper and ink from the palette (a view's base and text colours), and
    again when the palette changes: a white chart in a dark window glared.
    """

    def __init__(self, title: str, unit: str, *, times: bool = True) -> None:
        axes = {"bottom": pg.DateAxisItem(orientation="bottom")} if times else {}
        super().__init__(axisItems=axes)
        self.setObjectName("chart_" + title.split(" ")[0].lower())
        self.title = title
        self.unit = unit
        self.bottom_label = "local time" if times else ""
        for name in ("left", "bottom"):
            self.getAxis(name).enableAutoSIPrefix(False)  # ("jobs" must not become "kjobs" or "x0.001")
        self.showGrid(x=True, y=True, alpha=0.15)
        self.setMouseEnabled(x=False, y=False)
        self.setMenuEnabled(False)
        self.hideButtons()
        self.legend = self.addLegend(offset=(8, 4))
        self.setMinimumHeight(170)
        self.ink = ""
        self.paper = ""
        self.apply_palette()

    def apply_palette(self) -> None:
        """Paper, ink, axes and legend in the palette's view colours."""
        palette = self.palette()
        base, text = palette.color(QPalette.ColorRole.Base), palette.color(QPalette.ColorRole.Text)
        self.paper, self.ink = base.name(), text.name()
        muted = QColor(text)
        muted.setAlphaF(0.6)
        self.setBackground(base)
        self.plotItem.setTitle(self.title, color=self.ink, size="10pt")
        self.setLabel("left", self.unit, color=self.ink)
        if self.bottom_label:
            self.setLabel("bottom", self.bottom_label, color=self.ink)
        for name in ("left", "bottom"):
            axis = self.getAxis(name)
            axis.setTextPen(self.ink)
            axis.setPen(pg.mkPen(muted))
        self.legend.setLabelTextColor(self.ink)
        legend_paper = QColor(base)
        legend_paper.setAlpha(200)
        self.legend.setBrush(pg.mkBrush(legend_paper))

    def set_bottom_label(self, text: str) -> None:
        self.bottom_label = text
        self.setLabel("bottom", text, color=self.ink)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt API
        super().changeEvent(event)
        if event.type() not in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            return
        # (the base class changes the palette while it is made, before the chart is; and a
        # chart being closed has let its plot go)
        if getattr(self, "legend", None) is not None and getattr(self, "plotItem", None) is not None:
            self.apply_palette()

    def lines(
        self, times: Sequence[float], series: dict[str, tuple[np.ndarray[Any, Any], str, bool]], *, dots: bool = False
    ) -> None:
        """Draws ``name -> (values, colour, dashed)`` over ``times`` (step starts), with the legend;
        ``dots`` marks each value too (a sparse series, such as a percentile, has lone points):
        a dashed series with triangles, so that a lone point (which draws no line) and the
        legend's short sample still tell it from the solid one of its colour."""
        self.clear()
        self.legend.clear()
        x = np.array(times, dtype=float)
        for name, (values, colour, dashed) in series.items():
            style = Qt.PenStyle.DashLine if dashed else Qt.PenStyle.SolidLine
            pen = pg.mkPen(colour, width=2, style=style)
            marks: dict[str, Any] = {}
            if dots and np.isfinite(values).any():  # (no marks for nothing: an all-NaN scatter warns)
                marks = {"symbol": "t" if dashed else "o", "symbolSize": 7 if dashed else 5}
                marks.update(symbolPen=None, symbolBrush=colour)
            self.plot(x, values, pen=pen, name=name, connect="finite", **marks)
        # from zero, and at least to 1: a flat line of zeros still reads as "none"
        top = max((float(np.nanmax(v)) for v, _, _ in series.values() if np.isfinite(v).any()), default=0.0)
        self.setYRange(0, max(1.0, top) * 1.1)

    def names(self) -> list[str]:
        """The legend's entries (what a test and a screen reader can check)."""
        return [label.text for _sample, label in self.legend.items]


class MetricsPane(QWidget):
    """Charts of one window of the queue's figures, with a 1 h / 24 h / 7 d selector.

    Args:
        source: computes the figures in the background.
        parent: the Qt parent.
    """

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
        self.empty = QLabel()
        self.empty.setObjectName("metricsEmpty")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.setWordWrap(True)
        # scrolled: seven charts never make the window taller than a small screen
        scroll = QScrollArea()
        scroll.setObjectName("metricsCharts")
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(grid_host)
        self.charts = scroll
        self.stack = QStackedWidget()
        self.stack.addWidget(scroll)
        self.stack.addWidget(self.empty)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.stack, 1)
        self._set_empty("Computing the metrics…")

        self.timer = QTimer(self)
        self.timer.setObjectName("metricsRefreshTimer")
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh)

    # ----------------------------------------------------------------- refreshing

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt API
        super().showEvent(event)
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
        self.stack.setCurrentIndex(0)
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
                "queued": (_values(figures.depth["queued"]), COLOURS["queued"], False),
                "running": (_values(figures.depth["running"]), COLOURS["running"], False),
                "dead letters": (_values(figures.depth["dead"]), COLOURS["dead"], True),
            },
        )
        per_min = 60.0 / figures.step_s
        self.finished_chart.lines(
            x,
            {
                "succeeded": (_values(figures.finished["succeeded"], per_min), COLOURS["succeeded"], False),
                "dead": (_values(figures.finished["dead"], per_min), COLOURS["dead"], True),
                "cancelled": (_values(figures.finished["cancelled"], per_min), COLOURS["cancelled"], False),
            },
        )
        self.success_chart.lines(
            x, {"success rate": (_values(figures.success_rate, 100.0), COLOURS["succeeded"], False)}, dots=True
        )
        self.success_chart.setYRange(0, 105)
        self.times_chart.lines(
            x,
            {
                "wait p50": (_values(figures.wait_p50_s), COLOURS["wait"], False),
                "wait p95": (_values(figures.wait_p95_s), COLOURS["wait"], True),
                "run p50": (_values(figures.run_p50_s), COLOURS["run"], False),
                "run p95": (_values(figures.run_p95_s), COLOURS["run"], True),
            },
            dots=True,
        )
        per_hour = 3600.0 / figures.step_s
        self.trouble_chart.lines(
            x,
            {
                "retries": (_values(figures.retries, per_hour), COLOURS["retries"], False),
                "throttles (429)": (_values(figures.throttled, per_hour), COLOURS["throttled"], True),
                "lease expiries": (_values(figures.lease_expiries, per_hour), COLOURS["lease_expiries"], False),
            },
        )
        self._draw_dead(figures.dead_letters_by_class)
        series: dict[str, tuple[np.ndarray[Any, Any], str, bool]] = {}
        for i, prof in enumerate(figures.profiles):
            colour = _CYCLE[i % len(_CYCLE)]
            breaker = f", breaker {prof.breaker.replace('_', ' ')}" if prof.breaker else ""
            series[f"{prof.profile}{breaker}"] = (_values(prof.requests_per_min), colour, False)
            if prof.limit_rpm is not None:
                series[f"{prof.profile} limit"] = (_values([prof.limit_rpm] * len(x)), colour, True)
        self.profiles_chart.lines(x, series)

    def _draw_dead(self, by_class: dict[str, int]) -> None:
        chart = self.dead_chart
        chart.clear()
        chart.legend.clear()
        names = sorted(by_class, key=lambda k: (-by_class[k], k))
        if not names:
            chart.getAxis("bottom").setTicks([[]])
            chart.setYRange(0, 1)
            chart.set_bottom_label("none in this window")
            return
        heights = [by_class[n] for n in names]
        bars = pg.BarGraphItem(x=list(range(len(names))), height=heights, width=0.6, brush=COLOURS["dead"])
        chart.addItem(bars)
        chart.getAxis("bottom").setTicks([[(i, f"{n} ({by_class[n]})") for i, n in enumerate(names)]])
        chart.set_bottom_label("error class")
        chart.setXRange(-0.6, len(names) - 0.4)
        chart.setYRange(0, max(heights) * 1.15)
