"""A label that gives up width before its layout does: its text elides instead of pushing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel, QWidget


class ElidedLabel(QLabel):
    """One line of text that elides ("openai: ok, $0.5…") when narrower than its text.

    Its minimum width is :attr:`MIN_WIDTH`, whatever the text: a long title or provider
    state never widens a pane, a splitter or the window. The full text stays in
    :meth:`text` (give it to the tooltip); :attr:`elided` says whether it is cut now.
    :meth:`set_text` also takes shorter forms, shown whole before the text elides.

    Args:
        text: the text.
        mode: where the "…" goes (the middle keeps both ends: a title and its state).
        parent: the Qt parent.
    """

    MIN_WIDTH = 72
    #: (text, its shorter forms, most complete first), from :meth:`set_text`
    _shorter: tuple[str, tuple[str, ...]] = ("", ())

    def __init__(
        self, text: str = "", mode: Qt.TextElideMode = Qt.TextElideMode.ElideRight, parent: QWidget | None = None
    ) -> None:
        super().__init__(text, parent)
        self.mode = mode

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt API
        hint = super().minimumSizeHint()
        return QSize(min(hint.width(), self.MIN_WIDTH), hint.height())

    def set_text(self, text: str, shorter: Sequence[str] = ()) -> None:
        """Sets the text and shorter forms of it that leave out what matters least: the
        first form that fits is shown whole, else the shortest elides. (``setText``
        forgets them.)"""
        self._shorter = (text, tuple(shorter))
        self.setText(text)

    def shown_text(self) -> str:
        """The text as painted at the current width."""
        width = self.contentsRect().width()
        metrics = self.fontMetrics()
        text = self.text()
        of, shorter = self._shorter
        if shorter and of == text:
            for candidate in (text, *shorter):
                if metrics.horizontalAdvance(candidate) <= width:
                    return candidate
                text = candidate
        return metrics.elidedText(text, self.mode, width)

    @property
    def elided(self) -> bool:
        return self.shown_text() != self.text()

    def paintEvent(self, _event: Any) -> None:  # noqa: N802 - Qt API
        painter = QPainter(self)
        painter.setFont(self.font())
        painter.setPen(self.palette().color(self.foregroundRole()))
        flags = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        painter.drawText(self.contentsRect(), flags, self.shown_text())
