"""Webhook intake over real HTTP: verified before parsed, and one state change per delivery.

The drill of seed 003 ("webhook replay"): the same delivery twice, out of order and late
changes the job once; a worker polling the same background response at the same time
does not complete it a second time, and nothing is paid for twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from api_helpers import SECRET, Env, event_body

from desktop_queue.api.signature import TOLERANCE_S
from desktop_queue.core import EventType, Lease, Outcome, RunContext, StaleLease, State
from desktop_queue.core.backend import Change
from desktop_queue.core.ledger import SpendLedger
from desktop_queue.core.webhooks import MAX_DELIVERIES

MakeJob = Callable[[], tuple[Lease, str]]


def events(env: Env, job_id: str, kind: str) -> list[Any]:
    return [e for e in env.queue.get(job_id).events if e.type == kind]


def state_changes(env: Env, job_id: str) -> list[str]:
    """The timeline's entries that change a job's state after it was leased."""
    finishing = {EventType.SUCCEEDED, EventType.DEAD_LETTERED, EventType.RETRY_SCHEDULED, EventType.THROTTLED}
    return [e.type for e in env.queue.get(job_id).events if e.type in finishing]


def test_a_completed_response_finishes_its_job_without_a_poll(env: Env, responses_job: MakeJob) -> None:
    lease, response_id = responses_job()
    env.fake.finish(response_id)
    gets = env.fake.count("responses.get")
    reply = env.deliver("response.completed", response_id, "msg_1")
    assert reply.status == 200, reply
    assert reply.body == {
        "status": "applied",
        "job_id": lease.job_id,
        "state": "succeeded",
        "reason": reply.body["reason"],
    }
    job = env.queue.get(lease.job_id)
    assert job.state == State.SUCCEEDED and job.result_ref
    stored = env.queue.results.get(job.idempotency_key)
    assert stored is not None and stored["result"]["text"] == "background text"
    assert env.fake.count("responses.get") == gets + 1  # one free GET of the response
    assert env.fake.count("responses.create") == 1  # and nothing paid for again
    (note,) = events(env, job.id, EventType.WEBHOOK)
    assert "msg_1" in note.detail["reason"] and note.worker == "webhook:openai"


def test_the_same_delivery_twice_changes_the_job_once(env: Env, responses_job: MakeJob) -> None:
    lease, response_id = responses_job()
    env.fake.finish(response_id)
    assert env.deliver("response.completed", response_id, "msg_twice").body["status"] == "applied"
    gets = env.fake.count("responses.get")
    again = env.deliver("response.completed", response_id, "msg_twice")
    assert again.status == 200 and again.body["status"] == "duplicate"
    assert env.fake.count("responses.get") == gets  # a known delivery is not even looked up
    assert state_changes(env, lease.job_id) == [EventType.SUCCEEDED]
    assert len(events(env, lease.job_id, EventType.WEBHOOK)) == 1


def test_a_redelivery_survives_a_restart(env: Env, responses_job: MakeJob) -> None:
    """The delivery id is in the store (the same commit as the success), not in memory."""
    lease, response_id = responses_job()
    env.fake.finish(response_id)
    env.deliver("response.completed", response_id, "msg_durable")
    env.queue.close()
    reopened = type(env.queue).open(env.queue.data_dir, env.providers, background_compaction=False)
    try:
        assert reopened.raw_jobs({lease.job_id})[0].get("webhook_deliveries") == ["msg_durable"]
    finally:
        reopened.close()
    env.queue.store.open()  # (the fixture's queue serves the API: open it again)
    assert env.deliver("response.completed", response_id, "msg_durable").body["status"] == "duplicate"


def test_the_response_the_webhook_collected_is_in_the_spend_ledger_once(env: Env, responses_job: MakeJob) -> None:
    """The attempt that was polling ends without the usage (its lease was taken): the
    webhook records it, once, so budgets see it."""
    lease, response_id = responses_job()
    env.fake.finish(response_id)
    env.deliver("response.completed", response_id, "msg_spend")
    env.deliver("response.completed", response_id, "msg_spend")
    env.deliver("response.completed", response_id, "msg_spend_again")
    entries = [e for e in SpendLedger(env.queue.data_dir).entries() if e.job_id == lease.job_id]
    assert len(entries) == 1
    assert (entries[0].profile, entries[0].usage.tokens_in, entries[0].usage.tokens_out) == ("openai", 10, 20)


def test_failed_after_completed_changes_nothing(env: Env, responses_job: MakeJob) -> None:
    lease, response_id = responses_job()
    env.fake.finish(response_id)
    env.deliver("response.completed", response_id, "msg_a")
    late = env.deliver("response.failed", response_id, "msg_b")
    assert late.status == 200 and late.body["status"] == "finished" and late.body["state"] == "succeeded"
    assert env.queue.get(lease.job_id).state == State.SUCCEEDED
    assert state_changes(env, lease.job_id) == [EventType.SUCCEEDED]
    assert env.deliver("response.failed", response_id, "msg_b").body["status"] == "duplicate"
    assert len(events(env, lease.job_id, EventType.WEBHOOK)) == 2  # one note per delivery, never more


def test_the_event_type_alone_does_not_fail_a_completed_response(env: Env, responses_job: MakeJob) -> None:
    """A ``response.failed`` whose response in fact completed (reordered, or forged under a
    leaked secret): the provider's own answer decides."""
    lease, response_id = responses_job()
    env.fake.finish(response_id)
    assert env.deliver("response.failed", response_id, "msg_odd").body["state"] == "succeeded"


def test_a_failed_response_dead_letters_a_fatal_error(env: Env, responses_job: MakeJob) -> None:
    lease, response_id = responses_job()
    env.fake.finish(response_id, "failed", error={"code": "invalid_prompt", "message": "refused"})
    reply = env.deliver("response.failed", response_id, "msg_f")
    assert reply.body["status"] == "applied" and reply.body["state"] == "dead"
    job = env.queue.get(lease.job_id)
    assert job.state == State.DEAD and job.last_error is not None and job.last_error["class"] == "fatal"
    assert env.deliver("response.failed", response_id, "msg_f").body["status"] == "duplicate"
    assert state_changes(env, lease.job_id) == [EventType.DEAD_LETTERED]


def test_a_retryable_failure_queues_the_job_for_its_next_attempt(env: Env, responses_job: MakeJob) -> None:
    lease, response_id = responses_job()
    env.fake.finish(response_id, "failed", error={"code": "server_error", "message": "oops"})
    reply = env.deliver("response.failed", response_id, "msg_r")
    assert reply.body["state"] == "queued"
    with pytest.raises(StaleLease):
        env.queue.heartbeat(lease)  # the poller's lease is gone: it stops polling


def test_a_late_delivery_is_refused(env: Env, responses_job: MakeJob) -> None:
    lease, response_id = responses_job()
    env.fake.finish(response_id)
    # a minute past the tolerance either way: the server reads its clock after this test
    # did, so "one second ahead" could be within it by the time the delivery is checked
    off = TOLERANCE_S + 60
    for when in (int(time.time()) - off, int(time.time()) + off):
        reply = env.deliver("response.completed", response_id, "msg_late", timestamp=when)
        assert reply.status == 401 and reply.body["error"] == "bad_signature", reply
    assert env.queue.get(lease.job_id).state == State.RUNNING
    # not recorded: the same delivery, sent again in time, is applied
    assert env.deliver("response.completed", response_id, "msg_late").body["status"] == "applied"


def test_a_bad_signature_is_refused_before_the_body_is_parsed(env: Env, responses_job: MakeJob) -> None:
    lease, response_id = responses_job()
    env.fake.finish(response_id)
    gets = env.fake.count("responses.get")
    other = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="
    assert env.deliver("response.completed", response_id, "m1", secret=other).status == 401
    # a body that is not even JSON: 401 for a bad signature (it was never parsed) …
    broken = env.deliver("response.completed", response_id, "m2", secret=other, body=b"{not json")
    assert broken.status == 401 and broken.body["error"] == "bad_signature"
    # … and 400 only once it is signed
    signed = env.deliver("response.completed", response_id, "m3", body=b"{not json")
    assert signed.status == 400 and signed.body["error"] == "invalid_input"
    tampered = event_body("response.completed", response_id)
    headers = {"webhook-id": "m4", "webhook-timestamp": str(int(time.time())), "webhook-signature": "v1,AAAA"}
    assert env.client.call("POST", "/webhooks/openai", raw=tampered, token=None, headers=headers).status == 401
    headers.pop("webhook-signature")
    missing = env.client.call("POST", "/webhooks/openai", raw=tampered, token=None, headers=headers)
    assert missing.status == 401 and "webhook-signature" in missing.body["message"]
    assert env.fake.count("responses.get") == gets and env.queue.get(lease.job_id).state == State.RUNNING


def test_a_profile_without_a_secret_takes_no_webhooks(env: Env, responses_job: MakeJob) -> None:
    _lease, response_id = responses_job()
    reply = env.deliver("response.completed", response_id, "m", profile="other")
    assert reply.status == 404 and reply.body["error"] == "no_webhook_secret"


def test_a_response_of_another_profile_or_no_job_is_ignored(env: Env, responses_job: MakeJob) -> None:
    lease, response_id = responses_job()
    reply = env.deliver("response.completed", "resp_unknown", "m1")
    assert reply.status == 200 and reply.body["status"] == "ignored"
    other = env.deliver("batch.completed", response_id, "m2")
    assert other.body["status"] == "ignored"
    assert env.queue.get(lease.job_id).state == State.RUNNING


def test_a_response_still_running_is_not_recorded_and_asks_for_redelivery(env: Env, responses_job: MakeJob) -> None:
    lease, response_id = responses_job()
    early = env.deliver("response.completed", response_id, "msg_early")
    assert early.status == 503 and early.body["error"] == "not_ready" and early.headers["retry-after"]
    assert env.queue.get(lease.job_id).state == State.RUNNING
    env.fake.finish(response_id)
    assert env.deliver("response.completed", response_id, "msg_early").body["status"] == "applied"


def test_a_queued_job_between_attempts_runs_now_to_collect_it(env: Env, responses_job: MakeJob) -> None:
    lease, response_id = responses_job()
    env.queue.release(lease, "test: between attempts")
    job = env.queue.get(lease.job_id)
    # (as a retry's backoff leaves it: runnable only later)
    env.queue.store.commit(lambda state: Change([env.queue._upd(job.id, {"run_after": time.time() + 3600})], None))
    env.fake.finish(response_id)
    reply = env.deliver("response.completed", response_id, "msg_q")
    assert reply.body["status"] == "applied" and reply.body["state"] == "queued"
    assert env.queue.get(job.id).run_after <= time.time()
    assert env.deliver("response.completed", response_id, "msg_q").body["status"] == "duplicate"


def test_delivery_ids_kept_per_job_are_bounded(env: Env, responses_job: MakeJob) -> None:
    lease, response_id = responses_job()
    env.fake.finish(response_id)
    for n in range(MAX_DELIVERIES + 5):
        env.deliver("response.completed", response_id, f"msg_{n}")
    kept = env.queue.raw_jobs({lease.job_id})[0]["webhook_deliveries"]
    assert len(kept) == MAX_DELIVERIES and kept[-1] == f"msg_{MAX_DELIVERIES + 4}"
    assert state_changes(env, lease.job_id) == [EventType.SUCCEEDED]


# ---------------------------------------------------------------------- a worker polls the same response


def poller_context(
    env: Env, lease: Lease, response_id: str, before_beat: Callable[[], None] | None = None
) -> RunContext:
    """The context the lease driver gives the attempt that created ``response_id`` and polls it."""

    def beat() -> bool:
        if before_beat is not None:
            before_beat()
        try:
            env.queue.heartbeat(lease)
        except StaleLease:
            return False  # as the lease driver's renewal answers a lost lease
        return True

    return RunContext(
        job_id=lease.job_id,
        attempt=lease.attempt,
        idempotency_key=lease.job.idempotency_key,
        heartbeat=beat,
        record_provider_job=lambda pid: env.queue.record_provider_job(lease, pid),
        provider_job_id=response_id,
    )


def test_a_polling_worker_loses_its_lease_to_the_webhook_and_pays_nothing(env: Env, responses_job: MakeJob) -> None:
    """The real provider polls the response on a worker thread while the webhook lands."""
    lease, response_id = responses_job()
    polling, resume = threading.Event(), threading.Event()

    def hold() -> None:
        polling.set()
        assert resume.wait(30)

    outcome: list[Outcome] = []
    job = env.queue.get(lease.job_id)
    context = poller_context(env, lease, response_id, hold)
    worker = threading.Thread(target=lambda: outcome.append(env.providers["openai.responses"].run(job, context)))
    worker.start()
    assert polling.wait(30)  # the worker polls (the response still runs) and is about to heartbeat
    env.fake.finish(response_id)
    assert env.deliver("response.completed", response_id, "msg_race").body["status"] == "applied"
    resume.set()
    worker.join(30)
    assert not worker.is_alive() and outcome and not outcome[0].ok  # "lease lost while polling"
    with pytest.raises(StaleLease):
        env.queue.fail(lease, outcome[0])  # what the lease driver does next: refused, nothing changes
    with pytest.raises(StaleLease):
        env.queue.complete(lease, {"text": "late"})
    done = env.queue.get(lease.job_id)
    assert done.state == State.SUCCEEDED
    assert state_changes(env, done.id) == [EventType.SUCCEEDED]
    assert [e.type for e in done.events].count(EventType.STALE_RESULT) >= 2  # each refusal is recorded
    stored = env.queue.results.get(done.idempotency_key)
    assert stored is not None and stored["result"]["text"] == "background text"
    assert env.fake.count("responses.create") == 1  # nothing was paid for twice


def test_a_poller_that_completes_first_leaves_the_webhook_nothing(env: Env, responses_job: MakeJob) -> None:
    lease, response_id = responses_job()
    env.fake.finish(response_id)
    job = env.queue.get(lease.job_id)
    outcome = env.providers["openai.responses"].run(job, poller_context(env, lease, response_id))
    assert outcome.ok
    env.queue.complete(lease, outcome.result)
    late = env.deliver("response.completed", response_id, "msg_after")
    assert late.body["status"] == "finished"
    assert state_changes(env, lease.job_id) == [EventType.SUCCEEDED]


@pytest.mark.parametrize("round_", range(4))
def test_a_webhook_and_a_poller_at_the_same_moment_finish_the_job_once(
    env: Env, responses_job: MakeJob, round_: int
) -> None:
    lease, response_id = responses_job()
    env.fake.finish(response_id)
    job = env.queue.get(lease.job_id)
    result = env.providers["openai.responses"].run(job, poller_context(env, lease, response_id))
    assert result.ok
    start = threading.Barrier(2)
    poller: list[str] = []

    def complete() -> None:
        start.wait(10)
        try:
            env.queue.complete(lease, result.result)
            poller.append("completed")
        except StaleLease:
            poller.append("stale")

    thread = threading.Thread(target=complete)
    thread.start()
    start.wait(10)
    reply = env.deliver("response.completed", response_id, f"msg_same_{round_}")
    thread.join(30)
    assert reply.status == 200 and poller
    # exactly one of them finished it
    assert (poller[0] == "completed") == (reply.body["status"] == "finished")
    done = env.queue.get(lease.job_id)
    assert done.state == State.SUCCEEDED and state_changes(env, done.id) == [EventType.SUCCEEDED]
    stored = env.queue.results.get(done.idempotency_key)
    assert stored is not None and stored["result"]["text"] == "background text"
    assert env.fake.count("responses.create") == 1


def test_the_secret_comes_from_the_keyring_per_profile(env: Env, memory_keyring: Any) -> None:
    assert memory_keyring.store[("desktop-queue", "openai:webhook-secret")] == SECRET
    assert ("desktop-queue", "openai") not in memory_keyring.store  # never the API key's entry


def test_profile_webhook_secret_stores_and_removes_it(
    memory_keyring: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    from desktop_queue import cli
    from desktop_queue.providers.profiles import webhook_secret

    monkeypatch.setattr("sys.stdin", io.StringIO(SECRET + "\n"))
    assert cli.main(["profile", "webhook-secret", "openai"]) == 0
    assert webhook_secret("openai") == SECRET
    assert SECRET not in capsys.readouterr().out  # never echoed
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    assert cli.main(["profile", "webhook-secret", "openai"]) == 2  # an empty secret is a usage error
    assert cli.main(["profile", "webhook-secret", "nosuch"]) == 2
    assert "no profile named 'nosuch'" in capsys.readouterr().err
    assert cli.main(["profile", "webhook-secret", "openai", "--remove", "--json"]) == 0
    assert '"removed":true' in capsys.readouterr().out and webhook_secret("openai") is None


def test_a_failed_response_of_a_queued_job_keeps_its_backoff(env: Env, responses_job: MakeJob) -> None:
    lease, response_id = responses_job()
    env.queue.release(lease, "test: between attempts")
    later = time.time() + 3600
    env.queue.store.commit(lambda state: Change([env.queue._upd(lease.job_id, {"run_after": later})], None))
    env.fake.finish(response_id, "failed", error={"code": "server_error", "message": "oops"})
    reply = env.deliver("response.failed", response_id, "msg_qf")
    assert reply.body["status"] == "applied" and reply.body["state"] == "queued"
    assert env.queue.get(lease.job_id).run_after == pytest.approx(later)  # no paid attempt sooner than planned
    assert env.deliver("response.failed", response_id, "msg_qf").body["status"] == "duplicate"
