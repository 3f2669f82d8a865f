"""The job table model: hot jobs in sorted order, then archived jobs a page at a time.

The table models hold the store's plain job dicts (:meth:`Queue.raw_jobs`, no events, no
input) so that 10,000 jobs load in a blink. They are updated incrementally from the jobs
:class:`~desktop_queue.ui.models.refresh.RefreshCoordinator` hands them: ``dataChanged``
and ranged ``beginInsertRows``/``beginRemoveRows``; a model is reset only when the whole
store was reloaded.

The store keeps only its hot set in memory (queued, running, recently finished jobs);
older finished jobs are in its archive. A table shows the hot rows first, in the order
the user sorted them, then the archived rows, newest first, a page at a time as the view
scrolls down (``canFetchMore``/``fetchMore``), found through :meth:`Queue.history` with
the filters as its arguments: the archive is searched by its index, never loaded.
The rows of jobs the store archived after a refresh brought them are let go of now and
then (:meth:`JobTableModel.release`): they come back as archived rows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from PySide6.QtCore import QAbstractItemModel, QAbstractTableModel, QModelIndex, QObject, Qt, Signal
from PySide6.QtGui import QFont, QIcon

from desktop_queue.core import Job, QueueError, State
from desktop_queue.core.present import clock_time, error_text
from desktop_queue.core.search import SearchQuery, prompt_text
from desktop_queue.core.store.archive import ArchivedRow
from desktop_queue.ui.icons import icon, state_icon
from desktop_queue.ui.models.columns import (
    _DECORATION,
    _DISPLAY,
    _FONT,
    _HANDLED_ROLES,
    _ID,
    _JOB,
    _LAYOUT_SIGNATURE,
    _LOOK,
    _ROOT,
    _SEARCH,
    _SORT,
    _STATE,
    _TOOLTIP,
    QUEUE_COLUMNS,
    AnyIndex,
    CellLook,
    Column,
    JobDict,
    _runs,
    replayed_as_text,
)

log = logging.getLogger(__name__)


class HistorySource(Protocol):
    """Where a table finds archived jobs (:class:`Queue` is one)."""

    def history(
        self,
        *,
        state: str | None = None,
        kind: str | None = None,
        profile: str | None = None,
        error_class: str | None = None,
        text: str | None = None,
        before_seq: int | None = None,
        limit: int = 200,
        resolved: bool | None = None,
        signature: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
    ) -> list[ArchivedRow]: ...

    def get(self, job_id: str) -> Job: ...


@dataclass(frozen=True)
class ArchiveFilter:
    """What the archived rows of a table are found by (the archive's index does the work).

    Attributes:
        state: the state (None: any).
        query: kind, profile, date range and free text (searched in title and prompt).
        resolved: only resolved dead letters (True), only the others (False), any (None).
        signature: one error signature (a dead-letter group), or None.
    """

    state: str | None = None
    query: SearchQuery = SearchQuery()
    resolved: bool | None = None
    signature: str | None = None


#: archived rows loaded per ``fetchMore`` (one index query, a few segment blocks)
ARCHIVE_PAGE = 200

_FINISHED = frozenset({State.SUCCEEDED, State.DEAD, State.CANCELLED})


def archived_job(row: ArchivedRow, history: HistorySource | None = None) -> JobDict | None:
    """The job dict of an archived row, as the hot rows have it (``"archived": True``).

    With ``history`` the whole job is read (one segment block serves 32 jobs), so that
    attempts and the last error show as for hot jobs; without it, or if it cannot be
    read, what the index knows. None if the job is no longer in the row's state (it was
    retried meanwhile: the refresh brings it as a hot job).
    """
    job: JobDict | None = None
    if history is not None:
        try:
            found = history.get(row.id)
        except QueueError as exc:
            log.warning("could not read archived job %s: %s", row.id, exc)
        else:
            if found.state != row.state:
                return None
            job = found.to_json(with_events=False, with_input=False)
    if job is None:
        job = {
            "id": row.id,
            "state": row.state,
            "kind": row.kind,
            "title": row.title,
            "created_at": row.created_at,
            "finished_at": row.finished_at,
            "updated_at": row.updated_at,
        }
        if row.error_class:
            job["last_error"] = {"class": row.error_class}
        if row.resolved_at is not None:
            job["resolved_at"] = row.resolved_at
    job["seq"] = row.seq
    job["archived"] = True
    return job


def _maybe_archived(job: Mapping[str, Any]) -> bool:
    """Whether the archive may hold an older copy of this hot job (``history`` leaves those out)."""
    return job.get("state") in _FINISHED or (job.get("run") or 1) > 1 or bool(job.get("replayed_as"))


class _Row:
    """One table row: the job dict, its sort key and its formatted cells (cached).

    ``looks`` holds the :class:`CellLook` of every column, computed on first paint (the
    text of a clock-dependent column is left empty there: it is formatted on every
    call); a changed job gets a new ``_Row``, so nothing stale stays. ``search`` is what
    the text filter looks in, computed on first filter.
    """

    __slots__ = ("job", "id", "seq", "key", "looks", "search")

    def __init__(self, job: JobDict) -> None:
        self.job = job
        self.id: str = job["id"]
        self.seq = job.get("seq", 0)
        self.key: Any = None
        self.looks: list[CellLook] | None = None
        self.search: str | None = None


class JobTableModel(QAbstractTableModel):
    """Jobs as table rows, kept in sorted order, updated incrementally from job dicts.

    The model sorts itself (:meth:`sort`): one ``list.sort`` over keys computed once
    per row, then ``layoutChanged`` with the persistent indexes (the selection) moved
    along. The proxy on top only filters. Changes keep the order: a new job is inserted
    where it sorts, a changed job whose key moved it is moved (``beginMoveRows`` for
    one, one coalesced re-sort for more). Ties sort by submission order.

    Archived jobs (with ``history``) follow the hot rows, newest first whatever the sort
    column (the archive is read in that order, a page at a time: :meth:`fetchMore`).
    A job is in one of the two parts, never both: a page leaves out the jobs the hot
    part holds, and a job that becomes hot again (retried) leaves the archived part.

    Args:
        columns: what the table shows.
        clock: wall time (tests may pin it).
        parent: the Qt parent.
        history: where archived jobs are found (None: hot jobs only).
        page_size: archived rows per :meth:`fetchMore`.

    Signals:
        archive_error(str): the archive could not be read (no more rows are fetched
            until the filter changes or the model is reset).
        archive_fetched(): a page of archived rows was asked for (``canFetchMore`` may
            have changed, even if no row was added).
    """

    #: the state every archived row of this model is in (None: any, as the filter says)
    archive_state: str | None = None

    archive_error = Signal(str)
    archive_fetched = Signal()

    def __init__(
        self,
        columns: tuple[Column, ...] = QUEUE_COLUMNS,
        clock: Callable[[], float] = time.time,
        parent: QObject | None = None,
        *,
        history: HistorySource | None = None,
        page_size: int = ARCHIVE_PAGE,
    ) -> None:
        super().__init__(parent)
        self.columns = columns
        self._column_count = len(columns)
        self._clock = clock
        self._rows: list[_Row] = []
        self._row_of: dict[str, int] = {}
        self._now = clock()
        self._live_columns = [i for i, c in enumerate(columns) if c.live]
        self._live = frozenset(self._live_columns)
        self._static = [i for i, c in enumerate(columns) if not c.live]
        self._sort_column = -1
        self._sort_order = Qt.SortOrder.AscendingOrder
        self._state_col = next((i for i, c in enumerate(columns) if c.key == "state"), -1)
        self._title_col = next((i for i, c in enumerate(columns) if c.key == "title"), -1)
        self._bold = QFont()
        self._bold.setBold(True)
        self._link_icon: QIcon | None = None
        # the archived part: rows loaded so far, the seq to continue before, the filter
        self._history = history
        self.page_size = max(1, page_size)
        self._arch: list[_Row] = []
        self._arch_of: dict[str, int] = {}
        self._arch_cursor: int | None = None
        self._arch_done = history is None
        self._arch_text: str | None = None
        self._arch_filter_state: str | None = None
        self._arch_filter = ArchiveFilter()
        self._fetching = False
        #: the ids of the jobs the views hold on to (their selection), which :meth:`release`
        #: keeps; set by the pane that shows this model
        self.pinned: Callable[[], Iterable[str]] | None = None
        #: whether someone reads the table away from its top (scrolled down), where
        #: :meth:`release` changes nothing while the window is in sight; set by the pane
        self.in_use: Callable[[], bool] | None = None

    # ----------------------------------------------------------------- what belongs here

    def include(self, job: Mapping[str, Any]) -> bool:
        """Whether this model shows ``job`` (all jobs here; subclasses narrow it)."""
        return True

    # ----------------------------------------------------------------- Qt interface

    def rowCount(self, parent: AnyIndex = _ROOT) -> int:  # noqa: N802 - Qt API
        return 0 if parent.isValid() else len(self._rows) + len(self._arch)

    def columnCount(self, parent: AnyIndex = _ROOT) -> int:  # noqa: N802 - Qt API
        return 0 if parent.isValid() else len(self.columns)

    def index(self, row: int, column: int, parent: AnyIndex = _ROOT) -> QModelIndex:
        # Qt's own index() asks rowCount() and columnCount(): two calls into Python for
        # every cell the proxy maps while painting. One call does the same checks.
        if 0 <= row < len(self._rows) + len(self._arch) and 0 <= column < self._column_count and not parent.isValid():
            return self.createIndex(row, column)
        return QModelIndex()

    def headerData(  # noqa: N802 - Qt API
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if orientation == Qt.Orientation.Horizontal and 0 <= section < len(self.columns):
            if role == Qt.ItemDataRole.DisplayRole:
                return self.columns[section].header
            if role == Qt.ItemDataRole.ToolTipRole and self.columns[section].key == "error":
                return "Sorts by error signature: alike failures end up together"
        return None

    def _looks(self, entry: _Row) -> list[CellLook]:
        """The row's cached cell looks (computed on first use; live columns' text left empty)."""
        looks = entry.looks
        if looks is None:
            job, now, live = entry.job, self._now, self._live
            state = str(job.get("state"))
            looks = entry.looks = [
                CellLook("" if i in live else c.display(job, now)) for i, c in enumerate(self.columns)
            ]
            if self._state_col >= 0:
                state_look = state_icon(state)
                looks[self._state_col] = CellLook(
                    looks[self._state_col].text, None if state_look.isNull() else state_look, state == State.DEAD
                )
            if self._title_col >= 0 and job.get("replayed_as"):
                if self._link_icon is None:
                    self._link_icon = icon("event-link")
                if not self._link_icon.isNull():
                    looks[self._title_col] = CellLook(looks[self._title_col].text, self._link_icon)
            if self._title_col >= 0 and job.get("resolved_at") is not None:
                # a resolved dead letter: a check mark, so it stands apart among the waiting ones
                looks[self._title_col] = CellLook(looks[self._title_col].text, state_icon(State.SUCCEEDED))
        return looks

    def _look(self, entry: _Row, col: int) -> CellLook:
        """One cell's look: cached per row, except the text of the clock-dependent columns.

        Live cells ("retrying in 12 s", run time, also what flow control says right now)
        are formatted on every call, which the views make for visible rows only.
        """
        look = self._looks(entry)[col]
        if col in self._live:
            return CellLook(self.columns[col].display(entry.job, self._now), look.icon, look.bold)
        return look

    def _cell(self, entry: _Row, col: int) -> str:
        """The display text of one cell (see :meth:`_look`)."""
        if col in self._live:
            return self.columns[col].display(entry.job, self._now)
        return self._looks(entry)[col].text

    def cell_look(self, row: int, col: int) -> CellLook | None:
        """What the cell at ``row``, ``col`` shows (``JobRole.LOOK``); None outside the table."""
        if 0 <= row < len(self._rows) + len(self._arch) and 0 <= col < self._column_count:
            return self._look(self._entry(row), col)
        return None

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        # the paint path asks ~7 roles per cell, most of them unhandled: leave early
        role = int(role)
        if role not in _HANDLED_ROLES:
            return None
        return self.cell_data(index.row(), index.column(), role)

    def cell_data(self, row: int, col: int, role: int) -> Any:
        """:meth:`data` by row and column (the filter proxy calls it without an index)."""
        if row < 0 or row >= len(self._rows) + len(self._arch) or col < 0 or col >= self._column_count:
            return None
        entry = self._entry(row)
        if role == _DISPLAY:
            return self._cell(entry, col)
        if role == _LOOK:
            return self._look(entry, col)
        job = entry.job
        if role == _DECORATION:
            return self._looks(entry)[col].icon
        if role == _FONT:
            return self._bold if self._looks(entry)[col].bold else None
        if role == _TOOLTIP:
            key = self.columns[col].key
            if key in ("error", "class") and job.get("last_error"):
                return error_text(job)
            if key == "title":
                replayed = replayed_as_text(job)
                archived = "\narchived (shown after the jobs in memory, newest first)" if job.get("archived") else ""
                resolved = (
                    f"\nresolved {clock_time(job['resolved_at'], self._now)} (closed without a retry)"
                    if job.get("resolved_at") is not None
                    else ""
                )
                return (
                    f"{job.get('title')}\njob {entry.id}"
                    + (f"\nreplayed as {replayed}" if replayed else "")
                    + resolved
                    + archived
                )
            if key == "state" and job.get("last_error"):
                return f"{job.get('state')}: {error_text(job)}"
            tip = self.columns[col].tip
            if tip is not None:
                return tip(job)
            return self._cell(entry, col) or None
        if role == _JOB:
            return job
        if role == _ID:
            return entry.id
        if role == _STATE:
            return job.get("state")
        if role == _SEARCH:
            return self._search(entry)
        if role == _SORT:  # the key this column sorts by (the model sorts itself; kept for callers)
            return self._column_key(col, job, self._now)
        return None

    def _search(self, entry: _Row) -> str:
        if entry.search is None:
            job = entry.job
            # a queued row carries its input: its prompt is searched here, once per row; the
            # finished rows' prompts through Queue.prompt_matches
            prompt = prompt_text(job["input"]) if job.get("input") is not None else ""
            entry.search = " ".join(
                str(x)
                for x in (entry.id, job.get("title"), job.get("kind"), job.get("state"), error_text(job), prompt)
                if x
            ).casefold()
        return entry.search

    # ----------------------------------------------------------------- sorting

    def _column_key(self, col: int, job: Mapping[str, Any], now: float) -> Any:
        column = self.columns[col]
        # text sorts as people expect: "apple" next to "Apple", not after "Zebra"
        return column.sort(job, now) if column.sort is not None else column.display(job, now).casefold()

    def _key(self, entry: _Row, now: float) -> tuple[Any, int]:
        """The row's sort key for the current column; ties go by submission order."""
        if self._sort_column < 0:
            return (0, entry.seq)
        return (self._column_key(self._sort_column, entry.job, now), entry.seq)

    @property
    def sort_column(self) -> int:
        """The column the rows are sorted by (-1: submission order)."""
        return self._sort_column

    @property
    def sort_order(self) -> Qt.SortOrder:
        return self._sort_order

    def _order_rows(self, rows: list[_Row]) -> None:
        """Sorts ``rows`` in place: keys computed once per row, one ``list.sort``."""
        now = self._now
        for entry in rows:
            entry.key = self._key(entry, now)
        rows.sort(key=lambda e: e.key, reverse=self._sort_order == Qt.SortOrder.DescendingOrder)

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Sorts the rows by ``column`` (-1: submission order); the selection survives."""
        column = column if 0 <= column < len(self.columns) else -1
        if column == self._sort_column and order == self._sort_order:
            return
        self._sort_column, self._sort_order = column, order
        self._relayout(rekey=True)

    def _relayout(self, *, rekey: bool) -> None:
        """Puts every row in sorted order with ``layoutChanged``, moving persistent indexes."""
        hint = QAbstractItemModel.LayoutChangeHint.VerticalSortHint
        self.layoutAboutToBeChanged[_LAYOUT_SIGNATURE].emit([], hint)  # type: ignore[index]
        persistent = self.persistentIndexList()
        # archived rows keep their places (after the hot rows, whose number does not change)
        where = [(self._entry(p.row()).id, p.column()) for p in persistent]
        if rekey:
            self._order_rows(self._rows)
        else:
            self._rows.sort(key=lambda e: e.key, reverse=self._sort_order == Qt.SortOrder.DescendingOrder)
        self._row_of = {e.id: i for i, e in enumerate(self._rows)}
        self.changePersistentIndexList(persistent, [self.index(self._row_number(i), c) for i, c in where])
        self.layoutChanged[_LAYOUT_SIGNATURE].emit([], hint)  # type: ignore[index]

    def _position(self, key: Any) -> int:
        """Where a row with ``key`` goes among the rows (binary search, either order)."""
        rows = self._rows
        lo, hi = 0, len(rows)
        if self._sort_order == Qt.SortOrder.DescendingOrder:
            while lo < hi:
                mid = (lo + hi) // 2
                if key < rows[mid].key:
                    lo = mid + 1
                else:
                    hi = mid
        else:
            while lo < hi:
                mid = (lo + hi) // 2
                if rows[mid].key < key:
                    lo = mid + 1
                else:
                    hi = mid
        return lo

    def _in_place(self, row: int) -> bool:
        """Whether row ``row`` still sorts between its neighbours."""
        rows, key = self._rows, self._rows[row].key
        before = rows[row - 1].key if row > 0 else None
        after = rows[row + 1].key if row + 1 < len(rows) else None
        if self._sort_order == Qt.SortOrder.DescendingOrder:
            before, after = after, before
        return (before is None or not key < before) and (after is None or not after < key)

    # ----------------------------------------------------------------- access

    def _entry(self, row: int) -> _Row:
        """The row at ``row``: a hot one, or an archived one after them."""
        hot = self._rows
        return hot[row] if row < len(hot) else self._arch[row - len(hot)]

    def _row_number(self, job_id: str) -> int:
        row = self._row_of.get(job_id)
        return row if row is not None else len(self._rows) + self._arch_of[job_id]

    def job_at(self, row: int) -> JobDict:
        return self._entry(row).job

    def row_of(self, job_id: str) -> int | None:
        row = self._row_of.get(job_id)
        if row is not None:
            return row
        offset = self._arch_of.get(job_id)
        return None if offset is None else len(self._rows) + offset

    def jobs(self) -> list[JobDict]:
        """The hot jobs (those in the store's memory); archived rows are not among them."""
        return [e.job for e in self._rows]

    def hot_count(self) -> int:
        """How many rows are hot jobs (the archived rows come after them)."""
        return len(self._rows)

    def archived_count(self) -> int:
        """How many archived rows are loaded."""
        return len(self._arch)

    def search_text(self, row: int) -> str:
        """What the text filter searches in row ``row`` (casefolded, cached)."""
        return self._search(self._entry(row))

    # ----------------------------------------------------------------- the archive

    def canFetchMore(self, parent: AnyIndex = _ROOT) -> bool:  # noqa: N802 - Qt API
        return not parent.isValid() and not self._arch_done

    def fetchMore(self, parent: AnyIndex = _ROOT) -> None:  # noqa: N802 - Qt API
        if not parent.isValid():
            self.fetch_archived()

    @property
    def archive_filter(self) -> tuple[str | None, str | None]:
        """``(state, text)`` the archived rows are found by."""
        return self.archive_state or self._arch_filter_state, self._arch_text

    def set_archive_filter(
        self,
        state: str | None,
        text: str | None,
        *,
        query: SearchQuery | None = None,
        resolved: bool | None = None,
        signature: str | None = None,
    ) -> None:
        """Finds the archived rows again with the filter's state, text (title or prompt),
        and the rest of a search query (kind, profile, dates), resolution and error signature.

        The archive's index does the filtering (SQL): its loaded rows are dropped and
        the first page of the new matches loaded; the view fetches more as it scrolls.
        """
        text = text or None
        wanted = ArchiveFilter(state, query or SearchQuery(text=text), resolved, signature)
        if (state, text) == (self._arch_filter_state, self._arch_text) and wanted == self._arch_filter:
            return
        self._arch_filter_state, self._arch_text = state, text
        self._arch_filter = wanted
        self._drop_archived()
        self.fetch_archived()

    def prompt_matches(self, text: str) -> set[str]:
        """The hot jobs whose prompt holds ``text`` (the rows do not carry finished jobs' inputs)."""
        ask = getattr(self._history, "prompt_matches", None)
        if not text or not callable(ask):
            return set()
        try:
            found = ask(text)
        except QueueError as exc:
            log.warning("could not search the prompts: %s", exc)
            return set()
        return set(found)

    def _drop_archived(self) -> None:
        if self._arch:
            first = len(self._rows)
            self.beginRemoveRows(_ROOT, first, first + len(self._arch) - 1)
            self._arch, self._arch_of = [], {}
            self.endRemoveRows()
        self._arch_cursor = None
        self._arch_done = self._history is None

    def _history_page(self, before: int | None, limit: int) -> tuple[list[ArchivedRow], bool]:
        """Up to ``limit`` archived rows before seq ``before`` matching the filter, and
        whether they were the last ones.

        ``history`` leaves out the jobs the store's hot set holds, so a page may come
        back short while more follow: asking for as many more rows as there are hot
        jobs the archive may hold, a page shorter than ``limit`` is the end.
        """
        assert self._history is not None
        state, text = self.archive_filter
        if state in (State.QUEUED, State.RUNNING):
            return [], True  # the archive holds finished jobs only
        extra = sum(1 for e in self._rows if _maybe_archived(e.job)) + 16
        f = self._arch_filter
        q = f.query
        if q.state is not None and state is not None and q.state != state:
            return [], True  # "state:queued" typed in the dead letters: nothing archived matches
        if q.state in (State.QUEUED, State.RUNNING):
            return [], True
        narrowed: dict[str, Any] = {}
        for name, value in (
            ("kind", q.kind),
            ("profile", q.profile),
            ("resolved", f.resolved),
            ("signature", f.signature),
            ("created_after", q.after),
            ("created_before", q.before),
        ):
            if value is not None:
                narrowed[name] = value  # (only what is set: a plain history source takes the rest)
        rows = self._history.history(
            state=state or q.state, text=text, before_seq=before, limit=limit + extra, **narrowed
        )
        return rows, len(rows) < limit

    def fetch_archived(self, count: int | None = None) -> int:
        """Loads the next page of archived rows (``count`` of them at most); how many were added."""
        if self._arch_done or self._history is None or self._fetching:
            return 0  # never from within a fetch's own insert (a view or tester asking again)
        self._fetching = True
        try:
            return self._fetch_archived(count or self.page_size)
        finally:
            self._fetching = False

    def _fetch_archived(self, want: int) -> int:
        added: list[_Row] = []
        try:
            while not added and not self._arch_done:
                rows, last = self._history_page(self._arch_cursor, want)
                taken = rows[:want]
                if taken:
                    self._arch_cursor = taken[-1].seq
                self._arch_done = last and len(taken) == len(rows)
                for row in taken:
                    if row.id in self._row_of or row.id in self._arch_of:
                        continue  # a hot row already (the store let go of it since the last reload)
                    job = archived_job(row, self._history)
                    if job is not None and self.include(job):
                        added.append(_Row(job))
                if not taken:
                    self._arch_done = True
        except QueueError as exc:
            self._arch_done = True
            log.warning("could not read the archive: %s", exc)
            self.archive_error.emit(str(exc))
        if added:
            first = len(self._rows) + len(self._arch)
            self.beginInsertRows(_ROOT, first, first + len(added) - 1)
            base = len(self._arch)
            self._arch.extend(added)
            for i, entry in enumerate(added):
                self._arch_of[entry.id] = base + i
            self.endInsertRows()
        self.archive_fetched.emit()
        return len(added)

    def archived_ids(self) -> list[str]:
        """The ids of every archived job the filter finds: those loaded, then the rest
        (read from the index only, in pages; for "Retry all matching")."""
        out = [e.id for e in self._arch]
        if self._history is None or self._arch_done:
            return out
        seen = set(out) | set(self._row_of)
        before = self._arch_cursor
        try:
            while True:
                rows, last = self._history_page(before, 5000)
                for row in rows:
                    if row.id not in seen:
                        seen.add(row.id)
                        out.append(row.id)
                if last or not rows:
                    break
                before = rows[-1].seq
        except QueueError as exc:
            self.archive_error.emit(str(exc))
        return out

    def release(
        self, still_hot: Callable[[list[str]], set[str]], *, at_least: int = 1, out_of_sight: bool = False
    ) -> int:
        """Lets go of the rows of finished jobs that the store's hot set let go of; how many.

        Every job a refresh brings stays a row of the hot part: in a window open for
        weeks, that is every job run meanwhile, long after the store moved it to its
        archive. Such rows are let go of here (``still_hot`` answers which of the ids
        the store still holds) and found again in the archived part, a page at a time,
        as the view scrolls there. Rows the views hold on to (:attr:`pinned`) stay.

        While the window is in sight, nothing is let go of under someone reading the
        table (:attr:`in_use`, or archived rows loaded), nor fewer than ``at_least`` rows
        at once, so that a table in front changes rarely and never under the reader's
        eyes. ``out_of_sight``: the window is hidden; the archived rows go too.
        """
        if self._history is None:
            return 0
        if not out_of_sight and (self._arch or self._in_use()):
            return 0
        finished = [e.id for e in self._rows if e.job.get("state") in _FINISHED]
        if len(finished) < at_least:
            return 0
        hot = still_hot(finished)
        try:
            held = set(self.pinned()) if self.pinned is not None else set()
        except RuntimeError:  # the view is gone (the window is closing)
            held = set()
        gone = sorted(self._row_of[i] for i in finished if i not in hot and i not in held)
        if len(gone) < at_least:
            return 0
        for first, last in reversed(_runs(gone)):
            self.beginRemoveRows(_ROOT, first, last)
            del self._rows[first : last + 1]
            self.endRemoveRows()
        self._row_of = {e.id: i for i, e in enumerate(self._rows)}
        # the archived part starts again from the newest, where the rows let go of are
        self._drop_archived()
        self.archive_fetched.emit()  # (canFetchMore may have changed)
        return len(gone)

    def _in_use(self) -> bool:
        try:
            return self.in_use is not None and self.in_use()
        except RuntimeError:  # the view is gone (the window is closing)
            return False

    def reveal(self, job_id: str, limit: int = 20_000) -> int | None:
        """Loads archived pages until ``job_id`` is among the rows (at most ``limit`` rows); its row."""
        while self.row_of(job_id) is None and not self._arch_done and len(self._arch) < limit:
            if not self.fetch_archived(1000):
                break
        return self.row_of(job_id)

    # ----------------------------------------------------------------- updates

    def reset_jobs(self, jobs: Iterable[Mapping[str, Any]]) -> None:
        """Replaces every row (start-up, or after the store was reloaded from its files)."""
        self.beginResetModel()
        self._now = self._clock()
        rows = [_Row(dict(j)) for j in jobs if self.include(j)]
        self._order_rows(rows)
        self._rows = rows
        self._row_of = {e.id: i for i, e in enumerate(rows)}
        # the archived part is found again as the view scrolls (the store may have let go of jobs)
        self._arch, self._arch_of = [], {}
        self._arch_cursor = None
        self._arch_done = self._history is None
        self.endResetModel()

    def apply(self, jobs: Iterable[Mapping[str, Any]]) -> None:
        """Applies changed jobs: ``dataChanged`` for known rows, ranged inserts and removals.

        Rows stay sorted: new rows are inserted where they sort; changed rows whose sort
        key moved them are moved (one row) or re-sorted in one ``layoutChanged`` (more).
        """
        jobs = list(jobs)
        self._unarchive(job["id"] for job in jobs)
        changed: list[str] = []
        rekeyed: list[str] = []
        removed: list[int] = []
        added: list[_Row] = []
        now = self._now
        for job in jobs:
            row = self._row_of.get(job["id"])
            if row is None:
                if self.include(job):
                    added.append(_Row(dict(job)))
            elif self.include(job):
                entry = _Row(dict(job))
                entry.key = self._key(entry, now)
                if entry.key != self._rows[row].key:
                    rekeyed.append(entry.id)
                self._rows[row] = entry
                changed.append(entry.id)
            else:
                removed.append(row)
        if removed:
            for first, last in reversed(_runs(removed)):
                self.beginRemoveRows(_ROOT, first, last)
                del self._rows[first : last + 1]
                self.endRemoveRows()
            self._row_of = {e.id: i for i, e in enumerate(self._rows)}
        last_col = len(self.columns) - 1
        for first, last in _runs(self._row_of[i] for i in changed):
            self.dataChanged.emit(self.index(first, 0), self.index(last, last_col))
        misplaced = [row for row in (self._row_of[i] for i in rekeyed) if not self._in_place(row)]
        if len(rekeyed) == 1 and misplaced:
            self._move(misplaced[0])  # every other row kept its key: the rest is in order
        elif misplaced:
            self._relayout(rekey=False)
        if added:
            self._insert(added)

    def _unarchive(self, ids: Iterable[str]) -> None:
        """Takes jobs that are hot again (retried, replayed) out of the archived part."""
        if not self._arch_of:
            return
        gone = [self._arch_of[i] for i in ids if i in self._arch_of]
        if not gone:
            return
        base = len(self._rows)
        for first, last in reversed(_runs(gone)):
            self.beginRemoveRows(_ROOT, base + first, base + last)
            del self._arch[first : last + 1]
            self.endRemoveRows()
        self._arch_of = {e.id: i for i, e in enumerate(self._arch)}

    def _move(self, row: int) -> None:
        """Moves one row whose key changed to where it now sorts."""
        entry = self._rows.pop(row)
        target = self._position(entry.key)
        self._rows.insert(row, entry)
        # beginMoveRows wants the destination in the old numbering (after the moved row: +1)
        destination = target if target < row else target + 1
        if not self.beginMoveRows(_ROOT, row, row, _ROOT, destination):  # pragma: no cover - it is not in place
            return
        del self._rows[row]
        self._rows.insert(target, entry)
        first, last = min(row, target), max(row, target)
        for i in range(first, last + 1):
            self._row_of[self._rows[i].id] = i
        self.endMoveRows()

    def _insert(self, added: list[_Row]) -> None:
        """Inserts new rows where they sort, one ranged insert per place."""
        now = self._now
        descending = self._sort_order == Qt.SortOrder.DescendingOrder
        for entry in added:
            entry.key = self._key(entry, now)
        added.sort(key=lambda e: e.key, reverse=descending)
        groups: list[tuple[int, list[_Row]]] = []
        for entry in added:
            position = self._position(entry.key)
            if groups and groups[-1][0] == position:
                groups[-1][1].append(entry)
            else:
                groups.append((position, [entry]))
        for position, entries in reversed(groups):  # bottom first: the positions above stay valid
            self.beginInsertRows(_ROOT, position, position + len(entries) - 1)
            self._rows[position:position] = entries
            self.endInsertRows()
        # once for the batch (as after removals): per group it would be O(rows × groups)
        self._row_of = {e.id: i for i, e in enumerate(self._rows)}

    def tick(self) -> None:
        """Moves the clock on for the time-dependent cells ("retrying in 12 s", run time).

        No ``dataChanged`` is emitted for them: with 10,000 waiting jobs that would
        re-filter every row on every tick. The views repaint their visible rows instead
        (see :meth:`has_live_columns`), and only those rows' live cells are formatted
        again. Sorting by a live column uses its values at sort time.
        """
        self._now = self._clock()

    def has_live_columns(self) -> bool:
        """Whether some column's text depends on the clock (views repaint after each tick)."""
        return bool(self._live_columns)
