"""Trend alerts: rules over the queue's signals that fire once when a condition starts and clear once when it ends.

Three layers, each testable alone:

- :func:`evaluate` is pure: ``(rules, signals, previous_state, now) -> (new_state, transitions)``.
  Each rule turns :class:`Signals` into a value per *subject* (``""`` for the whole queue,
  a profile name for the breaker and budget rules). An alert **fires** once the value has
  stayed at or above the rule's ``threshold`` for ``for_s``, and **clears** once it has
  stayed below ``clear_below`` (the hysteresis band: a value that wobbles around the
  threshold does not flap) for ``clear_s``. Nothing fires per job.
- :func:`gather` builds :class:`Signals` from a queue, flow control and the spend ledger.
  It is the only place that knows where figures come from, so it can later read the
  windowed metrics instead of the hot set.
- :class:`AlertBook` keeps the state (``alerts-state.json``) and the history (``alerts.jsonl``,
  append-only) in the data dir. :meth:`AlertBook.update` decides under a file lock against
  the persisted state, so that with several processes on one data dir (the window and a
  ``work``) each transition is recorded once.

Rules come with defaults (:data:`DEFAULT_RULES`); people change thresholds in the config
dir's ``alerts.json`` (:func:`load_rules` / :func:`save_rules`), with ``desktop-queue
alerts rules`` or in the window.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from desktop_queue.core.errors import QueueError
from desktop_queue.core.model import EventType, State, events_of
from desktop_queue.core.paths import config_dir
from desktop_queue.core.store.fileio import append_lines, atomic_write, locked, make_dirs, set_aside_if_possible
from desktop_queue.core.wording import counted

log = logging.getLogger(__name__)

RULES_FILE = "alerts.json"
RULES_FORMAT = "desktop-queue.alert-rules"
STATE_FILE = "alerts-state.json"  # (not alerts.json: the config dir may be the data dir)
STATE_FORMAT = "desktop-queue.alert-state"
HISTORY_FILE = "alerts.jsonl"
LOCK_FILE = ".alerts.lock"
SCHEMA_VERSION = 1

#: how far back the gatherer looks for timed events (429s, dead letters, waits)
LOOKBACK_S = 3600.0
#: backlog samples kept in the state (one a scan; the trend windows are minutes long)
MAX_SAMPLES = 240

FIRED = "fired"
CLEARED = "cleared"

# rule names
BACKLOG_GROWING = "backlog_growing"
QUEUE_WAIT_P95 = "queue_wait_p95"
DEAD_LETTERS_GROWING = "dead_letters_growing"
THROTTLE_SPIKE = "throttle_spike"
LONG_RUNNING = "long_running"
BREAKER_OPEN = "breaker_open"
BUDGET_NEARLY_SPENT = "budget_nearly_spent"
JOBS_STUCK = "jobs_stuck"

#: the rules that look back over ``window_s`` (the others read the present)
USES_WINDOW = frozenset({BACKLOG_GROWING, QUEUE_WAIT_P95, DEAD_LETTERS_GROWING, THROTTLE_SPIKE})
#: the fields a person may change, and what they must be
EDITABLE = ("threshold", "clear_below", "window_s", "for_s", "clear_s", "min_s")


class RuleError(ValueError):
    """A rule setting that does not make sense (unknown rule or field, bad number)."""


@dataclass(frozen=True)
class Rule:
    """One alert rule.

    Attributes:
        name: the rule (one of :data:`DEFAULT_RULES`).
        threshold: the value at which the condition starts.
        clear_below: the value below which it ends (None: ``threshold``); lower than the
            threshold, it is a hysteresis band.
        window_s: how far back a trend or a count looks.
        for_s: how long the condition must hold before the alert fires.
        clear_s: how long it must be over before the alert clears.
        min_s: for ``long_running``: jobs younger than this never count.
        enabled: a disabled rule fires nothing (and clears what it had fired).
        text: what the rule watches, for people.
    """

    name: str
    threshold: float
    clear_below: float | None = None
    window_s: float = 600.0
    for_s: float = 0.0
    clear_s: float = 60.0
    min_s: float = 0.0
    enabled: bool = True
    text: str = ""

    @property
    def clear_level(self) -> float:
        return self.threshold if self.clear_below is None else min(self.clear_below, self.threshold)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


DEFAULT_RULES: tuple[Rule, ...] = (
    Rule(BACKLOG_GROWING, 5, window_s=600, clear_s=120, text="the backlog grew by this many jobs over the window"),
    Rule(
        QUEUE_WAIT_P95,
        300,
        clear_below=240,
        window_s=900,
        for_s=60,
        clear_s=300,
        text="p95 queue wait (seconds) of jobs leased or waiting in the window",
    ),
    Rule(DEAD_LETTERS_GROWING, 3, window_s=900, clear_s=300, text="jobs dead-lettered in the window"),
    Rule(THROTTLE_SPIKE, 10, clear_below=3, window_s=300, clear_s=300, text="429 / rate-limit answers in the window"),
    Rule(LONG_RUNNING, 3.0, min_s=120, clear_s=30, text="a running job's time as a multiple of its usual run time"),
    Rule(BREAKER_OPEN, 1, for_s=300, clear_s=60, text="a profile's circuit breaker not closed (open or probing)"),
    Rule(
        BUDGET_NEARLY_SPENT,
        0.9,
        clear_below=0.8,
        clear_s=0,
        text="share of a profile's daily or monthly budget spent",
    ),
    Rule(JOBS_STUCK, 1, clear_s=60, text="queued jobs far past their run time while capacity is free"),
)
DEFAULTS: dict[str, Rule] = {r.name: r for r in DEFAULT_RULES}


# ---------------------------------------------------------------------- signals


@dataclass(frozen=True)
class Signals:
    """What the rules look at, gathered once per scan.

    Attributes:
        at: when they were gathered.
        backlog: jobs queued (runnable now or later).
        waits: ``(when, seconds)`` queue waits: jobs leased recently (how long they
            waited) and jobs runnable now that still wait (how long so far).
        throttles: times of 429 / rate-limit answers (the last hour).
        dead_lettered: times jobs became dead letters (the last hour).
        running: ``(job id, seconds so far, usual seconds or None)`` of each running job.
        breakers: profile -> its breaker state (``closed``, ``open``, ``half_open``).
        budgets: profile -> the largest share of a budget limit it has spent (0..1+).
        stuck: ids of queued jobs the repair scan found stuck.
    """

    at: float
    backlog: int = 0
    waits: tuple[tuple[float, float], ...] = ()
    throttles: tuple[float, ...] = ()
    dead_lettered: tuple[float, ...] = ()
    running: tuple[tuple[str, float, float | None], ...] = ()
    breakers: Mapping[str, str] = field(default_factory=dict)
    budgets: Mapping[str, float] = field(default_factory=dict)
    stuck: tuple[str, ...] = ()


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)


@dataclass(frozen=True)
class Reading:
    """A rule's value for one subject, and what to tell people about it."""

    value: float
    text: str


def _backlog_growth(rule: Rule, samples: Sequence[tuple[float, float]], now: float) -> Reading | None:
    """Growth of the backlog over the window, when it grew steadily (old <= middle <= now)."""
    window = [(t, v) for t, v in samples if t >= now - rule.window_s]
    if len(window) < 2 or window[-1][0] - window[0][0] < rule.window_s * 0.9:
        return None  # not watched for a whole window yet: no trend to speak of
    first, last = window[0][1], window[-1][1]
    middle = min(window, key=lambda s: abs(s[0] - (window[0][0] + window[-1][0]) / 2))[1]
    grew = last - first if first <= middle <= last else 0.0
    minutes = round(rule.window_s / 60)
    return Reading(grew, f"the backlog went from {first:.0f} to {last:.0f} jobs in {minutes} min")


def readings(rule: Rule, signals: Signals, samples: Sequence[tuple[float, float]], now: float) -> dict[str, Reading]:
    """The rule's value per subject (absent subject: the condition does not hold)."""
    since = now - rule.window_s
    if rule.name == BACKLOG_GROWING:
        got = _backlog_growth(rule, samples, now)
        return {"": got} if got is not None else {}
    if rule.name == QUEUE_WAIT_P95:
        p95 = _percentile([w for t, w in signals.waits if t >= since], 95)
        return {"": Reading(p95, f"queue wait p95 is {p95:.0f} s")} if p95 is not None else {}
    if rule.name == DEAD_LETTERS_GROWING:
        n = sum(1 for t in signals.dead_lettered if t >= since)
        return {"": Reading(n, f"{counted(n, 'job')} dead-lettered in {round(rule.window_s / 60)} min")}
    if rule.name == THROTTLE_SPIKE:
        n = sum(1 for t in signals.throttles if t >= since)
        return {"": Reading(n, f"{counted(n, 'rate-limit (429) answer')} in {round(rule.window_s / 60)} min")}
    if rule.name == LONG_RUNNING:
        worst: tuple[float, str, float, float] | None = None
        for job_id, elapsed, usual in signals.running:
            if usual is None or usual <= 0 or elapsed < rule.min_s:
                continue
            ratio = elapsed / usual
            if worst is None or ratio > worst[0]:
                worst = (ratio, job_id, elapsed, usual)
        if worst is None:
            return {}
        ratio, job_id, elapsed, usual = worst
        return {"": Reading(ratio, f"job {job_id[:8]} has run {elapsed:.0f} s, {ratio:.1f}× its usual {usual:.0f} s")}
    if rule.name == BREAKER_OPEN:
        return {
            p: Reading(1.0, f"profile {p}: the circuit breaker is {s.replace('_', '-')}")
            for p, s in signals.breakers.items()
            if s != "closed"
        }
    if rule.name == BUDGET_NEARLY_SPENT:
        return {
            p: Reading(share, f"profile {p} has spent {share:.0%} of its budget")
            for p, share in signals.budgets.items()
        }
    if rule.name == JOBS_STUCK:
        n = len(signals.stuck)
        return {"": Reading(n, f"{counted(n, 'queued job')} stuck past their run time while capacity is free")}
    return {}


# ---------------------------------------------------------------------- the pure evaluation


@dataclass(frozen=True)
class Track:
    """What the evaluation remembers about one (rule, subject).

    Attributes:
        active: the alert has fired and not cleared.
        since: when the value last crossed into the condition (None: not in it).
        calm_since: while active, when the value last fell below the clear level.
        fired_at: when the active alert fired.
        text: the last reading's text.
        value: the last value.
    """

    active: bool = False
    since: float | None = None
    calm_since: float | None = None
    fired_at: float | None = None
    text: str = ""
    value: float | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Track:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})


@dataclass(frozen=True)
class AlertState:
    """Everything :func:`evaluate` carries from one scan to the next.

    Attributes:
        tracks: ``"rule"`` or ``"rule:subject"`` -> its :class:`Track`.
        samples: ``(when, backlog)`` of recent scans, for the backlog trend.
        seq: the number of transitions recorded so far (each transition's id).
    """

    tracks: Mapping[str, Track] = field(default_factory=dict)
    samples: tuple[tuple[float, float], ...] = ()
    seq: int = 0

    def active(self) -> dict[str, Track]:
        return {k: t for k, t in self.tracks.items() if t.active}

    def to_json(self) -> dict[str, Any]:
        return {
            "tracks": {k: t.to_json() for k, t in self.tracks.items()},
            "samples": [list(s) for s in self.samples],
            "seq": self.seq,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> AlertState:
        tracks = {str(k): Track.from_json(v) for k, v in (raw.get("tracks") or {}).items() if isinstance(v, Mapping)}
        samples = tuple((float(s[0]), float(s[1])) for s in raw.get("samples") or () if len(s) == 2)
        return cls(tracks, samples, int(raw.get("seq") or 0))


@dataclass(frozen=True)
class Transition:
    """An alert fired or cleared: one line of the history.

    Attributes:
        id: a number unique in this data dir (the state's ``seq``).
        rule: the rule's name.
        subject: ``""`` (the queue) or what it is about (a profile).
        kind: :data:`FIRED` or :data:`CLEARED`.
        at: when.
        text: what people are told.
        value: the value that decided it.
    """

    id: int
    rule: str
    subject: str
    kind: str
    at: float
    text: str
    value: float | None = None

    @property
    def key(self) -> str:
        return _key(self.rule, self.subject)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Transition:
        return cls(
            id=int(raw["id"]),
            rule=str(raw["rule"]),
            subject=str(raw.get("subject") or ""),
            kind=str(raw["kind"]),
            at=float(raw["at"]),
            text=str(raw.get("text") or ""),
            value=raw.get("value"),
        )

    def describe(self) -> str:
        """``Alert: …`` / ``Cleared: …`` for a banner or a log line."""
        return ("Alert: " if self.kind == FIRED else "Cleared: ") + self.text


def _key(rule: str, subject: str) -> str:
    return f"{rule}:{subject}" if subject else rule


def _split(key: str) -> tuple[str, str]:
    rule, _, subject = key.partition(":")
    return rule, subject


def _step(rule: Rule, subject: str, track: Track, reading: Reading | None, now: float) -> tuple[Track, str | None]:
    """One (rule, subject)'s next track, and the transition it makes (None: none)."""
    value = reading.value if reading is not None else None
    text = reading.text if reading is not None else track.text
    if not track.active:
        if rule.enabled and value is not None and value >= rule.threshold:
            since = track.since if track.since is not None else now
            if now - since >= rule.for_s:
                return Track(True, since, None, now, text, value), FIRED
            return Track(False, since, None, None, text, value), None
        return Track(False, None, None, None, text, value), None
    # active: clear only after the value stays under the clear level for clear_s
    if not rule.enabled:
        return Track(False, None, None, None, f"{text} (rule disabled)", value), CLEARED
    if value is not None and value >= rule.clear_level:
        return Track(True, track.since, None, track.fired_at, text, value), None
    calm = track.calm_since if track.calm_since is not None else now
    if now - calm >= rule.clear_s:
        if reading is None:  # nothing to read any more: say what is over, not the last reading
            text = calm_text(rule.name, subject, track.text)
        return Track(False, None, None, None, text, value), CLEARED
    return Track(True, track.since, calm, track.fired_at, text, value), None


#: what a cleared alert says when its condition left nothing to read
_CALM = {
    BREAKER_OPEN: "profile {subject}: the circuit breaker is closed again",
    LONG_RUNNING: "no job runs far longer than usual now",
    QUEUE_WAIT_P95: "no job has waited in the window",
    BUDGET_NEARLY_SPENT: "profile {subject}: no budget is nearly spent now",
}


def calm_text(rule: str, subject: str, last: str) -> str:
    """The text of a cleared alert whose subject has no reading now (a breaker closed, a job done)."""
    template = _CALM.get(rule)
    return template.format(subject=subject) if template else f"over: {last}"


def evaluate(
    rules: Iterable[Rule], signals: Signals, previous: AlertState, now: float
) -> tuple[AlertState, list[Transition]]:
    """The alerts' next state and the transitions from ``previous`` to it.

    Pure: the same arguments give the same answer. An alert fires when its rule's value
    has been at or above the threshold for ``for_s``; it clears when the value has been
    below the clear level (or absent) for ``clear_s``. A value between the two levels
    keeps an active alert active and a quiet one quiet.

    Args:
        rules: the rules (unknown rule names give no readings).
        signals: what was gathered now.
        previous: the state the last evaluation returned (``AlertState()`` at first).
        now: the time of this evaluation.
    """
    samples = tuple(s for s in (*previous.samples, (now, float(signals.backlog))) if s[0] >= now - 2 * 86_400)
    samples = tuple(sorted(samples))[-MAX_SAMPLES:]  # (two processes' scans interleave)
    tracks: dict[str, Track] = {}
    transitions: list[Transition] = []
    seq = previous.seq
    by_name = {r.name: r for r in rules}
    for rule in by_name.values():
        got = readings(rule, signals, samples, now) if rule.enabled else {}
        keys = {_key(rule.name, s) for s in got}
        keys |= {k for k in previous.tracks if _split(k)[0] == rule.name}
        for key in sorted(keys):
            subject = _split(key)[1]
            old = previous.tracks.get(key, Track())
            new, kind = _step(rule, subject, old, got.get(subject), now)
            if kind is not None:
                seq += 1
                transitions.append(Transition(seq, rule.name, subject, kind, now, new.text, new.value))
            if new.active or new.since is not None:
                tracks[key] = new  # a quiet track with nothing pending is not worth keeping
    # an active alert of a rule that no longer exists still clears once
    for key, old in previous.tracks.items():
        rule_name, subject = _split(key)
        if rule_name not in by_name and old.active:
            seq += 1
            transitions.append(Transition(seq, rule_name, subject, CLEARED, now, f"{old.text} (rule removed)", None))
    return AlertState(tracks, samples, seq), transitions


# ---------------------------------------------------------------------- rules in the config dir


def rules_path(directory: Path | str | None = None) -> Path:
    return (Path(directory) if directory is not None else config_dir()) / RULES_FILE


def _number(name: str, field_name: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise RuleError(f"{name}.{field_name} must be a number, not {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise RuleError(f"{name}.{field_name} must be a finite number of zero or more, not {value!r}")
    return number


def apply_setting(rules: Mapping[str, Rule], name: str, field_name: str, value: Any) -> dict[str, Rule]:
    """``rules`` with ``name.field_name = value`` (checked)."""
    if name not in rules:
        raise RuleError(f"no alert rule {name!r} (rules: {', '.join(sorted(rules))})")
    if field_name == "enabled":
        if not isinstance(value, bool):
            raise RuleError(f"{name}.enabled must be true or false")
        return {**rules, name: dataclasses.replace(rules[name], enabled=value)}
    if field_name not in EDITABLE:
        raise RuleError(f"{name} has no setting {field_name!r} (settings: {', '.join(EDITABLE)}, enabled)")
    number = None if field_name == "clear_below" and value is None else _number(name, field_name, value)
    changes: dict[str, Any] = {field_name: number}
    return {**rules, name: dataclasses.replace(rules[name], **changes)}


def load_rules(directory: Path | str | None = None, notices: list[str] | None = None) -> dict[str, Rule]:
    """The rules: the defaults with the config dir's changes applied.

    A damaged file or a bad setting is reported in ``notices`` (and skipped), never fatal:
    alerts keep working on the defaults.
    """
    rules = dict(DEFAULTS)
    path = rules_path(directory)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return rules
    except OSError as exc:
        if notices is not None:
            notices.append(f"could not read {path}: {exc.strerror or exc}; default alert rules in use")
        return rules
    try:
        doc = orjson.loads(raw)
        if not isinstance(doc, dict) or doc.get("format") != RULES_FORMAT:
            raise ValueError("not an alert rules file")
        if int(doc.get("schema_version", 0)) > SCHEMA_VERSION:
            raise ValueError("written by a newer version")
        changes = doc.get("rules") or {}
        if not isinstance(changes, dict):
            raise ValueError("'rules' is not an object")
    except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
        if notices is not None:
            notices.append(f"{path} is damaged ({exc}); default alert rules in use")
        return rules
    for name, settings in changes.items():
        if not isinstance(settings, dict):
            continue
        for field_name, value in settings.items():
            try:
                rules = apply_setting(rules, name, field_name, value)
            except RuleError as exc:
                if notices is not None:
                    notices.append(f"{path}: {exc}; ignored")
    return rules


def save_rules(rules: Mapping[str, Rule], directory: Path | str | None = None) -> Path:
    """Writes the rules' differences from the defaults to the config dir (atomically)."""
    path = rules_path(directory)
    make_dirs(path.parent)
    changes: dict[str, dict[str, Any]] = {}
    for name, rule in rules.items():
        default = DEFAULTS.get(name)
        if default is None:
            continue
        diff = {f: getattr(rule, f) for f in (*EDITABLE, "enabled") if getattr(rule, f) != getattr(default, f)}
        if diff:
            changes[name] = diff
    doc = {"format": RULES_FORMAT, "schema_version": SCHEMA_VERSION, "rules": changes}
    atomic_write(path, orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    return path


# ---------------------------------------------------------------------- the gatherer


def _budget_shares(flow: Any, budgets: Mapping[str, Any], now: float) -> dict[str, float]:
    ledger = getattr(flow, "ledger", None) if flow is not None else None
    if ledger is None or not budgets:
        return {}
    out: dict[str, float] = {}
    for profile, budget in budgets.items():
        if budget is None or not budget.is_set():
            continue
        try:
            day, month = ledger.spent(profile, "day", now), ledger.spent(profile, "month", now)
        except (OSError, ValueError, QueueError):
            continue  # an unreadable ledger: no budget signal this scan (the spend view says why)
        shares = []
        for limit, used in (
            (budget.usd_per_day, day.usd),
            (budget.usd_per_month, month.usd),
            (budget.tokens_per_day, day.tokens),
            (budget.tokens_per_month, month.tokens),
        ):
            if limit is not None:
                shares.append(1.0 if limit <= 0 else used / limit)
        if shares:
            out[profile] = round(max(shares), 4)
    return out


#: events after which a job waits again; its queue wait counts from when it may run
_READY_AGAIN = frozenset(
    {
        EventType.SUBMITTED,
        EventType.RETRIED,
        EventType.RETRY_SCHEDULED,
        EventType.THROTTLED,
        EventType.LEASE_EXPIRED,
        EventType.RELEASED,
    }
)


def _ready_at(at: float, detail: Mapping[str, Any]) -> float:
    """When a job may run after an event at ``at``: a backoff, a Retry-After or a later ``run_after``."""
    ready = at
    for key in ("delay_s", "retry_after_s"):
        value = detail.get(key)
        if isinstance(value, (int, float)):
            ready = max(ready, at + float(value))
    run_after = detail.get("run_after")
    if isinstance(run_after, (int, float)):
        ready = max(ready, float(run_after))
    return ready


def gather(
    queue: Any,
    *,
    flow: Any = None,
    budgets: Mapping[str, Any] | None = None,
    run_times: Any = None,
    stuck: Iterable[str] = (),
    now: float | None = None,
) -> Signals:
    """The signals of one scan, from the hot set (jobs changed in the last hour only).

    Args:
        queue: the :class:`~desktop_queue.core.queue.Queue`.
        flow: its :class:`~desktop_queue.core.flow.FlowControl` (breakers, and through
            its ledger the spend), read only; None: no breaker or budget signals.
        budgets: profile -> :class:`~desktop_queue.core.ledger.Budget`.
        run_times: a :class:`~desktop_queue.core.estimate.RunTimes` (usual run times);
            None: built from the hot set.
        stuck: the ids the repair scan found stuck.
        now: the time (default: the queue's clock).
    """
    from desktop_queue.core.backend import finished_since, scan_jobs
    from desktop_queue.core.estimate import model_of, run_times_of

    at = queue.clock.now() if now is None else now
    since = at - LOOKBACK_S
    times = run_times if run_times is not None else run_times_of(queue)

    def fn(
        st: Any,
    ) -> tuple[int, list[tuple[float, float]], list[float], list[float], list[tuple[str, float, float | None]]]:
        waits: list[tuple[float, float]] = []
        throttles: list[float] = []
        dead: list[float] = []
        running: list[tuple[str, float, float | None]] = []
        hot = list(scan_jobs(st))
        queued = [job for job in hot if job["state"] == State.QUEUED]
        for job in queued:
            ready = job.get("run_after", job["created_at"])
            if ready <= at:
                waits.append((at, at - ready))
        for job in hot:
            if job["state"] != State.RUNNING:
                continue
            started = job.get("started_at")
            if started is None:
                continue
            usual = times.usual(str(job.get("kind") or ""), model_of(job))
            running.append((job["id"], max(0.0, at - started), usual.seconds if usual is not None else None))
        for job in hot:
            if job.get("updated_at", job["created_at"]) < since:
                continue  # nothing of it happened in the last hour: its events are not parsed
            ready = job["created_at"]
            for ev in events_of(job):
                kind, t = ev["type"], ev["at"]
                if kind in _READY_AGAIN:
                    ready = _ready_at(t, ev.get("detail") or {})
                    if kind == EventType.THROTTLED and t >= since:
                        throttles.append(t)
                elif kind == EventType.LEASED and t >= since:
                    waits.append((t, max(0.0, t - ready)))
                elif kind == EventType.DEAD_LETTERED and t >= since:
                    dead.append(t)
        # the dead letters of the hour that left the hot set (it keeps the newest finished
        # jobs: a few failures among many successes are archived before the next scan)
        seen = {job["id"] for job in hot}
        dead += [t for job_id, t in finished_since(st, since, State.DEAD).items() if job_id not in seen]
        return len(queued), waits, throttles, dead, running

    backlog, waits, throttles, dead, running = queue.store.read(fn)
    breakers: dict[str, str] = {}
    if flow is not None:
        for profile in flow.profiles():
            state = flow.breaker_state(profile)
            if state is not None:
                breakers[profile] = str(state)
    return Signals(
        at=at,
        backlog=backlog,
        waits=tuple(waits),
        throttles=tuple(sorted(throttles)),
        dead_lettered=tuple(sorted(dead)),
        running=tuple(running),
        breakers=breakers,
        budgets=_budget_shares(flow, budgets or {}, at),
        stuck=tuple(stuck),
    )


# ---------------------------------------------------------------------- the book in the data dir


@dataclass(frozen=True)
class History:
    """The alert history as read: transitions oldest first, and what was wrong with the file."""

    transitions: tuple[Transition, ...]
    notices: tuple[str, ...] = ()


class AlertBook:
    """The alert state and history of one data dir, shared by every process on it.

    ``alerts-state.json`` holds the :class:`AlertState` (written atomically); ``alerts.jsonl``
    the history, one transition a line, appended and fsynced. Both change only under
    ``.alerts.lock``: a process evaluates against the state as persisted, so that two
    processes scanning at once record each transition once.

    A crash between the two writes loses nothing: the state is written first and lists
    the transitions not yet in the history (``unlogged``); whoever takes the lock next
    appends those that are missing.

    Args:
        data_dir: the data directory.
    """

    def __init__(self, data_dir: Path | str) -> None:
        self.dir = Path(data_dir)
        self.state_path = self.dir / STATE_FILE
        self.history_path = self.dir / HISTORY_FILE
        self.notices: list[str] = []

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return locked(self.dir / LOCK_FILE)

    def _read_state(self) -> tuple[AlertState, list[Transition]]:
        try:
            raw = self.state_path.read_bytes()
        except FileNotFoundError:
            return AlertState(), []
        try:
            doc = orjson.loads(raw)
            if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
                raise ValueError("not an alert state file")
            if int(doc.get("schema_version", 0)) > SCHEMA_VERSION:
                raise ValueError("written by a newer version")
            unlogged = [Transition.from_json(t) for t in doc.get("unlogged") or ()]
            return AlertState.from_json(doc.get("state") or {}), unlogged
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as exc:
            return self._set_aside(exc)

    def _set_aside(self, exc: Exception) -> tuple[AlertState, list[Transition]]:
        """Keeps a damaged state file aside; alerts start afresh (the state is derived, the history is not)."""
        aside = set_aside_if_possible(self.state_path)
        self.notices.append(f"the alert state was damaged ({exc}); kept aside as {aside.name}, alerts start afresh")
        log.warning("%s", self.notices[-1])
        return AlertState(), []

    def state(self) -> AlertState:
        """The persisted state (what is active now)."""
        return self._read_state()[0]

    def history(self) -> History:
        """Every transition recorded, oldest first; a torn or damaged line is skipped with a note."""
        try:
            data = self.history_path.read_bytes()
        except FileNotFoundError:
            return History(())
        out: list[Transition] = []
        notices: list[str] = []
        lines = data.split(b"\n")
        for n, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                out.append(Transition.from_json(orjson.loads(line)))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                last = n == len(lines) - 1
                notices.append(
                    "the last alert history line was torn (a crash while writing); it was skipped"
                    if last
                    else f"alert history line {n + 1} is damaged; it was skipped"
                )
        return History(tuple(out), tuple(notices))

    def _append(self, transitions: Sequence[Transition]) -> None:
        if not transitions:
            return
        append_lines(self.history_path, b"".join(orjson.dumps(t.to_json()) + b"\n" for t in transitions))

    def _write_state(self, state: AlertState, unlogged: Sequence[Transition]) -> None:
        doc = {
            "format": STATE_FORMAT,
            "schema_version": SCHEMA_VERSION,
            "state": state.to_json(),
            "unlogged": [t.to_json() for t in unlogged],
        }
        atomic_write(self.state_path, orjson.dumps(doc))

    def _mend(self, unlogged: Sequence[Transition]) -> None:
        """Appends the transitions a crashed update left out of the history (held: the lock)."""
        if unlogged:
            logged = {t.id for t in self.history().transitions}
            self._append([t for t in unlogged if t.id not in logged])

    def update(self, rules: Iterable[Rule], signals: Signals, now: float | None = None) -> list[Transition]:
        """Evaluates ``signals`` against the persisted state; records and returns the transitions.

        Decided under the lock: a second process that evaluates the same condition a
        moment later finds the alert already active and records nothing.
        """
        at = signals.at if now is None else now
        with self._locked():
            previous, unlogged = self._read_state()
            self._mend(unlogged)
            state, transitions = evaluate(rules, signals, previous, at)
            self._write_state(state, transitions)
            self._append(transitions)
            if transitions:
                self._write_state(state, ())
        return transitions

    def active(self) -> list[Transition]:
        """The active alerts as the transitions that fired them (newest first)."""
        state = self.state()
        fired: dict[str, Transition] = {}
        for t in self.history().transitions:
            if t.kind == FIRED:
                fired[t.key] = t
        out = []
        for key, track in state.active().items():
            rule, subject = _split(key)
            found = fired.get(key)
            out.append(found or Transition(0, rule, subject, FIRED, track.fired_at or 0.0, track.text, track.value))
        return sorted(out, key=lambda t: t.at, reverse=True)


class HistoryTail:
    """Reads the transitions appended to the history since the last look (any process's).

    The window shows each transition once, whichever process recorded it. It starts at
    the end of the file: what happened before the window opened is in the history view,
    not announced again.
    """

    def __init__(self, book: AlertBook) -> None:
        self.book = book
        self.offset = self._size()
        self._partial = b""

    def _size(self) -> int:
        try:
            return self.book.history_path.stat().st_size
        except FileNotFoundError:
            return 0

    def new(self) -> list[Transition]:
        size = self._size()
        if size < self.offset:
            self.offset, self._partial = 0, b""  # replaced (a test, a restore): read it again
        if size == self.offset:
            return []
        with open(self.book.history_path, "rb") as f:
            f.seek(self.offset)
            data = self._partial + f.read(size - self.offset)
        self.offset = size
        *lines, self._partial = data.split(b"\n")
        out = []
        for line in lines:
            with contextlib.suppress(orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                out.append(Transition.from_json(orjson.loads(line)))
        return out


__all__ = [
    "AlertBook",
    "AlertState",
    "CLEARED",
    "DEFAULTS",
    "DEFAULT_RULES",
    "FIRED",
    "History",
    "HistoryTail",
    "Reading",
    "Rule",
    "RuleError",
    "Signals",
    "Track",
    "Transition",
    "USES_WINDOW",
    "apply_setting",
    "evaluate",
    "gather",
    "load_rules",
    "readings",
    "rules_path",
    "save_rules",
]
