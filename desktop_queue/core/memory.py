"""A backend that keeps every job in memory, for scripts and tests that need no durability.

It implements :class:`~desktop_queue.core.backend.Backend` with the same state and
indexes as the JSON store (:class:`~desktop_queue.core.store.state.StoreState`) and none of
its files: a commit applies its records under a lock, nothing survives the process, and
only this process sees the jobs. It shows what the seam asks of a backend; the verb
tests run over it and over the JSON store through one fixture.

Usage: ``Queue(data_dir, providers, backend=MemoryBackend())`` (``data_dir`` still holds
result and artifact files, flow control and the spend ledger).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

from desktop_queue.core.backend import Change, OpenReport, Orphans, wait_out
from desktop_queue.core.errors import StoreError
from desktop_queue.core.records import PurgeRecord, Record
from desktop_queue.core.store.archive import PurgeFilter
from desktop_queue.core.store.state import StoreState

T = TypeVar("T")


class MemoryBackend:
    """Every job in one :class:`StoreState`; commits are atomic within this process."""

    def __init__(self) -> None:
        self.state = StoreState()
        self.report = OpenReport(first=True)
        self._lock = threading.RLock()
        self._results: dict[str, dict[str, Any]] = {}
        self._open = False

    @property
    def poisoned(self) -> str | None:
        return None

    @property
    def closed(self) -> bool:
        return not self._open

    def open(self, on_first: Callable[[], None] | None = None) -> OpenReport:
        self._open = True
        if on_first is not None:
            on_first()  # (always first: no other process can see these jobs)
        return self.report

    def close(self) -> None:
        self._open = False

    def _check_open(self) -> None:
        if not self._open:
            raise StoreError("the task store is closed")

    def commit(self, fn: Callable[[StoreState], Change[T]], *, durable: bool = True) -> T:
        """Commits the records of the :class:`~desktop_queue.core.backend.Change` ``fn`` returns; returns its value."""
        answers: list[T] = []

        def records(state: StoreState) -> Sequence[Record]:
            change = fn(state)
            answers.append(change.value)
            return change.records

        self.transact(records, durable=durable)
        return answers[-1]

    def transact(self, fn: Callable[[StoreState], Sequence[Record]], *, durable: bool = True) -> Sequence[Record]:
        with self._lock:
            self._check_open()
            records = fn(self.state)
            for number, record in enumerate(records, start=self.state.n + 1):
                record["n"] = number
            for record in records:
                if record.get("op") == "purge":
                    self._drop_results(PurgeFilter.from_json(cast(PurgeRecord, record)["filter"]))
                self.state.apply(record)
                doc = record.get("res")
                if isinstance(doc, dict) and isinstance(doc.get("key"), str):
                    self._results[doc["key"]] = doc
            return records

    def _drop_results(self, purge: PurgeFilter) -> None:
        for job in self.state.jobs.values():
            if purge.matches(job):
                self._results.pop(job["key"], None)

    def read(self, fn: Callable[[StoreState], T]) -> T:
        with self._lock:
            self._check_open()
            return fn(self.state)

    def peek(self, fn: Callable[[StoreState], T]) -> T:
        with self._lock:
            return fn(self.state)

    def on_orphans(self, recover: Orphans) -> None:
        """Nothing to set: orphans are reconciled by the first opener (``on_first``)."""

    def changes(self, version: int) -> tuple[int, set[str] | None]:
        return self.read(lambda state: state.changed_since(version))

    def wait_changes(self, version: int, timeout_s: float, stop: threading.Event | None = None) -> bool:
        return wait_out(timeout_s, stop)  # (no change feed: the caller reads at this pace)

    def sync(self) -> None:
        """Nothing to put on disk."""

    def compact_now(self) -> None:
        """Nothing to fold: a purge is carried out when it is applied."""

    @contextlib.contextmanager
    def quiet(self) -> Iterator[bool]:
        yield True

    def carried_result(self, key: str) -> dict[str, Any] | None:
        return self._results.get(key)

    def carried_keys(self) -> list[str]:
        return list(self._results)

    def archived_result(self, key: str) -> dict[str, Any] | None:
        return None
