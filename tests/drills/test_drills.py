"""The five fault drills of the production guide (seed 003), run against real processes.

Run them alone with ``make drills``. Each drill is what the guide asks to see before a
queue goes live; every worker is a real ``desktop-queue work`` subprocess on one data dir,
against the fake OpenAI server on 127.0.0.1, which counts what went over the wire.

1. provider 429: no request before ``Retry-After``, no concurrency cap exceeded;
2. idempotency race: the same key submitted twice at once, two workers: one job, one
   result, one provider call;
3. lease recovery: a worker dies after the provider answered and before its commit: the
   next worker recognises the result (chat) or the provider job (background responses)
   and pays nothing twice;
4. dead letter: continuous failure ends dead (no endless retries) with one alert, and a
   replay is paced by the profile's limits and keeps the history;
5. webhook replay: the same delivery twice, out of order and late: one state change.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "providers"))

from fakeserver import Action, FakeOpenAI  # noqa: E402
from workerproc import (  # noqa: E402
    env_for,
    finish,
    jobs,
    server,  # noqa: F401  (a fixture)
    start_worker,
    submit,
    wait_for,
)

from desktop_queue.core import Queue, State  # noqa: E402
from desktop_queue.core.alerts import DEAD_LETTERS_GROWING, DEFAULTS, FIRED, AlertBook  # noqa: E402
from desktop_queue.core.repair import RepairScan, Upkeep  # noqa: E402
from desktop_queue.core.store.fileio import FileLock  # noqa: E402
from desktop_queue.providers import discover  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.drill,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals"),
]


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Workers a drill starts; any still running at the end are killed."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)


def cli(data_dir: Path, server: FakeOpenAI, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), *args],
        env=env_for(server),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


# ---------------------------------------------------------------------- 1. provider 429


def test_drill_1_a_429_holds_every_worker_until_retry_after(server: FakeOpenAI, data_dir: Path) -> None:
    """PROVIDER_FAULT=429: the first request is refused with ``Retry-After: 3``. Two workers
    share the profile: neither asks again before the 3 s are up, and one call at a time."""
    server.default_delay_s = 0.2
    server.push("chat", Action.error(429, "slow down", "rate_limit_exceeded", headers={"Retry-After": "3"}))
    ids = submit(data_dir, 4)
    flags = ("--provider-concurrency", "1", "--until-idle", "--max-seconds", "60")
    summaries = [finish(w, 90) for w in [start_worker(data_dir, server, *flags) for _ in range(2)]]

    chats = server.of("chat")
    assert len(chats) == 5, "four answers and the one refusal"
    refused_at = chats[0].at
    assert all(r.at - refused_at >= 3.0 for r in chats[1:]), [round(r.at - refused_at, 2) for r in chats]
    assert server.max_in_flight == 1
    done = {job.id: job for job in jobs(data_dir)}
    assert {done[i].state for i in ids} == {State.SUCCEEDED}
    assert all(done[i].attempts == 1 for i in ids), "the throttled attempt was given back"
    assert sum(s["finished"].get("succeeded", 0) for s in summaries) == 4


# ---------------------------------------------------------------------- 2. idempotency race


def test_drill_2_one_key_submitted_twice_at_once_is_one_job_and_one_call(server: FakeOpenAI, data_dir: Path) -> None:
    """Two ``submit`` processes race with one idempotency key while two workers wait for work:
    one job, one result, one request to the provider (one business side effect)."""
    server.default_delay_s = 0.5
    with Queue.open(data_dir, discover()):
        pass  # the data dir exists before the racers start
    runners = [start_worker(data_dir, server, "--max-seconds", "10") for _ in range(2)]
    payload = json.dumps({"prompt": "charge the customer once", "max_tokens": 8})
    racers = [
        cli(data_dir, server, "submit", "openai.chat", "--input", payload, "--key", "order-42", "--json")
        for _ in range(2)
    ]
    answers = []
    for racer in racers:
        out, err = racer.communicate(timeout=30)
        assert racer.returncode == 0, err.decode()
        answers.append(json.loads(out))
    for runner in runners:
        finish(runner, 30)

    assert answers[0]["id"] == answers[1]["id"]
    assert sorted(a.get("duplicate", False) for a in answers) == [False, True]
    [job] = jobs(data_dir)
    assert job.state == State.SUCCEEDED and job.total_attempts == 1
    assert server.count("chat") == 1, "the side effect happened once"
    with Queue.open(data_dir, discover()) as queue:
        again = queue.submit("openai.chat", json.loads(payload), key="order-42")
        assert again.duplicate and again.result is not None, "a later duplicate gets the stored result"
    assert server.count("chat") == 1


# ---------------------------------------------------------------------- 3. lease recovery


def test_drill_3_a_worker_killed_between_the_answer_and_its_commit_pays_once(
    server: FakeOpenAI, data_dir: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    """The provider answers; the worker keeps the answer (``results/pending``) but dies
    before it can commit it. The next worker recognises the kept result: no second call."""
    server.default_delay_s = 1.0
    [job_id] = submit(data_dir, 1)
    first = start_worker(data_dir, server, "--lease-s", "3")
    workers.append(first)
    wait_for(lambda: server.count("chat") == 1, 30, "the provider call")
    # hold the store's commit lock: the worker gets its answer but cannot commit it
    lock = FileLock.on_directory(data_dir, data_dir / "store" / "commit.lock")
    lock.lock_exclusive()
    try:
        pending = data_dir / "results" / "pending"
        wait_for(lambda: pending.is_dir() and any(pending.glob("*.json")), 30, "the answer kept before the commit")
        first.kill()
        first.communicate(timeout=10)
        assert first.returncode == -signal.SIGKILL
    finally:
        lock.unlock()
        lock.close()

    finish(start_worker(data_dir, server, "--until-idle", "--max-seconds", "30"), 60)
    assert server.count("chat") == 1, "the kept answer was used, not asked for again"
    [job] = jobs(data_dir)
    assert job.id == job_id and job.state == State.SUCCEEDED
    assert job.total_attempts == 1
    assert "reconciled" in [e.type for e in job.events]


def test_drill_3_a_worker_killed_mid_background_response_resumes_the_provider_job(
    server: FakeOpenAI, data_dir: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    """``openai.responses`` in background mode: the worker dies while the provider generates;
    the next worker asks the provider about that response instead of creating another."""
    server.polls_to_complete = 10**6  # in progress until the drill says otherwise
    with Queue.open(data_dir, discover()) as queue:
        job_id = queue.submit("openai.responses", {"input": "a long essay", "model": "test-model"}).job.id
    first = start_worker(data_dir, server)
    workers.append(first)

    def provider_job() -> str | None:
        with Queue.open(data_dir, discover()) as queue:
            return queue.get(job_id).provider_job_id

    wait_for(lambda: provider_job() is not None, 30, "the provider job id committed")
    first.kill()
    first.communicate(timeout=10)
    response_id = provider_job()
    assert response_id is not None
    with server.lock:
        server.responses[response_id]["_polls_left"] = 2

    finish(start_worker(data_dir, server, "--until-idle", "--max-seconds", "30"), 60)
    assert server.count("responses.create") == 1, "no second generation was paid for"
    [job] = jobs(data_dir)
    assert job.state == State.SUCCEEDED and job.provider_job_id == response_id


# ---------------------------------------------------------------------- 4. dead letter


def test_drill_4_continuous_failure_ends_dead_and_a_replay_is_paced(server: FakeOpenAI, data_dir: Path) -> None:
    """Every call fails (HTTP 500): each job spends its 2 attempts and is dead-lettered, no
    endless retries, and the dead letters raise one alert. The provider comes back; replaying all the dead letters at once does
    not flood it: the profile's 2 requests a minute hold, and the originals keep their
    whole history."""
    server.outage = (time.monotonic() + 3600, 500)
    with Queue.open(data_dir, discover()) as queue:
        # 2 attempts each: the 4 failures stay under the breaker's threshold of 5
        ids = [
            queue.submit("openai.chat", {"prompt": f"doomed {i}", "max_tokens": 8}, max_attempts=2).job.id
            for i in range(2)
        ]
    finish(start_worker(data_dir, server, "--until-idle", "--max-seconds", "60"), 90)
    dead = {job.id: job for job in jobs(data_dir)}
    assert {dead[i].state for i in ids} == {State.DEAD}
    assert server.count("chat") == 4, "two attempts each, then no more"
    # the dead letters raise one alert (the rule's threshold edited to this drill's size)
    rule = dataclasses.replace(DEFAULTS[DEAD_LETTERS_GROWING], threshold=2)
    with Queue.open(data_dir, discover()) as queue:
        upkeep = Upkeep(RepairScan(queue), book=AlertBook(data_dir), rules=lambda: [rule])
        assert [(t.rule, t.kind) for t in upkeep.tick()] == [(DEAD_LETTERS_GROWING, FIRED)]
        assert upkeep.tick() == [], "one alert, not one per look"

    server.outage = None
    with Queue.open(data_dir, discover()) as queue:
        replayed = queue.replay_many(ids)
    assert sorted(replayed.created) == sorted(ids)
    started = time.monotonic()
    finish(start_worker(data_dir, server, "--rpm", "1", "--max-seconds", "6"), 30)
    after = server.of("chat")[4:]
    assert len(after) == 1, "one request a minute: the replay waits its turn"
    assert all(r.at >= started for r in after)

    by_id = {job.id: job for job in jobs(data_dir)}
    assert sorted(by_id[new].state for new in replayed.created.values()) == [State.QUEUED, State.SUCCEEDED]
    for original in ids:
        job = by_id[original]
        assert job.state == State.DEAD
        types = [e.type for e in job.events]
        assert types.count("leased") == 2 and "dead_lettered" in types and "replayed_as" in types


# ---------------------------------------------------------------------- 5. webhook replay

SECRET = "whsec_" + base64.b64encode(b"drill-webhook-signing-key-32-byte").decode()


def _signed(delivery_id: str, event_type: str, response_id: str, at: int) -> tuple[bytes, dict[str, str]]:
    """A webhook as OpenAI sends one (Standard Webhooks: HMAC-SHA256 of ``id.timestamp.body``)."""
    body = json.dumps(
        {"id": f"evt_{delivery_id}", "object": "event", "created_at": at, "type": event_type,
         "data": {"id": response_id}}
    ).encode()  # fmt: skip
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    mac = hmac.new(key, f"{delivery_id}.{at}.".encode() + body, hashlib.sha256).digest()
    headers = {
        "content-type": "application/json",
        "webhook-id": delivery_id,
        "webhook-timestamp": str(at),
        "webhook-signature": "v1," + base64.b64encode(mac).decode(),
    }
    return body, headers


def _post(port: int, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/webhooks/openai", body, headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_drill_5_a_webhook_replayed_out_of_order_and_late_changes_the_job_once(
    server: FakeOpenAI, data_dir: Path, tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    """A background response polled by a ``work`` process; its ``response.completed``
    webhook reaches ``desktop-queue serve`` twice, then a ``response.failed`` for it (out
    of order), then a copy signed ten minutes ago (late): the job succeeds once."""
    server.polls_to_complete = 10**6  # generating until the drill finishes it
    env = {
        **env_for(server),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS / "cli"), os.environ.get("PYTHONPATH")])),
        "PYTHON_KEYRING_BACKEND": "file_keyring.FileKeyring",  # one test keyring for every process
        "DQ_TEST_KEYRING_FILE": str(tmp_path / "keyring.json"),
        "DESKTOP_QUEUE_CONFIG_DIR": str(tmp_path / "config"),
    }
    setup = subprocess.run(
        [sys.executable, "-m", "desktop_queue", "profile", "webhook-secret", "openai"],
        input=SECRET.encode(), env=env, capture_output=True, timeout=30,
    )  # fmt: skip
    assert setup.returncode == 0, setup.stderr.decode()
    with Queue.open(data_dir, discover()) as queue:
        job_id = queue.submit("openai.responses", {"input": "a long essay", "model": "test-model"}).job.id
    worker = subprocess.Popen(
        [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), "work", "--json",
         "--until-idle", "--max-seconds", "60"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    api = subprocess.Popen(
        [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), "serve", "--port", "0"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    workers.extend([worker, api])
    assert api.stderr is not None
    line = api.stderr.readline().decode()
    found = re.search(r"127\.0\.0\.1:(\d+)", line)
    assert found, line
    port = int(found.group(1))

    def provider_job() -> str | None:
        with Queue.open(data_dir, discover()) as queue:
            return queue.get(job_id).provider_job_id

    wait_for(lambda: provider_job() is not None, 30, "the background response created")
    response_id = provider_job()
    assert response_id is not None
    server.finish(response_id)
    now = int(time.time())
    first = _post(port, *_signed("msg_1", "response.completed", response_id, now))
    again = _post(port, *_signed("msg_1", "response.completed", response_id, now))
    reordered = _post(port, *_signed("msg_2", "response.failed", response_id, now))
    late = _post(port, *_signed("msg_3", "response.failed", response_id, now - 600))

    assert first[0] == 200 and first[1]["status"] in ("applied", "finished"), first
    assert again == (200, {**again[1], "status": "duplicate"}), again
    assert reordered[0] == 200 and reordered[1].get("state") == "succeeded", reordered
    assert late[0] == 401, late
    finish(worker, 90)
    api.send_signal(signal.SIGTERM)
    api.communicate(timeout=30)
    assert api.returncode == 0

    [job] = jobs(data_dir)
    assert job.state == State.SUCCEEDED
    assert [e.type for e in job.events].count("succeeded") == 1, "one state change"
    assert [e.type for e in job.events if e.type in ("dead_lettered", "retry_scheduled")] == []
    assert server.count("responses.create") == 1, "nothing generated twice"
