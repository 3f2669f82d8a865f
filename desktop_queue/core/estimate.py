"""How long a running job usually takes: the median run time of finished jobs of its kind and model.

Built once from the hot set (the jobs a process keeps in memory: the recent history,
see :meth:`Queue.raw_jobs <desktop_queue.core.queue.Queue.raw_jobs>`) and then fed each
job that finishes, so that a view asks a dictionary on every repaint, never the
history. Each (kind, model) keeps its most recent :data:`SAMPLES` run times.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from desktop_queue.core.backend import scan_jobs
from desktop_queue.core.model import State
from desktop_queue.core.present import seconds

#: recent run times kept per (kind, model) and per kind
SAMPLES = 101
#: fewer finished jobs than this of one (kind, model) and the kind's median is used
MIN_SAMPLES = 3
#: the bar stops short of full while the job still runs
MAX_FRACTION = 0.97


def model_of(job: Mapping[str, Any]) -> str | None:
    """The model a job asked for (its input's ``model``), or None."""
    payload = job.get("input")
    model = payload.get("model") if isinstance(payload, Mapping) else None
    return model if isinstance(model, str) and model else None


def run_seconds(job: Mapping[str, Any]) -> float | None:
    """How long a succeeded job's last attempt ran, or None (not succeeded, or times missing)."""
    if job.get("state") != State.SUCCEEDED:
        return None
    started, finished = job.get("started_at"), job.get("finished_at")
    if not isinstance(started, (int, float)) or not isinstance(finished, (int, float)) or finished < started:
        return None
    return float(finished - started)


@dataclass(frozen=True)
class Usual:
    """The usual run time of a kind (and model).

    Attributes:
        seconds: the median run time.
        samples: how many finished jobs it comes from.
        scope: ``"model"`` (jobs of the same kind and model) or ``"kind"``.
    """

    seconds: float
    samples: int
    scope: str


class RunTimes:
    """Recent run times by (kind, model) and by kind; medians on demand (cached until fed)."""

    def __init__(self) -> None:
        self._by_model: dict[tuple[str, str | None], deque[float]] = {}
        self._by_kind: dict[str, deque[float]] = {}
        self._seen: set[str] = set()
        self._medians: dict[object, float] = {}

    @classmethod
    def from_jobs(cls, jobs: Iterable[Mapping[str, Any]]) -> RunTimes:
        """Run times of the succeeded ``jobs`` (oldest first, so the newest are kept)."""
        times = cls()
        done = [j for j in jobs if j.get("state") == State.SUCCEEDED]
        done.sort(key=lambda j: j.get("finished_at") or 0.0)
        for job in done:
            times.observe(job)
        return times

    def observe(self, job: Mapping[str, Any]) -> bool:
        """Counts a succeeded job once (by id); returns True if it was new."""
        elapsed = run_seconds(job)
        job_id = job.get("id")
        if elapsed is None or not isinstance(job_id, str) or job_id in self._seen:
            return False
        self._seen.add(job_id)
        kind = str(job.get("kind") or "")
        self._by_model.setdefault((kind, model_of(job)), deque(maxlen=SAMPLES)).append(elapsed)
        self._by_kind.setdefault(kind, deque(maxlen=SAMPLES)).append(elapsed)
        self._medians.pop((kind, model_of(job)), None)
        self._medians.pop(kind, None)
        return True

    def _median(self, key: object, values: deque[float]) -> float:
        cached = self._medians.get(key)
        if cached is None:
            cached = self._medians[key] = statistics.median(values)
        return cached

    def usual(self, kind: str, model: str | None = None) -> Usual | None:
        """The usual run time of ``kind`` with ``model``; of ``kind`` when that model has few; None if none."""
        same = self._by_model.get((kind, model))
        if same is not None and len(same) >= MIN_SAMPLES:
            return Usual(self._median((kind, model), same), len(same), "model")
        any_model = self._by_kind.get(kind)
        if any_model:
            return Usual(self._median(kind, any_model), len(any_model), "kind")
        return None


def run_times_of(queue: Any) -> RunTimes:
    """The run times of the succeeded jobs a :class:`~desktop_queue.core.queue.Queue` keeps in memory.

    One pass over the hot set (inputs included, for their model); archived jobs are not
    read. Meant to run once, off the window's thread, then be fed as jobs finish.
    """

    def fn(st: Any) -> list[dict[str, Any]]:
        return [
            {
                "id": j["id"],
                "kind": j.get("kind"),
                "state": j.get("state"),
                "started_at": j.get("started_at"),
                "finished_at": j.get("finished_at"),
                "input": {"model": model_of(j)},
            }
            for j in scan_jobs(st)
            if j.get("state") == State.SUCCEEDED
        ]

    return RunTimes.from_jobs(queue.store.read(fn))


@dataclass(frozen=True)
class Progress:
    """A running job's progress estimate.

    Attributes:
        fraction: 0..1 for a bar, or None (nothing to compare with, or past the usual time:
            a busy bar).
        text: ``about 40 s usually; 12 s so far``.
    """

    fraction: float | None
    text: str


def progress(elapsed: float, usual: Usual | None) -> Progress:
    """A running job's elapsed time against its usual run time."""
    so_far = f"{seconds(elapsed)} so far"
    if usual is None:
        return Progress(None, f"no finished job of this kind yet to compare with; {so_far}")
    of = "this model" if usual.scope == "model" else "this kind"
    typical = f"about {seconds(usual.seconds)} usually ({of}, {usual.samples} finished)"
    if usual.seconds <= 0:
        return Progress(None, f"{typical}; {so_far}")
    share = elapsed / usual.seconds
    if share > 1.0:
        return Progress(None, f"taking longer than usual: {typical}; {so_far}")
    return Progress(min(MAX_FRACTION, share), f"{typical}; {so_far}")


__all__ = [
    "MIN_SAMPLES",
    "Progress",
    "RunTimes",
    "SAMPLES",
    "Usual",
    "model_of",
    "progress",
    "run_seconds",
    "run_times_of",
]
