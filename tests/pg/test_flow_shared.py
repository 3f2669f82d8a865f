"""Flow control shared across machines: limits, breakers and budgets in the PostgreSQL queue.

First the storage seam on its own: :class:`PgSharedState` against :class:`_SharedFile`
(the same operations give the same documents, byte for byte), and the spend ledger's
totals from ``dq_spend`` against those of the JSON files. Then real ``desktop-queue
work`` processes, each with a data dir of its own (nothing shared but the database),
against the fake OpenAI server on 127.0.0.1, which counts what went over the wire.
"""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))

from fakeserver import FakeOpenAI  # noqa: E402
from workerproc import KEY, env_for, wait_for  # noqa: E402

from desktop_queue.core import FakeClock, Outcome, Queue, State, SystemClock  # noqa: E402
from desktop_queue.core.flow import Cost, FlowControl, ProfileLimits  # noqa: E402
from desktop_queue.core.ledger import SpendLedger, Usage  # noqa: E402
from desktop_queue.core.pg import PgBackend  # noqa: E402
from desktop_queue.core.pg.flowstate import FlowLink, PgSharedState  # noqa: E402
from desktop_queue.core.pg.ledger import PgSpendStore  # noqa: E402
from desktop_queue.core.pg.schema import migrate  # noqa: E402
from desktop_queue.providers import discover  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

OK = Outcome.success({"text": "t", "usage": {"total_tokens": 40}})
FAIL = Outcome.failure("retryable", "HTTP 500")


def job(job_id: str, tokens: int = 100) -> dict[str, Any]:
    return {"id": job_id, "kind": "openai.chat", "state": "queued", "input": {"cost": tokens}}


def cost_of(payload: Any) -> Cost:
    return Cost(1, int(payload.get("cost", 0)))


LIMITS = ProfileLimits(rpm=3, tpm=1000, concurrency=2, breaker_threshold=2, breaker_cooldown_s=10.0)


def _flow(clock: FakeClock, **where: Any) -> FlowControl:
    return FlowControl({"openai": LIMITS}, clock=clock, estimator=cost_of, rng=random.Random(5), **where)


def _stored_doc(dsn: str) -> bytes:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT doc FROM dq_flow WHERE name = 'flow'").fetchone()
    assert row is not None and row[0] is not None
    return str(row[0]).encode()


@pytest.fixture
def links(pg_dsn: str) -> Iterator[list[FlowLink]]:
    made: list[FlowLink] = []
    try:
        yield made
    finally:
        for link in made:
            link.close()


def _pg_link(dsn: str, links: list[FlowLink]) -> FlowLink:
    link = FlowLink(dsn)
    links.append(link)
    return link


# ---------------------------------------------------------------------- the seam: same docs


def _script(a: FlowControl, b: FlowControl, clock: FakeClock, look: Callable[[], bytes]) -> list[Any]:
    """Two processes' flow control through one shared state; what they answered, and the doc after each step."""
    seen: list[Any] = []

    def step(value: Any) -> None:
        seen.append(value)
        seen.append(look())

    step(a.accept(job("j1")))
    a.on_start(job("j1"))
    step(b.accept(job("j2")))  # b sees a's admission: one slot left of two
    b.on_start(job("j2"))
    step(b.accept(job("j3")))  # concurrency cap, counted across both
    step(b.waiting_reason(job("j3")))
    a.on_outcome(job("j1"), FAIL)
    clock.advance(1.0)
    b.on_outcome(job("j2"), FAIL)  # the second failure in a row: b opens the breaker for both
    step(a.breaker_state("openai"))
    step(a.waiting_reason(job("j3")))
    clock.advance(11.0)
    step(a.accept(job("j3")))  # the one probe after the cool-down
    step(b.accept(job("j4")))  # ...and only one
    a.on_start(job("j3"))
    a.on_outcome(job("j3"), OK)
    step(b.breaker_state("openai"))
    clock.advance(30.0)
    step(b.accept(job("j4")))  # three requests in the minute: the RPM budget is spent
    step(b.waiting_reason(job("j4")))
    step(a.throttle_delay(job("j4"), 2.0))
    clock.advance(40.0)
    step(b.accept(job("j4")))
    step(a.snapshot("openai"))
    return seen


def test_pg_shared_state_gives_the_same_answers_and_documents_as_the_shared_file(
    pg_dsn: str, tmp_path: Path, links: list[FlowLink]
) -> None:
    file_clock = FakeClock()
    shared_dir = tmp_path / "flow"
    on_file = _script(
        _flow(file_clock, shared_dir=shared_dir),
        _flow(file_clock, shared_dir=shared_dir),
        file_clock,
        lambda: (shared_dir / "state.json").read_bytes(),
    )
    pg_clock = FakeClock()
    in_db = _script(
        _flow(pg_clock, shared=PgSharedState(_pg_link(pg_dsn, links))),
        _flow(pg_clock, shared=PgSharedState(_pg_link(pg_dsn, links))),
        pg_clock,
        lambda: _stored_doc(pg_dsn),
    )
    assert in_db == on_file
    answers = on_file[0::2]
    assert answers[:3] == [True, True, False]  # (the script does what it says)
    assert "open" in str(answers[4]) and answers[6] is True and answers[7] is False


_JOBS = ("j1", "j2", "j3", "j4")
_STEPS = st.lists(
    st.tuples(
        st.sampled_from((0, 1)),
        st.sampled_from(("accept", "start", "ok", "fail", "throttle", "reason", "advance")),
        st.sampled_from(_JOBS),
        st.sampled_from((0.5, 3.0, 11.0, 61.0)),
    ),
    min_size=1,
    max_size=25,
)


def _play(flows: list[FlowControl], clock: FakeClock, steps: list[Any], look: Callable[[], bytes]) -> list[Any]:
    seen: list[Any] = []
    for who, action, job_id, seconds in steps:
        flow, j = flows[who], job(job_id)
        if action == "accept":
            seen.append(flow.accept(j))
        elif action == "start":
            seen.append(flow.on_start(j))
        elif action in ("ok", "fail"):
            seen.append(flow.on_outcome(j, OK if action == "ok" else FAIL))
        elif action == "throttle":
            seen.append(flow.throttle_delay(j, None))
        elif action == "reason":
            seen.append(flow.waiting_reason(j))
        else:
            clock.advance(seconds)
        seen.append(look())
    return seen


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_STEPS)
def test_any_sequence_of_operations_gives_the_same_documents_in_both(
    steps: list[Any], pg_dsn: str, tmp_path: Path, links: list[FlowLink]
) -> None:
    if len(links) < 2:
        links.extend(FlowLink(pg_dsn) for _ in range(2))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # a fresh state for each example
        migrate(conn)
        conn.execute("UPDATE dq_flow SET doc = NULL, version = version + 1")
    shared_dir = Path(tempfile.mkdtemp(dir=tmp_path)) / "flow"
    file_clock, pg_clock = FakeClock(), FakeClock()
    on_file = _play(
        [_flow(file_clock, shared_dir=shared_dir) for _ in range(2)],
        file_clock,
        steps,
        lambda: (shared_dir / "state.json").read_bytes() if (shared_dir / "state.json").exists() else b"",
    )
    in_db = _play(
        [_flow(pg_clock, shared=PgSharedState(link)) for link in links[:2]],
        pg_clock,
        steps,
        lambda: _stored_doc_or_empty(pg_dsn),
    )
    assert in_db == on_file


def _stored_doc_or_empty(dsn: str) -> bytes:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT doc FROM dq_flow WHERE name = 'flow'").fetchone()
    return b"" if row is None or row[0] is None else str(row[0]).encode()


def test_a_session_sees_none_when_nobody_wrote_and_the_doc_when_another_did(pg_dsn: str, links: list[FlowLink]) -> None:
    one, two = PgSharedState(_pg_link(pg_dsn, links)), PgSharedState(_pg_link(pg_dsn, links))
    doc = {"format": "desktop-queue.flow", "schema_version": 1, "profiles": {"p": {"x": 1}}}
    with one.locked() as first:
        assert first == {}
        one.write(doc)
    with one.locked() as again:
        assert again is None  # its own write: its memory is current
    with two.locked() as other:
        assert other == doc
        two.write({**doc, "profiles": {}})
    with one.locked() as changed:
        assert changed == {**doc, "profiles": {}}


def test_the_row_lock_keeps_a_second_session_out_until_the_first_commits(pg_dsn: str, links: list[FlowLink]) -> None:
    import threading

    one, two = PgSharedState(_pg_link(pg_dsn, links)), PgSharedState(_pg_link(pg_dsn, links))
    doc = {"format": "desktop-queue.flow", "schema_version": 1, "profiles": {"n": 1}}
    got: list[Any] = []
    entered = threading.Event()

    def other() -> None:
        entered.wait(10)
        with two.locked() as seen:
            got.append(seen)

    thread = threading.Thread(target=other)
    thread.start()
    with one.locked():
        entered.set()
        thread.join(0.5)  # it waits on the row lock...
        assert thread.is_alive() and got == []
        one.write(doc)
    thread.join(10)
    assert got == [doc]  # ...and reads what the first committed


def test_a_session_whose_commit_is_lost_keeps_its_state_and_writes_it_next_time(
    pg_dsn: str, links: list[FlowLink], caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    link = _pg_link(pg_dsn, links)
    flow = _flow(clock, shared=PgSharedState(link))
    with caplog.at_level(logging.WARNING), flow.session():
        assert flow.accept(job("j1"))
        with psycopg.connect(pg_dsn, autocommit=True) as admin:  # the server cuts the session
            admin.execute("SELECT pg_terminate_backend(%s)", (link.conn.info.backend_pid,))
    assert "could not save the flow state" in caplog.text
    flow.on_start(job("j1"))  # the next session reconnects: its memory is still the state
    doc = json.loads(_stored_doc(pg_dsn))
    assert list(doc["profiles"]["openai"]["admitted"]) == ["j1"]
    assert doc["profiles"]["openai"]["admitted"]["j1"][3] is True  # started


def test_a_flow_state_from_a_newer_version_is_refused(pg_dsn: str, links: list[FlowLink]) -> None:
    newer = PgSharedState(_pg_link(pg_dsn, links))
    with newer.locked():
        newer.write({"format": "desktop-queue.flow", "schema_version": 99, "profiles": {}})
    flow = _flow(FakeClock(), shared=PgSharedState(_pg_link(pg_dsn, links)))
    with pytest.raises(ValueError, match="newer Desktop Queue"):
        flow.accept(job("j1"))


def test_a_machine_that_died_mid_attempt_frees_its_slot_once_its_lease_runs_out(
    open_pg: Callable[..., Queue], pg_dsn: str, links: list[FlowLink]
) -> None:
    """Another machine's process cannot be asked whether it lives: its job's lease in the database tells."""
    from desktop_queue.core.liveness import this_process

    clock = FakeClock(start=time.time())  # (leases on the server's timeline)
    queue = open_pg(clock=clock)
    held, waiting = (queue.submit("demo", {"prompt": p}).job for p in ("held", "waiting"))
    limits = {"demo": ProfileLimits(concurrency=1)}
    doomed = FlowControl(limits, clock=clock, shared=PgSharedState(_pg_link(pg_dsn, links)))
    with doomed.session():
        lease = queue.lease("doomed", accept=doomed.accept, lease_s=30)
        assert lease is not None and lease.job_id == held.id
        doomed.on_start(lease.job)
    with psycopg.connect(pg_dsn) as conn:  # it ran on another machine (and it dies there now)
        conn.execute(
            "UPDATE dq_flow SET doc = replace(doc, %s, 'far-host/4242/1'), version = version + 1",
            (this_process(),),
        )
    survivor = FlowControl(limits, clock=clock, shared=PgSharedState(_pg_link(pg_dsn, links)))
    candidate = {"id": waiting.id, "kind": "demo", "state": "queued", "input": waiting.input}
    clock.advance(6.0)
    assert survivor.waiting_reason(candidate) == "waiting: concurrency cap"  # its lease is live
    later = open_pg(clock=FakeClock(start=time.time() + 3600))
    assert later.reap() == [held.id]  # the lease ran out
    clock.advance(6.0)
    assert survivor.accept(candidate)  # the dead machine's slot is free


# ---------------------------------------------------------------------- the seam: same totals


def test_the_database_ledger_totals_what_the_json_ledger_does(
    pg_dsn: str, tmp_path: Path, links: list[FlowLink]
) -> None:
    clock = FakeClock()
    on_file = SpendLedger(tmp_path / "a", clock)
    in_db = SpendLedger(tmp_path / "b", clock, store=PgSpendStore(_pg_link(pg_dsn, links)))
    base = datetime(2026, 1, 31, 23, 30).timestamp()  # across a day's and a month's end
    spends = [
        (0.0, "openai", "gpt-4o", Usage(tokens_in=100, tokens_out=50)),
        (600.0, "openai", "gpt-4o-mini", Usage(tokens_in=10, tokens_out=5)),
        (1200.0, "openai", "unpriced-model", Usage(tokens_in=7)),
        (1800.0, "lab", "gpt-4o", Usage(tokens_in=1)),
        (90_000.0, "openai", "dall-e-3", Usage(images=2)),
    ]
    for i, (offset, profile, model, usage) in enumerate(spends):
        for ledger in (on_file, in_db):
            ledger.record(
                profile=profile,
                model=model,
                kind="openai.chat",
                usage=usage,
                job_id=f"j{i}",
                attempt=1,
                at=base + offset,
            )
    for at in (base, base + 1200, base + 2000, base + 90_000):
        for profile in ("openai", "lab", "none"):
            for period in ("day", "month"):
                mine, theirs = in_db.spent(profile, period, at), on_file.spent(profile, period, at)  # type: ignore[arg-type]
                assert mine.tokens == theirs.tokens and mine.unknown_cost == theirs.unknown_cost
                assert mine.usd == pytest.approx(theirs.usd)
    for by in ("day", "model", "profile"):
        for since in (None, "2026-02-01"):
            assert in_db.report(by, since=since) == on_file.report(by, since=since)  # type: ignore[arg-type]
    assert list(in_db.entries()) == list(on_file.entries())
    assert in_db.spent("openai", "day", base).unknown_cost is True  # (the unpriced model counts)


def test_build_on_a_postgresql_backend_keeps_limits_and_spend_in_the_database(pg_dsn: str, tmp_path: Path) -> None:
    from desktop_queue.providers.setup import ProfileConfig, build

    backend = PgBackend(pg_dsn)
    _providers, flow = build([ProfileConfig(rpm=5)], plugins=False, data_dir=tmp_path / "d", backend=backend)
    try:
        assert flow.clock is backend.clock  # windows on the server's timeline, not this machine's
        assert flow.ledger is not None and isinstance(flow.ledger.store, PgSpendStore)
        assert isinstance(flow._shared, PgSharedState)
        assert flow.accept({"id": "j1", "kind": "openai.chat", "state": "queued", "input": {"prompt": "x"}})
    finally:
        flow.close()
    assert json.loads(_stored_doc(pg_dsn))["profiles"]["openai"]["admitted"].keys() == {"j1"}
    assert not (tmp_path / "d" / "flow").exists()
    _providers, on_files = build([ProfileConfig(rpm=5)], plugins=False, data_dir=tmp_path / "d")
    try:
        assert on_files.ledger is not None and on_files.ledger.store is None  # (no backend: the data dir's)
    finally:
        on_files.close()


# ---------------------------------------------------------------------- real workers


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def _uri(dsn: str, pg_harness: Any) -> str:
    return str(pg_harness.as_uri(dsn)) if not dsn.startswith("postgresql://") else dsn


def start_worker(uri: str, data_dir: Path, server: FakeOpenAI, *flags: str) -> subprocess.Popen[bytes]:
    """``desktop-queue --data-dir D --store URI work --json FLAGS``: its own data dir, the shared queue."""
    return subprocess.Popen(
        [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), "--store", uri, "work", "--json", *flags],
        env={**env_for(server), "PYTHONPATH": str(REPO)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )


def finish(worker: subprocess.Popen[bytes], timeout_s: float) -> dict[str, Any]:
    out, err = worker.communicate(timeout=timeout_s)
    assert worker.returncode == 0, err.decode()
    assert KEY not in (out + err).decode()
    summary: dict[str, Any] = json.loads(out)
    return summary


def submit(dsn: str, data_dir: Path, n: int) -> list[str]:
    backend = PgBackend(dsn)
    with Queue.open(data_dir, discover(), backend=backend, clock=backend.clock) as queue:
        return [queue.submit("openai.chat", {"prompt": f"paid question {i}", "max_tokens": 8}).job.id for i in range(n)]


def states(dsn: str, data_dir: Path) -> list[State]:
    backend = PgBackend(dsn)
    with Queue.open(data_dir, discover(), backend=backend, clock=SystemClock()) as queue:
        return [j.state for j in queue.list()]


def _two_workers(uri: str, tmp_path: Path, server: FakeOpenAI, *flags: str) -> list[subprocess.Popen[bytes]]:
    return [start_worker(uri, tmp_path / f"host{i}", server, *flags) for i in range(2)]


def test_two_workers_on_one_store_keep_one_rpm_budget(
    pg_dsn: str, pg_harness: Any, tmp_path: Path, server: FakeOpenAI
) -> None:
    submit(pg_dsn, tmp_path / "submitter", 6)
    workers = _two_workers(_uri(pg_dsn, pg_harness), tmp_path, server, "--rpm", "2", "--max-seconds", "8")
    summaries = [finish(w, 60) for w in workers]
    assert server.count("chat") == 2  # what fits in one minute, for both machines together
    assert sum(s["finished"].get("succeeded", 0) for s in summaries) == 2
    assert sorted(states(pg_dsn, tmp_path / "submitter")).count(State.QUEUED) == 4


def test_two_workers_on_one_store_keep_one_token_budget_per_day(
    pg_dsn: str, pg_harness: Any, tmp_path: Path, server: FakeOpenAI
) -> None:
    """Each job is estimated at 12 tokens and reports 12: a 36-token day fits 3 of 5."""
    server.usage_tokens = 12
    submit(pg_dsn, tmp_path / "submitter", 5)
    flags = ("--budget-tokens-per-day", "36", "--max-seconds", "8")
    uri = _uri(pg_dsn, pg_harness)
    for worker in _two_workers(uri, tmp_path, server, *flags):
        finish(worker, 60)
    assert server.count("chat") == 3
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT count(*), sum(tokens_in + tokens_out) FROM dq_spend").fetchone()
    assert row is not None and (row[0], int(row[1])) == (3, 36)  # the ledger is the database's
    assert not any((tmp_path / f"host{i}" / "ledger").exists() for i in range(2))
    # `spend` on a third machine reads the same ledger
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "desktop_queue",
            "--data-dir",
            str(tmp_path / "host9"),
            "--store",
            uri,
            "spend",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["total"]["tokens"] == 36


def test_a_breaker_opened_by_one_worker_holds_the_other(
    pg_dsn: str, pg_harness: Any, tmp_path: Path, server: FakeOpenAI
) -> None:
    """A server down for everyone: five failures open the shared breaker, then only probes go."""
    server.outage = (time.monotonic() + 3600, 500)
    submit(pg_dsn, tmp_path / "submitter", 10)
    flags = ("--concurrency", "1", "--max-seconds", "8")
    for worker in _two_workers(_uri(pg_dsn, pg_harness), tmp_path, server, *flags):
        finish(worker, 60)
    # 5 open it (one more may be in flight in the other worker as it opens); the cool-down
    # is 30 s, so no probe within the 8 s
    assert 5 <= server.count("chat") <= 6
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT doc FROM dq_flow").fetchone()
    assert row is not None and json.loads(row[0])["profiles"]["openai"]["breaker"]["state"] == "open"


def test_two_workers_on_one_store_share_one_provider_concurrency(
    pg_dsn: str, pg_harness: Any, tmp_path: Path, server: FakeOpenAI
) -> None:
    server.default_delay_s = 1.0
    submit(pg_dsn, tmp_path / "submitter", 4)
    flags = ("--provider-concurrency", "1", "--until-idle", "--max-seconds", "60")
    for worker in _two_workers(_uri(pg_dsn, pg_harness), tmp_path, server, *flags):
        finish(worker, 90)
    assert server.count("chat") == 4
    assert server.max_in_flight == 1
    assert states(pg_dsn, tmp_path / "submitter") == [State.SUCCEEDED] * 4


def test_a_server_restart_mid_run_does_not_reset_the_budgets(
    own_server: Any, tmp_path: Path, server: FakeOpenAI
) -> None:
    """Two requests spend the minute's RPM and the day's tokens; the server restarts; the
    workers reconnect by themselves and spend nothing more."""
    server.usage_tokens = 12
    dsn = own_server.dsn
    submit(dsn, tmp_path / "submitter", 5)
    flags = ("--rpm", "2", "--budget-tokens-per-day", "24", "--max-seconds", "14")
    workers = _two_workers(dsn, tmp_path, server, *flags)
    try:
        wait_for(lambda: server.count("chat") == 2, 30, "the budget's two requests")
        own_server.restart()
        restarted_at = _server_now(dsn)
        # a third worker starts after the restart, as a machine joining would: it too is held
        workers.append(start_worker(dsn, tmp_path / "host2", server, *flags))
        # the first two went on over new connections of their own: each renewed its
        # heartbeat row after the restart (its session died with the server)
        first_two = {w.pid for w in workers[:2]}
        wait_for(lambda: first_two <= _beat_since(dsn, restarted_at), 12, "both workers' heartbeats after the restart")
        summaries = [finish(w, 60) for w in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(30)
    assert server.count("chat") == 2
    assert sum(s["finished"].get("succeeded", 0) for s in summaries) == 2
    assert sorted(states(dsn, tmp_path / "submitter")).count(State.QUEUED) == 3


def _server_now(dsn: str) -> Any:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def _beat_since(dsn: str, since: Any) -> set[int]:
    """The pids of the worker rows renewed after ``since`` (the server's clock)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT pid FROM dq_workers WHERE heartbeat_at > %s", (since,)).fetchall()
    return {int(r[0]) for r in rows}
