"""The dead letters grouped by error signature."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from PySide6.QtCore import QAbstractListModel, QObject, Qt

from desktop_queue.core.wording import counted
from desktop_queue.ui.icons import state_icon
from desktop_queue.ui.models.columns import _ROOT, AnyIndex, _runs


class DeadGroupModel(QAbstractListModel):
    """The dead letters grouped by error signature ("fatal 429 rate limited ×812"), largest first.

    :meth:`set_groups` updates the counts in place (``dataChanged``) while the groups
    stay the same, and inserts or removes rows for groups that come or go; it resets
    only when the order of the groups that stay changed.
    """

    SIGNATURE = Qt.ItemDataRole.UserRole
    COUNT = Qt.ItemDataRole.UserRole + 1

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._groups: list[Any] = []  # DeadGroup

    def rowCount(self, parent: AnyIndex = _ROOT) -> int:  # noqa: N802 - Qt API
        return 0 if parent.isValid() else len(self._groups)

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._groups):
            return None
        group = self._groups[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return group.label
        if role == Qt.ItemDataRole.ToolTipRole:
            return f"{counted(group.count, 'dead letter')} failed like this, e.g.\n{group.example}"
        if role == Qt.ItemDataRole.DecorationRole:
            return state_icon("dead")
        if role == self.SIGNATURE:
            return group.signature
        if role == self.COUNT:
            return group.count
        return None

    def groups(self) -> list[Any]:
        return list(self._groups)

    def row_of(self, signature: str) -> int | None:
        for row, group in enumerate(self._groups):
            if group.signature == signature:
                return row
        return None

    def set_groups(self, groups: Iterable[Any]) -> None:
        new = list(groups)
        old_sigs = [g.signature for g in self._groups]
        new_sigs = [g.signature for g in new]
        if old_sigs == new_sigs:
            changed = [i for i, (a, b) in enumerate(zip(self._groups, new, strict=True)) if a != b]
            self._groups = new
            for first, last in _runs(changed):
                self.dataChanged.emit(self.index(first, 0), self.index(last, 0))
            return
        kept = [s for s in old_sigs if s in set(new_sigs)]
        if kept != [s for s in new_sigs if s in set(old_sigs)]:
            self.beginResetModel()
            self._groups = new
            self.endResetModel()
            return
        # the groups that stay keep their order: remove the gone, then insert the new where they go
        gone = [i for i, s in enumerate(old_sigs) if s not in set(new_sigs)]
        for first, last in reversed(_runs(gone)):
            self.beginRemoveRows(_ROOT, first, last)
            del self._groups[first : last + 1]
            self.endRemoveRows()
        for row, group in enumerate(new):
            if row < len(self._groups) and self._groups[row].signature == group.signature:
                if self._groups[row] != group:
                    self._groups[row] = group
                    self.dataChanged.emit(self.index(row, 0), self.index(row, 0))
                continue
            self.beginInsertRows(_ROOT, row, row)
            self._groups.insert(row, group)
            self.endInsertRows()
