"""The queue against a simple model: a Hypothesis state machine with a fake clock and crashes.

Every rule drives the real :class:`Queue` on real files and the model (a dict of
``id -> expected job``) side by side; after every step the invariants of
shared/DESIGN.md section 6 are checked, including that a second, independent
opener of the data dir sees exactly the same jobs.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from desktop_queue.core import (
    DuplicateKeyConflict,
    ErrorClass,
    FakeClock,
    IllegalTransition,
    Lease,
    NotAllowed,
    Outcome,
    Queue,
    QueueFull,
    RetryPolicy,
    StaleLease,
)
from desktop_queue.core.fingerprint import canonical_json, fingerprint

CANARY = "CANARY-tangerine-owl-5501"
API_KEY = "sk-live-9Gh2Kq7WmX4pL0aZr8Tn"
INPUTS: list[dict[str, Any]] = [
    {"prompt": f"{CANARY} paint the harbour at dawn"},
    {"prompt": f"{CANARY} a limerick about compilers"},
    {"prompt": f"{CANARY} translate the menu into Welsh"},
    {"prompt": "short one"},
    {"prompt": f"{CANARY} summarise the meeting notes", "temperature": 0.2},
]
POLICY = RetryPolicy(base_s=1.0, cap_s=60.0, max_attempts=3, deadline_s=300.0, poison_after=3, lease_s=45.0)
LIVE = ("queued", "running")
KEY_HOLDING = ("queued", "running", "succeeded")
FINISHED = ("succeeded", "dead", "cancelled")
MAX_INTERACTIVE = 5


@dataclass
class MJob:
    """What the model expects of one job."""

    id: str
    seq: int
    key: str
    input: Any
    priority: str
    max_attempts: int
    state: str = "queued"
    attempts: int = 0
    total_attempts: int = 0
    run: int = 1
    poison_count: int = 0
    run_after: float = 0.0
    deadline_at: float = 0.0
    lease_expires_at: float | None = None
    token: str | None = None
    replay_of: str | None = None
    replayed_as: list[str] = field(default_factory=list)


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="dq-prop-"))
        self.data_dir = self.tmp / "data"
        self.clock = FakeClock()
        self.rng = random.Random(20240601)
        self.twin = random.Random(20240601)  # replays every backoff draw the queue makes
        self.queue = self._open()
        self.jobs: dict[str, MJob] = {}
        self.current: dict[str, Lease] = {}
        self.stale: list[Lease] = []
        self.result_keys: set[str] = set()
        self.last_epoch = 0
        self.seen_events: dict[str, list[dict[str, Any]]] = {}

    def _open(self) -> Queue:
        return Queue.open(
            self.data_dir, clock=self.clock, policy=POLICY, rng=self.rng, rotate_bytes=8192, background_compaction=False
        )

    def teardown(self) -> None:
        if not self.queue.store.closed:
            self.queue.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------------ model helpers

    def _holder(self, key: str) -> MJob | None:
        holders = [j for j in self.jobs.values() if j.key == key and j.state in KEY_HOLDING]
        assert len(holders) <= 1
        return holders[0] if holders else None

    def _interactive_waiting(self) -> int:
        return sum(1 for j in self.jobs.values() if j.state == "queued" and j.priority == "interactive")

    def _revoke(self, job: MJob) -> None:
        lease = self.current.pop(job.id, None)
        if lease is not None:
            self.stale.append(lease)
        job.token = None
        job.lease_expires_at = None

    def _model_reap(self, now: float) -> set[str]:
        reaped = set()
        for job in self.jobs.values():
            if job.state == "running" and job.lease_expires_at is not None and job.lease_expires_at < now:
                reaped.add(job.id)
                self._revoke(job)
                if job.attempts >= job.max_attempts:
                    job.state = "dead"
                else:
                    job.state = "queued"
                    job.run_after = now
        return reaped

    def _pick(self, items: list[Any], index: int) -> Any:
        return items[index % len(items)]

    def _new_job(self, job_id: str, seq: int, key: str, payload: Any, priority: str, max_attempts: int) -> MJob:
        now = self.clock.now()
        job = MJob(
            job_id, seq, key, payload, priority, max_attempts, run_after=now, deadline_at=now + POLICY.deadline_s
        )
        assert seq == len(self.jobs) + 1
        self.jobs[job_id] = job
        return job

    # ------------------------------------------------------------------ rules

    @rule(
        which=st.integers(0, len(INPUTS) - 1),
        key=st.sampled_from([None, None, None, "key-a", "key-b"]),
        priority=st.sampled_from(["interactive", "background"]),
        max_attempts=st.sampled_from([None, 1, 2, 3]),
    )
    def submit(self, which: int, key: str | None, priority: str, max_attempts: int | None) -> None:
        payload = INPUTS[which]
        the_key = key or fingerprint("demo", "1", payload)
        holder = self._holder(the_key)
        if holder is not None and canonical_json(holder.input) != canonical_json(payload):
            try:
                self.queue.submit("demo", payload, key=key, priority=priority, max_attempts=max_attempts)
            except DuplicateKeyConflict:
                return
            raise AssertionError("same key, other input: expected DuplicateKeyConflict")
        if holder is None and priority == "interactive" and self._interactive_waiting() >= MAX_INTERACTIVE:
            try:
                self.queue.submit("demo", payload, key=key, priority=priority, max_attempts=max_attempts)
            except QueueFull:
                return
            raise AssertionError("expected QueueFull")
        res = self.queue.submit("demo", payload, key=key, priority=priority, max_attempts=max_attempts)
        if holder is not None:
            assert res.duplicate and res.job.id == holder.id
            assert (res.result is not None) == (holder.state == "succeeded")
            return
        assert not res.duplicate
        assert res.job.id not in self.jobs
        self._new_job(res.job.id, res.job.seq, the_key, payload, priority, max_attempts or POLICY.max_attempts)

    @rule(
        then=st.sampled_from([None, None, "complete", "fail", "heartbeat"]),
        error_class=st.sampled_from(list(ErrorClass)),
        retry_after=st.sampled_from([None, None, 0.0, 5.0, 400.0]),
    )
    def lease(self, then: str | None, error_class: ErrorClass, retry_after: float | None) -> None:
        """Leases the next job; the worker may report at once (otherwise a later rule does)."""
        now = self.clock.now()
        # expired leases are reaped in the same commit; a job reaped there waits for the next lease
        reaped = self._model_reap(now)
        runnable = [j for j in self.jobs.values() if j.state == "queued" and j.run_after <= now and j.id not in reaped]
        expected = None
        for lane in ("interactive", "background"):
            in_lane = [j for j in runnable if j.priority == lane]
            if in_lane:
                expected = min(in_lane, key=lambda j: (j.run_after, j.seq))
                break
        lease = self.queue.lease("worker")
        if expected is None:
            assert lease is None
            return
        assert lease is not None and lease.job_id == expected.id
        assert lease.epoch > self.last_epoch
        self.last_epoch = lease.epoch
        expected.state = "running"
        expected.attempts += 1
        expected.total_attempts += 1
        assert lease.attempt == expected.attempts
        expected.lease_expires_at = now + POLICY.lease_s
        expected.token = lease.token
        self.current[lease.job_id] = lease
        if then == "complete":
            self._complete(lease)
        elif then == "fail":
            self._fail(lease, error_class, retry_after)
        elif then == "heartbeat":
            self._heartbeat(lease)

    @precondition(lambda self: self.current)
    @rule(
        index=st.integers(0, 10**6),
        verb=st.sampled_from(["complete", "fail", "fail", "heartbeat"]),
        error_class=st.sampled_from(list(ErrorClass)),
        retry_after=st.sampled_from([None, None, 0.0, 5.0, 400.0]),
    )
    def worker_reports(self, index: int, verb: str, error_class: ErrorClass, retry_after: float | None) -> None:
        """The holder of a current lease completes, fails (each class) or heartbeats."""
        lease = self._pick(sorted(self.current.values(), key=lambda x: self.jobs[x.job_id].seq), index)
        if verb == "complete":
            self._complete(lease)
        elif verb == "fail":
            self._fail(lease, error_class, retry_after)
        else:
            self._heartbeat(lease)

    def _complete(self, lease: Lease) -> None:
        job = self.jobs[lease.job_id]
        done = self.queue.complete(lease, {"text": f"result of {lease.job_id}"})
        assert done.state == "succeeded"
        self.result_keys.add(job.key)
        job.state = "succeeded"
        self._revoke(job)
        self.stale.append(lease)

    def _fail(self, lease: Lease, error_class: ErrorClass, retry_after: float | None) -> None:
        job = self.jobs[lease.job_id]
        message = f"provider said no to '{job.input['prompt']}' (Authorization: Bearer {API_KEY}; key {API_KEY})"
        after = self.queue.fail(lease, Outcome.failure(error_class, message, status=500, retry_after=retry_after))
        now = self.clock.now()
        self._revoke(job)
        self.stale.append(lease)

        def requeue(delay: float) -> None:
            if now + delay > job.deadline_at:
                job.state = "dead"
            else:
                job.state = "queued"
                job.run_after = now + delay

        if error_class is ErrorClass.FATAL:
            job.state = "dead"
        elif error_class is ErrorClass.THROTTLED:
            delay = retry_after if retry_after is not None else POLICY.backoff(max(1, job.attempts), self.twin)
            job.attempts = max(0, job.attempts - 1)
            requeue(max(0.0, delay))
        else:
            if error_class is ErrorClass.POISON:
                job.poison_count += 1
            if (
                error_class is ErrorClass.POISON
                and job.poison_count >= POLICY.poison_after
                or job.attempts >= job.max_attempts
            ):
                job.state = "dead"
            else:
                requeue(retry_after if retry_after is not None else POLICY.backoff(job.attempts, self.twin))
        assert after.state == job.state

    def _heartbeat(self, lease: Lease) -> None:
        expires = self.queue.heartbeat(lease)
        assert expires == self.clock.now() + POLICY.lease_s
        self.jobs[lease.job_id].lease_expires_at = expires

    @precondition(lambda self: self.stale)
    @rule(index=st.integers(0, 10**6), verb=st.sampled_from(["heartbeat", "complete", "fail"]))
    def use_stale_token(self, index: int, verb: str) -> None:
        lease = self._pick(self.stale, index)
        job = self.jobs[lease.job_id]
        assert job.token != lease.token
        try:
            if verb == "heartbeat":
                self.queue.heartbeat(lease)
            elif verb == "complete":
                self.queue.complete(lease, {"text": "late"})
            else:
                self.queue.fail(lease, Outcome.failure(ErrorClass.FATAL, f"late {API_KEY}"))
        except StaleLease:
            pass
        else:
            raise AssertionError(f"stale {verb} was accepted")
        # a stale complete() stores nothing: the result store is unchanged, and so is the job

    @precondition(lambda self: self.jobs)
    @rule(
        index=st.integers(0, 10**6),
        verb=st.sampled_from(["cancel", "retry", "replay"]),
        edit=st.sampled_from([None, None, 3]),
    )
    def person(self, index: int, verb: str, edit: int | None) -> None:
        """A person cancels, retries or replays any job (legal or not)."""
        job = self._pick(sorted(self.jobs.values(), key=lambda j: j.seq), index)
        if verb == "cancel":
            self._cancel(job)
        elif verb == "retry":
            self._retry(job)
        else:
            self._replay(job, edit)

    def _cancel(self, job: MJob) -> None:
        if job.state not in LIVE:
            try:
                self.queue.cancel(job.id)
            except IllegalTransition:
                return
            raise AssertionError(f"cancel of a {job.state} job was accepted")
        assert self.queue.cancel(job.id).state == "cancelled"
        job.state = "cancelled"
        self._revoke(job)

    def _retry(self, job: MJob) -> None:
        holder = self._holder(job.key)
        if job.state not in ("dead", "cancelled"):
            try:
                self.queue.retry(job.id)
            except IllegalTransition:
                return
            raise AssertionError(f"retry of a {job.state} job was accepted")
        if holder is not None:
            try:
                self.queue.retry(job.id)
            except IllegalTransition:
                raise AssertionError("a key held elsewhere is not an illegal transition") from None
            except NotAllowed:
                return
            raise AssertionError("retry while another job holds the key was accepted")
        again = self.queue.retry(job.id)
        now = self.clock.now()
        job.state = "queued"
        job.run += 1
        job.attempts = 0
        job.poison_count = 0
        job.run_after = now
        job.deadline_at = now + POLICY.deadline_s
        assert again.run == job.run

    def _replay(self, job: MJob, edit: int | None) -> None:
        payload = None if edit is None else INPUTS[edit]
        if job.state not in FINISHED:
            try:
                self.queue.replay(job.id, payload)
            except NotAllowed:
                return
            raise AssertionError(f"replay of a {job.state} job was accepted")
        if job.priority == "interactive" and self._interactive_waiting() >= MAX_INTERACTIVE:
            try:
                self.queue.replay(job.id, payload)
            except QueueFull:
                return
            raise AssertionError("expected QueueFull")
        new = self.queue.replay(job.id, payload)
        assert new.id not in self.jobs and new.replay_of == job.id
        assert new.idempotency_key != job.key
        model = self._new_job(
            new.id, new.seq, new.idempotency_key, payload if payload is not None else job.input, job.priority,
            job.max_attempts,
        )  # fmt: skip
        model.replay_of = job.id
        job.replayed_as.append(new.id)

    @rule(seconds=st.sampled_from([0.5, 3.0, 9.0, 11.0, 30.0, 120.0]))
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def _any_running(self) -> bool:
        return any(j.state == "running" for j in self.jobs.values())

    @precondition(lambda self: self._any_running())
    @rule()
    def reap(self) -> None:
        expected = self._model_reap(self.clock.now())
        assert set(self.queue.reap()) == expected

    @precondition(lambda self: self._any_running())
    @rule()
    def crash_and_reopen(self) -> None:
        """The process dies with jobs running; the next (first) opener reconciles them."""
        self.queue.close()
        now = self.clock.now()
        expected = {}
        for job in self.jobs.values():
            if job.state != "running":
                continue
            self._revoke(job)
            if job.key in self.result_keys:
                job.state, decision = "succeeded", "succeeded"
            elif job.attempts >= job.max_attempts:
                job.state, decision = "dead", "dead"
            else:
                job.state, decision = "queued", "requeued"
                job.run_after = now
            expected[job.id] = decision
        self.queue = self._open()
        assert self.queue.report.first
        assert {r.job_id: r.decision for r in self.queue.reconciled} == expected

    # ------------------------------------------------------------------ invariants

    @invariant()
    def matches_the_model(self) -> None:
        actual = {j.id: j for j in self.queue.list(with_events=True)}
        # 1. every acknowledged job exists (and nothing else does)
        assert set(actual) == set(self.jobs)
        counts = self.queue.counts()
        # 3. each job is in exactly one state
        assert sum(counts.values()) == len(self.jobs)
        for job_id, m in self.jobs.items():
            job = actual[job_id]
            got = (job.state, job.attempts, job.total_attempts, job.run, job.poison_count, job.max_attempts)
            assert got == (m.state, m.attempts, m.total_attempts, m.run, m.poison_count, m.max_attempts), job_id
            assert (job.idempotency_key, job.priority, job.seq, job.replay_of) == (
                m.key,
                m.priority,
                m.seq,
                m.replay_of,
            )
            assert list(job.replayed_as) == m.replayed_as
            assert job.input == m.input
            assert job.deadline_at == m.deadline_at
            if m.state == "queued":
                assert job.run_after == m.run_after
            if m.state == "running":
                assert job.lease_expires_at == m.lease_expires_at
            # 4. the attempt budget
            assert job.attempts <= job.max_attempts
            # 3. history is append-only
            events = job.to_json()["events"]
            before = self.seen_events.get(job_id, [])
            assert events[: len(before)] == before
            self.seen_events[job_id] = events
            if job.state == "succeeded":
                # the result is stored (in the journal until compaction writes its file) and
                # its file can be had at the ref the job names
                assert job.result_ref is not None
                doc = self.queue.results.get(job.idempotency_key)
                assert doc is not None and doc["job_id"] == job_id
                path = self.queue.results.materialize(job.idempotency_key)
                assert path == self.data_dir / job.result_ref and path.is_file()

    @invariant()
    def the_indexes_match_a_recount(self) -> None:
        # the queued-by-kind and by-lane indexes (lease skips a scan on them) agree with the jobs
        state = self.queue.store.state
        queued = [m for m in self.jobs.values() if m.state == "queued"]
        assert state.queued_of_kinds(["demo"]) == bool(queued)  # (every job here is a demo job)
        assert not state.queued_of_kinds(["openai.chat"])
        for lane in ("interactive", "background"):
            assert state.queued_in_lane(lane) == sum(1 for m in queued if m.priority == lane)

    @invariant()
    def one_live_job_per_key(self) -> None:
        # 2. at most one live (or succeeded) job per key; a result is stored once per key
        holders = [j.idempotency_key for j in self.queue.list() if j.state in KEY_HOLDING]
        assert len(holders) == len(set(holders))
        assert self.queue.results.count() == len(self.result_keys)

    @invariant()
    def only_the_current_token_works(self) -> None:
        # 5. the store holds exactly the model's current tokens; stale ones are not current
        for job_id, m in self.jobs.items():
            assert self.queue.lease_token(job_id) == m.token
        for lease in self.stale:
            assert self.queue.lease_token(lease.job_id) != lease.token

    @invariant()
    def no_secret_or_prompt_text_in_timelines(self) -> None:
        # 7. neither the API key nor prompt text reaches events or errors
        for job in self.queue.list(with_events=True):
            text = orjson.dumps([job.to_json(with_input=False)["events"], job.last_error]).decode()
            assert CANARY not in text and "sk-" not in text and "harbour" not in text

    @invariant()
    def store_reopens_identically(self) -> None:
        # 6. the files alone give the same jobs: a second, independent opener agrees
        other = Queue.open(self.data_dir, clock=self.clock, policy=POLICY)
        try:
            assert not other.report.first
            assert other.report.notices == []
            mine = {j.id: j.to_json() for j in self.queue.list(with_events=True)}
            theirs = {j.id: j.to_json() for j in other.list(with_events=True)}
            assert theirs == mine
        finally:
            other.close()


def test_queue_state_machine() -> None:
    run_state_machine_as_test(
        QueueMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
