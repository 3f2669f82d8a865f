"""How long finished jobs, their results and quarantined files are kept.

The policy is one small JSON file in the data directory (``retention.json``), so the
window and every ``desktop-queue work`` on that directory apply the same one. By default
everything is kept: removing a person's history is something they choose. Applying the
policy purges through :meth:`desktop_queue.core.queue.Queue.purge` (one journal record,
folded by a compaction) and deletes ``*.corrupt-*`` copies that were set aside longer ago
than the quarantine period.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from desktop_queue.core.errors import InvalidInput, StoreError
from desktop_queue.core.model import State
from desktop_queue.core.store.fileio import CORRUPT_MARK, atomic_write, fsync_dir

POLICY_FILE = "retention.json"
POLICY_FORMAT = "desktop-queue.retention"
#: the periods offered in Preferences (None: keep forever)
OFFERED_DAYS = (None, 30, 90, 365)
DAY_S = 86_400.0


@dataclass(frozen=True)
class RetentionPolicy:
    """What to keep.

    Attributes:
        finished_days: finished jobs (with their events, results and artifacts) older
            than this many days are purged; None keeps them forever.
        keep_succeeded: succeeded jobs and their results are kept whatever their age
            (only dead letters and cancelled jobs go).
        quarantine_days: damaged files set aside as ``*.corrupt-*`` are deleted after
            this many days; None keeps them.
    """

    finished_days: int | None = None
    keep_succeeded: bool = False
    quarantine_days: int | None = None

    def __post_init__(self) -> None:
        for name in ("finished_days", "quarantine_days"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise InvalidInput(f"{name.replace('_', ' ')} must be a whole number of days, at least 1")

    @property
    def keeps_everything(self) -> bool:
        return self.finished_days is None and self.quarantine_days is None

    def purge_states(self) -> tuple[str, ...]:
        return (State.DEAD, State.CANCELLED) if self.keep_succeeded else (State.SUCCEEDED, State.DEAD, State.CANCELLED)

    def describe(self) -> str:
        if self.keeps_everything:
            return "everything is kept"
        parts = []
        if self.finished_days is not None:
            what = "dead and cancelled jobs" if self.keep_succeeded else "finished jobs"
            parts.append(f"{what} are kept {self.finished_days} days")
        else:
            parts.append("finished jobs are kept")
        if self.quarantine_days is not None:
            parts.append(f"damaged files set aside are kept {self.quarantine_days} days")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": POLICY_FORMAT,
            "version": 1,
            "finished_days": self.finished_days,
            "keep_succeeded": self.keep_succeeded,
            "quarantine_days": self.quarantine_days,
        }

    @classmethod
    def from_json(cls, doc: Any) -> RetentionPolicy:
        if not isinstance(doc, dict) or doc.get("format") != POLICY_FORMAT:
            raise InvalidInput("not a retention policy")
        return cls(
            finished_days=doc.get("finished_days"),
            keep_succeeded=bool(doc.get("keep_succeeded", False)),
            quarantine_days=doc.get("quarantine_days"),
        )


def load_policy(data_dir: Path) -> RetentionPolicy:
    """The data directory's policy; the default (keep everything) when there is none.

    A damaged file keeps everything too (nothing is deleted on a guess) and says so.

    Raises:
        StoreError: the file exists but cannot be read or understood.
    """
    path = Path(data_dir) / POLICY_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return RetentionPolicy()
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return RetentionPolicy.from_json(orjson.loads(raw))
    except (orjson.JSONDecodeError, InvalidInput) as exc:
        raise StoreError(f"{path} is damaged ({exc}); nothing is purged until it is set again") from exc


def save_policy(data_dir: Path, policy: RetentionPolicy) -> None:
    """Writes the policy atomically."""
    path = Path(data_dir) / POLICY_FILE
    try:
        atomic_write(path, orjson.dumps(policy.to_json(), option=orjson.OPT_INDENT_2))
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from exc


def quarantined_files(data_dir: Path) -> Iterator[Path]:
    """Every ``*.corrupt-*`` copy under the data directory."""
    for root, _dirs, files in os.walk(data_dir):
        for name in files:
            if CORRUPT_MARK in name:
                yield Path(root) / name


def purge_quarantined(data_dir: Path, before: float, *, dry_run: bool = False) -> list[Path]:
    """Deletes the quarantined copies set aside before ``before`` (by their modification time)."""
    gone: list[Path] = []
    dirs: set[Path] = set()
    for path in quarantined_files(data_dir):
        try:
            if path.stat().st_mtime >= before:
                continue
            if not dry_run:
                path.unlink()
                dirs.add(path.parent)
        except OSError:
            continue
        gone.append(path)
    for directory in dirs:
        with contextlib.suppress(OSError):
            fsync_dir(directory)
    return gone


def cutoff(days: int, now: float | None = None) -> float:
    return (time.time() if now is None else now) - days * DAY_S
