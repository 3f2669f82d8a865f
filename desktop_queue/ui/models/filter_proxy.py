"""The job tables' filter proxy: text search, state, resolution and error signature."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QAbstractItemModel, QObject, QSortFilterProxyModel, Qt, QTimer, Signal, Slot

from desktop_queue.core import QueueError
from desktop_queue.core.present import error_signature
from desktop_queue.core.search import SearchQuery
from desktop_queue.ui.models.columns import _CELL_FLAGS, _HANDLED_ROLES, AnyIndex, CellLook, JobRole
from desktop_queue.ui.models.job_table import JobTableModel


class JobFilterProxy(QSortFilterProxyModel):
    """Text search (id, title, kind, state, error) and an optional state filter.

    Hot rows are filtered here; the archived rows are found again by the archive's
    index with the same state and the text in their title
    (:meth:`JobTableModel.set_archive_filter`), so a filter never loads the archive.
    With ``archive_delay_ms`` the archive is asked only once typing pauses (on a
    million jobs a title search scans the index); meanwhile the archived rows already
    loaded are filtered here like the hot ones, so nothing that does not match shows.

    It only filters: :meth:`sort` hands the sort to the source :class:`JobTableModel`,
    which sorts in one Python ``list.sort`` instead of Qt asking Python for a key on
    every comparison. The proxy's own sort column stays -1, so it keeps the source's
    order; ``dynamicSortFilter`` stays on so that a changed job is filtered again.
    """

    #: the filter changed (text, state, resolved, group): "no matches" may show or go
    filter_changed = Signal()

    def __init__(self, parent: QObject | None = None, *, archive_delay_ms: int = 0) -> None:
        super().__init__(parent)
        self._text = ""
        self._state: str | None = None
        self._query = SearchQuery()
        self._prompt_ids: set[str] = set()
        self._hide_resolved = False
        self._signature: str | None = None
        #: why the typed query could not be read (a bad date), or None
        self.query_error: str | None = None
        self._jobs: JobTableModel | None = None
        self.setDynamicSortFilter(True)  # re-filters changed rows; never sorts (sort column -1)
        self.archive_timer = QTimer(self)
        self.archive_timer.setObjectName("archiveFilterTimer")
        self.archive_timer.setSingleShot(True)
        self.archive_timer.setInterval(archive_delay_ms)
        self.archive_timer.timeout.connect(self.filter_archive)

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Sorts the source model (the header and ``QTableView.sortByColumn`` land here)."""
        model = self.sourceModel()
        if isinstance(model, JobTableModel):
            model.sort(column, order)
        else:  # pragma: no cover - every pane's source is a JobTableModel
            super().sort(column, order)

    def setSourceModel(self, model: QAbstractItemModel) -> None:  # noqa: N802 - Qt API
        self._jobs = model if isinstance(model, JobTableModel) else None
        super().setSourceModel(model)

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        # Painting asks ~7 roles per cell. Qt's path maps every one to the source, which
        # calls into Python twice (index(), data()); unfiltered, the row is the same.
        role = int(role)
        if role not in _HANDLED_ROLES:
            return None
        jobs = self._jobs
        if jobs is not None and not self.filtering and index.isValid():
            return jobs.cell_data(index.row(), index.column(), role)
        return super().data(index, role)

    def flags(self, index: AnyIndex) -> Qt.ItemFlag:
        # the source's flags are the same for every cell: no mapping needed (asked per painted cell)
        return _CELL_FLAGS if index.isValid() else Qt.ItemFlag.NoItemFlags

    def cell_look(self, index: AnyIndex) -> CellLook | None:
        """``index.data(JobRole.LOOK)`` without the trip through Qt (the delegate's paint path)."""
        jobs = self._jobs
        if jobs is None or not index.isValid():
            return None
        if not self.filtering:  # unfiltered: the proxy's rows are the source's
            return jobs.cell_look(index.row(), index.column())
        source = self.mapToSource(index)
        return jobs.cell_look(source.row(), source.column())

    @property
    def text(self) -> str:
        return self._text

    @property
    def query(self) -> SearchQuery:
        """What the typed text asks for (``kind:``, ``profile:``, ``state:``, ``after:``, ``before:``, words)."""
        return self._query

    @property
    def state(self) -> str | None:
        """The state filter (None: every state)."""
        return self._state

    @property
    def filtering(self) -> bool:
        """Whether any filter is on (else every source row shows, in the source's order)."""
        return bool(self._state is not None or self._text or self._hide_resolved or self._signature is not None)

    def set_text(self, text: str) -> None:
        """Shows only jobs matching the typed query: ``field:value`` terms and words found in
        the id, title, kind, state, error or prompt (see :class:`SearchQuery`)."""
        folded = text.strip().casefold()
        if folded != self._text:
            try:
                query, self.query_error = SearchQuery.parse(text.strip()), None
            except QueueError as exc:  # a date being typed: search the words meanwhile
                query, self.query_error = SearchQuery(text=text.strip() or None), str(exc)

            # the finished jobs' prompts are searched once typing pauses (filter_archive): a
            # keystroke filters the rows in memory only (queued rows carry their input)
            def change() -> None:
                self._text, self._query, self._prompt_ids = folded, query, set()

            self._change_filter(change)
            if self.archive_timer.interval() > 0:
                self.archive_timer.start()  # again: typing goes on
            else:
                self.filter_archive()
            self.filter_changed.emit()

    def set_state(self, state: str | None) -> None:
        """Shows only jobs in ``state`` (None: every state)."""
        if state != self._state:
            self._change_filter(lambda: setattr(self, "_state", state))
            self.filter_archive()
            self.filter_changed.emit()

    @property
    def hide_resolved(self) -> bool:
        return self._hide_resolved

    def set_hide_resolved(self, hide: bool) -> None:
        """Leaves out the dead letters a person resolved (the dead-letter pane's default)."""
        if hide != self._hide_resolved:
            self._change_filter(lambda: setattr(self, "_hide_resolved", hide))
            self.filter_archive()
            self.filter_changed.emit()

    @property
    def signature(self) -> str | None:
        return self._signature

    def set_signature(self, signature: str | None) -> None:
        """Shows only the jobs whose error has this signature (a dead-letter group); None: any."""
        if signature != self._signature:
            self._change_filter(lambda: setattr(self, "_signature", signature))
            self.filter_archive()
            self.filter_changed.emit()

    @Slot()
    def filter_archive(self) -> None:
        """Finds the archived rows again with this filter (at once, even if a search waits)."""
        self.archive_timer.stop()
        if self._jobs is not None:
            text = self._query.text
            prompts = self._jobs.prompt_matches(text) if text else set()
            if prompts != self._prompt_ids:
                self._change_filter(lambda: setattr(self, "_prompt_ids", prompts))
            self._jobs.set_archive_filter(
                self._state,
                self._query.text,
                query=self._query,
                resolved=False if self._hide_resolved else None,
                signature=self._signature,
            )

    def _change_filter(self, change: Callable[[], None]) -> None:
        # Qt 6.10 replaced invalidateRowsFilter() by begin/endFilterChange()
        if hasattr(self, "beginFilterChange"):
            self.beginFilterChange()
            change()
            self.endFilterChange(QSortFilterProxyModel.Direction.Rows)
        else:  # pragma: no cover - older Qt
            change()
            self.invalidateRowsFilter()

    def filterAcceptsRow(self, source_row: int, source_parent: AnyIndex) -> bool:  # noqa: N802 - Qt API
        if not self.filtering:
            return True  # asked for every row after each re-sort: the common case is cheap
        model = self.sourceModel()
        if not isinstance(model, JobTableModel):
            return True
        job = model.job_at(source_row)
        if self._state is not None and job.get("state") != self._state:
            return False
        if self._hide_resolved and job.get("resolved_at") is not None:
            return False
        if self._signature is not None and error_signature(job) != self._signature:
            return False
        query = self._query
        if not self._text or query.empty:
            return True
        if not query.matches_fields(job):
            return False
        if not query.text:
            return True
        if job.get("archived") and model.archive_filter[1] == query.text:
            return True  # the archive's index found it by this text (in its title or prompt)
        return query.text.casefold() in model.search_text(source_row) or job["id"] in self._prompt_ids

    def job_ids(self) -> list[str]:
        """The ids of every job the filter lets through, in view order."""
        return [self.index(r, 0).data(JobRole.ID) for r in range(self.rowCount())]
