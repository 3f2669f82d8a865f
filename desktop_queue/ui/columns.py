"""Job-table columns that hold their layout: one column keeps a readable width, the others give way.

Qt's ``Stretch`` resize mode gives the stretched column whatever the others leave, down
to a few pixels: a narrow pane (a wide job side, a small screen, a larger font) showed
every title as "…". :class:`ColumnFitter` fits the columns to the viewport instead:

* the *main* column (Title, Last error) takes what the others leave, but never less than
  :attr:`ColumnFitter.main_min` (about 28 characters of the view's font);
* when that is not enough, the other columns give way first, each in proportion to
  what it has above its own minimum (its heading, or the widest cell it shows now, for
  date columns such as Created, whose cells read "2026-11-30 16:24" for older days);
* then the main column gives way too, down to :attr:`ColumnFitter.main_floor` (about 20
  characters), if that is enough for the table to fit: a wide kind ("openai.responses")
  would otherwise push the last column behind a scroll bar at the window's first size;
* only when that is not enough either does the table scroll horizontally, and then the
  main column keeps its 28 characters (giving less would not spare the scrolling).

A column the user drags keeps that width as its preferred one; hidden columns take no
room. :func:`column_menu` is the header's context menu: show or hide each column (the
main one always shows) and reset them; the header's saved state keeps the choice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from PySide6.QtCore import QObject, QPoint, Qt, QTimer
from PySide6.QtGui import QAction, QFontMetrics
from PySide6.QtWidgets import QHeaderView, QMenu, QTableView, QWidget

#: the section's padding beside a heading's text, and the sort indicator's room
HEADING_PAD = 16
SORT_PAD = 14
#: the least a cell column shrinks to (an icon and a few characters)
CELL_MIN = 36
#: the main column's minimum, in average characters of the view's font
MAIN_MIN_CHARS = 28
#: the least it gives way to when that spares the table a horizontal scroll bar
MAIN_FLOOR_CHARS = 20


class ColumnFitter(QObject):
    """Fits a table's columns to its viewport (see the module's docstring).

    Args:
        view: the table.
        keys: the column keys, by model column.
        main: the key of the column that takes what is left.
        widths: key -> preferred width at the view's font (the default layout).
        content_keys: columns that widen to their widest visible cell (dates).
        samples: key -> the text the column must show whole (e.g. the longest state),
            beside an icon.
        texts: key -> the text a column without icons must show whole (the widest
            value it holds: "background").
        floors: key -> the least width of that column, in average characters (a
            title beside the main column stays readable).
    """

    def __init__(
        self,
        view: QTableView,
        keys: Sequence[str],
        main: str,
        widths: dict[str, int],
        content_keys: Sequence[str] = (),
        samples: dict[str, str] | None = None,
        floors: dict[str, int] | None = None,
        texts: dict[str, str] | None = None,
    ) -> None:
        super().__init__(view)
        self.view = view
        self.header = view.horizontalHeader()
        self.keys = list(keys)
        self.main = self.keys.index(main)
        self.defaults = dict(widths)
        self.content = {self.keys.index(k) for k in content_keys if k in self.keys}
        self.floors = {self.keys.index(k): chars for k, chars in (floors or {}).items() if k in self.keys}
        #: column -> (the text it shows whole, whether an icon stands beside it): samples and texts
        self.whole = {
            self.keys.index(k): (text, icon)
            for given, icon in ((samples, True), (texts, False))
            for k, text in (given or {}).items()
            if k in self.keys
        }
        self._fitting = False
        #: column -> width the user (or the default layout) wants when there is room
        self.preferred: dict[int, int] = {}
        self.header.setStretchLastSection(False)
        self.header.setMinimumSectionSize(CELL_MIN)
        for i in range(len(self.keys)):
            self.header.setSectionResizeMode(i, QHeaderView.ResizeMode.Interactive)
        self.reset_widths()
        self.header.sectionResized.connect(self._resized_by_user)
        self.header.sectionCountChanged.connect(lambda *_: self.schedule())
        view.viewport().installEventFilter(self)
        # new rows may hold wider dates: measured again, once per burst of changes
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(150)
        self._timer.timeout.connect(self.fit)
        model = view.model()
        for signal in (model.rowsInserted, model.modelReset, model.layoutChanged):
            signal.connect(lambda *_: self.schedule())

    # ----------------------------------------------------------------- widths

    def _chars(self, n: int) -> int:
        """The width of ``n`` average characters of the view's font, and the cell's padding."""
        return QFontMetrics(self.view.font()).averageCharWidth() * n + 16

    @property
    def main_min(self) -> int:
        """The main column's least width: about 28 characters (it grows with the font)."""
        return self._chars(MAIN_MIN_CHARS)

    @property
    def main_floor(self) -> int:
        """The least the main column gives way to when that lets the table fit: about 20 characters."""
        return self._chars(MAIN_FLOOR_CHARS)

    def _scale(self) -> float:
        """The view's font against the 9-point font the default widths were chosen for."""
        return max(1.0, QFontMetrics(self.view.font()).averageCharWidth() / 7.0)

    def reset_widths(self) -> None:
        """Back to the default widths (the user's drags forgotten)."""
        scale = self._scale()
        self.preferred = {
            i: round(self.defaults[k] * scale) for i, k in enumerate(self.keys) if k in self.defaults and i != self.main
        }
        self.fit()

    def preferred_by_key(self) -> dict[str, int]:
        """The widths the columns take when there is room (the defaults, or the user's drags), by key.

        What the window saves: a header's own state holds the widths of the moment, which
        a narrow window, or a pane never shown (fitted to a viewport of a few pixels),
        squeezed; taken back as preferred, they would stay squeezed for good.
        """
        return {self.keys[i]: width for i, width in self.preferred.items()}

    def restore_preferred(self, widths: Mapping[str, object]) -> None:
        """Takes back saved :meth:`preferred_by_key` widths (unknown keys and bad values are
        ignored; a column not named keeps its default)."""
        for i, key in enumerate(self.keys):
            width = widths.get(key)
            if i != self.main and isinstance(width, int) and not isinstance(width, bool) and width > 0:
                self.preferred[i] = width
        self.fit()

    def minimum(self, column: int) -> int:
        """The least width of a column: its heading, its widest visible cell (date columns), or
        the text it must show whole."""
        metrics = QFontMetrics(self.header.font())
        text = self.view.model().headerData(column, Qt.Orientation.Horizontal) or ""
        pad = HEADING_PAD + (SORT_PAD if self.header.sortIndicatorSection() == column else 0)
        least = max(CELL_MIN, metrics.horizontalAdvance(str(text)) + pad)
        if column in self.content and self.view.isVisible():
            # (a hidden view, a pane not shown yet, would be measured over every row up to
            # Qt's resizeContentsPrecision, not the visible ones: it is fitted again on Show)
            least = max(least, self.view.sizeHintForColumn(column))
        chars = self.floors.get(column)
        if chars is not None:
            least = max(least, self._chars(chars))
        whole = self.whole.get(column)
        if whole is not None:
            shown, beside_icon = whole
            size = self.view.iconSize().width()  # (-1 until set: the style's 16)
            icon = (size if size > 0 else 16) + 2 if beside_icon else 0
            least = max(least, QFontMetrics(self.view.font()).horizontalAdvance(shown) + icon + 12)
        return least

    def schedule(self) -> None:
        if not self._timer.isActive():
            self._timer.start()

    def fit(self) -> None:
        """Lays the visible columns out in the viewport's width (see the module's docstring)."""
        if self._fitting:
            return
        self._fitting = True
        try:
            header = self.header
            available = self.view.viewport().width()
            if available <= 0:
                return
            shown = [i for i in range(len(self.keys)) if i != self.main and not header.isSectionHidden(i)]
            mins = {i: self.minimum(i) for i in shown}
            wanted = {i: max(mins[i], self.preferred.get(i, mins[i])) for i in shown}
            main_min = self.main_min
            room = available - main_min
            total = sum(wanted.values())
            if total > room:  # the others give way, each from what it has above its minimum
                spare = sum(wanted[i] - mins[i] for i in shown)
                cut = min(spare, total - room)
                # (rounded up: a pixel too many would show a horizontal scroll bar)
                widths = {
                    i: max(mins[i], wanted[i] - (math.ceil(cut * (wanted[i] - mins[i]) / spare) if spare else 0))
                    for i in shown
                }
            else:
                widths = wanted
            for i, width in widths.items():
                if header.sectionSize(i) != width:
                    header.resizeSection(i, width)
            left = available - sum(widths.values())
            # (below its floor the table scrolls whatever the main column gives: it keeps its 28 characters)
            header.resizeSection(self.main, left if left >= self.main_floor else main_min)
        finally:
            self._fitting = False

    def _resized_by_user(self, column: int, _old: int, new: int) -> None:
        if self._fitting:
            return
        if column != self.main and new > 0:  # (0: hidden; its width is kept for when it shows again)
            self.preferred[column] = new
        self.schedule()

    def eventFilter(self, watched: QObject, event: object) -> bool:  # noqa: N802 - Qt API
        from PySide6.QtCore import QEvent

        if isinstance(event, QEvent) and event.type() in (QEvent.Type.Resize, QEvent.Type.Show):
            self.fit()
        return False


def column_menu(
    view: QTableView, headings: Sequence[str], always_shown: int, on_reset: Callable[[], None], parent: QWidget
) -> QMenu:
    """The header's context menu: a check box per column (``always_shown`` cannot be hidden), then Reset."""
    header = view.horizontalHeader()
    menu = QMenu(parent)
    menu.setObjectName("columnMenu")
    menu.setTitle("&Columns")
    for column, heading in enumerate(headings):
        action = QAction(heading, menu)
        action.setObjectName(f"column_{column}")
        action.setCheckable(True)
        action.setChecked(not header.isSectionHidden(column))
        action.setEnabled(column != always_shown)
        action.toggled.connect(lambda on, c=column: view.setColumnHidden(c, not on))
        menu.addAction(action)
    menu.addSeparator()
    reset = menu.addAction("&Reset columns")
    reset.setObjectName("resetColumns")
    reset.triggered.connect(on_reset)
    return menu


def install_column_chooser(
    view: QTableView, headings: Sequence[str], always_shown: int, on_reset: Callable[[], None]
) -> None:
    """Right-click on the header opens :func:`column_menu`."""
    header = view.horizontalHeader()
    header.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)

    def popup(pos: QPoint) -> None:
        column_menu(view, headings, always_shown, on_reset, header).popup(header.mapToGlobal(pos))

    header.customContextMenuRequested.connect(popup)
