"""Provider webhooks: a verified delivery finishes its job at most once.

A provider that runs jobs in the background (OpenAI's Responses API in background mode)
tells us when one ends by a signed webhook (``response.completed``, ``response.failed``
…). The HTTP layer (:mod:`desktop_queue.api`) verifies the signature and the timestamp
before it parses anything; this module applies what a verified delivery means:

1. find the job by its provider job id (``Queue.record_provider_job`` committed it);
2. ask the provider what became of that provider job (a GET of the response: free, not
   a paid call), outside any commit: the event type alone is not trusted to say how it
   ended, so a ``response.failed`` that arrives after ``response.completed`` (or a forged
   type under a leaked secret) cannot turn a success into a failure;
3. in **one** commit, record the delivery id on the job (``webhook_deliveries``) together
   with its effect: ``running`` -> ``succeeded`` (the result carried in the record, as
   :meth:`Queue.complete` does) or the failure decision of :meth:`Queue.fail`, taking
   over from whichever lease is current. The lease token is cleared, so the worker that
   polls the same response is refused as stale (``StaleLease``) when it reports; it pays
   for nothing, as it only polled a response that was already paid for.

A delivery id already on the job changes nothing (a redelivery); a job that already
finished records the delivery with a ``webhook`` event and changes nothing else (a late
or reordered delivery); a queued job (between two attempts) is made runnable now, and
its next attempt resumes the provider job and finds it finished.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import orjson

from desktop_queue.core.backend import Change, View, scan_jobs
from desktop_queue.core.errors import InvalidInput, QueueError
from desktop_queue.core.model import ErrorClass, EventType, Job, State
from desktop_queue.core.outcome import LookupResult, Outcome
from desktop_queue.core.records import JobChanges, JobDict, Record

if TYPE_CHECKING:
    from desktop_queue.core.queue import Queue

#: the event types that say a background response ended (the lookup says how)
RESPONSE_ENDED = frozenset({"response.completed", "response.failed", "response.incomplete", "response.cancelled"})
#: the job kind whose provider job a response is
RESPONSES_KIND = "openai.responses"
#: delivery ids kept per job: a job sees a handful of deliveries in its life
MAX_DELIVERIES = 32
#: the longest delivery id and provider job id accepted (they are stored)
MAX_ID = 200


class WebhookNotReady(QueueError):
    """The provider cannot say yet how the provider job ended (it still runs, or the
    look-up failed): nothing is recorded, so the sender's redelivery is applied later."""

    exit_code = 1


class Applied(StrEnum):
    """What a delivery did."""

    #: the job finished (or, between attempts, was made runnable now)
    APPLIED = "applied"
    #: this delivery id was applied before: nothing changed
    DUPLICATE = "duplicate"
    #: the job had finished already (a late or reordered delivery): nothing changed
    FINISHED = "finished"
    #: no job of ours has this provider job id, or the event is not one we act on
    IGNORED = "ignored"


@dataclass(frozen=True)
class Delivery:
    """One verified webhook delivery.

    Attributes:
        delivery_id: the ``webhook-id`` header (the same on every redelivery).
        event_type: e.g. ``response.completed``.
        provider_job_id: the provider's id of the job (``data.id``).
        profile: the profile whose endpoint received it.
    """

    delivery_id: str
    event_type: str
    provider_job_id: str
    profile: str


@dataclass(frozen=True)
class WebhookResult:
    """The answer to one delivery.

    Attributes:
        status: what it did.
        job_id: the matching job, if any.
        state: that job's state afterwards.
        reason: one line for people (and the HTTP answer).
    """

    status: Applied
    job_id: str | None = None
    state: str | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"status": str(self.status), "job_id": self.job_id, "state": self.state, "reason": self.reason}


def parse_delivery(delivery_id: str, body: bytes, profile: str) -> Delivery:
    """The delivery in a verified body (``{"type": ..., "data": {"id": ...}}``).

    Call only after the signature was verified: this is the first look at the body.

    Raises:
        InvalidInput: not JSON, or without an event type or a ``data.id``.
    """
    if not delivery_id or len(delivery_id) > MAX_ID:
        raise InvalidInput("the webhook-id header is missing or too long")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"the webhook body is not JSON: {exc}") from None
    event_type = doc.get("type") if isinstance(doc, dict) else None
    data = doc.get("data") if isinstance(doc, dict) else None
    provider_job_id = data.get("id") if isinstance(data, dict) else None
    if not isinstance(event_type, str) or not event_type:
        raise InvalidInput('the webhook body has no "type"')
    if not isinstance(provider_job_id, str) or not provider_job_id or len(provider_job_id) > MAX_ID:
        raise InvalidInput('the webhook body has no "data.id"')
    return Delivery(delivery_id, event_type, provider_job_id, profile)


def _matching(state: View, delivery: Delivery, profile_of: Callable[[JobDict], str | None]) -> JobDict | None:
    """The hot job of ``delivery``'s provider job on its profile, live ones first.

    A scan of the hot set (live jobs and recently finished ones), not of the history:
    a delivery is for a job that was running moments ago.
    """
    found = None
    for job in scan_jobs(state):
        if job.get("provider_job_id") != delivery.provider_job_id or job["kind"] != RESPONSES_KIND:
            continue
        if profile_of(job) != delivery.profile:
            continue
        if job["state"] in (State.RUNNING, State.QUEUED):
            return job
        found = job
    return found


def _seen(job: JobDict, delivery_id: str) -> bool:
    return delivery_id in (job.get("webhook_deliveries") or ())


def _with_delivery(job: JobDict, delivery_id: str) -> list[str]:
    return [*(job.get("webhook_deliveries") or ())][-(MAX_DELIVERIES - 1) :] + [delivery_id]


def apply_delivery(
    queue: Queue,
    delivery: Delivery,
    lookup: Callable[[Job], LookupResult],
    profile_of: Callable[[JobDict], str | None],
) -> WebhookResult:
    """Applies one verified delivery; safe to call again with the same one, from any process.

    Args:
        queue: the queue of the data dir.
        delivery: what was delivered.
        lookup: asks the provider what became of a job's provider job (the provider's
            ``lookup``: a GET, never a paid call).
        profile_of: the profile a job runs on.

    Raises:
        WebhookNotReady: the provider does not say yet that the provider job ended;
            nothing was recorded.
    """
    if delivery.event_type not in RESPONSE_ENDED:
        return WebhookResult(Applied.IGNORED, reason=f"event {delivery.event_type} is not one Desktop Queue acts on")
    job = queue.store.read(lambda state: _matching(state, delivery, profile_of))
    if job is None:
        return WebhookResult(Applied.IGNORED, reason=f"no job has provider job {delivery.provider_job_id}")
    job_id = job["id"]
    if _seen(job, delivery.delivery_id):
        return WebhookResult(Applied.DUPLICATE, job_id, job["state"], "this delivery was applied before")
    outcome: Outcome | None = None
    doc: _Document | None = None
    if job["state"] in (State.RUNNING, State.QUEUED):
        found = lookup(Job.from_dict(job, with_events=False))
        if found.status == LookupResult.FINISHED:
            outcome = Outcome.success(found.result)
        elif found.status == LookupResult.FAILED and found.outcome is not None:
            outcome = found.outcome
        else:
            raise WebhookNotReady(
                f"the provider does not say yet how {delivery.provider_job_id} ended ({found.status}); "
                "deliver it again later"
            )
        if outcome.ok and job["state"] == State.RUNNING:
            doc = _document(queue, job, outcome.result)
    return queue.store.commit(lambda state: _decide(queue, state, job_id, delivery, outcome, doc))


@dataclass(frozen=True)
class _Document:
    """The result document a webhook commits with the success, made before the commit."""

    ref: str
    doc: dict[str, Any]
    reused: bool


def _document(queue: Queue, job: JobDict, result: Any) -> _Document:
    """As :meth:`Queue.complete` does: a result already stored for the key is reused, never made twice."""
    key = job["key"]
    existing = queue.results.get(key)
    if existing is not None:
        return _Document(queue.results.ref_for(key), existing, True)
    doc = queue.results.attempt_document(
        key, result, job_id=job["id"], epoch=job.get("lease_epoch", 0), produced_at=queue.clock.now()
    )
    return _Document(queue.results.ref_for(key), doc, False)


def _decide(
    queue: Queue, state: View, job_id: str, delivery: Delivery, outcome: Outcome | None, doc: _Document | None
) -> Change[WebhookResult]:
    """The commit: re-reads the job (a poller may have finished it since) and decides."""
    job = state.hot(job_id)
    if job is None:
        return Change([], WebhookResult(Applied.IGNORED, job_id, None, "the job is no longer in the queue"))
    if _seen(job, delivery.delivery_id):
        return Change([], WebhookResult(Applied.DUPLICATE, job_id, job["state"], "this delivery was applied before"))
    now = queue.clock.now()
    worker = f"webhook:{delivery.profile}"
    what = f"{delivery.event_type} (delivery {delivery.delivery_id})"
    seen = _with_delivery(job, delivery.delivery_id)
    if job.get("provider_job_id") != delivery.provider_job_id or job["state"] not in (State.RUNNING, State.QUEUED):
        # finished meanwhile (the poller won), or a newer provider job replaced this one
        reason = f"{what}: the job is already {job['state']}; nothing changed"
        if job.get("provider_job_id") != delivery.provider_job_id:
            reason = f"{what}: the job has moved on to another provider job; nothing changed"
        ev = queue._event(EventType.WEBHOOK, job, "system", now, detail={"reason": reason}, worker=worker)
        record: Record = queue._upd(job_id, {"webhook_deliveries": seen}, ev)
        return Change([record], WebhookResult(Applied.FINISHED, job_id, job["state"], reason))
    assert outcome is not None  # (looked up for a live job before the commit)
    if job["state"] == State.QUEUED:
        # between attempts: queued -> succeeded is no transition. A finished response: the
        # next attempt, now, resumes it, finds it ended (a free GET) and finishes the job.
        # A failed one: the next attempt starts afresh, after the backoff already set
        changes: JobChanges = {"webhook_deliveries": seen, "updated_at": now}
        if outcome.ok:
            reason = f"{what}: the provider job finished; the job runs now to collect it"
            changes["run_after"] = now
        else:
            reason = f"{what}: the provider job failed; the next attempt starts afresh"
        ev = queue._event(EventType.WEBHOOK, job, "system", now, detail={"reason": reason}, worker=worker)
        record = queue._upd(job_id, changes, ev)
        return Change([record], WebhookResult(Applied.APPLIED, job_id, State.QUEUED, reason))
    note = queue._event(
        EventType.WEBHOOK,
        job,
        "system",
        now,
        detail={"reason": f"{what}: finishing the job without waiting for the next poll"},
        worker=worker,
    )
    if outcome.ok:
        if doc is None:  # (queued when it was read, leased since: the next delivery or poll finishes it)
            raise WebhookNotReady("the job was leased again meanwhile; deliver it again later")
        lease = queue.taken_over(job, worker)
        record = queue._success_record(job, lease, doc.ref, now, doc.doc, reused=doc.reused)
        state_after = State.SUCCEEDED
        reason = f"{what}: the job succeeded"
    else:
        if outcome.error_class is None:
            outcome = Outcome.failure(ErrorClass.RETRYABLE, outcome.message)
        record = queue._failure_record(job, outcome, now, "system", worker)
        state_after = State(record["set"].get("state", job["state"]))
        reason = f"{what}: the attempt failed; the job is {state_after}"
    record["set"]["webhook_deliveries"] = seen
    record["ev"].insert(0, note)
    return Change([record], WebhookResult(Applied.APPLIED, job_id, str(state_after), reason))
