"""Roles, cell looks and columns of the job tables (shared by the table models and the proxy)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QIcon

from desktop_queue.core import State
from desktop_queue.core.model import iso
from desktop_queue.core.present import (
    HoldReason,
    attempts_text,
    describe_state,
    error_signature,
    error_text,
    run_time,
    seconds,
    table_time,
    wait_time,
)

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
        tip: job dict -> the cell's tooltip, when the cell shortens what it says (default:
            the display text).
    """

    key: str
    header: str
    display: Callable[[Mapping[str, Any], float], str]
    sort: Callable[[Mapping[str, Any], float], Any] | None = None
    live: bool = False
    tip: Callable[[Mapping[str, Any]], str | None] | None = None


def _time_column(key: str, header: str, field: str, sort: Callable[[Mapping[str, Any], float], Any]) -> Column:
    """A column of one of the job's times: short in the cell (:func:`table_time`), whole in its tooltip."""
    return Column(
        key,
        header,
        lambda j, n: table_time(j.get(field), n) if j.get(field) is not None else "",
        sort,
        tip=lambda j: iso(j.get(field)) if j.get(field) is not None else None,
    )


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
        _time_column("created", "Created", "created_at", lambda j, _n: j.get("seq", 0)),
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
    _time_column("died", "Died at", "finished_at", lambda j, _n: _num(j.get("finished_at"))),
    # a dead job stays dead when it is replayed: say so, or it looks like nobody dealt with it
    Column("replayed", "Replayed as", lambda j, _n: ", ".join(str(i) for i in j.get("replayed_as") or ())),
    # shown with "Show resolved": when a person closed it without a retry
    _time_column("resolved", "Resolved", "resolved_at", lambda j, _n: _num(j.get("resolved_at"))),
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


#: what every cell of a job table allows (QAbstractTableModel's default, spelled out for the proxy)
_CELL_FLAGS = Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemNeverHasChildren

#: the (parents, hint) overload of layoutAboutToBeChanged/layoutChanged (PySide6 splits C++ defaults)
_LAYOUT_SIGNATURE = ("QList<QPersistentModelIndex>", "QAbstractItemModel::LayoutChangeHint")

_HANDLED_ROLES = frozenset({_DISPLAY, _DECORATION, _TOOLTIP, _FONT, _JOB, _ID, _STATE, _SORT, _SEARCH, _LOOK})
