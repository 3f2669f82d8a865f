"""The event timeline of the selected job, drawn as a vertical list of events."""

from __future__ import annotations

import math

from PySide6.QtCore import (
    QModelIndex,
    QPersistentModelIndex,
    QPointF,
    QRect,
    QSize,
    Qt,
    Signal,
)
from PySide6.QtGui import (
    QColor,
    QFont,
    QPainter,
    QPalette,
    QPen,
    QTextLayout,
    QTextOption,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QListView,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from desktop_queue.core.present import attempt_hosts
from desktop_queue.ui.elided import ElidedLabel
from desktop_queue.ui.icons import icon
from desktop_queue.ui.models.timeline_model import TimelineModel, TimelineRole
from desktop_queue.ui.panes.common import (
    CATEGORY_COLOURS,
)
from desktop_queue.ui.timeline import LiveTimelineModel


def wrapped_text(text: str, font: QFont, width: int) -> tuple[QTextLayout, int]:
    """``text`` laid out in lines of at most ``width`` pixels, and its height.

    Lines break between words, or anywhere in a word too long for a line (ids, URLs).
    """
    layout = QTextLayout(text, font)
    option = QTextOption()
    option.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
    layout.setTextOption(option)
    height = 0.0
    layout.beginLayout()
    while True:
        line = layout.createLine()
        if not line.isValid():
            break
        line.setLineWidth(max(1, width))
        line.setPosition(QPointF(0, height))
        height += line.height()
    layout.endLayout()
    return layout, math.ceil(height)


class TimelineDelegate(QStyledItemDelegate):
    """Paints an event as a node on a vertical line: icon, bold headline, quieter detail.

    Retries, throttling, lease expiries, reconciliation and replay links get a tinted
    card and their own icon (never colour alone); links are underlined. The headline
    and the detail wrap to the view's width, never cut with "…"; the row is as tall as
    its lines (the view lays its rows out again when its width changes).

    Args:
        view: the list view it paints for (its width decides where lines wrap).
    """

    GUTTER = 34
    PAD = 6
    #: card margins around the text: left, right (see :meth:`paint`)
    TEXT_INSET = GUTTER + (PAD + 2) + PAD + 4

    def __init__(self, view: QListView) -> None:
        super().__init__(view)
        self._view = view

    def _fonts(self, option: QStyleOptionViewItem) -> tuple[QFont, QFont]:
        headline = QFont(option.font)
        headline.setBold(True)
        return headline, QFont(option.font)

    def text_width(self) -> int:
        """Where lines wrap: the viewport's width less the card's margins.

        A vertical scroll bar is assumed even before it shows, so that the rows laid
        out without it still fit once it appears (no line goes missing).
        """
        width = self._view.viewport().width()
        if not self._view.verticalScrollBar().isVisible():
            width -= self._view.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, self._view)
        return max(60, width - self.TEXT_INSET)

    def _texts(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex, width: int
    ) -> tuple[QTextLayout, int, QTextLayout, int]:
        headline, small = self._fonts(option)
        if index.data(TimelineRole.LINK):
            headline.setUnderline(True)
        head, head_height = wrapped_text(index.data(TimelineRole.HEADLINE) or "", headline, width)
        detail, detail_height = wrapped_text(index.data(TimelineRole.DETAIL) or "", small, width)
        return head, head_height, detail, detail_height

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:  # noqa: N802
        width = self.text_width()
        _head, head_height, _detail, detail_height = self._texts(option, index, width)
        return QSize(width + self.TEXT_INSET, head_height + detail_height + self.PAD // 2 + 3 * self.PAD)

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        painter.save()
        palette = option.palette
        rect: QRect = option.rect
        category = index.data(TimelineRole.CATEGORY) or "normal"
        accent = QColor(CATEGORY_COLOURS.get(category, palette.color(QPalette.ColorRole.Mid).name()))
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        card = rect.adjusted(self.GUTTER, 2, -4, -2)
        if selected:
            painter.fillRect(rect, palette.color(QPalette.ColorRole.Highlight))
        elif category not in ("normal",):
            tint = QColor(accent)
            tint.setAlpha(34)
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(tint)
            painter.drawRoundedRect(card, 5, 5)
        # the vertical line through every node
        line_x = rect.left() + self.GUTTER // 2
        pen = QPen(palette.color(QPalette.ColorRole.Mid))
        pen.setWidth(2)
        painter.setPen(pen)
        first = index.row() == 0
        last = index.row() == index.model().rowCount() - 1
        painter.drawLine(
            line_x,
            rect.top() if not first else rect.center().y(),
            line_x,
            rect.bottom() if not last else rect.center().y(),
        )
        # the node: the event's icon on a base-coloured disc
        node = QRect(0, 0, 20, 20)
        node.moveCenter(rect.center())
        node.moveLeft(line_x - 10)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(palette.color(QPalette.ColorRole.Base))
        painter.drawEllipse(node)
        decoration = index.data(Qt.ItemDataRole.DecorationRole)
        if decoration is not None and not decoration.isNull():
            decoration.paint(painter, node.adjusted(2, 2, -2, -2))
        else:
            painter.setBrush(accent)
            painter.drawEllipse(node.adjusted(5, 5, -5, -5))
        # text: the headline, then the detail, each wrapped to the card
        text_rect = card.adjusted(self.PAD + 2, self.PAD - 1, -self.PAD, -self.PAD)
        text_colour = palette.color(QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text)
        if index.data(TimelineRole.LINK) and not selected:
            text_colour = palette.color(QPalette.ColorRole.Link)
        head, head_height, detail, _detail_height = self._texts(
            option, index, min(text_rect.width(), self.text_width())
        )
        painter.setPen(text_colour)
        head.draw(painter, QPointF(text_rect.topLeft()))
        detail_colour = palette.color(
            QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.PlaceholderText
        )
        painter.setPen(detail_colour)
        detail.draw(painter, QPointF(text_rect.left(), text_rect.top() + head_height + self.PAD // 2))
        painter.restore()


class TimelinePane(QWidget):
    """The selected job's events as a vertical timeline; replay links jump to the other job.

    Signals:
        link_activated(str): a replay link was clicked (the id of the job to show).
        copy_requested(): the Copy button was pressed.
    """

    link_activated = Signal(str)
    copy_requested = Signal()

    def __init__(self, model: TimelineModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        # a long title elides (in the middle: the job's state stays in sight); it must
        # never widen the job side and squeeze the job tables. The tooltip has it all.
        self.heading = ElidedLabel("Select a job to see its timeline", Qt.TextElideMode.ElideMiddle)
        self.heading.setObjectName("timelineHeading")
        self.heading.setTextFormat(Qt.TextFormat.PlainText)
        font = self.heading.font()
        font.setBold(True)
        self.heading.setFont(font)
        self.copy_button = QPushButton(icon("action-copy"), "&Copy")
        self.copy_button.setToolTip("Copy this timeline to the clipboard as text")
        self.view = QListView()
        self.view.setObjectName("timelineView")
        self.view.setModel(model)
        self.view.setItemDelegate(TimelineDelegate(self.view))
        self.view.setWordWrap(True)
        self.view.setResizeMode(QListView.ResizeMode.Adjust)  # lines wrap again when the width changes
        self.view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.view.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.view.setMouseTracking(True)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        top = QHBoxLayout()
        top.addWidget(self.heading, 1)
        top.addWidget(self.copy_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.view, 1)
        self.copy_button.clicked.connect(self.copy_requested)
        self.view.clicked.connect(self._clicked)
        self.view.activated.connect(self._clicked)
        self._stick_to_bottom = True
        model.rowsAboutToBeInserted.connect(self._remember_bottom)
        model.rowsInserted.connect(self._follow)
        model.modelReset.connect(self._on_reset)
        self.view.entered.connect(self._hover)

    def _hover(self, index: QModelIndex) -> None:
        cursor = Qt.CursorShape.PointingHandCursor if index.data(TimelineRole.LINK) else Qt.CursorShape.ArrowCursor
        self.view.viewport().setCursor(cursor)

    def at_bottom(self) -> bool:
        bar = self.view.verticalScrollBar()
        return bar.value() >= bar.maximum() - 2

    def _remember_bottom(self, *_: object) -> None:
        self._stick_to_bottom = self.at_bottom()

    def _follow(self, *_: object) -> None:
        if self._stick_to_bottom:
            self.view.scrollToBottom()

    def _on_reset(self) -> None:
        self.refresh_heading()
        self.view.scrollToBottom()

    def refresh_heading(self) -> None:
        """Shows the job's title, id and current state above its timeline."""
        job = self.model.job
        if job is None:
            self.heading.setText("Select a job to see its timeline")
        else:
            note = self.model.result_note if isinstance(self.model, LiveTimelineModel) else None
            hosts = attempt_hosts(job.events)
            # the machine of the latest attempt: on a shared queue it may be any of them
            where = f"  ·  attempt {hosts[-1][0]} on {hosts[-1][1]}" if hosts else ""
            end = f"  ·  {job.state}" + (f"  ·  {note}" if note else "")
            # narrower, the machine goes first, then the id; then the title elides in the
            # middle (the state last: it must stay in sight; a title's end tells "study 998"
            # from "study 999")
            self.heading.set_text(
                f"{job.title}  ·  job {job.id}{where}{end}",
                shorter=[f"{job.title}  ·  job {job.id}{end}", f"{job.title}{end}"] if where else [f"{job.title}{end}"],
            )
        self.heading.setToolTip(self.heading.text())

    def _clicked(self, index: QModelIndex) -> None:
        link = index.data(TimelineRole.LINK)
        if link:
            self.link_activated.emit(str(link))
