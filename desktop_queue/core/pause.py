"""The queue-wide "pause background work" switch, shared by every process on a data dir.

The window's Pause queue stops its own driver only, and is forgotten when it closes.
This switch is the data dir's: while it is on, no process (the window, any ``work``)
leases a background-lane job, and interactive jobs still run. It lives in
``<data dir>/background-pause.json``, written atomically and durably under a lock (two
people flipping it at once leave one answer, never a torn file), with who flipped it
and when; every process reads it again on its next lease (one ``stat`` when unchanged),
so a flip is honoured within a tick of the lease driver, and kept across restarts.

A damaged file is set aside (``*.corrupt-<time>``), never silently dropped: the
process keeps the last state it read (a process that read none: not paused) and
:attr:`PauseState.problem` says what happened. A file from a newer version is
refused, never overwritten.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from desktop_queue.core.clock import Clock, SystemClock
from desktop_queue.core.errors import StoreError
from desktop_queue.core.store.codec import stamped_doc
from desktop_queue.core.store.fileio import atomic_write, locked, set_aside_if_possible

log = logging.getLogger(__name__)

PAUSE_FILE = "background-pause.json"
PAUSE_FORMAT = "desktop-queue.background-pause"
PAUSE_SCHEMA = 1
#: the longest reason kept (it is shown in a status bar)
MAX_REASON = 200


@dataclass(frozen=True)
class PauseState:
    """Whether background work is paused on the data dir, and by whom.

    Attributes:
        paused: no background-lane job is leased by any process.
        by: who flipped it last (``user``: the window, ``cli``).
        where: the process that flipped it (``host:pid``).
        at: when (wall time), None if it never was.
        reason: what the person said, if anything (never a prompt: typed by people).
        problem: the switch's file could not be read (damaged, newer) and what
            happened; the state is then the last one read.
    """

    paused: bool = False
    by: str | None = None
    where: str | None = None
    at: float | None = None
    reason: str | None = None
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"paused": self.paused, "by": self.by, "where": self.where, "at": self.at, "reason": self.reason}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PauseState:
        def text(key: str) -> str | None:
            value = doc.get(key)
            return value[:MAX_REASON] if isinstance(value, str) and value else None

        at = doc.get("at")
        return cls(
            paused=doc.get("paused") is True,
            by=text("by"),
            where=text("where"),
            at=float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else None,
            reason=text("reason"),
        )


def _checksum(body: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


class BackgroundSwitch:
    """Reads and flips the data dir's background pause (thread-safe; any number of processes).

    Args:
        data_dir: the data directory whose processes share the switch.
        clock: time source for ``at`` (default: the system clock).
    """

    def __init__(self, data_dir: Path | str, clock: Clock | None = None) -> None:
        self.path = Path(data_dir) / PAUSE_FILE
        self.clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._state = PauseState()

    # ------------------------------------------------------------------ reading

    @property
    def paused(self) -> bool:
        """True while background work is paused (read again if another process flipped it)."""
        return self.state().paused

    def state(self) -> PauseState:
        """The switch as the file says now (one ``stat`` when nothing changed)."""
        with self._lock:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                self._seen, self._state = None, PauseState()
                return self._state
            except OSError as exc:  # unreadable for now: keep the last state, and say so
                return replace(self._state, problem=f"cannot read {self.path.name}: {exc.strerror or exc}")
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp != self._seen:
                self._state = self._read()
                self._seen = stamp
            return self._state

    def _read(self) -> PauseState:
        """The file's state; on damage the last state read, with the problem (called under the lock)."""
        try:
            raw = self.path.read_bytes()
        except OSError as exc:
            return replace(self._state, problem=f"cannot read {self.path.name}: {exc.strerror or exc}")
        try:
            doc, newer = stamped_doc(raw, PAUSE_FORMAT, PAUSE_SCHEMA, "a background pause file")
            if newer is not None:
                return replace(
                    self._state,
                    problem=f"{self.path.name} was written by a newer Desktop Queue (schema {newer}); "
                    "it is not changed here",
                )
            body = doc.get("state")
            if not isinstance(body, dict) or doc.get("checksum") != _checksum(body):
                raise ValueError("its checksum does not match")
            return PauseState.from_json(body)
        except (orjson.JSONDecodeError, ValueError) as exc:
            aside = set_aside_if_possible(self.path)
            kept = "paused" if self._state.paused else "not paused"
            message = f"{self.path.name} was damaged ({exc}); kept aside as {aside.name}; background work stays {kept}"
            log.warning("%s", message)
            return replace(self._state, problem=message)

    # ------------------------------------------------------------------ writing

    def set(self, paused: bool, by: str, *, reason: str | None = None, where: str | None = None) -> PauseState:
        """Pauses (or resumes) background work for every process on the data dir; durable on return.

        Args:
            paused: the new position.
            by: who asks (``user``, ``cli``).
            reason: what the person said (kept short).
            where: the process that asks (default ``host:pid``).

        Setting the position it already has (with no new reason) changes nothing: who
        paused it first, and when, is what people need to know.

        Returns:
            The new state.

        Raises:
            StoreError: the file is from a newer version (never overwritten), or cannot
                be written (the switch is then unchanged).
        """
        with locked(self.path.with_name(f".{PAUSE_FILE}.lock")):
            if (self.state().problem or "").startswith(f"{self.path.name} was written by a newer"):
                raise StoreError(f"{self.path.name} is from a newer Desktop Queue; it was not changed")
            reason = reason.strip()[:MAX_REASON] if reason and reason.strip() else None
            current = self.state()
            if current.paused == paused and reason in (None, current.reason) and not current.problem:
                return current
            new = PauseState(
                paused=paused,
                by=by,
                where=where or f"{socket.gethostname().split('.')[0]}:{os.getpid()}",
                at=self.clock.now(),
                reason=reason,
            )
            body = new.to_json()
            doc = {
                "format": PAUSE_FORMAT,
                "schema_version": PAUSE_SCHEMA,
                "checksum": _checksum(body),
                "state": body,
            }
            try:
                atomic_write(self.path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
            except OSError as exc:
                raise StoreError(f"cannot write {self.path}: {exc.strerror or exc}") from exc
            with self._lock:
                self._seen = None  # read back on the next look (its stamp is the file's)
                self._state = new
        return new


__all__ = ["PAUSE_FILE", "BackgroundSwitch", "PauseState"]
