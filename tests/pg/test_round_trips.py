"""What a job's lifecycle costs the server: statements and round trips, counted on the wire.

libpq's trace of the backend's one pooled connection lists every protocol message the
client sends (``Execute``: a statement; ``Sync`` and ``Flush``: the end of a batch the client may
then wait for) and every one it receives (``DataRow``: a row). The counts are behaviour, not timing:
a change that brings a statement or a wait back fails here, whatever the machine.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq

from desktop_queue.core import FakeClock, Queue, State
from desktop_queue.core.pg import PgBackend
from desktop_queue.core.pg.view import _HOLDER

#: what one submit + lease + complete may cost at most on the pooled connection: one
#: statement per verb (a plain lease too: PgView.lease_next), and the change notifications
#: of the submission and the completion (no burst; the lease's is carried by the next
#: commit or the notifier's thread, on a connection of its own)
MAX_STATEMENTS = 5
#: ``Sync`` and ``Flush`` messages: the points where the client may wait for the server
#: (a verb that notifies sends two syncs, one ending its transaction and one its
#: notification's, and waits once for both)
MAX_WAITS = 9


class Wire:
    """Counts the protocol messages of ``backend``'s pooled connection while :meth:`tracing`."""

    def __init__(self, backend: PgBackend, path: Path) -> None:
        self.backend = backend
        self.path = path

    @contextlib.contextmanager
    def tracing(self) -> Iterator[Counter[str]]:
        counts: Counter[str] = Counter()
        pool = self.backend._pool
        assert pool is not None
        with open(self.path, "w") as fh:
            with pool.connection() as conn:
                conn.pgconn.trace(fh.fileno())
                conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
            try:
                yield counts
            finally:
                with pool.connection() as conn:
                    conn.pgconn.untrace()
        for line in self.path.read_text(errors="replace").splitlines():
            parts = line.split("\t")
            if len(parts) >= 3 and parts[0] in ("F", "B"):
                counts[f"{parts[0]} {parts[2]}"] += 1


@pytest.fixture
def traced(open_pg: Callable[..., Queue], pg_dsn: str, tmp_path: Path) -> tuple[Queue, Wire]:
    # one pooled connection: every verb's statements go over it (the session and the
    # notifier have connections of their own, and are not counted)
    backend = PgBackend(pg_dsn, pool_size=1)
    queue = open_pg(backend=backend)
    assert backend.notifier is not None
    backend.notifier.linger_s = 0  # (the most a verb costs: every commit notifies in its own round trip)
    return queue, Wire(backend, tmp_path / "trace.txt")


def _notices(backend: PgBackend) -> list[str]:
    """What the server says to the backend's one pooled connection from now on (a warning, say)."""
    said: list[str] = []
    assert backend._pool is not None
    with backend._pool.connection() as conn:
        conn.add_notice_handler(lambda d: said.append(f"{d.severity}: {d.message_primary}"))
    return said


def _lifecycle(queue: Queue, n: int) -> None:
    queue.submit("demo", {"n": n})
    lease = queue.lease("w")
    assert lease is not None
    queue.complete(lease, {"answer": n})


def test_a_lifecycle_costs_few_statements_and_waits(traced: tuple[Queue, Wire]) -> None:
    queue, wire = traced
    said = _notices(wire.backend)
    for n in range(6):  # (psycopg prepares a statement on its fifth use: past that)
        _lifecycle(queue, n)
    rounds = 5
    with wire.tracing() as counts:
        for n in range(rounds):
            _lifecycle(queue, 100 + n)
    assert counts["F Execute"] >= 3 * rounds, counts  # (the trace sees them: at least each verb's write)
    assert counts["F Execute"] + counts["F Query"] <= MAX_STATEMENTS * rounds, counts
    assert counts["F Sync"] + counts["F Flush"] + counts["F Query"] <= MAX_WAITS * rounds, counts
    assert queue.counts()[State.SUCCEEDED] == 6 + rounds
    assert said == []  # (no "there is no transaction in progress": the syncs end the transactions)


def test_a_lease_reads_no_running_job_but_its_own(
    traced: tuple[Queue, Wire], clock: FakeClock, open_pg: Callable[..., Queue]
) -> None:
    """The reaper asks an index for expired leases: 30 busy workers cost a lease nothing more."""
    queue, wire = traced

    def one_lease(n: int) -> Counter[str]:
        queue.submit("demo", {"lease": n})
        with wire.tracing() as counts:
            assert queue.lease("w") is not None
        return counts

    for n in range(6):
        one_lease(n)
    alone = one_lease(10)
    others = open_pg()
    for n in range(30):
        others.submit("demo", {"held": n})
        assert others.lease("other") is not None  # running, and not expired
    assert queue.counts()[State.RUNNING] == 7 + 30
    busy = one_lease(11)
    assert alone["B DataRow"] > 0
    assert busy["B DataRow"] == alone["B DataRow"], (alone, busy)
    assert busy["F Execute"] == alone["F Execute"]
    # and an expired one is still found and reaped by the next lease
    clock.advance(10_000)
    reaper = one_lease(12)
    assert queue.counts()[State.RUNNING] == 1  # all reaped, the new one leased
    assert reaper["F Execute"] > busy["F Execute"]  # (reading and requeueing them)


def test_a_verb_that_only_writes_one_statement_sends_it_alone_with_one_sync(traced: tuple[Queue, Wire]) -> None:
    """Submit, lease and complete, when no notification is due, are each one statement on the wire.

    Outside a pipeline libpq sends the statement and its sync together, and the server
    wakes once for it; in the pipeline it was the statement, the commit's sync and the
    pipeline's closing sync, three sends and two syncs.
    """
    queue, wire = traced
    notifier = wire.backend.notifier
    assert notifier is not None
    for n in range(6):
        _lifecycle(queue, n)
    notifier.linger_s = 3600.0  # (within a burst: every commit hands its ids to the notifier)
    queue.submit("demo", {"n": 99})  # (the burst's first commit: due, it notifies)
    assert queue.lease("w") is not None
    rounds = 5
    with wire.tracing() as counts:
        for n in range(rounds):
            _lifecycle(queue, 200 + n)
    assert counts["F Execute"] == 3 * rounds, counts
    assert counts["F Sync"] == 3 * rounds and counts["F Flush"] == 0, counts
    assert queue.counts()[State.SUCCEEDED] == 6 + rounds


def test_a_held_write_is_sent_before_the_verb_reads_and_a_verb_that_raises_commits_nothing(
    open_pg: Callable[..., Queue], pg_dsn: str
) -> None:
    """A verb's writes wait for its commit only until it reads: the read sees them, in the same transaction,
    and a verb that raises after its writes were sent leaves none of them (the pipeline's sync would commit them)."""
    from desktop_queue.core.backend import Change

    backend = PgBackend(pg_dsn, pool_size=1)
    queue = open_pg(backend=backend)
    said = _notices(backend)
    job = queue.submit("demo", {"n": 1}, title="first").job
    retitle = "UPDATE dq_jobs SET doc = jsonb_set(doc, '{title}', to_jsonb(%s::text)) WHERE id = %s"
    title_of = "SELECT doc->>'title' FROM dq_jobs WHERE id = %s"
    seen: list[str] = []

    def fn(view: Any) -> Change[None]:
        view._write(retitle, ("held", job.id))  # (held: nothing sent yet)
        # a read of the verb's own, and a read by the backend inside the verb (a stored result, say)
        seen.append(view._conn.execute(title_of, (job.id,)).fetchone()[0])
        seen.append(backend.read(lambda inner: inner._conn.execute(title_of, (job.id,)).fetchone()[0]))
        raise RuntimeError("the verb changed its mind")

    with pytest.raises(RuntimeError, match="changed its mind"):
        backend.commit(fn)
    assert seen == ["held", "held"]
    with psycopg.connect(pg_dsn, autocommit=True) as other:
        assert other.execute(title_of, (job.id,)).fetchone()[0] == "first"

    def held_then_raises(view: Any) -> Change[None]:
        view._write(retitle, ("never sent", job.id))
        raise RuntimeError("before any read")

    with pytest.raises(RuntimeError, match="before any read"):
        backend.commit(held_then_raises)
    assert queue.get(job.id).title == "first"
    queue.cancel(job.id)  # (and the connection is back in order)
    assert queue.get(job.id).state == State.CANCELLED
    assert said == []


def test_the_answer_of_a_verb_is_the_job_as_committed(traced: tuple[Queue, Wire]) -> None:
    """Submit, lease and complete answer from their commit (no read after it), and say what a read says."""
    queue, wire = traced
    for n in range(6):
        _lifecycle(queue, n)
    with wire.tracing() as counts:
        submitted = queue.submit("demo", {"n": 1000}, title="t").job
    assert counts["F Sync"] <= 2  # (the commit's and its notification's: no read transaction after it)
    assert submitted == queue.get(submitted.id)
    lease = queue.lease("w")
    assert lease is not None and lease.job == queue.get(lease.job_id)
    assert lease.job.state == State.RUNNING and lease.job.attempts == 1
    done = queue.complete(lease, {"answer": 1})
    assert done == queue.get(done.id)
    assert [e.type for e in done.events] == ["submitted", "leased", "succeeded"]
    again = queue.submit("demo", {"n": 1000})  # the duplicate: answered from the job it locked
    assert again.duplicate and again.job == queue.get(done.id)
    assert again.result is not None and again.result["result"] == {"answer": 1}


def test_a_race_lost_in_a_pipelined_commit_runs_the_verb_again(open_pg: Callable[..., Queue], pg_dsn: str) -> None:
    """A rev-checked write is checked by the server (the write goes with the commit): a lost race reruns."""
    from desktop_queue.core.backend import Change
    from desktop_queue.core.records import UpdateRecord

    queue = open_pg()
    job = queue.submit("demo", {"n": 1}).job
    runs: list[int] = []

    def fn(view: Any) -> Change[int]:
        runs.append(1)
        view.hot_jobs()[job.id]  # read without a lock...
        if len(runs) == 1:  # ...and changed by someone else before this commits
            with psycopg.connect(pg_dsn, autocommit=True) as other:
                other.execute("UPDATE dq_jobs SET rev = rev + 1 WHERE id = %s", (job.id,))
        record: UpdateRecord = {"op": "upd", "id": job.id, "set": {"title": f"run {len(runs)}"}, "ev": []}
        return Change([record], len(runs))

    assert queue.store.commit(fn) == 2
    assert queue.get(job.id).title == "run 2"


def test_the_key_look_up_uses_the_unique_index_with_a_prepared_plan(open_pg: Callable[..., Queue], pg_dsn: str) -> None:
    """A submission's key look-up must not read every live job once its plan is generic."""
    open_pg().submit("demo", {"n": 1})
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute("SET enable_seqscan = off")  # (a tiny table: still, which index?)
        text = _HOLDER.replace("%s", "$1")
        conn.execute(f"PREPARE holder(text) AS {text}")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN EXECUTE holder('k')").fetchall())
    assert "dq_jobs_live_key" in plan, plan


def test_a_taken_random_id_fails_the_insert_and_is_drawn_again(
    open_pg: Callable[..., Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submission does not ask whether its random id is free: the primary key answers, and it draws again."""
    from desktop_queue.core import queue as queue_module

    queue = open_pg()
    first = queue.submit("demo", {"n": 1}).job
    drawn = iter([first.id, "f00dfeed01"])
    monkeypatch.setattr(queue_module.secrets, "token_hex", lambda _n: next(drawn))
    second = queue.submit("demo", {"n": 2}).job
    assert second.id == "f00dfeed01"
    assert queue.get(first.id).input == {"n": 1}  # (untouched)
    assert sorted(j.id for j in queue.list()) == sorted([first.id, second.id])


def test_a_commit_notifies_after_it_in_the_same_round_trip_and_a_failed_one_does_not(
    open_pg: Callable[..., Queue], pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notification goes after the commit (its own implicit transaction): none for a commit that failed,
    and a notification that fails does not make a made change look failed."""
    from desktop_queue.core.pg import notify

    queue = open_pg()
    backend = queue.store
    assert isinstance(backend, PgBackend) and backend._channel is not None and backend.notifier is not None
    backend.notifier.linger_s = 0  # (every commit notifies in its own round trip)
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(f"LISTEN {backend._channel}")
        job = queue.submit("demo", {"n": 1}).job
        told = list(listener.notifies(timeout=5, stop_after=1))
        assert [n.payload for n in told] == [job.id]
        # a notification the server refuses (too long): the submission is still made and answered
        monkeypatch.setattr(notify, "payload_of", lambda ids: "x" * 9000)
        second = queue.submit("demo", {"n": 2}).job
        assert queue.get(second.id).state == State.QUEUED
        assert backend.notifier.flush(10)  # (its notifier tried again, and was refused again)
        # a verb that commits nothing tells no one
        monkeypatch.undo()
        with pytest.raises(Exception, match="different input"):
            queue.submit("demo", {"n": 3}, key=job.idempotency_key)
        assert list(listener.notifies(timeout=0.5, stop_after=1)) == []


def test_a_verb_that_fails_after_sending_writes_commits_none_of_them(
    open_pg: Callable[..., Queue], pg_dsn: str
) -> None:
    """The pipeline's sync would commit what was sent: a verb that raises between two writes leaves both undone."""
    from desktop_queue.core.backend import Change
    from desktop_queue.core.records import UpdateRecord

    backend = PgBackend(pg_dsn, pool_size=1)
    queue = open_pg(backend=backend)
    said = _notices(backend)
    first = queue.submit("demo", {"n": 1}, title="first").job
    second = queue.submit("demo", {"n": 2}, title="second").job

    def fn(view: Any) -> Change[None]:
        view.exists(first.id)  # (a read: the transaction is in its pipeline, and each write is sent at once)
        sent: UpdateRecord = {"op": "upd", "id": first.id, "set": {"title": "changed"}, "ev": []}
        # (the second write cannot even be encoded: it raises in this process, after the first was sent)
        broken: UpdateRecord = {"op": "upd", "id": second.id, "set": {"title": object()}, "ev": []}
        return Change([sent, broken], None)

    with pytest.raises(TypeError):
        queue.store.commit(fn)
    assert queue.get(first.id).title == "first"
    assert queue.get(second.id).title == "second"
    # and the connection it used is back in order: the next verbs commit
    queue.cancel(first.id)
    assert queue.get(first.id).state == State.CANCELLED
    assert said == []  # (undone without a warning in the server's log)


def test_statements_of_a_callers_own_make_the_transaction_a_block(open_pg: Callable[..., Queue]) -> None:
    """``view.conn`` (a copy's bulk inserts) turns the implicit transaction into a block: psycopg's own syncs
    inside it (``executemany`` sends one) commit nothing early, a failure undoes all of it, a success all."""
    from desktop_queue.core.backend import Change

    queue = open_pg()
    job = queue.submit("demo", {"n": 1}).job

    def fn(fail: bool) -> Callable[[Any], Change[None]]:
        def inner(view: Any) -> Change[None]:
            with view.conn.cursor() as cur:
                cur.executemany(
                    "UPDATE dq_jobs SET doc = doc || %s::jsonb WHERE id = %s", [('{"title": "bulk"}', job.id)]
                )
            if fail:
                raise RuntimeError("a copy that stops half-way")
            return Change([], None)

        return inner

    with pytest.raises(RuntimeError):
        queue.store.commit(fn(fail=True))
    assert queue.store.read(lambda view: view.read_job(job.id, lock=False))["title"] != "bulk"
    queue.store.commit(fn(fail=False))
    assert queue.store.read(lambda view: view.read_job(job.id, lock=False))["title"] == "bulk"


def test_a_new_submission_lets_its_insert_check_the_key_and_a_duplicate_is_still_found(
    traced: tuple[Queue, Wire],
) -> None:
    """No look-up before a new job's insert (the unique index of live keys checks); a held key is looked up."""
    from desktop_queue.core.errors import DuplicateKeyConflict

    queue, wire = traced
    for n in range(6):
        _lifecycle(queue, n)
    with wire.tracing() as new:
        first = queue.submit("demo", {"n": 500})
    assert not first.duplicate
    assert new["F Execute"] == 2, new  # the insert and its notification
    with wire.tracing() as again:
        second = queue.submit("demo", {"n": 500})
    assert second.duplicate and second.job.id == first.job.id
    assert again["F Execute"] > new["F Execute"]  # (the insert found the key held; the verb looked)
    with pytest.raises(DuplicateKeyConflict):
        queue.submit("demo", {"n": 501}, key=first.job.idempotency_key)
    assert [j.id for j in queue.list() if j.idempotency_key == first.job.idempotency_key] == [first.job.id]
    assert queue.get(first.job.id).seq > 0  # (the number the sequence gave, not the guess's)
    # neither the duplicate nor the refused one took a submission number
    assert queue.submit("demo", {"n": 503}).job.seq == queue.get(first.job.id).seq + 1
    # a batch is looked up as before (a guess checks one insert only)
    batch = queue.submit_many("demo", [{"n": 500}, {"n": 502}])
    assert [r.duplicate for r in batch] == [True, False]
    assert batch[1].job.seq == queue.get(first.job.id).seq + 2


def _store_result(pg_dsn: str, queue: Queue, key: str, job_id: str, text: str) -> None:
    """A result the database holds for ``key`` (committed by an earlier attempt of the key's job)."""
    doc = queue.results.attempt_document(key, {"text": text}, job_id=job_id, epoch=0, produced_at=0.0)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO dq_results (key, doc) VALUES (%s, %s::jsonb)", (key, psycopg.types.json.Jsonb(doc)))


def _stored_text(pg_dsn: str, key: str) -> Any:
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT doc->'result'->>'text' FROM dq_results WHERE key = %s", (key,)).fetchone()
    return row[0] if row else None


@pytest.mark.parametrize("how", ["complete", "kept", "batch"])
def test_a_success_asks_for_no_stored_result_first_and_one_stored_is_reused(
    traced: tuple[Queue, Wire], pg_dsn: str, how: str
) -> None:
    """The result insert checks that the key has none; when it has one, the verb looks it up and reuses it."""
    queue, wire = traced
    for n in range(6):
        _lifecycle(queue, n)
    # the usual case: one statement (and the notification), no read before it
    job = queue.submit("demo", {"n": 600}).job
    lease = queue.lease("w")
    assert lease is not None and lease.job_id == job.id
    with wire.tracing() as plain:
        queue.complete(lease, {"text": "new"})
    # (two syncs: the transaction's and the notification's; psycopg adds a flush when the
    # pipeline ends only if some answer has not come back yet, so there may be none)
    assert plain["F Execute"] == 2 and plain["F Sync"] == 2 and plain["F Flush"] <= 1, plain
    assert _stored_text(pg_dsn, job.idempotency_key) == "new"
    # a result already stored for the key: reused, never overwritten, the success committed once
    job = queue.submit("demo", {"n": 601}).job
    lease = queue.lease("w")
    assert lease is not None and lease.job_id == job.id
    _store_result(pg_dsn, queue, job.idempotency_key, job.id, "earlier")
    key = job.idempotency_key
    mine = queue.results.attempt_document(key, {"text": "later"}, job_id=job.id, epoch=lease.epoch, produced_at=1.0)
    with wire.tracing() as found:
        if how == "complete":
            done = queue.complete(lease, {"text": "later"})
        elif how == "kept":
            done = queue.complete(lease, {"text": "later"}, document=mine)
        else:
            (answer,) = queue.complete_many([(lease, {"text": "later"}, mine)], pending=False)
            assert not isinstance(answer, Exception)
            done = answer
    assert found["F Execute"] > plain["F Execute"], found  # (the insert found one; the verb looked)
    assert done.state == State.SUCCEEDED
    assert "not produced again" in done.events[-1].detail["reason"]
    assert _stored_text(pg_dsn, key) == "earlier"
    after = queue.get(job.id)
    assert [e.type for e in after.events].count("succeeded") == 1
    assert queue.stored_result(lease) is not None and queue.stored_result(lease)["result"] == {"text": "earlier"}


def test_leasing_several_jobs_scans_once_per_job_and_never_an_empty_lane_twice(traced: tuple[Queue, Wire]) -> None:
    """A worker filling several slots in one commit (``work``): each job costs one locked scan.

    SKIP LOCKED skips only other transactions' locks, so a scan that did not pass over the
    jobs this transaction already holds found the one just leased again (and the
    interactive lane, empty, was asked again for every slot).
    """
    queue, wire = traced
    for n in range(6):
        _lifecycle(queue, n)
    ids = [queue.submit("demo", {"n": 700 + n}).job.id for n in range(5)]
    with wire.tracing() as counts:
        leases = queue.lease_many("w", 4, kinds={"demo"})
    assert [lease.job_id for lease in leases] == ids[:4]  # (in order, each once)
    assert len({lease.token for lease in leases}) == 4
    # the pick (with the expired leases; its job's kind answers the kinds look), three
    # scans, an update per lease, the notification (it took 21: each scan found the job
    # leased before it first, and the kinds were looked up apart)
    assert counts["F Execute"] <= 1 + 3 + 4 + 1, counts
    with wire.tracing() as rest:
        more = queue.lease_many("w", 4, kinds={"demo"})
    assert [lease.job_id for lease in more] == ids[4:]
    # the pick (it found the last job), one scan finding no more in its lane (the empty
    # interactive lane is not asked again), the update, the notification
    assert rest["F Execute"] <= 1 + 1 + 1 + 1, rest
    with wire.tracing() as idle:
        assert queue.lease_many("w", 4, kinds={"demo"}) == []
    assert idle["F Execute"] == 1, idle  # (the pick found nothing due: no lane, no kind asked)


def test_a_completion_in_a_worker_s_batch_knows_its_job_holds_its_key(traced: tuple[Queue, Wire]) -> None:
    """complete_and_lease of an attempt that kept its result: no look-up of the key's holder
    (its own job, rev-checked in the commit, is it), and the verb runs once."""
    queue, wire = traced
    for n in range(6):
        _lifecycle(queue, n)
    first = queue.submit("demo", {"n": 800}).job
    queue.submit("demo", {"n": 801})
    (lease,) = queue.lease_many("w", 1)
    assert lease.job_id == first.id
    doc = queue.results.attempt_document(
        first.idempotency_key, {"text": "kept"}, job_id=first.id, epoch=lease.epoch, produced_at=1.0
    )
    with wire.tracing() as counts:
        answers, leases = queue.complete_and_lease([(lease, {"text": "kept"}, doc)], 1, worker="w")
    assert not isinstance(answers[0], Exception) and answers[0].state == State.SUCCEEDED
    assert len(leases) == 1
    # the pick, the two updates (one statement each), the notification: nothing asked twice
    assert counts["F Execute"] <= 4, counts
    assert counts["F Sync"] + counts["F Flush"] <= 4, counts


def test_counting_the_jobs_ships_no_job_and_agrees_with_listing_them(
    traced: tuple[Queue, Wire], clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Queue.counts`` (the window's status bar, at every change) is one row, however long the history."""
    from desktop_queue.core import Outcome
    from desktop_queue.core.pg.view import PgView

    queue, wire = traced

    def every_state(round_: int) -> None:
        for n in range(3):
            _lifecycle(queue, 100 * round_ + n)
        for n in range(2):
            dead = queue.submit("demo", {"round": round_, "dies": n}, max_attempts=1).job
            lease = queue.lease("w")
            assert lease is not None and lease.job_id == dead.id
            queue.fail(lease, Outcome.failure("fatal", "no"))
        queue.resolve(dead.id)
        queue.cancel(queue.submit("demo", {"round": round_, "cancelled": 1}).job.id)
        queue.submit("demo", {"round": round_, "runs": 1})
        assert queue.lease("w", lease_s=3600) is not None
        queue.submit("demo", {"round": round_, "waits": 1}, run_after=clock.now() + 3600)

    every_state(0)
    with wire.tracing() as few:
        counted = queue.counts()
    for n in range(1, 5):
        every_state(n)
    with wire.tracing() as many:
        counted_more = queue.counts()
    assert counted == {"queued": 1, "running": 1, "succeeded": 3, "dead": 1, "cancelled": 1, "resolved": 1}
    assert many["B DataRow"] == few["B DataRow"] == 1, (few, many)
    assert many["F Execute"] + many["F Query"] == few["F Execute"] + few["F Query"]
    # the same answer as the count every other backend makes (every job's id listed)
    monkeypatch.delattr(PgView, "state_counts")
    assert queue.counts() == counted_more
    assert counted_more == {"queued": 5, "running": 5, "succeeded": 15, "dead": 5, "cancelled": 5, "resolved": 5}


def test_a_page_of_the_newest_jobs_reads_that_page_and_agrees_with_listing_them(
    traced: tuple[Queue, Wire], clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Queue.list(state, limit=N)`` (``list``, the API's ``GET /jobs``) reads N rows, however long the history."""
    from desktop_queue.core import Outcome
    from desktop_queue.core.pg.view import PgView

    queue, wire = traced
    for n in range(12):
        _lifecycle(queue, n)
        if n % 3 == 0:
            dead = queue.submit("demo", {"dies": n}, max_attempts=1).job
            lease = queue.lease("w")
            assert lease is not None and lease.job_id == dead.id
            queue.fail(lease, Outcome.failure("fatal", "no"))
    queue.submit("demo", {"waits": 1}, run_after=clock.now() + 60)
    with wire.tracing() as page:
        newest = queue.list(State.SUCCEEDED, limit=2)
    assert page["B DataRow"] == 2, page
    assert [j.seq for j in newest] == sorted((j.seq for j in newest), reverse=True)
    asked = [(s, n) for s in (None, *State) for n in (0, 1, 3, 100)]
    paged = {(s, n): [j.to_json() for j in queue.list(s, limit=n, with_events=True)] for s, n in asked}
    monkeypatch.delattr(PgView, "newest")  # the listing every other backend makes: every job, sorted
    listed = {(s, n): [j.to_json() for j in queue.list(s, limit=n, with_events=True)] for s, n in asked}
    assert paged == listed
    assert len(paged[(None, 100)]) == 12 + 4 + 1 and len(paged[(State.DEAD, 3)]) == 3


def test_the_prompt_search_reads_every_input_at_once_and_finds_what_the_job_by_job_search_finds(
    traced: tuple[Queue, Wire], clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Queue.prompt_matches`` (the window's search box) is one statement, not one per job."""
    from desktop_queue.core import Outcome
    from desktop_queue.core.pg.view import PgView

    queue, wire = traced
    prompts = ["A lighthouse at dusk", "a LIGHTHOUSE in fog", "Straße im Regen", "a cat", "dusk over the sea"]
    for n, prompt in enumerate(prompts * 3):
        if n % 5 == 4:  # (queued: its row carries its input, the search leaves it out)
            queue.submit("demo", {"prompt": prompt, "n": n}, run_after=clock.now() + 3600)
            continue
        job = queue.submit("demo", {"prompt": prompt, "n": n}).job
        lease = queue.lease("w")
        assert lease is not None and lease.job_id == job.id
        if n % 3 == 0:
            queue.fail(lease, Outcome.failure("fatal", "no"))
        elif n % 3 == 1:
            queue.complete(lease, {"n": n})
    needles = ["lighthouse", "DUSK", "strasse", "straße", "cat", "nothing like it"]
    with wire.tracing() as one:
        found = {needle: queue.prompt_matches(needle) for needle in needles[:1]}
    assert one["F Execute"] + one["F Query"] <= 3, one  # (the read's BEGIN, the statement, COMMIT)
    found = {needle: queue.prompt_matches(needle) for needle in needles}
    assert len(found["lighthouse"]) == 6 and found["nothing like it"] == set()
    monkeypatch.delattr(PgView, "inputs_not_queued")  # every job read on its own, as before
    assert {needle: queue.prompt_matches(needle) for needle in needles} == found


def test_the_windows_jobs_come_in_one_statement_as_the_job_by_job_read_shapes_them(
    traced: tuple[Queue, Wire], clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Queue.raw_jobs`` (the window's first look, and each refresh's changed jobs) is one statement."""
    from desktop_queue.core import Outcome
    from desktop_queue.core.pg.view import PgView

    queue, wire = traced
    ids = []
    for n in range(12):
        if n % 4 == 3:
            ids.append(queue.submit("demo", {"prompt": f"later {n}"}, run_after=clock.now() + 60).job.id)
            continue
        ids.append(queue.submit("demo", {"prompt": f"job {n}"}).job.id)
        lease = queue.lease("w")
        assert lease is not None
        if n % 4 == 1:
            queue.fail(lease, Outcome.failure("fatal", "no"))
        elif n % 4 == 0:
            queue.complete(lease, {"n": n})
    some = {ids[0], ids[1], ids[2], ids[3], "no-such-job"}
    with wire.tracing() as one:
        shaped_all = queue.raw_jobs()
        shaped_some = queue.raw_jobs(some)
    assert one["F Execute"] + one["F Query"] <= 6, one  # (two reads: BEGIN, the statement, COMMIT each)
    monkeypatch.delattr(PgView, "window_jobs")  # every job read with its timeline, then trimmed
    by_id = {j["id"]: j for j in queue.raw_jobs()}
    assert {j["id"]: j for j in shaped_all} == by_id and len(by_id) == 12
    assert {j["id"]: j for j in shaped_some} == {i: by_id[i] for i in some if i in by_id}
    assert "input" in by_id[ids[3]] and "input" not in by_id[ids[0]]  # (queued jobs keep their input)
    assert all("lease_token" not in j and "events" not in j for j in shaped_all)
