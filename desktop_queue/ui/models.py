"""Item models of the window: the queue, the dead letters, one job's timeline.

The table models hold the store's plain job dicts (:meth:`Queue.raw_jobs`, no events, no
input) so that 10,000 jobs load in a blink. :class:`RefreshCoordinator` owns the one
refresh timer: every tick it asks the queue what changed since the version it last saw
and hands only those jobs to the models, which emit ``dataChanged`` and ranged
``beginInsertRows``/``beginRemoveRows``; a model is reset only when the whole store was
reloaded.

The store keeps only its hot set in memory (queued, running, recently finished jobs);
older finished jobs are in its archive. A table shows the hot rows first, in the order
the user sorted them, then the archived rows, newest first, a page at a time as the view
scrolls down (``canFetchMore``/``fetchMore``), found through :meth:`Queue.history` with
the filters as its arguments: the archive is searched by its index, never loaded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol

from PySide6.QtCore import (
    QAbstractItemModel,
    QAbstractListModel,
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
    QTimer,
    Signal,
    Slot,
)
from PySide6.QtGui import QFont, QIcon

from desktop_queue.core import Job, Queue, QueueError, State
from desktop_queue.core.model import Event, EventType
from desktop_queue.core.present import (
    HoldReason,
    attempts_text,
    clock_time,
    describe_state,
    error_signature,
    error_text,
    run_time,
    seconds,
    wait_time,
)
from desktop_queue.core.search import SearchQuery, prompt_text
from desktop_queue.core.store.archive import ArchivedRow
from desktop_queue.ui.icons import icon, state_icon

log = logging.getLogger(__name__)

JobDict = dict[str, Any]
AnyIndex = QModelIndex | QPersistentModelIndex
_ROOT = QModelIndex()


class JobRole(IntEnum):
    """Data roles of the job models (``JobRole.JOB`` is the raw job dict)."""

    JOB = Qt.ItemDataRole.UserRole
    ID = Qt.ItemDataRole.UserRole + 1
    STATE = Qt.ItemDataRole.UserRole + 2
    SORT = Qt.ItemDataRole.UserRole + 3
    SEARCH = Qt.ItemDataRole.UserRole + 4
    LOOK = Qt.ItemDataRole.UserRole + 5


_DISPLAY = int(Qt.ItemDataRole.DisplayRole.value)
_DECORATION = int(Qt.ItemDataRole.DecorationRole.value)
_TOOLTIP = int(Qt.ItemDataRole.ToolTipRole.value)
_FONT = int(Qt.ItemDataRole.FontRole.value)
_JOB, _ID, _STATE, _SORT, _SEARCH, _LOOK = (
    int(r) for r in (JobRole.JOB, JobRole.ID, JobRole.STATE, JobRole.SORT, JobRole.SEARCH, JobRole.LOOK)
)


@dataclass(frozen=True, slots=True)
class CellLook:
    """Everything a painted cell shows, in one object (``JobRole.LOOK``).

    The queue views' delegate asks for this one role instead of Qt asking for display
    text, icon, font, alignment, colours... one role at a time, each a call into Python.

    Attributes:
        text: the display text.
        icon: the decoration (state icon, replay link), or None.
        bold: whether the text is bold (the state of a dead job).
    """

    text: str
    icon: QIcon | None = None
    bold: bool = False


@dataclass(frozen=True)
class Column:
    """One table column: a header, what it shows, how it sorts.

    Attributes:
        key: a stable name (tests and saved header state use positions, people see ``header``).
        header: the header text.
        display: job dict, now -> text.
        sort: job dict, now -> a sortable value (default: the display text).
        live: the text depends on the clock (repainted on every refresh tick).
    """

    key: str
    header: str
    display: Callable[[Mapping[str, Any], float], str]
    sort: Callable[[Mapping[str, Any], float], Any] | None = None
    live: bool = False


_STATE_ORDER = {"running": 0, "queued": 1, "dead": 2, "cancelled": 3, "succeeded": 4}


def _num(value: float | None) -> float:
    return -1.0 if value is None else value


def _state_text(job: Mapping[str, Any], _now: float) -> str:
    """``dead``, or ``dead (resolved)`` for a dead letter a person closed."""
    state = str(job.get("state", ""))
    return f"{state} (resolved)" if state == State.DEAD and job.get("resolved_at") is not None else state


def queue_columns(hold: HoldReason | None = None) -> tuple[Column, ...]:
    """The queue pane's columns; ``hold`` says why flow control keeps a due job waiting."""

    def next_run(job: Mapping[str, Any], now: float) -> str:
        return describe_state(job, now, hold)

    return (
        Column("state", "State", _state_text, lambda j, _n: _STATE_ORDER.get(str(j.get("state")), 9)),
        Column("title", "Title", lambda j, _n: j.get("title") or ""),
        Column("kind", "Kind", lambda j, _n: j.get("kind") or ""),
        Column("priority", "Priority", lambda j, _n: j.get("priority") or ""),
        Column(
            "attempts",
            "Attempts",
            lambda j, _n: attempts_text(j) if "attempts" in j else "",
            lambda j, _n: j.get("attempts", 0) * 1000 + j.get("max_attempts", 0),
        ),
        Column(
            "next",
            "Next run",
            next_run,
            lambda j, n: float(j.get("run_after") or 0.0) if j.get("state") == State.QUEUED else 1e15,
            live=True,
        ),
        Column("created", "Created", lambda j, n: clock_time(j.get("created_at"), n), lambda j, _n: j.get("seq", 0)),
        Column(
            "wait",
            "Wait",
            lambda j, n: seconds(wait_time(j, n)) if wait_time(j, n) is not None else "",
            lambda j, n: _num(wait_time(j, n)),
            live=True,
        ),
        Column(
            "run",
            "Run time",
            lambda j, n: seconds(run_time(j, n)) if run_time(j, n) is not None else "",
            lambda j, n: _num(run_time(j, n)),
            live=True,
        ),
        Column("error", "Last error", lambda j, _n: error_text(j), lambda j, _n: error_signature(j)),
    )


QUEUE_COLUMNS: tuple[Column, ...] = queue_columns()


def replayed_as_text(job: Mapping[str, Any]) -> str:
    """``job 1a2b3c`` (or ``jobs a, b``) for a job that was replayed, else ""."""
    ids = [str(i) for i in job.get("replayed_as") or ()]
    if not ids:
        return ""
    return ("job " if len(ids) == 1 else "jobs ") + ", ".join(ids)


DEAD_COLUMNS: tuple[Column, ...] = (
    Column("title", "Title", lambda j, _n: j.get("title") or ""),
    Column("kind", "Kind", lambda j, _n: j.get("kind") or ""),
    Column(
        "class",
        "Error class",
        lambda j, _n: str((j.get("last_error") or {}).get("class", "")),
        lambda j, _n: error_signature(j),
    ),
    Column("error", "Last error", lambda j, _n: error_text(j), lambda j, _n: error_signature(j)),
    Column(
        "attempts",
        "Attempts",
        lambda j, _n: f"{j.get('attempts', 0)} ({j.get('total_attempts', 0)} in all)" if "attempts" in j else "",
        lambda j, _n: j.get("total_attempts", 0),
    ),
    Column(
        "died", "Died at", lambda j, n: clock_time(j.get("finished_at"), n), lambda j, _n: _num(j.get("finished_at"))
    ),
    # a dead job stays dead when it is replayed: say so, or it looks like nobody dealt with it
    Column("replayed", "Replayed as", lambda j, _n: ", ".join(str(i) for i in j.get("replayed_as") or ())),
    # shown with "Show resolved": when a person closed it without a retry
    Column(
        "resolved",
        "Resolved",
        lambda j, n: clock_time(j.get("resolved_at"), n) if j.get("resolved_at") is not None else "",
        lambda j, _n: _num(j.get("resolved_at")),
    ),
)


def _runs(rows: Iterable[int]) -> list[tuple[int, int]]:
    """Contiguous ``(first, last)`` runs of sorted row numbers."""
    out: list[tuple[int, int]] = []
    for row in sorted(rows):
        if out and row == out[-1][1] + 1:
            out[-1] = (out[-1][0], row)
        else:
            out.append((row, row))
    return out


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


#: what every cell of a job table allows (QAbstractTableModel's default, spelled out for the proxy)
_CELL_FLAGS = Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemNeverHasChildren

#: the (parents, hint) overload of layoutAboutToBeChanged/layoutChanged (PySide6 splits C++ defaults)
_LAYOUT_SIGNATURE = ("QList<QPersistentModelIndex>", "QAbstractItemModel::LayoutChangeHint")

_HANDLED_ROLES = frozenset({_DISPLAY, _DECORATION, _TOOLTIP, _FONT, _JOB, _ID, _STATE, _SORT, _SEARCH, _LOOK})


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


class QueueModel(JobTableModel):
    """Every job of the queue.

    Args:
        clock: wall time (tests may pin it).
        hold: why flow control keeps a due job waiting (``FlowControl.waiting_reason``).
        parent: the Qt parent.
        history: where archived jobs are found (None: hot jobs only).
        page_size: archived rows per :meth:`fetchMore`.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        parent: QObject | None = None,
        *,
        hold: HoldReason | None = None,
        history: HistorySource | None = None,
        page_size: int = ARCHIVE_PAGE,
    ) -> None:
        super().__init__(
            queue_columns(hold) if hold is not None else QUEUE_COLUMNS,
            clock,
            parent,
            history=history,
            page_size=page_size,
        )


class DeadLetterModel(JobTableModel):
    """Only the dead jobs, archived ones included: a job leaves this model when it is retried."""

    archive_state = str(State.DEAD)

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        parent: QObject | None = None,
        *,
        history: HistorySource | None = None,
        page_size: int = ARCHIVE_PAGE,
    ) -> None:
        super().__init__(DEAD_COLUMNS, clock, parent, history=history, page_size=page_size)

    def include(self, job: Mapping[str, Any]) -> bool:
        return job.get("state") == State.DEAD


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


# --------------------------------------------------------------------------- dead-letter groups


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
            return f"{group.count:,} dead letters failed like this, e.g.\n{group.example}"
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


# --------------------------------------------------------------------------- timeline


class TimelineRole(IntEnum):
    """Data roles of :class:`TimelineModel`."""

    EVENT = Qt.ItemDataRole.UserRole
    CATEGORY = Qt.ItemDataRole.UserRole + 1
    LINK = Qt.ItemDataRole.UserRole + 2
    HEADLINE = Qt.ItemDataRole.UserRole + 3
    DETAIL = Qt.ItemDataRole.UserRole + 4


#: event type -> (category, label, icon)
EVENT_LOOK: dict[str, tuple[str, str, str]] = {
    EventType.SUBMITTED: ("normal", "Submitted", "event-submitted"),
    EventType.LEASED: ("normal", "Leased", "event-leased"),
    EventType.PROVIDER_JOB: ("normal", "Provider job started", "event-info"),
    EventType.SUCCEEDED: ("success", "Succeeded", "state-succeeded"),
    EventType.RETRY_SCHEDULED: ("retry", "Retry scheduled", "event-retry"),
    EventType.THROTTLED: ("throttle", "Throttled: waiting for the rate limit", "event-throttled"),
    EventType.DEAD_LETTERED: ("failure", "Dead-lettered", "state-dead"),
    EventType.LEASE_EXPIRED: ("expiry", "Lease expired", "event-lease-expired"),
    EventType.CANCELLED: ("cancel", "Cancelled", "state-cancelled"),
    EventType.RETRIED: ("retry", "Retried by hand (new run)", "event-retry"),
    EventType.REPLAYED_AS: ("link", "Replayed as a new job", "event-link"),
    EventType.RECONCILED: ("reconcile", "Reconciled after a crash", "event-reconciled"),
    EventType.STALE_RESULT: ("expiry", "Late result rejected (stale lease)", "event-stale"),
    EventType.RELEASED: ("normal", "Released (attempt not counted)", "event-info"),
    EventType.RESUMED: ("normal", "Lease renewed after a suspension", "event-info"),
    EventType.RESOLVED: ("success", "Resolved by hand (closed without a retry)", "state-succeeded"),
}

#: detail keys shown in the headline rather than in the detail line
_HIDDEN_DETAIL = frozenset({"replayed_as", "replay_of"})

#: events a person caused outside any attempt: the attempt/epoch they carry is the job's
#: previous one ("Retried by hand · attempt 1 · epoch 1" read as if attempt 1 were retried)
_NO_ATTEMPT = frozenset({EventType.SUBMITTED, EventType.RETRIED, EventType.REPLAYED_AS})


def event_link(event: Event) -> str | None:
    """The job id an event links to (a replay's original, or the replay), if any."""
    target = event.detail.get("replayed_as") or event.detail.get("replay_of")
    return str(target) if target else None


def event_headline(event: Event, now: float | None = None) -> str:
    """``12:03:04  Leased  · attempt 1 · epoch 3``."""
    _cat, label, _icon = EVENT_LOOK.get(event.type, ("normal", event.type.replace("_", " ").capitalize(), "event-info"))
    if event.type == EventType.SUBMITTED and event.detail.get("replay_of"):
        label = f"Submitted as a replay of {event.detail['replay_of']}"
    elif event.type == EventType.REPLAYED_AS:
        label = f"Replayed as job {event.detail.get('replayed_as')}"
    parts = [clock_time(event.at, now), label]
    if (event.attempt or event.epoch) and event.type not in _NO_ATTEMPT:
        parts.append(f"attempt {event.attempt} · epoch {event.epoch}")
    return "  ·  ".join(parts)


def event_detail(event: Event) -> str:
    """``by system on host:42 · lease_s 30 · error …``."""
    who = f"by {event.actor}" + (f" on {event.worker}" if event.worker else "")
    extra = []
    for key, value in event.detail.items():
        if key in _HIDDEN_DETAIL:
            continue
        if key in ("delay_s", "retry_after_s", "lease_s") and isinstance(value, (int, float)):
            # the unit moves from the key to the value: "delay: 0.9 s", not "delay s: 0.9 s"
            key, value = key[: -len("_s")], seconds(float(value))
        elif key in ("run_after", "expired_at") and isinstance(value, (int, float)):
            value = clock_time(float(value))
        elif isinstance(value, bool):
            value = "yes" if value else "no"
        extra.append(f"{key.replace('_', ' ')}: {value}")
    return " · ".join([who, *extra])


class TimelineModel(QAbstractListModel):
    """The events of one job, oldest first; new events are appended with ranged inserts.

    Signals:
        job_changed(str): the model now shows another job (id, or "" for none).
    """

    job_changed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._job: Job | None = None
        self._events: list[Event] = []

    @property
    def job(self) -> Job | None:
        return self._job

    def rowCount(self, parent: AnyIndex = _ROOT) -> int:  # noqa: N802 - Qt API
        return 0 if parent.isValid() else len(self._events)

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._events):
            return None
        event = self._events[index.row()]
        category, _label, icon_name = EVENT_LOOK.get(event.type, ("normal", event.type, "event-info"))
        if event.type == EventType.SUBMITTED and event.detail.get("replay_of"):
            category, icon_name = "link", "event-link"
        if role == Qt.ItemDataRole.DisplayRole:
            return f"{event_headline(event)}\n{event_detail(event)}"
        if role == TimelineRole.HEADLINE:
            return event_headline(event)
        if role == TimelineRole.DETAIL:
            return event_detail(event)
        if role == Qt.ItemDataRole.DecorationRole:
            return icon(icon_name)
        if role == Qt.ItemDataRole.ToolTipRole:
            link = event_link(event)
            return f"Click to open job {link}" if link else event_detail(event)
        if role == TimelineRole.EVENT:
            return event
        if role == TimelineRole.CATEGORY:
            return category
        if role == TimelineRole.LINK:
            return event_link(event)
        return None

    def show_job(self, job: Job | None) -> None:
        """Shows another job's timeline (a reset: the rows are a different list)."""
        self.beginResetModel()
        self._job = job
        self._events = list(job.events) if job is not None else []
        self.endResetModel()
        self.job_changed.emit(job.id if job is not None else "")

    def update_job(self, job: Job) -> None:
        """The same job changed: appends its new events (timelines only grow)."""
        if self._job is None or job.id != self._job.id or len(job.events) < len(self._events):
            self.show_job(job)
            return
        self._job = job
        new = list(job.events[len(self._events) :])
        if new:
            start = len(self._events)
            self.beginInsertRows(_ROOT, start, start + len(new) - 1)
            self._events.extend(new)
            self.endInsertRows()

    def as_text(self) -> str:
        """The timeline as plain text (what Copy puts on the clipboard)."""
        if self._job is None:
            return ""
        job = self._job
        lines = [f"{job.title} (job {job.id}, {job.kind}) — {job.state}"]
        if job.replay_of:
            lines.append(f"replay of {job.replay_of}")
        for event in self._events:
            lines.append(f"{event_headline(event)}\n    {event_detail(event)}")
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- refresh


class RefreshCoordinator(QObject):
    """Polls the queue for changes on one named timer and feeds them to the models.

    Changes made by any process (this window, the CLI, a headless worker) show up
    within one interval.

    Args:
        queue: the engine.
        models: the job table models to keep up to date.
        interval_ms: the refresh interval (250-500 ms).
        parent: the Qt parent.

    Signals:
        jobs_changed(object): the set of job ids that changed (None: everything was reloaded).
        refreshed(): a refresh tick ran (the clock moved on).
        error(str): the store could not be read.
    """

    jobs_changed = Signal(object)
    refreshed = Signal()
    error = Signal(str)

    def __init__(
        self, queue: Queue, models: list[JobTableModel], interval_ms: int = 300, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.queue = queue
        self.models = list(models)
        self.version = -1
        self.timer = QTimer(self)
        self.timer.setObjectName("refreshTimer")
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self.refresh)

    def start(self) -> None:
        """Loads everything once, then polls."""
        self.refresh()
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    def soon(self) -> None:
        """Refreshes as soon as the event loop is free (after a verb of this window)."""
        QTimer.singleShot(0, self, self.refresh)

    @Slot()
    def refresh(self) -> None:
        """One coalesced update: what changed since the last version, and nothing else."""
        try:
            if self.version < 0:
                self.version = self.queue.refresh()
                jobs = self.queue.raw_jobs()
                for model in self.models:
                    model.reset_jobs(jobs)
                self.jobs_changed.emit(None)
            else:
                version, ids = self.queue.changed_since(self.version)
                self.version = version
                if ids is None:
                    jobs = self.queue.raw_jobs()
                    for model in self.models:
                        model.reset_jobs(jobs)
                    self.jobs_changed.emit(None)
                elif ids:
                    jobs = self.queue.raw_jobs(ids)
                    for model in self.models:
                        model.apply(jobs)
                    self.jobs_changed.emit(set(ids))
        except QueueError as exc:
            self.error.emit(str(exc))
            return
        for model in self.models:
            model.tick()
        self.refreshed.emit()
