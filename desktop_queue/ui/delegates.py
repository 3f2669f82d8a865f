"""Item delegates of the job tables: one call into Python per painted cell, not eight.

Qt's own :class:`QStyledItemDelegate` fills a cell's style option by asking the model
for display text, icon, font, alignment, colours and check state, one role at a time:
with a Python model each is a call into Python, ~8 per painted cell. The delegate here
fills the same option from one :class:`~desktop_queue.ui.models.columns.CellLook` (text, icon,
bold) and leaves the drawing to Qt: ``QStyledItemDelegate.paint`` (C++) calls
:meth:`JobCellDelegate.initStyleOption`, then draws with the style's ``CE_ItemViewItem``
exactly as before (native selection, alternating rows, icon, focus, eliding, light or
dark palette; pixel for pixel the same).

Drawing the text here instead (a cached ``QStaticText`` per cell, after the style drew
the cell without it) was tried: the style's text layout is the costliest part of a
cell, but the ~25 PySide calls per cell that it takes (option getters return copies,
flag arithmetic goes through Python enums) cost more than the layout they save.

Tooltips, accessibility and anything else still ask the model for the usual roles.
"""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QStyledItemDelegate, QStyleOptionViewItem

from desktop_queue.ui.models.columns import CellLook, JobRole
from desktop_queue.ui.models.filter_proxy import JobFilterProxy

_HAS_DISPLAY = QStyleOptionViewItem.ViewItemFeature.HasDisplay
_HAS_DISPLAY_AND_DECORATION = _HAS_DISPLAY | QStyleOptionViewItem.ViewItemFeature.HasDecoration


class JobCellDelegate(QStyledItemDelegate):
    """Paints a job table's cells from one ``JobRole.LOOK`` per cell.

    Only :meth:`initStyleOption` is replaced: Qt's ``paint`` and ``sizeHint`` call it,
    then draw with the style as for any item view. A cell without a look (a model
    that is not a job table) is filled the usual way.

    Args:
        parent: the Qt parent (the view).
    """

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        # feature flags seen -> with HasDisplay (and HasDecoration): enum arithmetic per cell costs
        self._with_display: dict[object, QStyleOptionViewItem.ViewItemFeature] = {}
        self._with_decoration: dict[object, QStyleOptionViewItem.ViewItemFeature] = {}
        self._bold: dict[str, tuple[QFont, QFontMetrics]] = {}

    def _look(self, index: QModelIndex | QPersistentModelIndex) -> CellLook | None:
        model = index.model()
        look = model.cell_look(index) if isinstance(model, JobFilterProxy) else index.data(JobRole.LOOK)
        return look if isinstance(look, CellLook) else None

    def initStyleOption(  # noqa: N802 - Qt API
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        # what QStyledItemDelegate.initStyleOption does with the model's roles, from one look
        look = self._look(index)
        if look is None:
            super().initStyleOption(option, index)
            return
        option.index = index  # type: ignore[assignment]
        features = option.features
        if look.icon is not None:
            with_decoration = self._with_decoration.get(features)
            if with_decoration is None:
                with_decoration = self._with_decoration[features] = features | _HAS_DISPLAY_AND_DECORATION
            option.features = with_decoration
            option.icon = look.icon  # SVG: draws at the option's decorationSize, nothing to clamp
        else:
            with_display = self._with_display.get(features)
            if with_display is None:
                with_display = self._with_display[features] = features | _HAS_DISPLAY
            option.features = with_display
        # as QStyledItemDelegate.displayText: a newline is a line separator in an item
        option.text = look.text.replace("\n", "\u2028") if "\n" in look.text else look.text
        if look.bold:
            key = option.font.key()
            bold = self._bold.get(key)
            if bold is None:
                font = QFont(option.font)
                font.setBold(True)
                bold = self._bold[key] = (font, QFontMetrics(font))
            option.font, option.fontMetrics = bold
        option.styleObject = None  # type: ignore[assignment]  # no style animations in item views (QTBUG-30146)
