"""``migrate``: a JSON data dir copied into PostgreSQL and back, whole, interrupted and resumed."""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import FakeClock, Queue, RetryPolicy
from desktop_queue.core.migrate import TargetNotEmpty, describe, jobs_of, migrate, open_side
from desktop_queue.core.model import ErrorClass, State
from desktop_queue.core.outcome import Outcome
from desktop_queue.core.records import JobDict

REPO = Path(__file__).resolve().parents[2]


def _history(path: Path, seed: int) -> None:
    """A random history in the data dir ``path``: every state, retries, replays, results, an artifact,
    and finished jobs moved into the archive by compaction."""
    rng = random.Random(seed)
    clock = FakeClock()
    queue = Queue.open(
        path,
        clock=clock,
        policy=RetryPolicy(),
        rng=random.Random(seed),
        background_compaction=False,
        keep_finished=3,
        keep_finished_s=0.0,
    )
    artifacts = 0
    try:
        for n in range(rng.randint(25, 45)):
            waiting = sum(1 for j in queue.list(State.QUEUED) if j.priority == "interactive")
            # (at most 5 interactive jobs may wait; a replay or retry keeps its job's lane)
            priority = "interactive" if waiting < 2 and rng.random() < 0.3 else "background"
            key = f"own-{seed}-{n}" if rng.random() < 0.2 else None
            queue.submit("demo", {"prompt": f"p{n}", "x": rng.random()}, priority=priority, key=key)
            clock.advance(rng.uniform(0.1, 3.0))
            for _ in range(rng.randint(0, 2)):
                lease = queue.lease(f"w{rng.randint(1, 3)}")
                if lease is None:
                    break
                roll = rng.random()
                if roll < 0.5:
                    result: Any = {"text": f"answer {n}", "n": rng.randint(0, 10**9), "f": rng.random()}
                    if rng.random() < 0.15 or not artifacts:
                        artifacts += 1
                        result = {"artifact_b64": base64.b64encode(os.urandom(64)).decode(), "mime": "image/png"}
                    queue.complete(lease, result)
                elif roll < 0.65:
                    queue.fail(lease, Outcome(ok=False, error_class=ErrorClass.FATAL, message="HTTP 400 bad"))
                elif roll < 0.85:
                    queue.fail(lease, Outcome(ok=False, error_class=ErrorClass.RETRYABLE, message="timeout"))
                # (else: left running, a lease its worker still holds)
                clock.advance(rng.uniform(0.1, 2.0))
            jobs = queue.list()
            finished = [j for j in jobs if j.state in (State.DEAD, State.CANCELLED)]
            if finished and rng.random() < 0.3:
                queue.retry(rng.choice(finished).id)
            queued = [j for j in jobs if j.state == State.QUEUED]
            if queued and rng.random() < 0.2:
                queue.cancel(rng.choice(queued).id)
            done = [j for j in jobs if j.state == State.SUCCEEDED]
            if done and rng.random() < 0.2:
                queue.replay(rng.choice(done).id)
            if rng.random() < 0.15:
                queue.store.compact_now()  # finished jobs go to archive segments
        # and at least one of each: dead then retried, replayed, cancelled, left running
        clock.advance(600.0)  # (every backoff over: the next lease takes whatever is due)
        for n in range(4):
            queue.submit("demo", {"prompt": f"last {n}"})
        lease = queue.lease("w1")
        assert lease is not None
        queue.fail(lease, Outcome(ok=False, error_class=ErrorClass.FATAL, message="HTTP 422 no"))
        queue.retry(lease.job_id)
        lease = queue.lease("w1")
        assert lease is not None
        queue.complete(lease, {"text": "last"})
        queue.replay(lease.job_id)
        queue.cancel(queue.list(State.QUEUED)[0].id)
        assert queue.lease("w2") is not None
        queue.store.compact_now()
    finally:
        queue.close()


def _everything(location: str, data_dir: Path) -> dict[str, tuple[JobDict, Any]]:
    """Every job of a store (with its events) and the result document of its key, by id."""
    queue = open_side(location, data_dir=data_dir)
    try:
        out: dict[str, tuple[JobDict, Any]] = {}
        for jobs in jobs_of(queue, batch=7):
            for job in jobs:
                out[job["id"]] = (job, queue.results.get(job["key"]))
        return out
    finally:
        queue.close()


def _migrate(source: str, target: str, data_dir: Path, **kwargs: Any) -> Any:
    src, dst = open_side(source, data_dir=data_dir), open_side(target, data_dir=data_dir)
    try:
        return migrate(src, dst, **kwargs)
    finally:
        src.close()
        dst.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_random_history_goes_to_postgresql_and_back_unchanged(
    seed: int, tmp_path: Path, pg_dsn: str, pg_harness: Any
) -> None:
    source, back, local = tmp_path / "source", tmp_path / "back", tmp_path / "local"
    _history(source, seed)
    uri = pg_harness.as_uri(pg_dsn)
    before = _everything(str(source), local)
    assert {job["state"] for job, _ in before.values()} == {str(s) for s in State}
    assert any(job.get("replay_of") for job, _ in before.values())
    assert any(job.get("run", 1) > 1 for job, _ in before.values())  # retried
    queue = open_side(str(source), data_dir=local)
    try:
        archived = queue.history(limit=10_000)
    finally:
        queue.close()
    assert archived, "the history has archived jobs"

    there = _migrate(str(source), uri, local, batch=5)
    assert there.equal and there.copied == len(before) and there.skipped == 0
    home = _migrate(uri, str(back), local, batch=9)
    assert home.equal and home.copied == len(before)
    assert there.source == home.target  # the same counts and checksum, three stores on

    on_pg = _everything(uri, local)
    after = _everything(str(back), local)
    assert set(on_pg) == set(after) == set(before)
    for job_id, (job, result) in before.items():
        assert on_pg[job_id] == (job, result), job_id
        assert after[job_id] == (job, result), job_id
    # an artifact's file came along with its result
    refs = [r["result"]["artifact_ref"] for _, r in after.values() if r and "artifact_ref" in r["result"]]
    assert refs
    for ref in refs:
        assert (back / ref).read_bytes() == (source / ref).read_bytes()
    # and into the database: a machine that never had the files shows them
    elsewhere = open_side(uri, data_dir=tmp_path / "elsewhere")
    try:
        for ref in refs:
            assert elsewhere.results.artifact_file(ref).read_bytes() == (source / ref).read_bytes()
    finally:
        elsewhere.close()


def test_a_non_empty_target_is_refused(tmp_path: Path, pg_dsn: str, pg_harness: Any) -> None:
    source, local = tmp_path / "source", tmp_path / "local"
    _history(source, 7)
    uri = pg_harness.as_uri(pg_dsn)
    other = open_side(uri, data_dir=local)
    try:
        other.submit("demo", {"prompt": "already here"})
    finally:
        other.close()
    with pytest.raises(TargetNotEmpty, match="holds 1 jobs already"):
        _migrate(str(source), uri, local)
    cli = _cli("--data-dir", str(local), "migrate", "--from", str(source), "--to", uri)
    assert cli.returncode == 1
    assert cli.stderr.strip().splitlines()[-1].startswith("desktop-queue: the target holds 1 jobs already")
    target = open_side(uri, data_dir=local)
    try:
        assert sum(target.counts().values()) == 1  # nothing was copied
    finally:
        target.close()


def test_the_output_never_shows_a_password() -> None:
    assert describe("postgresql://dq:s3cret@db/q") == "postgresql://dq:***@db/q"
    assert describe("postgresql://dq@db/q?password=s3cret&sslmode=require") == (
        "postgresql://dq@db/q?password=***&sslmode=require"
    )
    assert describe("/home/me/dq") == "/home/me/dq"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DESKTOP_QUEUE_STORE"}
    return subprocess.run(
        [sys.executable, "-m", "desktop_queue", *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=120
    )


def test_a_migration_killed_mid_way_is_finished_by_resume(tmp_path: Path, pg_dsn: str, pg_harness: Any) -> None:
    source, local = tmp_path / "source", tmp_path / "local"
    queue = Queue.open(source, background_compaction=False)
    try:
        for start in range(0, 3000, 500):
            queue.submit_many("demo", [{"prompt": f"p{n}"} for n in range(start, start + 500)])
        for _ in range(40):
            lease = queue.lease("w")
            assert lease is not None
            queue.complete(lease, {"text": "done"})
    finally:
        queue.close()
    uri = pg_harness.as_uri(pg_dsn)
    env = {k: v for k, v in os.environ.items() if k != "DESKTOP_QUEUE_STORE"}
    args = [sys.executable, "-m", "desktop_queue", "--data-dir", str(local), "migrate", "--from", str(source)]
    proc = subprocess.Popen([*args, "--to", uri, "--batch", "10"], stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    assert proc.stderr is not None
    line = proc.stderr.readline()  # the first batch's progress line: the copy is under way
    assert line.startswith("migrate: copied 10 of 3,000 jobs"), line
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    target = open_side(uri, data_dir=local)
    try:
        part = sum(target.counts().values())
    finally:
        target.close()
    assert 10 <= part < 3000  # killed mid-way, whole batches only
    assert part % 10 == 0

    refused = _cli("--data-dir", str(local), "migrate", "--from", str(source), "--to", uri)
    assert refused.returncode == 1 and "--resume" in refused.stderr
    done = _cli("--data-dir", str(local), "migrate", "--from", str(source), "--to", uri, "--resume", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["equal"] is True
    assert report["skipped"] == part and report["copied"] == 3000 - part
    assert report["target"]["counts"] == {"queued": 2960, "succeeded": 40}
    assert report["source"]["checksum"] == report["target"]["checksum"]
    assert any("stay files in the data dir" in note for note in report["notes"])
    before, after = _everything(str(source), local), _everything(uri, local)
    assert before == after  # no job twice, none missing, each as it was


def test_bad_flags_are_one_line_and_exit_2(tmp_path: Path) -> None:
    source = tmp_path / "source"
    Queue.open(source, background_compaction=False).close()
    cases = [
        (
            ["--from", str(tmp_path / "nowhere"), "--to", str(tmp_path / "t")],
            "not a data dir (it has no store/ folder)",
        ),
        (["--from", str(source), "--to", str(source)], "--from and --to are the same data dir"),
        (["--from", str(source), "--to", str(tmp_path / "t"), "--batch", "0"], "between 1 and 100000, not 0"),
        (["--from", str(source)], "the following arguments are required: --to"),
    ]
    for args, message in cases:
        done = _cli("--data-dir", str(tmp_path / "local"), "migrate", *args)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr.strip().splitlines()[-1], done.stderr
    flagged = _cli("--store", "postgresql://x@/y", "migrate", "--from", str(source), "--to", str(tmp_path / "t"))
    assert flagged.returncode == 2
    assert flagged.stderr.strip() == "desktop-queue: migrate names its stores with --from and --to, not --store"
    assert not (tmp_path / "t").exists()  # nothing was made


def test_schedules_prices_and_the_ledger_are_copied_into_a_data_dir(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    _history(source, 11)
    (source / "schedules.json").write_text('{"format": "desktop-queue-schedules", "schedules": []}')
    (source / "ledger").mkdir()
    (source / "ledger" / "spend-2026-11.jsonl").write_text('{"at": 1}\n')
    target.mkdir()
    (target / "prices.json").write_text("{}")  # the target's own: kept
    (source / "prices.json").write_text('{"models": {}}')
    done = _cli("--data-dir", str(tmp_path / "local"), "migrate", "--from", str(source), "--to", str(target))
    assert done.returncode == 0, done.stderr
    assert "verified: both sides hold the same jobs" in done.stdout
    assert (target / "schedules.json").read_bytes() == (source / "schedules.json").read_bytes()
    assert (target / "ledger" / "spend-2026-11.jsonl").read_text() == '{"at": 1}\n'
    assert (target / "prices.json").read_text() == "{}"
    assert "note: kept the target's own prices.json (not overwritten)" in done.stdout
    assert _everything(str(source), tmp_path / "local") == _everything(str(target), tmp_path / "local")
