"""Schedules: a job template run on a cron expression in an IANA time zone (no Qt).

A schedule's windows are the instants its cron expression names in its zone, computed
with croniter and kept as UTC timestamps. Rules that hold whatever process evaluates
them (the window, any ``work``):

- **At most one job a window.** The job's idempotency key is
  ``schedule:<id>:<window start, ISO 8601 UTC>``, so a second process, or the same one
  after a restart, that evaluates the same window gets the existing job back. The
  whole evaluation runs under ``schedules.lock`` and advances ``last_evaluated``, so a
  window is also decided (run, skipped) once.
- **Daylight saving.** A wall time the spring change skips runs at the change
  (02:30 on 2026-03-29 in Europe/Berlin runs at 03:00 CEST). A wall time the autumn
  change repeats runs once, the first time, unless the hour field is ``*`` (an
  hourly schedule runs every real hour, both 02:00s included).
- **Late and missed windows.** A window found at most :data:`GRACE_S` after its start
  is on time and runs under every policy (the tick is a few seconds; a laptop lid
  closed for a minute is no reason to skip). Older ones were missed (the app was
  closed): catch-up ``skip`` (default) runs none of them, the next window runs as
  usual; ``latest`` runs one job for the most recent; ``all`` one for each, at most
  :data:`MAX_CATCH_UP` (the most recent ones).
- **Overlap.** ``skip`` (default): while the previous run (a job made by an earlier
  evaluation) is queued or running, due windows are skipped and say why; ``allow``
  runs them anyway. Catch-up jobs of one evaluation do not skip each other.
- **Pause on failure.** After ``pause_after`` (default 3) runs in a row end ``dead``,
  the schedule pauses itself with the reason. A succeeded run resets the count; a
  cancelled one leaves it. Resuming starts from the next window (no catch-up of the
  paused time).

Schedules live in ``schedules.json`` in the data dir, written atomically under a file
lock; a damaged file is set aside (``schedules.json.corrupt-<time>``) with a notice,
and a newer format is refused, never overwritten.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import hashlib
import logging
import os
import re
import secrets
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson

from desktop_queue.core.errors import InvalidInput, NoSuchJob, QueueError, StoreError
from desktop_queue.core.fingerprint import canonical_json
from desktop_queue.core.model import Actor, Priority, State
from desktop_queue.core.store.codec import stamped_doc
from desktop_queue.core.store.fileio import FileLock, atomic_write, make_dirs, set_aside

log = logging.getLogger(__name__)

FILE_NAME = "schedules.json"
LOCK_NAME = "schedules.lock"
FORMAT = "desktop-queue-schedules"
SCHEMA_VERSION = 1

CATCH_UP = ("skip", "latest", "all")
OVERLAP = ("skip", "allow")
#: the most jobs one catch-up (``all``) creates
MAX_CATCH_UP = 10
#: a window found this long after its start still counts as on time
GRACE_S = 300.0
DEFAULT_PAUSE_AFTER = 3
#: the runs a schedule follows until they finish (``overlap allow`` may start many)
MAX_PENDING = 50
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}$")


@dataclass(frozen=True)
class JobTemplate:
    """A job written elsewhere (the New job dialog) that a new schedule starts from.

    Attributes:
        kind, input, title, priority, max_attempts: the job each window will submit.
    """

    kind: str
    input: Any
    title: str | None = None
    priority: str = Priority.BACKGROUND.value
    max_attempts: int | None = None

    def suggested_name(self) -> str:
        """A schedule name made from the title ("" when none can be): a name takes letters,
        digits, spaces, '.', '_' and '-', starts with a letter or digit, and is 64 long at most."""
        # accents go (résumé: resume), then whatever a name cannot hold becomes a space
        plain = unicodedata.normalize("NFKD", self.title or "").encode("ascii", "ignore").decode()
        cleaned = re.sub(r"\s+", " ", re.sub(r"[^A-Za-z0-9 _.-]+", " ", plain)).strip(" _.-")
        return cleaned[:64].rstrip(" _.-")


class ScheduleError(QueueError):
    """A schedule request that cannot be done (no such schedule, bad cron, damaged file)."""


class NoSuchSchedule(ScheduleError):
    exit_code = NoSuchJob.exit_code


def iso_utc(ts: float) -> str:
    """``2026-03-29T01:00:00Z``: how window starts are stored and keyed."""
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _from_iso(text: str | None) -> float | None:
    if text is None:
        return None
    return _dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _to_iso(ts: float | None) -> str | None:
    return None if ts is None else _dt.datetime.fromtimestamp(ts, _dt.UTC).isoformat(timespec="milliseconds")


def check_cron(expr: str) -> str:
    """The expression, tidied, when croniter reads it as five fields; else InvalidInput."""
    # imported here, not at the top: croniter's import runs `file` as a child process
    # (platform.architecture), which every command and worker would pay for
    from croniter import croniter

    clean = " ".join(str(expr).split())
    if len(clean.split(" ")) != 5 or not croniter.is_valid(clean):
        raise InvalidInput(f"not a cron expression: {expr!r} (five fields, e.g. '0 * * * *' for every hour)")
    return clean


def check_zone(name: str) -> ZoneInfo:
    """The IANA zone named ``name`` (``Europe/Berlin``, ``UTC``); else InvalidInput."""
    try:
        return ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(f"not an IANA time zone: {name!r} (e.g. Europe/Berlin, America/New_York, UTC)") from None


def local_zone_name() -> str:
    """The user's zone as an IANA name when the system says one, else ``UTC``."""
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz:
        try:
            ZoneInfo(tz)
            return tz
        except (ZoneInfoNotFoundError, ValueError):
            pass
    try:
        target = os.path.realpath("/etc/localtime")
        marker = "zoneinfo/"
        if marker in target:
            name = target.split(marker, 1)[1]
            ZoneInfo(name)
            return name
    except (OSError, ZoneInfoNotFoundError, ValueError):
        pass
    return "UTC"


# --------------------------------------------------------------------------- the records


@dataclass(frozen=True)
class Schedule:
    """A job template and when to run it.

    Attributes:
        id: stable, unpredictable (``secrets``); part of every job key it makes.
        name: unique among the data dir's schedules; what people and the CLI call it.
        cron: five-field cron expression, read in ``tz``.
        tz: IANA time zone.
        kind, input, title, priority, max_attempts: the job each window submits.
        profile: provider profile, put in the input as ``"profile"`` (None: the default).
        catch_up: ``skip`` | ``latest`` | ``all`` (see the module docstring).
        overlap: ``skip`` | ``allow``.
        pause_after: dead runs in a row that pause the schedule (0: never).
        created_at: wall time; windows before it never run.
    """

    id: str
    name: str
    cron: str
    tz: str
    kind: str
    input: Any
    created_at: float
    title: str | None = None
    priority: str = Priority.BACKGROUND.value
    max_attempts: int | None = None
    profile: str | None = None
    catch_up: str = "skip"
    overlap: str = "skip"
    pause_after: int = DEFAULT_PAUSE_AFTER

    def job_input(self) -> Any:
        if self.profile and isinstance(self.input, dict):
            return {**self.input, "profile": self.profile}
        return self.input

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["created_at"] = _to_iso(self.created_at)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Schedule:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["created_at"] = _from_iso(values.get("created_at")) or 0.0
        return cls(**values)


@dataclass(frozen=True)
class ScheduleState:
    """What evaluating a schedule has found so far (kept with it in ``schedules.json``).

    Attributes:
        last_evaluated: windows up to this wall time have been decided.
        last_window: the start of the latest window that got a job.
        last_job_id: the latest job it made (a window or run-now).
        last_good_job_id, last_good_at: the latest run that succeeded, and when.
        dead_streak: runs in a row that ended dead.
        paused: a person paused it, or it paused itself.
        paused_reason: why (shown in the pane and ``schedule list``).
        last_skipped: why the latest due window made no job (overlap, catch-up), or None.
        pending: the runs not yet seen finished, oldest first.
    """

    last_evaluated: float | None = None
    last_window: float | None = None
    last_job_id: str | None = None
    last_good_job_id: str | None = None
    last_good_at: float | None = None
    dead_streak: int = 0
    paused: bool = False
    paused_reason: str | None = None
    last_skipped: str | None = None
    pending: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for name in ("last_evaluated", "last_window", "last_good_at"):
            data[name] = _to_iso(data[name])
        data["pending"] = list(self.pending)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ScheduleState:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("last_evaluated", "last_window", "last_good_at"):
            values[name] = _from_iso(values.get(name))
        values["pending"] = tuple(values.get("pending") or ())
        return cls(**values)


@dataclass(frozen=True)
class Entry:
    """One schedule with its state, as stored and as the views show it."""

    schedule: Schedule
    state: ScheduleState = field(default_factory=ScheduleState)

    def next_run(self, now: float) -> float | None:
        """The next window after ``now``; None while paused."""
        if self.state.paused:
            return None
        return next_window(self.schedule, now)


# --------------------------------------------------------------------------- windows


def _hourly(expr: str) -> bool:
    return expr.split(" ")[1] == "*"


def _repeated_second(moment: _dt.datetime, zone: ZoneInfo) -> bool:
    """Whether ``moment`` is the second of two instants with the same wall time (autumn change)."""
    wall = moment.replace(tzinfo=None)
    first = wall.replace(tzinfo=zone, fold=0)
    second = wall.replace(tzinfo=zone, fold=1)
    return first.utcoffset() != second.utcoffset() and moment.utcoffset() == second.utcoffset()


def _windows(schedule: Schedule, start: float, *, forward: bool) -> Iterator[float]:
    """The schedule's windows after (or before) ``start``, as UTC timestamps, nearest first."""
    zone = check_zone(schedule.tz)
    expr = check_cron(schedule.cron)
    hourly = _hourly(expr)
    from croniter import croniter  # loaded by check_cron above

    it = croniter(expr, _dt.datetime.fromtimestamp(start, zone))
    seen: float | None = None
    while True:
        moment = it.get_next(_dt.datetime) if forward else it.get_prev(_dt.datetime)
        if not hourly and _repeated_second(moment, zone):
            continue  # 02:30 on the autumn change: the first 02:30 ran (or runs)
        ts = moment.timestamp()
        if seen is not None and ts == seen:
            continue  # the spring change may map two wall times to one instant
        if (forward and ts <= start) or (not forward and ts > start):
            continue
        seen = ts
        yield ts


def next_window(schedule: Schedule, after: float) -> float:
    """The first window strictly after ``after``."""
    return next(_windows(schedule, after, forward=True))


def due_windows(schedule: Schedule, last_evaluated: float | None, now: float, limit: int = MAX_CATCH_UP) -> list[float]:
    """The windows in ``(last_evaluated, now]``, oldest first: at most the ``limit`` latest.

    Walks back from ``now``, so a schedule left for a year costs ``limit`` steps, not
    one a window. ``last_evaluated`` None means since the schedule was created.
    """
    since = schedule.created_at if last_evaluated is None else last_evaluated
    found: list[float] = []
    if now <= since:
        return found
    for ts in _windows(schedule, now + 0.0005, forward=False):
        if ts <= since or len(found) >= limit:
            break
        if ts <= now:
            found.append(ts)
    return found[::-1]


@dataclass(frozen=True)
class Plan:
    """What one evaluation decides for one schedule.

    Attributes:
        run: the window starts that get a job, oldest first.
        skipped: why due windows got none (None: none was skipped).
        due: how many windows were due (0: nothing to decide, nothing to write).
    """

    run: tuple[float, ...]
    skipped: str | None
    due: int = 0


def plan(schedule: Schedule, state: ScheduleState, now: float, *, previous_active: bool) -> Plan:
    """Decides which due windows get a job (pure: the catch-up and overlap rules above)."""
    if state.paused:
        return Plan((), None)
    windows = due_windows(schedule, state.last_evaluated, now, limit=MAX_CATCH_UP)
    if not windows:
        return Plan((), None)
    on_time = [w for w in windows if now - w <= GRACE_S]
    missed = [w for w in windows if now - w > GRACE_S]
    skipped: str | None = None
    if schedule.catch_up == "all":
        run = windows
    elif schedule.catch_up == "latest":
        run = windows[-1:]
        if len(windows) > 1:
            skipped = f"caught up with the latest missed window only ({len(windows) - 1} older ones not run)"
    else:
        run = on_time[-1:]
        if missed:
            skipped = f"missed {'window' if len(missed) == 1 else 'windows'} not run (catch-up: skip)"
    if run and previous_active and schedule.overlap == "skip":
        return Plan((), "skipped: the previous run was still queued or running", len(windows))
    return Plan(tuple(run), skipped, len(windows))


def observe(schedule: Schedule, state: ScheduleState, finished: Mapping[str, Mapping[str, Any]]) -> ScheduleState:
    """The state after the pending runs in ``finished`` (job id -> job dict) ended.

    Runs count in the order they were made; ``pause_after`` dead ones in a row pause
    the schedule, with the last error in the reason.
    """
    streak, good_id, good_at = state.dead_streak, state.last_good_job_id, state.last_good_at
    paused, reason = state.paused, state.paused_reason
    pending = []
    for job_id in state.pending:
        job = finished.get(job_id)
        if job is None:
            pending.append(job_id)
            continue
        outcome = job.get("state")
        if outcome == State.SUCCEEDED:
            streak, good_id, good_at = 0, job_id, job.get("finished_at")
        elif outcome == State.DEAD:
            streak += 1
            if schedule.pause_after and streak >= schedule.pause_after and not paused:
                error = job.get("last_error") or {}
                why = f"{error.get('class')}: {error.get('message')}" if error else "no error recorded"
                paused, reason = True, f"paused after {streak} failed runs in a row (last: {why})"
    return dataclasses.replace(
        state,
        dead_streak=streak,
        last_good_job_id=good_id,
        last_good_at=good_at,
        paused=paused,
        paused_reason=reason,
        pending=tuple(pending),
    )


# --------------------------------------------------------------------------- the file


def _checksum(entries: list[dict[str, Any]]) -> str:
    return hashlib.sha256(canonical_json(entries)).hexdigest()


class ScheduleBook:
    """The schedules of one data dir, in ``schedules.json``, changed under ``schedules.lock``.

    Every change reads the file, changes it and writes it back atomically while holding
    the lock, so processes sharing the data dir never lose one another's changes.

    Args:
        data_dir: the data directory.
        clock: ``() -> wall time``.

    Attributes:
        notices: what loading found that people should know (a damaged file set aside).
    """

    def __init__(self, data_dir: Path | str, clock: Callable[[], float]) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / FILE_NAME
        self.clock = clock
        self.notices: list[str] = []
        self._lock: FileLock | None = None

    # ------------------------------------------------------------------ file

    def _file_lock(self) -> FileLock:
        if self._lock is None:
            make_dirs(self.data_dir)
            self._lock = FileLock(self.data_dir / LOCK_NAME)
        return self._lock

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Holds the schedules lock (a thread of this process waits for the others' changes too)."""
        lock = self._file_lock()
        with lock.held():
            yield

    def _set_aside(self, why: str) -> None:
        target = set_aside(self.path)
        notice = f"{self.path.name} was damaged ({why}): set aside as {target.name}; its schedules are not loaded"
        self.notices.append(notice)
        log.warning("%s", notice)

    def _read(self) -> list[Entry]:
        """The stored entries (call with the lock held)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreError(f"cannot read {self.path.name}: {exc.strerror or exc}") from exc
        try:
            doc, newer = stamped_doc(raw, FORMAT, SCHEMA_VERSION, "a schedules file")
            if newer is not None:
                raise ScheduleError(
                    f"{self.path.name} was written by a newer Desktop Queue (schema {newer}); "
                    "it is left as it is: update the app to use schedules"
                )
            items = doc.get("schedules")
            if not isinstance(items, list) or doc.get("checksum") != _checksum(items):
                raise ValueError("checksum mismatch")
            return [
                Entry(Schedule.from_json(item["schedule"]), ScheduleState.from_json(item.get("state") or {}))
                for item in items
            ]
        except ScheduleError:
            raise
        except (ValueError, TypeError, KeyError) as exc:
            self._set_aside(str(exc) or type(exc).__name__)
            return []

    def _write(self, entries: list[Entry]) -> None:
        items = [{"schedule": e.schedule.to_json(), "state": e.state.to_json()} for e in entries]
        doc = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "checksum": _checksum(items), "schedules": items}
        atomic_write(self.path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))

    def load(self) -> list[Entry]:
        """Every schedule with its state, in the order they were added."""
        with self.locked():
            return self._read()

    def change(self, fn: Callable[[list[Entry]], list[Entry] | None]) -> list[Entry]:
        """Runs ``fn`` on the entries under the lock and stores what it returns (None: no change)."""
        with self.locked():
            entries = self._read()
            changed = fn(list(entries))
            if changed is None:
                return entries
            self._write(changed)
            return changed

    # ------------------------------------------------------------------ verbs

    def get(self, name: str) -> Entry:
        return _named(self.load(), name)

    def add(self, schedule: Schedule) -> Entry:
        """Stores a new schedule (validated; a name already used is refused)."""
        checked = validate(schedule)
        entry = Entry(checked, ScheduleState(last_evaluated=checked.created_at))

        def fn(entries: list[Entry]) -> list[Entry]:
            if any(e.schedule.name == checked.name for e in entries):
                raise InvalidInput(f"a schedule named {checked.name!r} already exists")
            return [*entries, entry]

        self.change(fn)
        return entry

    def edit(self, which: str, /, **changes: Any) -> Entry:
        """Changes the fields of schedule ``which`` (id, state and creation time stay)."""
        name = which
        out: list[Entry] = []

        def fn(entries: list[Entry]) -> list[Entry]:
            old = _named(entries, name)
            new_name = changes.get("name")
            if new_name and new_name != name and any(e.schedule.name == new_name for e in entries):
                raise InvalidInput(f"a schedule named {new_name!r} already exists")
            updated = Entry(validate(dataclasses.replace(old.schedule, **changes)), old.state)
            out.append(updated)
            return [updated if e.schedule.id == old.schedule.id else e for e in entries]

        self.change(fn)
        return out[0]

    def remove(self, name: str) -> Entry:
        out: list[Entry] = []

        def fn(entries: list[Entry]) -> list[Entry]:
            old = _named(entries, name)
            out.append(old)
            return [e for e in entries if e.schedule.id != old.schedule.id]

        self.change(fn)
        return out[0]

    def set_paused(self, name: str, paused: bool, reason: str | None = None) -> Entry:
        """Pauses or resumes; resuming forgets the dead streak and starts from the next window."""
        now = self.clock()
        out: list[Entry] = []

        def fn(entries: list[Entry]) -> list[Entry]:
            old = _named(entries, name)
            if paused:
                state = dataclasses.replace(old.state, paused=True, paused_reason=reason or "paused by a person")
            else:
                state = dataclasses.replace(
                    old.state, paused=False, paused_reason=None, dead_streak=0, last_evaluated=now, last_skipped=None
                )
            out.append(Entry(old.schedule, state))
            return [out[0] if e.schedule.id == old.schedule.id else e for e in entries]

        self.change(fn)
        return out[0]


def _named(entries: list[Entry], name: str) -> Entry:
    for entry in entries:
        if entry.schedule.name == name or entry.schedule.id == name:
            return entry
    known = ", ".join(e.schedule.name for e in entries) or "none"
    raise NoSuchSchedule(f"no schedule named {name!r} (schedules: {known})")


def validate(schedule: Schedule) -> Schedule:
    """The schedule with its cron tidied; InvalidInput naming the first bad field."""
    if not _NAME.match(schedule.name or ""):
        raise InvalidInput(
            f"a schedule name is 1 to 64 letters, digits, spaces, '.', '_' or '-', not {schedule.name!r}"
        )
    cron = check_cron(schedule.cron)
    check_zone(schedule.tz)
    if schedule.catch_up not in CATCH_UP:
        raise InvalidInput(f"catch-up must be one of {', '.join(CATCH_UP)}, not {schedule.catch_up!r}")
    if schedule.overlap not in OVERLAP:
        raise InvalidInput(f"overlap must be one of {', '.join(OVERLAP)}, not {schedule.overlap!r}")
    if schedule.priority not in (p.value for p in Priority):
        raise InvalidInput(f"priority must be interactive or background, not {schedule.priority!r}")
    if schedule.max_attempts is not None and not 1 <= schedule.max_attempts <= 100:
        raise InvalidInput(f"max attempts must be between 1 and 100, not {schedule.max_attempts!r}")
    if not isinstance(schedule.pause_after, int) or schedule.pause_after < 0:
        raise InvalidInput(f"pause after must be 0 (never) or more, not {schedule.pause_after!r}")
    if not schedule.kind:
        raise InvalidInput("a schedule needs a job kind")
    return dataclasses.replace(schedule, cron=cron)


def new_schedule(name: str, cron: str, kind: str, payload: Any, *, now: float, **options: Any) -> Schedule:
    """A validated schedule with a fresh id, created at ``now`` (the zone defaults to the user's)."""
    options.setdefault("tz", local_zone_name())
    return validate(
        Schedule(id=secrets.token_hex(5), name=name, cron=cron, kind=kind, input=payload, created_at=now, **options)
    )


# --------------------------------------------------------------------------- the scheduler


@dataclass(frozen=True)
class TickReport:
    """What one :meth:`Scheduler.tick` did: job ids made (new ones only), schedules paused."""

    created: tuple[str, ...] = ()
    paused: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


class Scheduler:
    """Evaluates every schedule of a data dir against its queue.

    Call :meth:`tick` often (the lease driver does, every few seconds at most): it
    notes how the pending runs ended, then submits a job for each window the rules
    say should run. Safe to run in every process on the data dir at once.

    Args:
        queue: the :class:`~desktop_queue.core.queue.Queue` (anything with ``submit``,
            ``raw_jobs`` and ``clock``).
        min_interval_s: :meth:`maybe_tick` does nothing sooner than this after the last tick.
    """

    def __init__(self, queue: Any, *, min_interval_s: float = 5.0) -> None:
        self.queue = queue
        self.book = ScheduleBook(queue.data_dir, queue.clock.now)
        self.min_interval_s = min_interval_s
        self._last_tick: float | None = None

    def maybe_tick(self) -> TickReport | None:
        """:meth:`tick` unless one ran less than ``min_interval_s`` ago (monotonic time)."""
        mono = self.queue.clock.monotonic()
        if self._last_tick is not None and mono - self._last_tick < self.min_interval_s:
            return None
        self._last_tick = mono
        return self.tick()

    def jobs(self, ids: set[str]) -> dict[str, dict[str, Any]]:
        """The jobs with these ids: the hot ones in one read, a finished one moved to the archive by id."""
        if not ids:
            return {}
        found = {str(j["id"]): dict(j) for j in self.queue.raw_jobs(ids)}
        for job_id in ids - found.keys():
            try:
                found[job_id] = self.queue.get(job_id).to_json(with_events=False, with_input=False)
            except NoSuchJob:
                continue  # purged: let go below
        return found

    def _submit(self, schedule: Schedule, key: str, window: float | None) -> tuple[str, bool]:
        title = schedule.title or schedule.name
        result = self.queue.submit(
            schedule.kind,
            schedule.job_input(),
            key=key,
            title=title,
            priority=schedule.priority,
            max_attempts=schedule.max_attempts,
            actor=Actor.SYSTEM,
        )
        return result.job.id, result.duplicate

    def tick(self, now: float | None = None) -> TickReport:
        """Evaluates every schedule at ``now`` (default: the queue's clock)."""
        if not self.book.path.exists():
            return TickReport()  # no schedule was ever added here: not even a lock file
        at = self.queue.clock.now() if now is None else now
        created: list[str] = []
        paused: list[str] = []
        errors: list[str] = []

        def fn(entries: list[Entry]) -> list[Entry] | None:
            ids = {i for e in entries for i in e.state.pending}
            jobs = self.jobs(ids)
            finished = {
                i: j for i, j in jobs.items() if j.get("state") in (State.SUCCEEDED, State.DEAD, State.CANCELLED)
            }
            # a pending job no longer found (purged) is let go, as if cancelled
            finished.update({i: {"state": "gone"} for i in ids if i not in jobs})
            out: list[Entry] = []
            dirty = False
            for entry in entries:
                schedule, state = entry.schedule, entry.state
                new = observe(schedule, state, finished) if state.pending else state
                if new.paused and not state.paused:
                    paused.append(schedule.name)
                active = any(jobs.get(i, {}).get("state") in (State.QUEUED, State.RUNNING) for i in new.pending)
                try:
                    decided = plan(schedule, new, at, previous_active=active)
                except InvalidInput as exc:  # a hand-edited cron or zone: say so, keep the others going
                    errors.append(f"schedule {schedule.name}: {exc}")
                    out.append(Entry(schedule, new))
                    dirty = dirty or new != state
                    continue
                pending = list(new.pending)
                last_job, last_window = new.last_job_id, new.last_window
                for window in decided.run:
                    try:
                        job_id, duplicate = self._submit(schedule, f"schedule:{schedule.id}:{iso_utc(window)}", window)
                    except QueueError as exc:
                        errors.append(f"schedule {schedule.name}: {exc}")
                        continue
                    if not duplicate:
                        created.append(job_id)
                    if job_id not in pending:
                        pending.append(job_id)
                    last_job, last_window = job_id, window
                # nothing due: the state stays as it is, so a quiet tick writes nothing
                if not new.paused and decided.due:
                    new = dataclasses.replace(
                        new,
                        last_evaluated=at,
                        last_job_id=last_job,
                        last_window=last_window,
                        pending=tuple(pending[-MAX_PENDING:]),
                        last_skipped=decided.skipped,
                    )
                dirty = dirty or new != state
                out.append(Entry(schedule, new))
            return out if dirty else None

        self.book.change(fn)
        return TickReport(tuple(created), tuple(paused), tuple(errors))

    def run_now(self, name: str) -> str:
        """Submits the schedule's job at once (a person asked: no overlap rule); returns its id."""
        out: list[str] = []

        def fn(entries: list[Entry]) -> list[Entry]:
            entry = _named(entries, name)
            now = self.queue.clock.now()
            key = f"schedule:{entry.schedule.id}:manual:{iso_utc(now)}:{secrets.token_hex(3)}"
            job_id, _ = self._submit(entry.schedule, key, None)
            out.append(job_id)
            state = dataclasses.replace(
                entry.state, last_job_id=job_id, pending=(*entry.state.pending, job_id)[-MAX_PENDING:]
            )
            return [Entry(e.schedule, state) if e.schedule.id == entry.schedule.id else e for e in entries]

        self.book.change(fn)
        return out[0]

    def close(self) -> None:
        self.book.close()


# --------------------------------------------------------------------------- views


@dataclass(frozen=True)
class LastRun:
    """How a schedule's latest run went, and its last good result when that run failed.

    Attributes:
        job_id, state: the latest run (None: never ran).
        good_job_id, good_at: the latest succeeded run.
        stale: True when the latest run did not succeed but an older one did: the
            good result is shown, marked as not current.
    """

    job_id: str | None
    state: str | None
    good_job_id: str | None
    good_at: float | None
    stale: bool


def last_run(entry: Entry, jobs: Mapping[str, Mapping[str, Any]]) -> LastRun:
    """The latest run of ``entry`` from ``jobs`` (id -> job dict, e.g. ``queue.raw_jobs``)."""
    state = entry.state
    job = jobs.get(state.last_job_id or "")
    current = str(job.get("state")) if job is not None else None
    good_id, good_at = state.last_good_job_id, state.last_good_at
    if current == State.SUCCEEDED and job is not None:
        good_id, good_at = state.last_job_id, job.get("finished_at")
    stale = bool(good_id) and current in (State.DEAD, State.CANCELLED) and good_id != state.last_job_id
    return LastRun(state.last_job_id, current, good_id, good_at, stale)


@functools.lru_cache(maxsize=256)  # (a table asks for every row it paints)
def describe_cron(cron: str) -> str | None:
    """A cron expression in words, as people check one: ``"At 06:30, Monday through Friday"``.

    None when it cannot be told (an ``@daily`` shorthand, say): the expression then
    speaks for itself. The words are English like the rest of the app, whatever the
    system's locale, and times read on a 24-hour clock like every other time shown.
    """
    from cron_descriptor import ExpressionDescriptor, Options
    from cron_descriptor.Exception import FormatException, MissingFieldException, WrongArgumentException

    options = Options()
    options.locale_code = "en_US"
    options.use_24hour_time_format = True
    try:
        return str(ExpressionDescriptor(cron, options).get_description())
    except (FormatException, MissingFieldException, WrongArgumentException, ValueError, IndexError, KeyError):
        return None


def entry_json(entry: Entry, now: float, jobs: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """A schedule for ``schedule list --json`` and the API: times in ISO 8601 UTC, ``when`` in words."""
    nxt = entry.next_run(now)
    data: dict[str, Any] = {
        **entry.schedule.to_json(),
        "when": describe_cron(entry.schedule.cron),
        "next_run": iso_utc(nxt) if nxt is not None else None,
        "paused": entry.state.paused,
        "paused_reason": entry.state.paused_reason,
        "last_window": iso_utc(entry.state.last_window) if entry.state.last_window is not None else None,
        "last_job_id": entry.state.last_job_id,
        "last_good_job_id": entry.state.last_good_job_id,
        "dead_streak": entry.state.dead_streak,
        "last_skipped": entry.state.last_skipped,
    }
    if jobs is not None:
        run = last_run(entry, jobs)
        data["last_state"] = run.state
        data["last_good_at"] = iso_utc(run.good_at) if run.good_at is not None else None
        data["last_good_stale"] = run.stale
    return data


#: how much of the last good result a schedule shows
PREVIEW_CHARS = 300


def result_preview(queue: Any, job_id: str | None, limit: int = PREVIEW_CHARS) -> str | None:
    """The start of a succeeded job's result as text (one line; ``image · 1.2 MB`` for an artifact), or None."""
    from desktop_queue.core.result_view import read_result, show_text

    if not job_id:
        return None
    try:
        job = queue.get(job_id)
    except NoSuchJob:
        return None
    content = read_result(queue.results, job)
    if not content.has_result:
        return None
    if content.text is None:
        return content.message
    text, cut = show_text(" ".join(content.text.split()), limit)
    return text + ("…" if cut else "")
