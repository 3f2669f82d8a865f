"""The state machine of shared/DESIGN.md section 1, checked pair by pair.

Every pair of states is tried: against the transition table itself and, where a
verb exists for the target state, through the real verbs of :class:`Queue`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from desktop_queue.core import (
    ErrorClass,
    FakeClock,
    IllegalTransition,
    Lease,
    NotAllowed,
    Outcome,
    Queue,
    StaleLease,
    State,
)
from desktop_queue.core.model import TRANSITIONS, check_transition


@pytest.fixture
def queue(any_queue: Queue) -> Queue:
    """Each backend in turn: the transitions are the queue's, whatever keeps the jobs."""
    return any_queue


#: The table of shared/DESIGN.md section 1, written out independently of the code.
DESIGN_TABLE: dict[State, set[State]] = {
    State.QUEUED: {State.RUNNING, State.CANCELLED},
    State.RUNNING: {State.SUCCEEDED, State.QUEUED, State.DEAD, State.CANCELLED},
    State.SUCCEEDED: set(),
    State.DEAD: {State.QUEUED},
    State.CANCELLED: {State.QUEUED},
}

ALL_PAIRS = list(itertools.product(State, State))
LEGAL_PAIRS = [(a, b) for a, b in ALL_PAIRS if b in DESIGN_TABLE[a]]
ILLEGAL_PAIRS = [(a, b) for a, b in ALL_PAIRS if b not in DESIGN_TABLE[a]]


def pair_id(pair: tuple[State, State]) -> str:
    return f"{pair[0].value}->{pair[1].value}"


def test_table_is_the_design_table() -> None:
    assert {s: set(t) for s, t in TRANSITIONS.items()} == DESIGN_TABLE
    assert len(LEGAL_PAIRS) == 8
    assert len(ILLEGAL_PAIRS) == 17


@pytest.mark.parametrize("pair", ALL_PAIRS, ids=pair_id)
def test_check_transition_every_pair(pair: tuple[State, State]) -> None:
    src, dst = pair
    if dst in DESIGN_TABLE[src]:
        check_transition("job1", src, dst)  # must not raise
    else:
        with pytest.raises(IllegalTransition) as info:
            check_transition("job1", src, dst)
        assert (info.value.job_id, info.value.from_state, info.value.to_state) == ("job1", src, dst)
        assert f"from {src.value} to {dst.value}" in str(info.value)
        assert isinstance(info.value, NotAllowed)
        assert info.value.exit_code == 4


# --------------------------------------------------------------------------- jobs in a given state


class Made:
    """A job brought into a state through the verbs, with the leases it has had."""

    def __init__(self, queue: Queue, job_id: str, leases: list[Lease]) -> None:
        self.queue = queue
        self.id = job_id
        self.leases = leases

    @property
    def state(self) -> str:
        return self.queue.get(self.id).state


def make_in_state(queue: Queue, state: State, n: int = 0) -> Made:
    """Drives a fresh job to ``state`` using only the public verbs."""
    job = queue.submit("demo", {"prompt": f"transition test {state.value} {n}"}).job
    leases: list[Lease] = []
    if state in (State.RUNNING, State.SUCCEEDED, State.DEAD):
        lease = queue.lease("w1")
        assert lease is not None and lease.job_id == job.id
        leases.append(lease)
    if state is State.SUCCEEDED:
        queue.complete(leases[-1], {"text": "done"})
    elif state is State.DEAD:
        queue.fail(leases[-1], Outcome.failure(ErrorClass.FATAL, "bad request", status=400))
    elif state is State.CANCELLED:
        queue.cancel(job.id)
    made = Made(queue, job.id, leases)
    assert made.state == state
    return made


def comparable(job_json: dict[str, Any]) -> dict[str, Any]:
    """A job's fields that a refused verb must not change (stale-result events may be appended)."""
    out = dict(job_json)
    out.pop("events")
    out.pop("updated_at")
    return out


# --------------------------------------------------------------------------- legal edges through verbs


def _lease(m: Made) -> None:
    lease = m.queue.lease("w2")
    assert lease is not None and lease.job_id == m.id


def _cancel(m: Made) -> None:
    m.queue.cancel(m.id)


def _complete(m: Made) -> None:
    m.queue.complete(m.leases[-1], {"text": "ok"})


def _fail_retryable(m: Made) -> None:
    m.queue.fail(m.leases[-1], Outcome.failure(ErrorClass.RETRYABLE, "timeout", retry_after=0))


def _reap_expired(m: Made) -> None:
    clock = m.queue.clock
    assert isinstance(clock, FakeClock)
    clock.advance(m.queue.policy.lease_s + 1)
    assert m.queue.reap() == [m.id]


def _fail_fatal(m: Made) -> None:
    m.queue.fail(m.leases[-1], Outcome.failure(ErrorClass.FATAL, "forbidden", status=403))


def _retry(m: Made) -> None:
    m.queue.retry(m.id)


#: Every edge of the table, with the verbs that take it.
EDGE_DRIVERS: list[tuple[State, State, str, Callable[[Made], None]]] = [
    (State.QUEUED, State.RUNNING, "lease", _lease),
    (State.QUEUED, State.CANCELLED, "cancel", _cancel),
    (State.RUNNING, State.SUCCEEDED, "complete", _complete),
    (State.RUNNING, State.QUEUED, "fail-retryable", _fail_retryable),
    (State.RUNNING, State.QUEUED, "reap", _reap_expired),
    (State.RUNNING, State.DEAD, "fail-fatal", _fail_fatal),
    (State.RUNNING, State.CANCELLED, "cancel", _cancel),
    (State.DEAD, State.QUEUED, "retry", _retry),
    (State.CANCELLED, State.QUEUED, "retry", _retry),
]


def test_every_legal_edge_has_a_verb() -> None:
    assert {(a, b) for a, b, _, _ in EDGE_DRIVERS} == set(LEGAL_PAIRS)


@pytest.mark.parametrize(
    "src,dst,verb,drive", EDGE_DRIVERS, ids=[f"{a.value}->{b.value}-{v}" for a, b, v, _ in EDGE_DRIVERS]
)
def test_legal_edge_through_verb(
    queue: Queue, src: State, dst: State, verb: str, drive: Callable[[Made], None]
) -> None:
    made = make_in_state(queue, src)
    before = queue.get(made.id)
    drive(made)
    after = queue.get(made.id)
    assert after.state == dst
    # history is append-only: the old timeline is a prefix of the new one
    assert after.events[: len(before.events)] == before.events
    assert len(after.events) > len(before.events)


# --------------------------------------------------------------------------- cancel and retry on every state


@pytest.mark.parametrize("src", list(State), ids=lambda s: s.value)
def test_cancel_on_each_state(queue: Queue, src: State) -> None:
    made = make_in_state(queue, src)
    before = queue.get(made.id).to_json()
    if State.CANCELLED in DESIGN_TABLE[src]:
        job = queue.cancel(made.id)
        assert job.state == State.CANCELLED
        assert job.events[-1].type == "cancelled"
        assert job.events[-1].detail["from_state"] == src.value
        assert queue.lease_token(made.id) is None
    else:
        with pytest.raises(IllegalTransition) as info:
            queue.cancel(made.id)
        assert (info.value.from_state, info.value.to_state) == (src, State.CANCELLED)
        assert queue.get(made.id).to_json() == before


@pytest.mark.parametrize("src", list(State), ids=lambda s: s.value)
def test_retry_on_each_state(queue: Queue, src: State) -> None:
    made = make_in_state(queue, src)
    before = queue.get(made.id).to_json()
    if src in (State.DEAD, State.CANCELLED):
        job = queue.retry(made.id)
        assert job.state == State.QUEUED
        assert job.run == 2
    else:
        # running -> queued is an edge of the table, but only failures and reaping take it:
        # a person's retry is for dead and cancelled jobs only.
        with pytest.raises(IllegalTransition) as info:
            queue.retry(made.id)
        assert (info.value.from_state, info.value.to_state) == (src, State.QUEUED)
        assert queue.get(made.id).to_json() == before


# --------------------------------------------------------------------------- every illegal pair


@pytest.mark.parametrize("pair", ILLEGAL_PAIRS, ids=pair_id)
def test_illegal_pair_is_refused(queue: Queue, pair: tuple[State, State]) -> None:
    """Every illegal pair raises; through the verb that targets ``dst`` where one can be aimed at a job."""
    src, dst = pair
    made = make_in_state(queue, src)
    # another job that *is* runnable, so a lease that skips ours is not just an empty queue
    other = make_in_state(queue, State.QUEUED, n=1) if dst is State.RUNNING else None
    before = queue.get(made.id).to_json()

    with pytest.raises(IllegalTransition):
        check_transition(made.id, src, dst)

    if dst is State.CANCELLED:
        with pytest.raises(IllegalTransition):
            queue.cancel(made.id)
    elif dst is State.QUEUED:
        with pytest.raises(IllegalTransition):
            queue.retry(made.id)
    elif dst is State.RUNNING:
        # lease picks queued jobs only: ours is passed over
        lease = queue.lease("w2")
        assert lease is not None and other is not None and lease.job_id == other.id
        assert queue.lease("w3") is None
    elif dst in (State.SUCCEEDED, State.DEAD):
        # complete/fail need the job's current lease; whatever lease there was is no longer current
        lease = made.leases[-1] if made.leases else _forged_lease(queue, made.id)
        with pytest.raises(StaleLease):
            if dst is State.SUCCEEDED:
                queue.complete(lease, {"text": "late"})
            else:
                queue.fail(lease, Outcome.failure(ErrorClass.FATAL, "late"))
    after = queue.get(made.id).to_json()
    assert after["state"] == src
    assert comparable(after) == comparable(before)
    # nothing but a record of the refused late report may be added to the timeline
    added = after["events"][len(before["events"]) :]
    assert after["events"][: len(before["events"])] == before["events"]
    assert all(e["type"] == "stale_result" for e in added)


def _forged_lease(queue: Queue, job_id: str) -> Lease:
    job = queue.get(job_id)
    return Lease(job_id, "forged-token", 99, 0.0, 1, "w9", job)


@pytest.mark.parametrize("src", [s for s in State if s is not State.RUNNING], ids=lambda s: s.value)
def test_complete_and_fail_need_a_running_job(queue: Queue, src: State) -> None:
    made = make_in_state(queue, src)
    lease = made.leases[-1] if made.leases else _forged_lease(queue, made.id)
    for token in (lease.token, "forged-token"):
        bad = replace(lease, token=token)
        with pytest.raises(StaleLease):
            queue.complete(bad, {"text": "x"})
        with pytest.raises(StaleLease):
            queue.fail(bad, Outcome.failure(ErrorClass.RETRYABLE, "x"))
        with pytest.raises(StaleLease):
            queue.heartbeat(bad)
    assert queue.get(made.id).state == src
