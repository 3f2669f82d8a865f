"""The charts of the Metrics pane, drawn with pyqtgraph.

pyqtgraph is pure Python over QtWidgets: it runs on the PySide6-Essentials wheel the app
ships with (QtCharts would need PySide6-Addons). It and numpy are a good part of what
the window would import at start, for a tab most sessions never open: the pane imports
this module when it is first shown (see :meth:`MetricsPane.showEvent`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QColor, QPalette


def values(series: Sequence[float | int | None], scale: float = 1.0) -> np.ndarray[Any, Any]:
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


def draw_bars(chart: Chart, by_class: dict[str, int], colour: str) -> None:
    """Bars of dead letters per error class, largest first (a chart without them says so)."""
    chart.clear()
    chart.legend.clear()
    names = sorted(by_class, key=lambda k: (-by_class[k], k))
    if not names:
        chart.getAxis("bottom").setTicks([[]])
        chart.setYRange(0, 1)
        chart.set_bottom_label("none in this window")
        return
    heights = [by_class[n] for n in names]
    bars = pg.BarGraphItem(x=list(range(len(names))), height=heights, width=0.6, brush=colour)
    chart.addItem(bars)
    chart.getAxis("bottom").setTicks([[(i, f"{n} ({by_class[n]})") for i, n in enumerate(names)]])
    chart.set_bottom_label("error class")
    chart.setXRange(-0.6, len(names) - 0.4)
    chart.setYRange(0, max(heights) * 1.15)
