"""Trend alerts: fire once per start, clear once per end, no flapping, one record across processes."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.alerts import (
    BACKLOG_GROWING,
    BREAKER_OPEN,
    BUDGET_NEARLY_SPENT,
    CLEARED,
    DEAD_LETTERS_GROWING,
    DEFAULTS,
    FIRED,
    LONG_RUNNING,
    QUEUE_WAIT_P95,
    THROTTLE_SPIKE,
    AlertBook,
    AlertState,
    HistoryTail,
    Rule,
    RuleError,
    Signals,
    apply_setting,
    evaluate,
    gather,
    load_rules,
    readings,
    rules_path,
    save_rules,
)
from desktop_queue.core.estimate import RunTimes
from desktop_queue.core.ledger import Budget, Spent
from desktop_queue.core.model import ErrorClass
from desktop_queue.core.outcome import Outcome

REPO = Path(__file__).resolve().parents[2]
T0 = 1_800_000_000.0

#: a rule over the queue-wide 429 count, its value set directly by the test
SPIKE = Rule(THROTTLE_SPIKE, threshold=10, clear_below=4, window_s=60, for_s=20, clear_s=30)


def spike_signals(at: float, n: int) -> Signals:
    """``n`` 429s in the last minute."""
    return Signals(at=at, throttles=tuple(at - 1 for _ in range(n)))


def run(rule: Rule, steps: list[tuple[float, int]]) -> list[tuple[float, str]]:
    """Evaluates ``rule`` over (time step, value) pairs; the transitions' (time, kind)."""
    state, now, out = AlertState(), T0, []
    for dt, value in steps:
        now += dt
        state, transitions = evaluate([rule], spike_signals(now, value), state, now)
        out += [(t.at, t.kind) for t in transitions]
    return out


steps_strategy = st.lists(
    st.tuples(st.floats(min_value=1, max_value=40), st.integers(min_value=0, max_value=20)), max_size=80
)


@settings(max_examples=200, deadline=None)
@given(steps_strategy)
def test_fires_once_per_start_and_clears_once_per_end(steps: list[tuple[float, int]]) -> None:
    state, now = AlertState(), T0
    active = False
    above_since: float | None = None  # reference model of the hysteresis
    calm_since: float | None = None
    for dt, value in steps:
        now += dt
        state, transitions = evaluate([SPIKE], spike_signals(now, value), state, now)
        kinds = [t.kind for t in transitions]
        assert len(kinds) <= 1, "one transition per evaluation at most"
        if not active:
            above_since = (above_since if above_since is not None else now) if value >= SPIKE.threshold else None
            should_fire = above_since is not None and now - above_since >= SPIKE.for_s
            assert kinds == ([FIRED] if should_fire else [])
            if should_fire:
                active, above_since, calm_since = True, None, None
        else:
            calm_since = None if value >= SPIKE.clear_level else (calm_since if calm_since is not None else now)
            should_clear = calm_since is not None and now - calm_since >= SPIKE.clear_s
            assert kinds == ([CLEARED] if should_clear else [])
            if should_clear:
                active, calm_since = False, None
        assert bool(state.active()) == active


@settings(max_examples=100, deadline=None)
@given(steps_strategy)
def test_transitions_alternate_and_ids_grow(steps: list[tuple[float, int]]) -> None:
    state, now, kinds, ids = AlertState(), T0, [], []
    for dt, value in steps:
        now += dt
        state, transitions = evaluate([SPIKE], spike_signals(now, value), state, now)
        kinds += [t.kind for t in transitions]
        ids += [t.id for t in transitions]
    assert kinds == [FIRED, CLEARED] * (len(kinds) // 2) + [FIRED] * (len(kinds) % 2)
    assert ids == sorted(set(ids))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(min_value=1, max_value=60), st.integers(min_value=4, max_value=30)), max_size=60))
def test_no_flapping_within_the_hysteresis_band(steps: list[tuple[float, int]]) -> None:
    """Once fired, a value that stays at or above the clear level never clears it, however it wobbles."""
    fired = run(SPIKE, [(1, 12), (25, 12)])
    assert [k for _t, k in fired] == [FIRED]
    state, now = AlertState(), T0
    for dt, value in [(1, 12), (25, 12), *steps]:
        now += dt
        state, transitions = evaluate([SPIKE], spike_signals(now, value), state, now)
        assert CLEARED not in [t.kind for t in transitions]


def test_a_short_dip_does_not_clear_and_a_short_spike_does_not_fire() -> None:
    # up for 10 s only (for_s is 20): nothing
    assert run(SPIKE, [(1, 15), (10, 15), (1, 0)]) == []
    # fires after 20 s above; a 10 s dip (clear_s is 30) does not clear; a 30 s calm does
    events = run(SPIKE, [(1, 15), (20, 15), (5, 0), (10, 0), (1, 15), (5, 0), (31, 0)])
    assert [k for _t, k in events] == [FIRED, CLEARED]


def test_each_rule_reads_its_signal() -> None:
    now = T0
    usual = 10.0
    sig = Signals(
        at=now,
        backlog=3,
        waits=((now, 400.0), (now, 500.0)),
        throttles=tuple(now - i for i in range(12)),
        dead_lettered=(now - 10, now - 20, now - 30),
        running=(("job-long", 100 * usual, usual), ("job-ok", 5.0, usual)),
        breakers={"openai": "open", "local": "closed"},
        budgets={"openai": 0.95, "local": 0.1},
    )
    rules = [dataclasses.replace(r, for_s=0) for r in DEFAULTS.values()]
    _state, transitions = evaluate(rules, sig, AlertState(), now)
    fired = {(t.rule, t.subject) for t in transitions if t.kind == FIRED}
    assert fired == {
        (QUEUE_WAIT_P95, ""),
        (DEAD_LETTERS_GROWING, ""),
        (THROTTLE_SPIKE, ""),
        (LONG_RUNNING, ""),
        (BREAKER_OPEN, "openai"),
        (BUDGET_NEARLY_SPENT, "openai"),
    }
    long_text = next(t.text for t in transitions if t.rule == LONG_RUNNING)
    assert "job-long"[:8] in long_text and "100.0×" in long_text


def test_backlog_growing_needs_a_whole_window_of_steady_growth() -> None:
    rule = DEFAULTS[BACKLOG_GROWING]  # +5 over 10 minutes
    state, now, kinds = AlertState(), T0, []
    for minute in range(12):  # one more job a minute
        now = T0 + minute * 60
        state, transitions = evaluate([rule], Signals(at=now, backlog=minute), state, now)
        kinds += [(minute, t.kind) for t in transitions]
    # not before (nearly: scans come late) a whole window was watched, though it grew from the start
    assert kinds == [(9, FIRED)]
    for minute in range(12, 30):  # the backlog stays put: growth over the window falls to zero
        now = T0 + minute * 60
        state, transitions = evaluate([rule], Signals(at=now, backlog=11), state, now)
        kinds += [(minute, t.kind) for t in transitions]
    assert [k for _m, k in kinds] == [FIRED, CLEARED]


def test_a_disabled_rule_clears_what_it_fired() -> None:
    state, transitions = evaluate([SPIKE], spike_signals(T0, 15), AlertState(), T0)
    state, transitions = evaluate([SPIKE], spike_signals(T0 + 30, 15), state, T0 + 30)
    assert [t.kind for t in transitions] == [FIRED]
    off = dataclasses.replace(SPIKE, enabled=False)
    state, transitions = evaluate([off], spike_signals(T0 + 31, 15), state, T0 + 31)
    assert [t.kind for t in transitions] == [CLEARED]
    assert "rule disabled" in transitions[0].text
    _state, transitions = evaluate([off], spike_signals(T0 + 90, 15), state, T0 + 90)
    assert transitions == []


# ---------------------------------------------------------------------- rules in the config dir


def test_rules_are_edited_saved_and_loaded(tmp_path: Path) -> None:
    rules = apply_setting(DEFAULTS, THROTTLE_SPIKE, "threshold", "25")
    rules = apply_setting(rules, BUDGET_NEARLY_SPENT, "enabled", False)
    save_rules(rules, tmp_path)
    loaded = load_rules(tmp_path)
    assert loaded[THROTTLE_SPIKE].threshold == 25
    assert loaded[BUDGET_NEARLY_SPENT].enabled is False
    assert loaded[QUEUE_WAIT_P95] == DEFAULTS[QUEUE_WAIT_P95]
    doc = orjson.loads(rules_path(tmp_path).read_bytes())
    assert doc["rules"] == {THROTTLE_SPIKE: {"threshold": 25.0}, BUDGET_NEARLY_SPENT: {"enabled": False}}


@pytest.mark.parametrize(
    ("name", "field", "value", "message"),
    [
        ("nope", "threshold", 1, "no alert rule 'nope'"),
        (THROTTLE_SPIKE, "colour", 1, "has no setting 'colour'"),
        (THROTTLE_SPIKE, "threshold", "lots", "must be a number"),
        (THROTTLE_SPIKE, "threshold", "-1", "zero or more"),
        (THROTTLE_SPIKE, "threshold", "nan", "finite"),
    ],
)
def test_bad_settings_are_refused_clearly(name: str, field: str, value: object, message: str) -> None:
    with pytest.raises(RuleError, match=message):
        apply_setting(DEFAULTS, name, field, value)


def test_a_damaged_rules_file_falls_back_to_the_defaults_with_a_note(tmp_path: Path) -> None:
    rules_path(tmp_path).write_bytes(b"{not json")
    notices: list[str] = []
    assert load_rules(tmp_path, notices) == DEFAULTS
    assert notices and "damaged" in notices[0]
    assert rules_path(tmp_path).read_bytes() == b"{not json"  # kept for the person to look at


# ---------------------------------------------------------------------- the gatherer


class _Flow:
    """Flow control as the gatherer reads it (breakers, and a ledger for budgets)."""

    def __init__(self) -> None:
        self.ledger = self

    def profiles(self) -> list[str]:
        return ["openai"]

    def breaker_state(self, profile: str) -> str:
        return "half_open"

    def spent(self, profile: str, period: str, at: float | None = None) -> Spent:
        return Spent(usd=4.6 if period == "day" else 10.0)


def test_gather_reads_the_queue_flow_and_spend(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    with Queue.open(tmp_path / "data", clock=clock) as queue:
        for i in range(3):
            queue.submit("demo", {"i": i})
        lease = queue.lease("w")
        assert lease is not None
        clock.advance(5)
        queue.fail(lease, Outcome.failure(ErrorClass.THROTTLED, "429", retry_after=1))
        clock.advance(2)
        lease = queue.lease("w")
        assert lease is not None
        clock.advance(30)
        times = RunTimes()
        for n in range(3):
            times.observe({"id": f"x{n}", "kind": "demo", "state": "succeeded", "started_at": 0, "finished_at": 10})
        sig = gather(queue, flow=_Flow(), budgets={"openai": Budget(usd_per_day=5.0)}, run_times=times)
    assert sig.backlog == 2
    assert len(sig.throttles) == 1
    assert sig.breakers == {"openai": "half_open"}
    assert sig.budgets == {"openai": pytest.approx(0.92)}
    ((job_id, elapsed, usual),) = sig.running
    assert job_id == lease.job_id and elapsed == pytest.approx(30) and usual == 10
    leased = sorted(round(w, 3) for t, w in sig.waits if t < T0 + 37)
    # the first lease waited 0 s; the second job (leased at +7 s) waited 7 s from its submission
    assert leased == [0.0, 7.0]
    # the two still queued: the throttled one counts from its Retry-After (+6 s), the other from +0
    waiting = sorted(round(w, 3) for t, w in sig.waits if t == T0 + 37)
    assert waiting == [31.0, 37.0]


def test_gather_counts_the_dead_letters_a_compaction_archived(tmp_path: Path) -> None:
    """The hot set keeps the newest finished jobs: three dead letters among many successes
    within the window were archived before the scan, and the alert never saw them."""
    clock = FakeClock(T0)
    with Queue.open(tmp_path / "data", clock=clock, keep_finished=5, background_compaction=False) as queue:
        for i in range(30):
            queue.submit("demo", {"i": i})
            lease = queue.lease("w")
            assert lease is not None
            clock.advance(10)
            if i in (2, 5, 9):
                queue.fail(lease, Outcome.failure(ErrorClass.FATAL, "400"))
            else:
                queue.complete(lease, {"ok": i})
        queue.store.compact_now()
        sig = gather(queue, run_times=RunTimes())
    assert sig.dead_lettered == (T0 + 30, T0 + 60, T0 + 100)


# ---------------------------------------------------------------------- the book


def test_the_book_records_each_transition_once_and_keeps_the_history(tmp_path: Path) -> None:
    book = AlertBook(tmp_path)
    assert book.update([SPIKE], spike_signals(T0, 15)) == []
    fired = book.update([SPIKE], spike_signals(T0 + 25, 15))
    assert [t.kind for t in fired] == [FIRED]
    # another process's book on the same dir finds it active: nothing recorded again
    assert AlertBook(tmp_path).update([SPIKE], spike_signals(T0 + 26, 15)) == []
    assert [t.rule for t in book.active()] == [THROTTLE_SPIKE]
    cleared = book.update([SPIKE], spike_signals(T0 + 30, 0)) + book.update([SPIKE], spike_signals(T0 + 61, 0))
    assert [t.kind for t in cleared] == [CLEARED]
    assert [t.kind for t in book.history().transitions] == [FIRED, CLEARED]
    assert book.active() == []


def test_a_torn_last_history_line_is_skipped_with_a_note(tmp_path: Path) -> None:
    book = AlertBook(tmp_path)
    book.update([SPIKE], spike_signals(T0, 15))
    book.update([SPIKE], spike_signals(T0 + 25, 15))
    with open(book.history_path, "ab") as f:
        f.write(b'{"id": 2, "rule": "thro')  # a crash in the middle of an append
    history = book.history()
    assert [t.kind for t in history.transitions] == [FIRED]
    assert history.notices and "torn" in history.notices[0]
    # the next append ends the torn line first: every later transition reads back
    book.update([SPIKE], spike_signals(T0 + 30, 0))
    book.update([SPIKE], spike_signals(T0 + 61, 0))
    history = book.history()
    assert [t.kind for t in history.transitions] == [FIRED, CLEARED]
    assert "damaged" in history.notices[0]


def test_transitions_written_to_the_state_but_not_the_history_are_logged_next_time(tmp_path: Path) -> None:
    """A crash between the state write and the history append loses no transition."""
    book = AlertBook(tmp_path)
    state, transitions = evaluate([SPIKE], spike_signals(T0, 15), AlertState(), T0)
    state, transitions = evaluate([SPIKE], spike_signals(T0 + 25, 15), state, T0 + 25)
    book._write_state(state, transitions)  # what the crashed process left
    assert book.history().transitions == ()
    assert book.update([SPIKE], spike_signals(T0 + 26, 15)) == []
    assert [t.kind for t in book.history().transitions] == [FIRED]


def test_the_tail_reads_what_any_process_appended(tmp_path: Path) -> None:
    book = AlertBook(tmp_path)
    book.update([SPIKE], spike_signals(T0, 15))
    tail = HistoryTail(book)
    assert tail.new() == []
    AlertBook(tmp_path).update([SPIKE], spike_signals(T0 + 25, 15))
    assert [t.kind for t in tail.new()] == [FIRED]
    assert tail.new() == []


_EVALUATOR = r"""
import sys
from desktop_queue.core.alerts import AlertBook, Rule, Signals
data_dir, start = sys.argv[1], float(sys.argv[2])
rule = Rule("throttle_spike", threshold=10, clear_below=4, window_s=60, for_s=0, clear_s=5)
book = AlertBook(data_dir)
print("ready", flush=True)
sys.stdin.readline()
n = 0
for step in range(60):
    at = start + step
    value = 15 if (step // 10) % 2 == 0 else 0
    n += len(book.update([rule], Signals(at=at, throttles=tuple(at - 1 for _ in range(value)))))
print(n, flush=True)
"""


def test_two_processes_record_each_transition_once(tmp_path: Path) -> None:
    """Two real processes evaluate the same rising and falling signal: the history has each transition once."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _EVALUATOR, str(tmp_path), str(T0)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            cwd=REPO,
        )
        for _ in range(2)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        counts = [int(proc.communicate(timeout=60)[0].strip()) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    history = AlertBook(tmp_path).history()
    kinds = [t.kind for t in history.transitions]
    # each transition was recorded by exactly one of them (decided under the lock against
    # the persisted state): the counts add up, and no alert fired twice in a row
    assert sum(counts) == len(kinds)
    assert kinds == [FIRED, CLEARED] * (len(kinds) // 2) + [FIRED] * (len(kinds) % 2)
    # how often it fired depends on how the two runs interleave: each replays the same
    # minute, so one's falling edge can meet the other's rising one (once it fired only
    # twice); it fired at least once, and never twice in a row
    assert FIRED in kinds
    assert [t.id for t in history.transitions] == list(range(1, len(kinds) + 1))


class BookMachine(RuleBasedStateMachine):
    """The book against the pure evaluation, with crashes in the middle of an update.

    A crash after the state write (its transitions listed as unlogged) or after the
    history append (before the state that says so) must neither lose a transition nor
    record one twice: the next update, by any process, mends the history.
    """

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="alert-book-"))
        self.book = AlertBook(self.dir)
        self.now = T0
        self.ref_state = AlertState()
        self.ref: list[tuple[int, str]] = []
        self.mended = True

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def _step(self, dt: float, value: int) -> Signals:
        self.now += dt
        signals = spike_signals(self.now, value)
        self.ref_state, transitions = evaluate([SPIKE], signals, self.ref_state, self.now)
        self.ref += [(t.id, t.kind) for t in transitions]
        return signals

    @rule(dt=st.floats(min_value=1, max_value=40), value=st.integers(min_value=0, max_value=20))
    def update(self, dt: float, value: int) -> None:
        self.book.update([SPIKE], self._step(dt, value))
        self.mended = True

    @rule(
        dt=st.floats(min_value=1, max_value=40),
        value=st.integers(min_value=0, max_value=20),
        appended=st.booleans(),
    )
    def crash_in_an_update(self, dt: float, value: int, appended: bool) -> None:
        signals = self._step(dt, value)
        previous, unlogged = self.book._read_state()  # the steps of AlertBook.update, then a crash
        self.book._mend(unlogged)
        state, transitions = evaluate([SPIKE], signals, previous, self.now)
        self.book._write_state(state, transitions)
        if appended:
            self.book._append(transitions)  # then the process died before saying so
        self.mended = False

    @rule()
    def reopen(self) -> None:
        self.book = AlertBook(self.dir)  # another process, or this one restarted

    @invariant()
    def history_matches_the_pure_evaluation(self) -> None:
        got = [(t.id, t.kind) for t in self.book.history().transitions]
        if self.mended:
            assert got == self.ref
        else:
            assert got == self.ref[: len(got)]  # a prefix: the rest is listed in the state
        assert len(got) == len({i for i, _k in got})  # never one transition twice


TestBookMachine = BookMachine.TestCase
TestBookMachine.settings = settings(max_examples=25, stateful_step_count=20, deadline=None)


@pytest.mark.parametrize("damage", [b"{not json", b'{"format": "desktop-queue.alert-state", "unlogged": [{"id": 1}]}'])
def test_a_damaged_state_is_kept_aside_and_alerts_start_afresh(tmp_path: Path, damage: bytes) -> None:
    book = AlertBook(tmp_path)
    book.state_path.write_bytes(damage)
    assert book.update([SPIKE], spike_signals(T0, 15)) == []
    assert book.notices and "kept aside" in book.notices[0]
    (aside,) = tmp_path.glob("alerts-state.json.corrupt-*")
    assert aside.read_bytes() == damage
    assert [t.kind for t in book.update([SPIKE], spike_signals(T0 + 25, 15))] == [FIRED]


def test_a_cleared_breaker_alert_says_the_breaker_closed() -> None:
    rule = dataclasses.replace(DEFAULTS[BREAKER_OPEN], for_s=0, clear_s=0)
    state, fired = evaluate([rule], Signals(at=T0, breakers={"openai": "open"}), AlertState(), T0)
    assert [(x.kind, x.subject) for x in fired] == [(FIRED, "openai")]
    assert fired[0].describe() == "Alert: profile openai: the circuit breaker is open"
    _state, cleared = evaluate([rule], Signals(at=T0 + 1, breakers={"openai": "closed"}), state, T0 + 1)
    assert cleared[0].describe() == "Cleared: profile openai: the circuit breaker is closed again"


def test_what_an_alert_says_reads_as_a_sentence() -> None:
    """It reaches the banner and the tray: "1 job", "7 jobs", never "job(s)"."""
    now = 1_800_000_000.0
    dead = DEFAULTS[DEAD_LETTERS_GROWING]
    one = readings(dead, Signals(at=now, dead_lettered=(now - 1,)), [], now)[""].text
    seven = readings(dead, Signals(at=now, dead_lettered=(now - 1,) * 7), [], now)[""].text
    assert one.startswith("1 job dead-lettered in ") and seven.startswith("7 jobs dead-lettered in ")
    spike = readings(DEFAULTS[THROTTLE_SPIKE], Signals(at=now, throttles=(now - 1,) * 1200), [], now)[""].text
    assert spike.startswith("1,200 rate-limit (429) answers in ")
