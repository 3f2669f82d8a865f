"""The verbs of shared/DESIGN.md section 1 and the failure classes of section 2, one behaviour per test.

``queue`` here is each backend in turn (``any_queue`` in conftest.py): a test that
reads the JSON store's files, or reopens it, asks for ``json_queue``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from desktop_queue.core import (
    DuplicateKeyConflict,
    ErrorClass,
    FakeClock,
    IllegalTransition,
    InputTooLarge,
    InvalidInput,
    Lease,
    NoSuchJob,
    NotAllowed,
    Outcome,
    Priority,
    Queue,
    QueueFull,
    RetryPolicy,
    StaleLease,
    State,
)
from desktop_queue.core import results as results_module
from desktop_queue.core.fingerprint import fingerprint
from desktop_queue.core.queue import MAX_INPUT_BYTES, MAX_INTERACTIVE_WAITING
from desktop_queue.core.redact import REDACTED, redact
from desktop_queue.core.store import journal as storage_module
from desktop_queue.core.store.codec import decode_record
from desktop_queue.core.store.snapshot import decode_snapshot


@pytest.fixture
def queue(any_queue: Queue) -> Queue:
    return any_queue


@pytest.fixture
def json_queue(open_queue: Callable[..., Queue]) -> Queue:
    return open_queue()


OpenQueue = Callable[..., Queue]


def types(job: Any) -> list[str]:
    return [e.type for e in job.events]


def lease_of(queue: Queue, job_id: str, **kwargs: Any) -> Lease:
    lease = queue.lease("worker-1", **kwargs)
    assert lease is not None, "expected a runnable job"
    assert lease.job_id == job_id
    return lease


def journal_records(data_dir: Path) -> list[tuple[bytes, dict[str, Any]]]:
    """Every (raw line, record) of every journal segment on disk."""
    out = []
    for seg in sorted((data_dir / "store").glob("journal-*.jsonl")):
        for line in seg.read_bytes().split(b"\0", 1)[0].splitlines():  # the zeros after the records left out
            record = decode_record(line)
            assert record is not None, f"unreadable journal line in {seg.name}"
            out.append((line, record))
    return out


def all_file_bytes(data_dir: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in data_dir.rglob("*") if p.is_file()}


# =========================================================================== submit


def test_submit_creates_a_durable_queued_job(json_queue: Queue, open_queue: OpenQueue, clock: FakeClock) -> None:
    queue = json_queue  # (the JSON store: this reads its files or reopens it)
    res = queue.submit("demo", {"prompt": "hello world"}, title="  My   first job ")
    job = res.job
    assert res.duplicate is False
    assert job.state == State.QUEUED
    assert (job.attempts, job.total_attempts, job.run) == (0, 0, 1)
    assert job.title == "My first job"
    assert job.priority == Priority.BACKGROUND
    assert job.idempotency_key == fingerprint("demo", "1", {"prompt": "hello world"})
    assert job.created_at == clock.now()
    assert types(job) == ["submitted"]
    assert job.events[0].actor == "user"
    assert job.events[0].detail["key_source"] == "fingerprint"
    # acknowledged means durable: an independent opener sees it
    other = open_queue()
    assert other.get(job.id).to_json() == job.to_json()


def test_a_job_submitted_without_a_title_is_named_by_its_prompt(open_queue: OpenQueue) -> None:
    """As the window, the CLI and the HTTP API name it: a script's jobs are not all "demo job"."""
    from desktop_queue.providers.demo import DemoProvider

    queue = open_queue(providers={"demo": DemoProvider()})
    assert queue.submit("demo", {"prompt": "  write a haiku\nabout rain"}).job.title == "write a haiku"
    assert queue.submit("demo", {"prompt": "p", "seed": 2}, title="Mine").job.title == "Mine"
    assert queue.submit("demo", {"prompt": "p", "seed": 3}, title="").job.title == "demo job"  # asked for none
    bare = open_queue(path=None, providers={})  # a kind no provider describes: the usual input fields
    chat = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Summarise it"}]}
    assert bare.submit("echo", chat).job.title == "Summarise it"
    assert bare.submit("echo", {"n": 1}).job.title == "echo job"


def test_duplicate_submit_returns_the_existing_job(queue: Queue) -> None:
    first = queue.submit("demo", {"prompt": "same", "n": 1})
    # key order does not matter: the fingerprint is over canonical JSON
    again = queue.submit("demo", {"n": 1, "prompt": "same"})
    assert again.duplicate is True
    assert again.job.id == first.job.id
    assert again.result is None
    assert len(queue.list()) == 1
    assert types(queue.get(first.job.id)) == ["submitted"]


def test_duplicate_of_a_running_job_returns_it(queue: Queue) -> None:
    job = queue.submit("demo", {"prompt": "p"}).job
    lease_of(queue, job.id)
    again = queue.submit("demo", {"prompt": "p"})
    assert again.duplicate and again.job.id == job.id and again.job.state == State.RUNNING


def test_duplicate_of_a_succeeded_job_returns_its_stored_result(queue: Queue) -> None:
    job = queue.submit("demo", {"prompt": "p"}).job
    queue.complete(lease_of(queue, job.id), {"text": "the answer"})
    again = queue.submit("demo", {"prompt": "p"})
    assert again.duplicate is True
    assert again.job.id == job.id and again.job.state == State.SUCCEEDED
    assert again.result is not None and again.result["result"] == {"text": "the answer"}
    assert len(queue.list()) == 1


@pytest.mark.parametrize("finish", ["cancel", "fatal"])
def test_a_dead_or_cancelled_job_does_not_hold_its_key(queue: Queue, finish: str) -> None:
    job = queue.submit("demo", {"prompt": "p"}).job
    if finish == "cancel":
        queue.cancel(job.id)
    else:
        queue.fail(lease_of(queue, job.id), Outcome.failure(ErrorClass.FATAL, "no"))
    again = queue.submit("demo", {"prompt": "p"})
    assert again.duplicate is False
    assert again.job.id != job.id
    assert again.job.idempotency_key == job.idempotency_key
    # and the old one cannot be retried while the new one holds the key
    with pytest.raises(NotAllowed) as info:
        queue.retry(job.id)
    assert not isinstance(info.value, IllegalTransition)
    assert again.job.id in str(info.value)
    assert queue.get(job.id).state in (State.CANCELLED, State.DEAD)


def test_same_key_with_different_input_is_a_conflict(queue: Queue, data_dir: Path) -> None:
    first = queue.submit("demo", {"prompt": "a"}, key="my-key")
    size = sum(p.stat().st_size for p in (data_dir / "store").glob("journal-*"))
    with pytest.raises(DuplicateKeyConflict) as info:
        queue.submit("demo", {"prompt": "b"}, key="my-key")
    assert first.job.id in str(info.value)
    assert [j.id for j in queue.list()] == [first.job.id]
    assert sum(p.stat().st_size for p in (data_dir / "store").glob("journal-*")) == size
    # the same key with the same input is a plain duplicate
    assert queue.submit("demo", {"prompt": "a"}, key="my-key").duplicate is True


def test_input_over_one_mib_is_refused_and_nothing_is_created(queue: Queue, data_dir: Path) -> None:
    journal = {p: p.read_bytes() for p in (data_dir / "store").glob("journal-*")}
    with pytest.raises(InputTooLarge) as info:
        queue.submit("demo", {"prompt": "x" * MAX_INPUT_BYTES})
    assert "1 MiB" in str(info.value)
    assert isinstance(info.value, InvalidInput) and info.value.exit_code == 2
    assert queue.list() == []
    assert {p: p.read_bytes() for p in (data_dir / "store").glob("journal-*")} == journal


def test_input_of_exactly_one_mib_is_accepted(queue: Queue) -> None:
    payload = "x" * (MAX_INPUT_BYTES - 2)  # canonical JSON adds the two quotes
    assert queue.submit("demo", payload).job.input == payload
    with pytest.raises(InputTooLarge):
        queue.submit("demo", payload + "y")


@pytest.mark.parametrize(
    "kwargs",
    [{"priority": "urgent"}, {"max_attempts": 0}, {"max_attempts": 101}, {"key": " "}, {"key": "k" * 257}],
    ids=["priority", "attempts-0", "attempts-101", "blank-key", "long-key"],
)
def test_invalid_submissions_create_nothing(queue: Queue, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        queue.submit("demo", {"prompt": "p"}, **kwargs)
    assert queue.list() == []


def test_input_must_be_json(queue: Queue) -> None:
    with pytest.raises(InvalidInput):
        queue.submit("demo", {"prompt": {1, 2}})
    assert queue.list() == []


def test_sixth_waiting_interactive_job_is_refused(queue: Queue) -> None:
    ids = [queue.submit("demo", {"i": i}, priority="interactive").job.id for i in range(MAX_INTERACTIVE_WAITING)]
    assert MAX_INTERACTIVE_WAITING == 5
    with pytest.raises(QueueFull):
        queue.submit("demo", {"i": 99}, priority="interactive")
    assert len(queue.list()) == 5
    # a duplicate of a waiting job is still answered, background jobs still fit
    assert queue.submit("demo", {"i": 0}, priority="interactive").duplicate is True
    assert queue.submit("demo", {"i": 99}, priority="background").duplicate is False
    # once one starts, there is room again
    lease_of(queue, ids[0])
    assert queue.submit("demo", {"i": 100}, priority="interactive").job.state == State.QUEUED
    with pytest.raises(QueueFull):
        queue.submit("demo", {"i": 101}, priority="interactive")


# =========================================================================== lease


def test_lease_order_lane_then_run_after_then_submission(queue: Queue, clock: FakeClock) -> None:
    bg1 = queue.submit("demo", {"n": "bg1"}).job
    bg2 = queue.submit("demo", {"n": "bg2"}).job
    bg3 = queue.submit("demo", {"n": "bg3"}).job
    # bg1 fails once and waits 1 s: from then on it comes after bg2 and bg3 (earlier run_after)
    queue.fail(lease_of(queue, bg1.id), Outcome.failure(ErrorClass.RETRYABLE, "timeout", retry_after=1.0))
    clock.advance(2.0)
    bg4 = queue.submit("demo", {"n": "bg4"}).job  # run_after = now, later than bg1's
    in1 = queue.submit("demo", {"n": "in1"}, priority="interactive").job
    in2 = queue.submit("demo", {"n": "in2"}, priority="interactive").job
    order = []
    while (lease := queue.lease("w")) is not None:
        order.append(lease.job_id)
    assert order == [in1.id, in2.id, bg2.id, bg3.id, bg1.id, bg4.id]


def test_a_job_waiting_for_its_run_after_is_not_leased(queue: Queue, clock: FakeClock) -> None:
    job = queue.submit("demo", {"n": 1}).job
    queue.fail(lease_of(queue, job.id), Outcome.failure(ErrorClass.RETRYABLE, "busy", retry_after=30))
    assert queue.lease("w") is None
    assert queue.next_wake() == pytest.approx(clock.now() + 30)
    clock.advance(29.9)
    assert queue.lease("w") is None
    clock.advance(0.1)
    assert lease_of(queue, job.id).attempt == 2


def test_an_interactive_job_goes_first_even_if_submitted_last(queue: Queue, clock: FakeClock) -> None:
    bg = queue.submit("demo", {"n": "bg"}).job
    clock.advance(100)
    it = queue.submit("demo", {"n": "it"}, priority="interactive").job
    assert lease_of(queue, it.id).job_id == it.id
    assert lease_of(queue, bg.id).job_id == bg.id


def test_attempt_is_recorded_durably_at_lease_time(json_queue: Queue, open_queue: OpenQueue, clock: FakeClock) -> None:
    queue = json_queue  # (the JSON store: this reads its files or reopens it)
    job = queue.submit("demo", {"n": 1}).job
    lease = lease_of(queue, job.id, lease_s=45)
    assert lease.attempt == 1
    assert lease.expires_at == clock.now() + 45
    # seen by another opener before any result comes back: the provider has not been called yet
    seen = open_queue().get(job.id)
    assert seen.state == State.RUNNING
    assert (seen.attempts, seen.total_attempts) == (1, 1)
    assert seen.lease_epoch == lease.epoch
    assert seen.lease_expires_at == lease.expires_at
    assert seen.worker == "worker-1"
    assert types(seen) == ["submitted", "leased"]
    assert (seen.events[-1].attempt, seen.events[-1].epoch) == (1, lease.epoch)
    # the token is never part of the job view
    assert lease.token not in orjson.dumps(seen.to_json()).decode()


def test_lease_tokens_are_unpredictable_and_epochs_increase(queue: Queue) -> None:
    for i in range(6):
        queue.submit("demo", {"n": i})
    leases = [queue.lease("w") for _ in range(6)]
    assert all(lease is not None for lease in leases)
    tokens = [lease.token for lease in leases if lease]
    epochs = [lease.epoch for lease in leases if lease]
    assert len(set(tokens)) == 6
    assert all(len(t) >= 32 for t in tokens)
    assert epochs == sorted(epochs) and len(set(epochs)) == 6


def test_lease_can_be_limited_to_kinds(queue: Queue) -> None:
    a = queue.submit("demo", {"n": 1}).job
    b = queue.submit("other", {"n": 2}).job
    lease = queue.lease("w", kinds={"other"})
    assert lease is not None and lease.job_id == b.id
    assert queue.lease("w", kinds={"other"}) is None
    assert queue.get(a.id).state == State.QUEUED


# =========================================================================== heartbeat / complete / fail with stale tokens


def test_heartbeat_extends_the_lease(queue: Queue, clock: FakeClock) -> None:
    job = queue.submit("demo", {"n": 1}).job
    lease = lease_of(queue, job.id, lease_s=10)
    clock.advance(8)
    assert queue.heartbeat(lease, lease_s=10) == clock.now() + 10
    clock.advance(8)  # past the first expiry, within the extended one
    assert queue.reap() == []
    assert queue.get(job.id).state == State.RUNNING


def _forged(lease: Lease) -> Lease:
    return replace(lease, token=lease.token[:-4] + "AAAA")


def test_wrong_token_changes_nothing(json_queue: Queue, open_queue: OpenQueue) -> None:
    queue = json_queue  # (the JSON store: this reads its files or reopens it)
    job = queue.submit("demo", {"n": 1}).job
    lease = lease_of(queue, job.id)
    before = queue.get(job.id).to_json()
    bad = _forged(lease)
    with pytest.raises(StaleLease):
        queue.heartbeat(bad)
    rejected = queue.get(job.id).to_json()
    # nothing of the job changed; only the rejection is on its timeline
    assert {k: v for k, v in rejected.items() if k != "events"} == {k: v for k, v in before.items() if k != "events"}
    assert [e["detail"]["reason"] for e in rejected["events"][2:]] == ["heartbeat of a lost lease rejected"]
    with pytest.raises(StaleLease):
        queue.complete(bad, {"text": "forged"})
    with pytest.raises(StaleLease):
        queue.fail(bad, Outcome.failure(ErrorClass.FATAL, "forged"))
    after = open_queue().get(job.id)
    assert after.state == State.RUNNING
    assert after.attempts == 1 and after.lease_expires_at == before["lease_expires_at"]
    assert types(after) == ["submitted", "leased", "stale_result", "stale_result", "stale_result"]
    # the real holder is unaffected
    assert queue.complete(lease, {"text": "real"}).state == State.SUCCEEDED


def test_old_token_is_rejected_after_expiry_and_re_lease(queue: Queue, clock: FakeClock) -> None:
    job = queue.submit("demo", {"n": 1}).job
    old = lease_of(queue, job.id, lease_s=10)
    clock.advance(11)
    assert queue.reap() == [job.id]
    new = lease_of(queue, job.id, lease_s=10)
    assert new.epoch > old.epoch and new.token != old.token and new.attempt == 2

    with pytest.raises(StaleLease):
        queue.heartbeat(old)
    with pytest.raises(StaleLease):
        queue.fail(old, Outcome.failure(ErrorClass.FATAL, "late failure"))
    with pytest.raises(StaleLease):
        queue.complete(old, {"text": "late"})
    current = queue.get(job.id)
    assert current.state == State.RUNNING
    assert current.lease_epoch == new.epoch
    assert queue.lease_token(job.id) == new.token
    stale = [e for e in current.events if e.type == "stale_result"]
    assert len(stale) == 3  # the heartbeat, the failure and the result: each one recorded
    assert all(e.detail["stale_epoch"] == old.epoch and e.epoch == old.epoch for e in stale)
    # the current holder still completes, and the result is stored once for the key
    done = queue.complete(new, {"text": "current"})
    assert done.state == State.SUCCEEDED
    assert queue.results.count() == 1


# =========================================================================== reap


def test_reap_requeues_an_expired_lease(queue: Queue, clock: FakeClock) -> None:
    job = queue.submit("demo", {"n": 1}).job
    lease = lease_of(queue, job.id, lease_s=10)
    clock.advance(10)
    assert queue.reap() == []  # expiring exactly now is not expired yet
    clock.advance(0.5)
    assert queue.reap() == [job.id]
    after = queue.get(job.id)
    assert after.state == State.QUEUED
    assert after.attempts == 1  # the attempt was spent
    assert after.run_after == clock.now()
    assert after.lease_expires_at is None and queue.lease_token(job.id) is None
    ev = after.events[-1]
    assert ev.type == "lease_expired" and ev.actor == "system"
    assert ev.detail["expired_at"] == pytest.approx(lease.expires_at)
    with pytest.raises(StaleLease):
        queue.heartbeat(lease)
    assert queue.reap() == []


def test_reap_dead_letters_when_attempts_are_exhausted(queue: Queue, clock: FakeClock) -> None:
    job = queue.submit("demo", {"n": 1}, max_attempts=1).job
    lease_of(queue, job.id, lease_s=5)
    clock.advance(6)
    assert queue.reap() == [job.id]
    after = queue.get(job.id)
    assert after.state == State.DEAD
    assert types(after)[-2:] == ["lease_expired", "dead_lettered"]
    assert after.last_error is not None and after.last_error["class"] == "retryable"
    assert after.finished_at == clock.now()


def test_lease_reaps_expired_leases_in_the_same_commit(queue: Queue, clock: FakeClock) -> None:
    a = queue.submit("demo", {"n": "a"}).job
    b = queue.submit("demo", {"n": "b"}).job
    lease_of(queue, a.id, lease_s=5)
    clock.advance(6)
    got = lease_of(queue, b.id)
    assert got.job_id == b.id
    assert queue.get(a.id).state == State.QUEUED
    assert types(queue.get(a.id))[-1] == "lease_expired"


# =========================================================================== cancel


def test_cancel_a_queued_job(queue: Queue) -> None:
    job = queue.submit("demo", {"n": 1}).job
    done = queue.cancel(job.id, actor="cli")
    assert done.state == State.CANCELLED
    assert done.events[-1].type == "cancelled" and done.events[-1].actor == "cli"
    assert queue.lease("w") is None


def test_cancel_a_running_job_rejects_its_late_result(queue: Queue) -> None:
    job = queue.submit("demo", {"n": 1}).job
    lease = lease_of(queue, job.id)
    cancelled = queue.cancel(job.id)
    assert cancelled.state == State.CANCELLED
    assert queue.lease_token(job.id) is None
    # the worker is told to stop: its heartbeat fails
    with pytest.raises(StaleLease):
        queue.heartbeat(lease)
    with pytest.raises(StaleLease):
        queue.complete(lease, {"text": "late"})
    with pytest.raises(StaleLease):
        queue.fail(lease, Outcome.failure(ErrorClass.RETRYABLE, "late"))
    after = queue.get(job.id)
    assert after.state == State.CANCELLED
    assert after.result_ref is None
    assert types(after) == ["submitted", "leased", "cancelled", "stale_result", "stale_result", "stale_result"]


def test_cancel_accepts_a_unique_id_prefix(queue: Queue) -> None:
    job = queue.submit("demo", {"n": 1}).job
    assert queue.cancel(job.id[:6]).id == job.id


def test_an_id_prefix_names_its_job_and_holds_no_wildcard(any_queue: Queue) -> None:
    """Over every backend (PostgreSQL finds the prefix with the server, not by every id)."""
    ids = [any_queue.submit("demo", {"n": n}).job.id for n in range(40)]
    first = ids[0]
    assert any_queue.get(first[:8]).id == first
    assert any_queue.get(first).id == first
    for typed in ("%%%%", "____", first[:3] + "%", first[:3] + "_"):  # (no wildcard, whatever the backend)
        with pytest.raises(NoSuchJob, match="no job"):
            any_queue.get(typed)


# =========================================================================== retry


def test_retry_a_dead_job_is_the_same_job_with_a_new_run(queue: Queue, clock: FakeClock) -> None:
    job = queue.submit("demo", {"n": 1}, max_attempts=2).job
    for _ in range(2):
        queue.fail(lease_of(queue, job.id), Outcome.failure(ErrorClass.RETRYABLE, "timeout", retry_after=0))
    dead = queue.get(job.id)
    assert dead.state == State.DEAD and dead.attempts == 2 and dead.total_attempts == 2
    clock.advance(5)
    again = queue.retry(job.id, actor="cli")
    assert again.id == job.id
    assert again.state == State.QUEUED
    assert (again.run, again.attempts, again.total_attempts) == (2, 0, 2)
    assert again.events[: len(dead.events)] == dead.events
    retried = again.events[-1]
    assert retried.type == "retried" and retried.actor == "cli"
    assert retried.detail == {"run": 2, "from_state": "dead"}
    assert again.run_after == clock.now()
    assert again.deadline_at == clock.now() + queue.policy.deadline_s
    assert again.finished_at is None
    lease = lease_of(queue, job.id)
    assert lease.attempt == 1
    assert queue.get(job.id).total_attempts == 3
    assert len(queue.list()) == 1


def test_retry_a_cancelled_job(queue: Queue) -> None:
    job = queue.submit("demo", {"n": 1}).job
    queue.cancel(job.id)
    again = queue.retry(job.id)
    assert again.state == State.QUEUED and again.run == 2
    assert types(again) == ["submitted", "cancelled", "retried"]


# =========================================================================== replay


def test_replay_creates_a_new_linked_job_with_its_own_key(queue: Queue) -> None:
    job = queue.submit("demo", {"prompt": "p"}, title="Poem", priority="interactive", max_attempts=7).job
    queue.complete(lease_of(queue, job.id), {"text": "v1"})
    new = queue.replay(job.id, actor="cli")
    assert new.id != job.id
    assert new.state == State.QUEUED
    assert new.input == job.input
    assert new.idempotency_key != job.idempotency_key
    assert new.key_source == "replay"
    assert new.replay_of == job.id
    assert (new.priority, new.max_attempts) == ("interactive", 7)
    assert new.title == "Poem (replay)"
    assert new.events[0].type == "submitted" and new.events[0].detail["replay_of"] == job.id
    original = queue.get(job.id)
    assert original.state == State.SUCCEEDED
    assert original.replayed_as == (new.id,)
    ev = original.events[-1]
    assert ev.type == "replayed_as" and ev.detail == {"replayed_as": new.id, "edited": False}
    # a second replay is another new job: deduplication does not swallow it
    newer = queue.replay(job.id)
    assert newer.id not in (job.id, new.id)
    assert queue.get(job.id).replayed_as == (new.id, newer.id)
    assert len(queue.list()) == 3


def test_replay_with_edited_input(queue: Queue) -> None:
    job = queue.submit("demo", {"prompt": "p"}).job
    queue.cancel(job.id)
    new = queue.replay(job.id, {"prompt": "q"})
    assert new.input == {"prompt": "q"}
    assert queue.get(job.id).events[-1].detail["edited"] is True


@pytest.mark.parametrize("dies_at", [1, 2])
def test_replay_links_both_ways_or_not_at_all(
    open_queue: OpenQueue, monkeypatch: pytest.MonkeyPatch, dies_at: int
) -> None:
    queue = open_queue()
    job = queue.submit("demo", {"prompt": "p"}).job
    queue.cancel(job.id)
    real = queue.store.transact
    calls = []

    def dies_on_a_commit(fn: Callable[..., Any], **kwargs: Any) -> Any:
        calls.append(fn)
        if len(calls) == dies_at:
            raise SystemExit("the process died here")
        return real(fn, **kwargs)

    monkeypatch.setattr(queue.store, "transact", dies_on_a_commit)
    died = False
    try:
        queue.replay(job.id)
    except SystemExit:
        died = True
    monkeypatch.undo()
    queue.close()
    after = open_queue()
    replays = [j for j in after.list() if j.replay_of == job.id]
    # either the replay happened (linked both ways) or it did not happen at all
    assert [j.id for j in replays] == list(after.get(job.id).replayed_as)
    assert len(replays) == (0 if died else 1)


@pytest.mark.parametrize("state", [State.QUEUED, State.RUNNING])
def test_replay_of_an_unfinished_job_is_refused(queue: Queue, state: State) -> None:
    job = queue.submit("demo", {"prompt": "p"}).job
    if state is State.RUNNING:
        lease_of(queue, job.id)
    with pytest.raises(NotAllowed):
        queue.replay(job.id)
    assert len(queue.list()) == 1
    assert queue.get(job.id).replayed_as == ()


# =========================================================================== failure classes


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_retryable_backoff_is_full_jitter_within_the_ceiling(
    open_queue: OpenQueue, clock: FakeClock, seed: int
) -> None:
    policy = RetryPolicy(base_s=1.0, cap_s=60.0, max_attempts=10)
    queue = open_queue(policy=policy, rng=random.Random(seed))
    twin = random.Random(seed)
    job = queue.submit("demo", {"n": 1}).job
    for n in range(1, 10):
        lease = lease_of(queue, job.id)
        assert lease.attempt == n
        now = clock.now()
        after = queue.fail(lease, Outcome.failure(ErrorClass.RETRYABLE, "connection reset", status=503))
        ceiling = min(60.0, 1.0 * 2 ** (n - 1))
        delay = after.run_after - now
        assert 0.0 <= delay <= ceiling + 1e-9
        assert delay == pytest.approx(twin.uniform(0.0, ceiling), abs=1e-6)
        assert after.state == State.QUEUED and after.attempts == n
        ev = after.events[-1]
        assert ev.type == "retry_scheduled"
        assert ev.detail["error_class"] == "retryable" and ev.detail["status"] == 503
        assert ev.detail["delay_s"] == pytest.approx(delay, abs=1e-3)
        if delay > 0:
            assert queue.lease("w") is None
        clock.advance(ceiling)
    dead = queue.fail(lease_of(queue, job.id), Outcome.failure(ErrorClass.RETRYABLE, "still down"))
    assert dead.state == State.DEAD and dead.attempts == 10


def test_retry_policy_ceiling_and_jitter_bounds() -> None:
    policy = RetryPolicy(base_s=1.0, cap_s=60.0)
    assert [policy.ceiling(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert policy.ceiling(0) == 1 and policy.ceiling(10_000) == 60
    rng = random.Random(7)
    for n in range(1, 12):
        samples = [policy.backoff(n, rng) for _ in range(200)]
        assert all(0.0 <= s <= policy.ceiling(n) for s in samples)
        # full jitter: spread over the whole range, not bunched at the ceiling
        assert min(samples) < policy.ceiling(n) * 0.1 and max(samples) > policy.ceiling(n) * 0.9


@pytest.mark.parametrize("error_class", [ErrorClass.RETRYABLE, ErrorClass.THROTTLED])
def test_retry_after_is_honoured(queue: Queue, clock: FakeClock, error_class: ErrorClass) -> None:
    job = queue.submit("demo", {"n": 1}).job
    now = clock.now()
    after = queue.fail(lease_of(queue, job.id), Outcome.failure(error_class, "slow down", status=429, retry_after=17.0))
    assert after.state == State.QUEUED
    assert after.run_after == now + 17.0
    assert after.events[-1].detail["retry_after_s"] == 17.0
    clock.advance(16.9)
    assert queue.lease("w") is None
    clock.advance(0.1)
    assert lease_of(queue, job.id)


def test_a_negative_retry_after_does_not_jump_the_queue(queue: Queue, clock: FakeClock) -> None:
    a = queue.submit("demo", {"n": "a"}).job
    b = queue.submit("demo", {"n": "b"}).job
    after = queue.fail(lease_of(queue, a.id), Outcome.failure(ErrorClass.RETRYABLE, "odd header", retry_after=-100.0))
    assert after.run_after >= clock.now()
    assert lease_of(queue, b.id)


def test_a_nan_retry_after_is_not_stored(json_queue: Queue, open_queue: OpenQueue) -> None:
    queue = json_queue  # (the JSON store: this reads its files or reopens it)
    job = queue.submit("demo", {"n": 1}).job
    after = queue.fail(lease_of(queue, job.id), Outcome.failure(ErrorClass.RETRYABLE, "x", retry_after=float("nan")))
    assert after.run_after == after.run_after  # not NaN
    assert open_queue().get(job.id).run_after == after.run_after  # and the same on disk


def test_throttled_does_not_spend_an_attempt(open_queue: OpenQueue, clock: FakeClock) -> None:
    queue = open_queue(policy=RetryPolicy(max_attempts=2))
    job = queue.submit("demo", {"n": 1}).job
    for i in range(5):
        lease = lease_of(queue, job.id)
        assert lease.attempt == 1
        after = queue.fail(
            lease, Outcome.failure(ErrorClass.THROTTLED, "429 too many requests", status=429, retry_after=5)
        )
        assert after.state == State.QUEUED
        assert after.attempts == 0
        assert after.total_attempts == i + 1
        assert after.events[-1].type == "throttled"
        clock.advance(5)
    queue.fail(lease_of(queue, job.id), Outcome.failure(ErrorClass.RETRYABLE, "timeout", retry_after=0))
    dead = queue.fail(lease_of(queue, job.id), Outcome.failure(ErrorClass.RETRYABLE, "timeout", retry_after=0))
    assert dead.state == State.DEAD
    assert (dead.attempts, dead.total_attempts) == (2, 7)
    assert "attempts exhausted (2/2)" in dead.events[-1].detail["reason"]


def test_throttled_without_retry_after_backs_off(queue: Queue, clock: FakeClock) -> None:
    job = queue.submit("demo", {"n": 1}).job
    now = clock.now()
    after = queue.fail(lease_of(queue, job.id), Outcome.failure(ErrorClass.THROTTLED, "rate limited"))
    assert 0.0 <= after.run_after - now <= queue.policy.ceiling(1)


def test_fatal_is_dead_at_once(queue: Queue, clock: FakeClock) -> None:
    job = queue.submit("demo", {"n": 1}, max_attempts=5).job
    dead = queue.fail(lease_of(queue, job.id), Outcome.failure(ErrorClass.FATAL, "unauthorized", status=401))
    assert dead.state == State.DEAD
    assert dead.attempts == 1
    assert dead.last_error == {"class": "fatal", "message": "unauthorized", "status": 401}
    assert dead.finished_at == clock.now()
    ev = dead.events[-1]
    assert ev.type == "dead_lettered" and ev.detail["reason"] == "fatal error"
    assert queue.lease("w") is None


def test_poison_three_times_is_dead(queue: Queue) -> None:
    job = queue.submit("demo", {"n": 1}, max_attempts=10).job
    for n in (1, 2):
        after = queue.fail(lease_of(queue, job.id), Outcome.failure(ErrorClass.POISON, "invalid output", retry_after=0))
        assert after.state == State.QUEUED
        assert after.poison_count == n
    dead = queue.fail(lease_of(queue, job.id), Outcome.failure(ErrorClass.POISON, "invalid output"))
    assert dead.state == State.DEAD
    assert dead.attempts == 3 and dead.poison_count == 3
    assert dead.events[-1].detail["poison_count"] == 3
    assert "poison" in dead.events[-1].detail["reason"]
    # a retry gives the input a fresh poison count
    assert queue.retry(job.id).poison_count == 0


def test_attempts_exhausted_is_dead(queue: Queue) -> None:
    job = queue.submit("demo", {"n": 1}, max_attempts=3).job
    for n in (1, 2, 3):
        lease = lease_of(queue, job.id)
        assert lease.attempt == n
        after = queue.fail(lease, Outcome.failure(ErrorClass.RETRYABLE, "timeout", retry_after=0))
        assert after.attempts <= after.max_attempts
    assert after.state == State.DEAD
    assert "attempts exhausted (3/3)" in after.events[-1].detail["reason"]
    assert queue.lease("w") is None


@pytest.mark.parametrize("how", ["retry-after-beyond", "clock-beyond"])
@pytest.mark.parametrize("error_class", [ErrorClass.RETRYABLE, ErrorClass.THROTTLED])
def test_retry_deadline_passed_is_dead(
    open_queue: OpenQueue, clock: FakeClock, how: str, error_class: ErrorClass
) -> None:
    queue = open_queue(policy=RetryPolicy(deadline_s=100.0, max_attempts=50))
    job = queue.submit("demo", {"n": 1}).job
    assert job.deadline_at == clock.now() + 100.0
    lease = lease_of(queue, job.id, lease_s=1000)
    if how == "retry-after-beyond":
        outcome = Outcome.failure(error_class, "busy", retry_after=150.0)
    else:
        clock.advance(101.0)
        outcome = Outcome.failure(error_class, "busy", retry_after=0.0)
    dead = queue.fail(lease, outcome)
    assert dead.state == State.DEAD
    assert dead.events[-1].detail["reason"] == "retry deadline passed"


# =========================================================================== redaction (invariant 7)

CANARY = "CANARY-purple-elephant-7731 write a sonnet about the secret lighthouse keeper"
API_KEY = "sk-proj-Zq8Xv2LmN4pR7tY1wK9bC3dF"


@pytest.mark.parametrize("error_class", list(ErrorClass), ids=lambda c: c.value)
def test_error_messages_are_redacted_everywhere(open_queue: OpenQueue, data_dir: Path, error_class: ErrorClass) -> None:
    queue = open_queue(background_compaction=False)
    job = queue.submit("demo", {"prompt": CANARY, "style": "formal"}).job
    message = (
        f"400 Bad Request: the prompt '{CANARY}' was rejected; "
        f"Authorization: Bearer {API_KEY} api_key={API_KEY} (key {API_KEY})"
    )
    queue.fail(lease_of(queue, job.id), Outcome.failure(error_class, message, status=400, retry_after=0))
    queue.store.compact_now()  # the snapshot must be clean too
    assert list((data_dir / "store").glob("snapshot-*.json"))
    after = queue.get(job.id)

    assert after.last_error is not None
    stored_text = orjson.dumps({"last_error": after.last_error, "events": after.to_json()["events"]}).decode()
    assert "CANARY" not in stored_text and "lighthouse" not in stored_text
    assert "sk-" not in stored_text and API_KEY not in stored_text
    assert REDACTED in after.last_error["message"]
    assert after.last_error["message"].startswith("400 Bad Request")

    # on disk: the key appears in no file at all; the prompt only as the job's own input
    for path, raw in all_file_bytes(data_dir).items():
        assert API_KEY.encode() not in raw, path
        assert b"sk-proj" not in raw, path
    # (the job's title is its prompt's first line, as every front end names a job: a
    # field of the job, like its input, never an event, a log or an error)
    for line, record in journal_records(data_dir):
        if record.get("op") == "new":
            rest = {k: v for k, v in record["job"].items() if k not in ("input", "title")}
            assert b"CANARY" not in orjson.dumps([rest, record.get("ev")])
        else:
            assert b"CANARY" not in line and b"lighthouse" not in line
    for snap in (data_dir / "store").glob("snapshot-*.json"):
        doc, _ = decode_snapshot(snap.read_bytes(), snap.name)
        for raw_job in doc["data"]["jobs"]:
            rest = {k: v for k, v in raw_job.items() if k not in ("input", "events", "title")}
            assert b"CANARY" not in orjson.dumps(rest)
            assert b"CANARY" not in raw_job["events"] and b"lighthouse" not in raw_job["events"]


@pytest.mark.parametrize(
    "message",
    [
        f"invalid prompt: {CANARY}",
        f"invalid prompt: {CANARY.upper()}",
        f"prompt starts with {CANARY[:30]}...",
        f"error in body {orjson.dumps({'prompt': CANARY}).decode()}",
        f"quoted: '{' '.join(CANARY.split()[:4])}'",
        f"prompt starts with {CANARY[:44]}...",
        "the model refused to talk about the secret lighthouse, sorry",
    ],
    ids=["verbatim", "upper-case", "prefix", "json-body", "first-words", "longer-prefix", "middle-words"],
)
def test_redact_removes_prompt_text(message: str) -> None:
    out = redact(message, {"prompt": CANARY})
    for word in ("canary", "elephant", "7731", "sonnet", "secret lighthouse"):
        assert word not in out.lower()
    assert REDACTED in out


def test_redact_keeps_unrelated_text() -> None:
    assert redact("connection reset by peer (HTTP 503)", {"prompt": CANARY}) == "connection reset by peer (HTTP 503)"


@pytest.mark.parametrize(
    "prompt,quoted",
    [
        (
            "line one of the poem\nline two of the poem",
            'body: {"prompt":"line one of the poem\\nline two of the poem"}',
        ),
        ('say "hello" to the quiet lighthouse', 'body: {"prompt":"say \\"hello\\" to the quiet lighthouse"}'),
        ("tabs\tand  double  spaces in a prompt", "prompt was: tabs and double spaces in a prompt"),
    ],
    ids=["json-escaped-newline", "json-escaped-quotes", "whitespace-collapsed"],
)
def test_redact_removes_prompt_text_as_providers_quote_it(prompt: str, quoted: str) -> None:
    out = redact(quoted, {"prompt": prompt})
    assert "lighthouse" not in out
    assert "poem" not in out
    assert "double spaces" not in out


@pytest.mark.parametrize(
    "message",
    [
        f"Incorrect API key provided: {API_KEY}.",
        f"Authorization: Bearer {API_KEY}",
        f"headers={{'x-api-key': '{API_KEY}'}}",
        "token=abcdef0123456789 password: hunter22hunter",
        "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    ],
)
def test_redact_removes_keys(message: str) -> None:
    out = redact(message)
    assert API_KEY not in out
    assert "sk-" not in out
    assert "abcdef0123456789" not in out and "hunter22" not in out
    assert REDACTED in out


def test_redact_caps_the_length() -> None:
    out = redact("x " * 1000)
    assert len(out) <= 300


# =========================================================================== idempotency race


@pytest.mark.parametrize("shared", [True, False], ids=["one-queue", "queue-per-thread"])
def test_eight_threads_submitting_the_same_input_make_one_job(open_queue: OpenQueue, shared: bool) -> None:
    first = open_queue()
    queues = [first] * 8 if shared else [first] + [open_queue() for _ in range(7)]
    barrier = threading.Barrier(8)
    results: list[Any] = [None] * 8
    errors: list[BaseException] = []

    def submit(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = queues[i].submit("demo", {"prompt": "the very same input"})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert len({r.job.id for r in results}) == 1
    assert sorted(r.duplicate for r in results) == [False] + [True] * 7
    assert len(first.list()) == 1
    assert types(first.get(results[0].job.id)) == ["submitted"]


# =========================================================================== results before succeeded


def test_result_is_stored_before_the_job_is_marked_succeeded(
    queue: Queue, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = queue.submit("demo", {"prompt": "p"}).job
    lease = lease_of(queue, job.id)
    seen: list[bool] = []
    real = queue.store.transact

    def checking_transact(fn: Callable[..., Any], **kwargs: Any) -> Any:
        def wrapped(state: Any) -> Any:
            records = fn(state)
            for r in records:
                if (r.get("set") or {}).get("state") == "succeeded":
                    # the result file exists already, or the record itself carries the result
                    # ("in the same durable commit", shared/DESIGN.md section 3)
                    carried = (r.get("res") or {}).get("key") == job.idempotency_key
                    seen.append(queue.results.has(job.idempotency_key) or carried)
            return records

        return real(wrapped, **kwargs)

    monkeypatch.setattr(queue.store, "transact", checking_transact)
    done = queue.complete(lease, {"text": "r"})
    assert seen == [True]
    assert done.state == State.SUCCEEDED
    assert done.result_ref is not None
    path = data_dir / done.result_ref
    assert queue.results.materialize(job.idempotency_key) == path
    doc = orjson.loads(path.read_bytes())
    assert doc["result"] == {"text": "r"}
    assert (doc["key"], doc["job_id"], doc["epoch"]) == (job.idempotency_key, job.id, lease.epoch)
    assert done.events[-1].type == "succeeded" and done.events[-1].detail["result_ref"] == done.result_ref


def test_complete_twice_is_impossible(queue: Queue, data_dir: Path) -> None:
    job = queue.submit("demo", {"prompt": "p"}).job
    lease = lease_of(queue, job.id)
    done = queue.complete(lease, {"text": "first"})
    queue.results.materialize(job.idempotency_key)
    raw = (data_dir / str(done.result_ref)).read_bytes()
    with pytest.raises(StaleLease):
        queue.complete(lease, {"text": "second"})
    after = queue.get(job.id)
    assert after.state == State.SUCCEEDED
    assert types(after).count("succeeded") == 1
    assert (data_dir / str(done.result_ref)).read_bytes() == raw
    assert queue.results.count() == 1


def test_a_result_already_stored_for_the_key_is_not_produced_again(queue: Queue, data_dir: Path) -> None:
    job = queue.submit("demo", {"prompt": "p"}).job
    lease = lease_of(queue, job.id)
    # stored by an earlier worker of this key (another epoch)
    ref, created = queue.results.put(job.idempotency_key, {"text": "earlier"}, job_id=job.id, epoch=0, produced_at=0.0)
    assert created
    done = queue.complete(lease, {"text": "later"})
    assert done.result_ref == ref
    assert orjson.loads((data_dir / ref).read_bytes())["result"] == {"text": "earlier"}
    assert "not produced again" in done.events[-1].detail["reason"]


def test_a_result_written_before_a_crash_is_reconciled(open_queue: OpenQueue, data_dir: Path) -> None:
    queue = open_queue()
    job = queue.submit("demo", {"prompt": "p"}).job
    lease = lease_of(queue, job.id)
    # the worker stored the result, then the process died before the commit
    queue.results.put(job.idempotency_key, {"text": "r"}, job_id=job.id, epoch=lease.epoch, produced_at=0.0)
    queue.close()
    reopened = open_queue()
    assert reopened.report.first
    after = reopened.get(job.id)
    assert after.state == State.SUCCEEDED
    assert after.result_ref == reopened.results.ref_for(job.idempotency_key)
    assert after.events[-1].type == "reconciled"
    assert [r.decision for r in reopened.reconciled] == ["succeeded"]
    assert os.path.exists(data_dir / after.result_ref)


def test_a_result_only_the_journal_holds_survives_a_reopen(open_queue: OpenQueue, data_dir: Path) -> None:
    queue = open_queue()
    job = queue.submit("demo", {"prompt": "p"}).job
    done = queue.complete(lease_of(queue, job.id), {"text": "r"})
    path = data_dir / str(done.result_ref)
    assert not path.exists()  # no result-file I/O on the commit path: the record carries it
    queue.close()
    reopened = open_queue()
    assert reopened.get(job.id).state == State.SUCCEEDED
    doc = reopened.results.get(job.idempotency_key)
    assert doc is not None and doc["result"] == {"text": "r"} and doc["job_id"] == job.id
    assert reopened.results.count() == 1
    # asking for the file writes it from the journal's copy
    assert reopened.results.materialize(job.idempotency_key) == path
    assert orjson.loads(path.read_bytes()) == doc
    # a duplicate submission answers with the stored result
    again = reopened.submit("demo", {"prompt": "p"})
    assert again.duplicate and again.result == doc


def test_compaction_writes_and_syncs_results_before_folding_their_records(
    open_queue: OpenQueue, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = open_queue(background_compaction=False)
    jobs = [queue.submit("demo", {"prompt": f"p{i}"}).job for i in range(3)]
    refs = [queue.complete(lease_of(queue, j.id), {"text": j.id}).result_ref for j in jobs]
    assert not any((data_dir / str(r)).exists() for r in refs)
    assert sorted(queue.store.carried_keys()) == sorted(j.idempotency_key for j in jobs)
    synced: list[bool] = []
    monkeypatch.setattr(
        results_module, "_syncfs", lambda fd: synced.append(all((data_dir / str(r)).exists() for r in refs))
    )
    queue.store.compact_now()  # the records carrying the results are folded away now
    assert synced == [True]  # written, then synced, before the snapshot replaced the records
    for job, ref in zip(jobs, refs, strict=True):
        assert orjson.loads((data_dir / str(ref)).read_bytes())["result"] == {"text": job.id}
    assert queue.store.carried_keys() == []  # memory is given back once the files are on disk
    assert queue.results.get(jobs[1].idempotency_key)["result"] == {"text": jobs[1].id}
    queue.close()
    reopened = open_queue()
    assert reopened.store.carried_keys() == [] and reopened.results.count() == 3


def test_leases_and_heartbeats_wait_for_no_fsync_until_sync(json_queue: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    queue = json_queue  # (the JSON store: this reads its files or reopens it)
    fsyncs: list[int] = []
    real = storage_module._datasync
    monkeypatch.setattr(storage_module, "_datasync", lambda fd: (fsyncs.append(fd), real(fd))[1])
    job = queue.submit("demo", {"prompt": "p"}).job
    assert len(fsyncs) == 1  # an acknowledged submission is durable
    lease = lease_of(queue, job.id)
    queue.heartbeat(lease)
    assert len(fsyncs) == 1  # written to the journal (other processes see it), not yet synced
    queue.sync()
    assert len(fsyncs) == 2  # one fsync covers both
    queue.sync()
    assert len(fsyncs) == 2  # nothing new to sync
    queue.heartbeat(lease)
    queue.complete(lease, {"text": "r"})
    assert len(fsyncs) == 3  # the durable commit covers the heartbeat written before it
    queue.sync()
    assert len(fsyncs) == 3


def test_a_lease_written_without_fsync_is_seen_by_another_process(data_dir: Path, json_queue: Queue) -> None:
    queue = json_queue  # (the JSON store: this reads its files or reopens it)
    job = queue.submit("demo", {"prompt": "p"}).job
    lease = lease_of(queue, job.id)
    code = (
        "import sys, json; from desktop_queue.core.queue import Queue\n"
        "q = Queue.open(sys.argv[1], providers={})\n"
        "j = q.get(sys.argv[2]); print(json.dumps([j.state, j.lease_epoch])); q.close()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(data_dir), job.id], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(out.stdout) == ["running", lease.epoch]


def test_raw_jobs_keep_the_input_of_queued_jobs_only(queue: Queue) -> None:
    done = queue.submit("demo", {"prompt": "finished"}).job
    queue.complete(lease_of(queue, done.id), {"text": "r"})
    waiting = queue.submit("demo", {"prompt": "still queued", "profile": "local"}).job
    rows = {row["id"]: row for row in queue.raw_jobs()}
    assert rows[waiting.id]["input"] == {"prompt": "still queued", "profile": "local"}  # flow control reads it
    assert "input" not in rows[done.id]
    assert all("events" not in row and "lease_token" not in row for row in rows.values())


def test_a_worker_of_other_kinds_leases_nothing_and_changes_nothing(queue: Queue) -> None:
    """A worker that runs none of the waiting kinds finds that out without scanning the lanes."""
    job = queue.submit("demo", {"prompt": "not mine"}).job
    version = queue.refresh()
    assert queue.lease("w", kinds={"openai.chat"}) is None
    assert queue.refresh() == version and queue.get(job.id).state == State.QUEUED
    lease = queue.lease("w", kinds={"demo", "openai.chat"})
    assert lease is not None and lease.job_id == job.id
    assert queue.lease("w", kinds={"demo"}) is None  # (none of its kind is queued any more)
