"""The OpenAI-compatible providers against a real HTTP server on 127.0.0.1 (no mocked transport)."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keyring.backends.fail
import pytest
from fakeserver import AUDIO_BYTES, PNG_BYTES, Action, FakeOpenAI
from provider_helpers import CANARY_KEY, CANARY_PROMPT, JobView, MemoryKeyring, context_for, step

from desktop_queue.core import ErrorClass, FakeClock, Queue, RunContext, State
from desktop_queue.core.flow import BreakerState, FlowControl, ProfileLimits
from desktop_queue.providers import discover
from desktop_queue.providers.openai_compat import (
    KeyringUnavailable,
    OpenAIChatProvider,
    OpenAIProfile,
    OpenAIResponsesProvider,
    make_providers,
    parse_duration,
    rate_limit_info,
    resolve_api_key,
    retry_after_from_headers,
    store_api_key,
)

CHAT = {"messages": [{"role": "user", "content": "write a haiku about queues"}], "max_tokens": 20}


def ctx(key: str = "key-1", **kwargs: Any) -> RunContext:
    return RunContext(job_id="job-1", attempt=1, idempotency_key=key, **kwargs)


def no_canary(text: str) -> None:
    assert CANARY_KEY not in text
    assert CANARY_KEY[:12] not in text
    assert CANARY_PROMPT not in text
    assert "purple walrus" not in text


# ---------------------------------------------------------------------- chat, driven directly


def test_chat_returns_text_and_usage_with_the_idempotency_key(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    outcome = OpenAIChatProvider(profile).run(JobView(CHAT), ctx("the-job-key"))
    assert outcome.ok, outcome
    assert outcome.result["text"] == "generated text"
    assert outcome.result["usage"]["total_tokens"] > 0
    (request,) = server.requests
    assert request.headers["idempotency-key"] == "the-job-key"
    assert request.headers["authorization"] == f"Bearer {CANARY_KEY}"
    assert request.body["max_tokens"] == 20 and request.body["model"] == "test-model"


def test_401_is_fatal_after_one_request_and_the_message_hides_key_and_prompt(
    server: FakeOpenAI, profile: OpenAIProfile
) -> None:
    server.push("chat", Action.error(401, "Incorrect API key provided", "invalid_api_key", echo=True))
    outcome = OpenAIChatProvider(profile).run(JobView({"prompt": CANARY_PROMPT}), ctx())
    assert outcome.error_class is ErrorClass.FATAL and outcome.status == 401
    assert server.count() == 1  # the SDK's own retries are off
    assert "HTTP 401" in outcome.message
    no_canary(outcome.message)


def test_429_is_throttled_with_retry_after(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.push("chat", Action.error(429, "Rate limit reached", "rate_limit_exceeded", headers={"Retry-After": "2"}))
    server.push("chat", Action.error(429, "Rate limit reached", headers={"retry-after-ms": "1500", "Retry-After": "9"}))
    server.push(
        "chat",
        Action.error(
            429,
            "Rate limit reached",
            headers={
                "x-ratelimit-remaining-requests": "5",
                "x-ratelimit-remaining-tokens": "0",
                "x-ratelimit-reset-requests": "1s",
                "x-ratelimit-reset-tokens": "6m0s",
            },
        ),
    )
    provider = OpenAIChatProvider(profile)
    outcomes = [provider.run(JobView(CHAT), ctx()) for _ in range(3)]
    assert all(o.error_class is ErrorClass.THROTTLED and o.status == 429 for o in outcomes)
    assert [o.retry_after for o in outcomes] == [2.0, 1.5, 360.0]


def test_exhausted_quota_is_fatal_not_throttled(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.push("chat", Action.error(429, "You exceeded your current quota", "insufficient_quota"))
    outcome = OpenAIChatProvider(profile).run(JobView(CHAT), ctx())
    assert outcome.error_class is ErrorClass.FATAL and "quota" in outcome.message


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (Action.error(500, "boom"), ErrorClass.RETRYABLE),
        (Action.error(502, "bad gateway"), ErrorClass.RETRYABLE),
        (Action.error(503, "overloaded"), ErrorClass.RETRYABLE),
        (Action.error(408, "timeout"), ErrorClass.RETRYABLE),
        (Action.error(409, "conflict"), ErrorClass.RETRYABLE),
        (Action.error(400, "bad request"), ErrorClass.FATAL),
        (Action.error(403, "forbidden"), ErrorClass.FATAL),
        (Action.error(404, "no such model"), ErrorClass.FATAL),
        (Action.error(422, "unprocessable"), ErrorClass.FATAL),
        (Action(drop=True), ErrorClass.RETRYABLE),
    ],
)
def test_classification_by_status(
    server: FakeOpenAI, profile: OpenAIProfile, action: Action, expected: ErrorClass
) -> None:
    server.push("chat", action)
    outcome = OpenAIChatProvider(profile).run(JobView(CHAT), ctx())
    assert outcome.error_class is expected, outcome
    assert server.count() == 1


def test_a_slow_response_times_out_as_retryable(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.push("chat", Action(delay_s=5.0))
    fast = OpenAIProfile(base_url=server.url, model="m", timeout_s=0.2, connect_timeout_s=0.2)
    outcome = OpenAIChatProvider(fast).run(JobView(CHAT), ctx())
    assert outcome.error_class is ErrorClass.RETRYABLE
    assert outcome.message == "openai.chat: no answer within 0.2 s (profile timeout)"


def test_a_response_without_text_is_poison(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.push(
        "chat",
        Action(status=200, body={"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": []}),
    )
    assert OpenAIChatProvider(profile).run(JobView(CHAT), ctx()).error_class is ErrorClass.POISON


def test_header_parsers() -> None:
    assert parse_duration("6m0s") == 360.0
    assert parse_duration("20ms") == pytest.approx(0.02)
    assert parse_duration("1h2m3.5s") == pytest.approx(3723.5)
    assert parse_duration("2.5") == 2.5
    assert parse_duration("soon") is None
    assert retry_after_from_headers({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=lambda: 1445412480.0) == 10.0
    info = rate_limit_info(
        {
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "2s",
            "x-ratelimit-remaining-tokens": "100",
            "x-ratelimit-reset-tokens": "30s",
        }
    )
    assert info is not None and info.remaining_requests == 0 and info.reset_s == 2.0
    assert rate_limit_info({}) is None


# ---------------------------------------------------------------------- keys


def test_the_keyring_key_is_preferred_to_the_environment(
    server: FakeOpenAI, memory_keyring: MemoryKeyring, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong-environment-key-000")
    store_api_key("openai", CANARY_KEY)
    assert memory_keyring.store[("desktop-queue", "openai")] == CANARY_KEY
    found = resolve_api_key("openai")
    assert found.source == "keyring" and CANARY_KEY not in repr(found)
    outcome = OpenAIChatProvider(OpenAIProfile(base_url=server.url)).run(JobView(CHAT), ctx())
    assert outcome.ok


def test_without_a_keyring_the_environment_is_used_and_saving_refuses(
    server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyring.set_keyring(keyring.backends.fail.Keyring())
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    found = resolve_api_key("openai")
    assert found.source == "environment" and found.notice and "keyring" in found.notice
    with pytest.raises(KeyringUnavailable, match="DESKTOP_QUEUE_API_KEY_OPENAI"):
        store_api_key("openai", CANARY_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)  # the base URL from the environment too
    assert OpenAIChatProvider().run(JobView(CHAT), ctx()).ok


def test_without_a_keyring_a_profile_that_needs_no_key_warns_of_nothing(
    server: FakeOpenAI, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyring.set_keyring(keyring.backends.fail.Keyring())
    found = resolve_api_key("local")
    # (no OPENAI_API_KEY either: the notice must not say it is used)
    assert found.source == "none" and found.notice == "no usable OS keyring (NoKeyringError)"
    with caplog.at_level("WARNING", logger="desktop_queue.providers.openai_compat"):
        OpenAIChatProvider(OpenAIProfile(name="local", base_url=server.url, require_key=False)).client()
    assert caplog.records == []
    # a profile that needs one still says why it has none, and where the key came from
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    with caplog.at_level("WARNING", logger="desktop_queue.providers.openai_compat"):
        OpenAIChatProvider(OpenAIProfile(base_url=server.url)).client()
    assert [r.getMessage() for r in caplog.records] == [
        "profile openai: no usable OS keyring (NoKeyringError); using the OPENAI_API_KEY environment variable"
    ]


def test_a_key_put_in_the_profiles_own_variable_is_not_warned_of_at_every_start(
    server: FakeOpenAI, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a keyring, every `work` started with a WARNING about the variable the person
    had set on purpose; it is an INFO line now (the OPENAI_API_KEY fallback still warns)."""
    keyring.set_keyring(keyring.backends.fail.Keyring())
    monkeypatch.setenv("DESKTOP_QUEUE_API_KEY_PROXY", CANARY_KEY)
    with caplog.at_level("INFO", logger="desktop_queue.providers.openai_compat"):
        OpenAIChatProvider(OpenAIProfile(name="proxy", base_url=server.url)).client()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "INFO",
            "profile proxy: no usable OS keyring (NoKeyringError); "
            "using the DESKTOP_QUEUE_API_KEY_PROXY environment variable",
        )
    ]


def test_no_key_at_all_waits_without_a_request_and_never_dead_letters(server: FakeOpenAI) -> None:
    outcome = OpenAIChatProvider(OpenAIProfile(base_url=server.url)).run(JobView(CHAT), ctx())
    assert outcome.error_class is ErrorClass.RETRYABLE, outcome
    assert outcome.message == (
        "no API key for profile openai: enter it in Preferences → Providers or set OPENAI_API_KEY"
    )
    assert server.count() == 0


def test_test_connection_lists_models_or_reports_a_redacted_error(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    assert OpenAIChatProvider(profile).test_connection() == ["model-a", "model-b"]
    bad = OpenAIChatProvider(profile, api_key="sk-not-the-right-key-12345")
    with pytest.raises(Exception) as info:
        bad.test_connection()
    assert "HTTP 401" in str(info.value) and "sk-not-the-right-key-12345" not in str(info.value)


def test_the_openai_kinds_are_discovered_through_entry_points() -> None:
    kinds = discover()
    assert {"demo", "openai.chat", "openai.responses", "openai.image", "openai.speech"} <= set(kinds)


# ---------------------------------------------------------------------- artifacts


def test_image_and_speech_return_their_bytes_named_by_key(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    providers = make_providers(profile)
    image = providers["openai.image"].run(JobView({"prompt": "a red fox"}), ctx("img-key"))
    assert image.ok and base64.b64decode(image.result["artifact_b64"]) == PNG_BYTES
    assert image.result["artifact_name"] == "img-key.png" and image.result["mime"] == "image/png"
    speech = providers["openai.speech"].run(JobView({"input": "hello there", "format": "wav"}), ctx("tts-key"))
    assert speech.ok and base64.b64decode(speech.result["artifact_b64"]) == AUDIO_BYTES
    assert speech.result["artifact_name"] == "tts-key.wav"
    assert [r.headers["idempotency-key"] for r in server.requests] == ["img-key", "tts-key"]
    assert server.of("speech")[0].body["response_format"] == "wav"


# ---------------------------------------------------------------------- responses (background)


def test_responses_creates_once_records_the_id_before_polling_and_finishes(
    server: FakeOpenAI, profile: OpenAIProfile
) -> None:
    server.polls_to_complete = 3
    seen_at_record: list[tuple[str, int, int]] = []

    def record(pid: str) -> None:
        seen_at_record.append((pid, server.count("responses.create"), server.count("responses.get")))

    beats = []
    context = ctx("bg-key", record_provider_job=record, heartbeat=lambda: beats.append(1) or True)
    outcome = OpenAIResponsesProvider(profile).run(JobView({"input": "long essay"}, kind="openai.responses"), context)
    assert outcome.ok, outcome
    assert outcome.result["text"] == "background text" and outcome.result["provider_job_id"] == "resp_0001"
    assert seen_at_record == [("resp_0001", 1, 0)]  # recorded before the first poll
    assert server.count("responses.create") == 1 and server.count("responses.get") == 3
    assert len(beats) == 3  # a heartbeat per poll
    assert server.of("responses.create")[0].body["background"] is True
    assert {r.headers["idempotency-key"] for r in server.requests} == {"bg-key"}


def test_responses_resumes_a_recorded_provider_job_without_creating(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    provider = OpenAIResponsesProvider(profile)
    lost = provider.run(JobView({"input": "x"}), ctx("k", heartbeat=lambda: False))  # the lease was lost
    assert not lost.ok and "lease lost" in lost.message
    assert server.count("responses.create") == 1 and server.count("responses.cancel") == 0
    outcome = provider.run(JobView({"input": "x"}), ctx("k", provider_job_id="resp_0001"))
    assert outcome.ok and outcome.result["provider_job_id"] == "resp_0001"
    assert server.count("responses.create") == 1


def test_cancel_during_polling_calls_the_cancel_endpoint(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.polls_to_complete = 1000
    cancelled = threading.Event()
    polls = 0

    def beat() -> bool:
        nonlocal polls
        polls += 1
        if polls == 2:
            cancelled.set()  # the user pressed Cancel while it was being generated
        return True

    outcome = OpenAIResponsesProvider(profile).run(JobView({"input": "x"}), ctx(cancelled=cancelled, heartbeat=beat))
    assert not outcome.ok and "cancelled" in outcome.message
    assert server.count("responses.cancel") == 1
    assert server.responses["resp_0001"]["status"] == "cancelled"


def test_lookup_reports_finished_running_failed_and_unknown(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    provider = OpenAIResponsesProvider(profile)
    server.polls_to_complete = 1000
    context = ctx(cancelled=threading.Event(), record_provider_job=lambda pid: context.cancelled.set())
    provider.run(JobView({"input": "x"}), context)  # creates resp_0001, then stops
    job = JobView({"input": "x"}, provider_job_id="resp_0002")
    server.responses["resp_0002"] = dict(
        server.responses["resp_0001"], id="resp_0002", status="in_progress", _polls_left=1000
    )
    assert provider.lookup(job).status == "running"
    server.finish("resp_0002", "completed")
    server.responses["resp_0002"]["output"] = [
        {
            "type": "message",
            "id": "m",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "done", "annotations": []}],
        }
    ]
    found = provider.lookup(job)
    assert found.status == "finished" and found.result["text"] == "done"
    server.finish("resp_0002", "failed", {"code": "server_error", "message": "the model crashed"})
    failed = provider.lookup(job)
    assert failed.status == "failed" and failed.outcome is not None
    assert failed.outcome.error_class is ErrorClass.RETRYABLE
    assert provider.lookup(JobView({"input": "x"}, provider_job_id="resp_9999")).status == "unknown"
    assert provider.lookup(JobView({"input": "x"})).status == "unknown"
    assert OpenAIChatProvider(profile).lookup(job).status == "unknown"


def test_a_transient_poll_error_does_not_end_the_attempt(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.polls_to_complete = 2
    server.push("responses.get", Action.error(502, "bad gateway"), Action(drop=True))
    outcome = OpenAIResponsesProvider(profile).run(JobView({"input": "x"}), ctx())
    assert outcome.ok and server.count("responses.create") == 1


# ---------------------------------------------------------------------- through a Queue (in-process loop)


def test_queue_401_is_dead_after_one_request_and_nothing_leaks(
    server: FakeOpenAI, profile: OpenAIProfile, open_queue: Callable[..., Queue], tmp_path: Path
) -> None:
    providers = make_providers(profile)
    queue = open_queue(providers)
    server.push("chat", Action.error(401, "Incorrect API key provided", "invalid_api_key", echo=True))
    job = queue.submit("openai.chat", {"prompt": CANARY_PROMPT}).job
    step(queue, providers)
    dead = queue.get(job.id)
    assert dead.state == State.DEAD and dead.attempts == 1 and server.count() == 1
    assert dead.last_error is not None and dead.last_error["class"] == "fatal"
    timeline = json.dumps([e.__dict__ for e in dead.events]) + json.dumps(dead.last_error)
    no_canary(timeline)
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            assert CANARY_KEY.encode() not in path.read_bytes(), path


def test_queue_429_waits_for_retry_after_slows_other_jobs_and_spends_no_attempt(
    server: FakeOpenAI, profile: OpenAIProfile, open_queue: Callable[..., Queue], clock: FakeClock
) -> None:
    providers = make_providers(profile)
    queue = open_queue(providers)
    flow = FlowControl({"openai": ProfileLimits(rpm=600)}, clock=clock)
    server.push("chat", Action.error(429, "Rate limit reached", headers={"Retry-After": "2"}))
    # interactive: a background job would wait for the whole rate (tests/flow/test_degradation.py)
    first = queue.submit("openai.chat", {"prompt": "first job"}, max_attempts=1, priority="interactive").job
    other = queue.submit("openai.chat", {"prompt": "other job"}, priority="interactive").job
    _lease, outcome = step(queue, providers, flow)  # type: ignore[misc]
    assert outcome.error_class is ErrorClass.THROTTLED and outcome.retry_after == 2.0
    throttled = queue.get(first.id)
    assert throttled.state == State.QUEUED and throttled.attempts == 0
    assert throttled.run_after == pytest.approx(clock.now() + 2.0)
    # the whole profile waits, not only the throttled job
    raw_other = queue.raw_jobs({other.id})[0] | {"input": {"prompt": "other job"}}
    assert flow.waiting_reason(raw_other) == "waiting: rate limit (~2 s)"
    clock.advance(1.9)
    assert step(queue, providers, flow) is None
    assert server.count() == 1
    clock.advance(0.1)
    while step(queue, providers, flow) is not None:
        pass
    done = queue.get(first.id)
    assert done.state == State.SUCCEEDED and done.attempts == 1  # max_attempts=1 and still fine
    assert queue.get(other.id).state == State.SUCCEEDED
    assert flow.snapshot("openai")["scale"] == 0.5  # the shared limit was lowered
    keys = [r.headers["idempotency-key"] for r in server.of("chat")]
    assert keys.count(first.idempotency_key) == 2


def test_queue_same_idempotency_key_on_every_retry(
    server: FakeOpenAI, profile: OpenAIProfile, open_queue: Callable[..., Queue], clock: FakeClock
) -> None:
    providers = make_providers(profile)
    queue = open_queue(providers)
    server.push("chat", Action.error(500, "boom"), Action(drop=True), Action.error(503, "overloaded"))
    job = queue.submit("openai.chat", CHAT, max_attempts=5).job
    for _ in range(20):
        step(queue, providers)
        clock.advance(61)
    final = queue.get(job.id)
    assert final.state == State.SUCCEEDED and final.attempts == 4
    assert [r.headers["idempotency-key"] for r in server.requests] == [job.idempotency_key] * 4


def test_queue_500_burst_opens_the_breaker_without_spending_attempts(
    server: FakeOpenAI, profile: OpenAIProfile, open_queue: Callable[..., Queue], clock: FakeClock
) -> None:
    providers = make_providers(profile)
    queue = open_queue(providers)
    flow = FlowControl({"openai": ProfileLimits(breaker_threshold=5, breaker_cooldown_s=30)}, clock=clock)
    server.push("chat", *[Action.error(500, "down") for _ in range(5)])
    jobs = [queue.submit("openai.chat", {"prompt": f"job number {n}"}, max_attempts=3).job for n in range(8)]
    for _ in range(5):
        step(queue, providers, flow)
    assert flow.breaker_state("openai") is BreakerState.OPEN
    assert server.count() == 5
    clock.advance(10)  # every backoff has passed, but the breaker holds them all
    assert step(queue, providers, flow) is None
    untouched = [queue.get(j.id) for j in jobs[5:]]
    assert all(j.attempts == 0 and j.state == State.QUEUED for j in untouched)
    raw = queue.raw_jobs({jobs[6].id})[0] | {"input": {"prompt": "job number 6"}}
    assert flow.waiting_reason(raw) == "background jobs paused: openai is failing"
    assert flow.waiting_reason(raw | {"priority": "interactive"}) == "waiting: provider unavailable"
    clock.advance(20)  # cool-down over: exactly one probe, which succeeds
    assert step(queue, providers, flow) is not None
    assert flow.breaker_state("openai") is BreakerState.CLOSED
    assert server.count() == 6
    for _ in range(40):
        step(queue, providers, flow)
        clock.advance(5)
    assert all(queue.get(j.id).state == State.SUCCEEDED for j in jobs)
    assert all(queue.get(j.id).attempts <= 2 for j in jobs)


def test_queue_concurrency_never_exceeds_the_profile_limit(
    server: FakeOpenAI, profile: OpenAIProfile, open_queue: Callable[..., Queue], clock: FakeClock
) -> None:
    providers = make_providers(profile)
    queue = open_queue(providers)
    flow = FlowControl({"openai": ProfileLimits(concurrency=2)}, clock=clock)
    server.default_delay_s = 0.05
    for n in range(8):
        queue.submit("openai.chat", {"prompt": f"concurrent job {n}"})
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            idle = 0
            while idle < 200 and not queue.is_idle():
                if step(queue, providers, flow) is None:
                    idle += 1
                    threading.Event().wait(0.005)  # another thread holds the slot: look again shortly
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not errors
    assert queue.counts()["succeeded"] == 8
    assert server.max_in_flight == 2


def test_queue_tpm_admits_at_the_budget_pace(
    server: FakeOpenAI, profile: OpenAIProfile, open_queue: Callable[..., Queue], clock: FakeClock
) -> None:
    providers = make_providers(profile)
    queue = open_queue(providers)
    flow = FlowControl({"openai": ProfileLimits(tpm=1000)}, clock=clock)
    payload = {"messages": [{"role": "user", "content": "x" * 400}], "max_tokens": 196}  # estimate: 300 tokens
    for n in range(20):
        queue.submit("openai.chat", payload, key=f"tpm-{n}")
    server.usage_tokens = 280  # what the server reports each used
    started: list[float] = []
    for _ in range(600):
        result = step(queue, providers, flow)
        if result is not None:
            started.append(clock.monotonic())
            continue
        if queue.is_idle():
            break
        clock.advance(1)
    assert len(started) == 20
    for t in started:
        assert sum(280 for u in started if t <= u < t + 60) <= 1000
    minutes = (started[-1] - started[0]) / 60
    assert minutes >= (20 * 280 - 1000) / 1000 * 0.9  # the pace of the budget, not faster


def test_queue_reconciliation_resumes_the_same_background_response(
    server: FakeOpenAI, profile: OpenAIProfile, open_queue: Callable[..., Queue], tmp_path: Path
) -> None:
    """In-process stand-in for a crash: the attempt dies after recording the provider job."""
    server.polls_to_complete = 2
    providers = make_providers(profile)
    queue = open_queue(providers)
    job = queue.submit("openai.responses", {"input": "a long report"}).job
    lease = queue.lease("doomed-worker")
    assert lease is not None
    context = context_for(queue, lease, cancelled=threading.Event())
    # the worker "dies" right after the id is committed (no cancel call: the process is gone)
    dying = OpenAIResponsesProvider(profile)
    original = context.record_provider_job
    context.record_provider_job = lambda pid: (original(pid), context.cancelled.set())
    dying._cancel = lambda *a: None  # type: ignore[method-assign,assignment]  # a dead process sends nothing
    dying.run(lease.job, context)
    queue.close()
    assert server.count("responses.create") == 1
    reopened = open_queue(providers)
    assert [r.decision for r in reopened.reconciled] == ["resumed"]
    resumed = reopened.get(job.id)
    assert resumed.state == State.QUEUED and resumed.provider_job_id == "resp_0001"
    step(reopened, providers)
    done = reopened.get(job.id)
    assert done.state == State.SUCCEEDED
    assert reopened.results.get(done.idempotency_key)["result"]["provider_job_id"] == "resp_0001"
    assert server.count("responses.create") == 1  # never paid for twice
