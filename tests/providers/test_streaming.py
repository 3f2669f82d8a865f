"""``openai.chat`` with ``"stream": true``: partial text as it arrives, only the final result stored (issue 11)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fakeserver import FakeOpenAI
from provider_helpers import JobView

from desktop_queue.core import ErrorClass, RunContext
from desktop_queue.core.errors import InvalidInput
from desktop_queue.providers.openai_compat import OpenAIChatProvider, OpenAIProfile

STREAMED = {"messages": [{"role": "user", "content": "tell me a story"}], "stream": True}


def test_a_streamed_answer_shows_its_text_so_far_and_returns_the_whole(
    server: FakeOpenAI, profile: OpenAIProfile
) -> None:
    server.stream_chunks = ["Once", " upon", " a time."]
    seen: list[str] = []
    context = RunContext(job_id="j", attempt=1, idempotency_key="k-stream", partial=seen.append)

    outcome = OpenAIChatProvider(profile).run(JobView(STREAMED), context)

    assert outcome.ok, outcome
    assert seen == ["Once", "Once upon", "Once upon a time."]
    assert outcome.result["text"] == "Once upon a time."
    assert outcome.result["finish_reason"] == "stop" and outcome.result["streamed"] is True
    assert outcome.result["usage"]["prompt_tokens"] == 7 and outcome.result["usage"]["completion_tokens"] == 3
    assert outcome.result["model"] == "test-model"
    (request,) = server.requests
    assert request.body["stream"] is True and request.body["stream_options"] == {"include_usage": True}
    assert request.headers["idempotency-key"] == "k-stream"


def test_the_partial_text_arrives_before_the_answer_is_complete(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.stream_gate = threading.Event()
    first = threading.Event()
    seen: list[str] = []

    def partial(text: str) -> None:
        seen.append(text)
        first.set()

    results: list[Any] = []
    context = RunContext(job_id="j", attempt=1, idempotency_key="k", partial=partial)
    worker = threading.Thread(
        target=lambda: results.append(OpenAIChatProvider(profile).run(JobView(STREAMED), context))
    )
    worker.start()
    try:
        assert first.wait(10)
        assert seen == ["generated"] and not results  # mid-stream: shown, not finished
    finally:
        server.stream_gate.set()
        worker.join(10)
    assert results and results[0].ok and results[0].result["text"] == "generated streamed text"


def test_a_stream_that_breaks_off_is_a_retryable_failure(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.stream_break = True
    seen: list[str] = []

    outcome = OpenAIChatProvider(profile).run(
        JobView(STREAMED), RunContext(job_id="j", attempt=1, idempotency_key="k", partial=seen.append)
    )

    assert not outcome.ok and outcome.error_class is ErrorClass.RETRYABLE
    assert seen == ["generated"]


def test_a_cancelled_stream_stops(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    context = RunContext(job_id="j", attempt=1, idempotency_key="k")
    context.partial = lambda _text: context.cancelled.set()

    outcome = OpenAIChatProvider(profile).run(JobView(STREAMED), context)

    assert not outcome.ok and "cancelled while streaming" in outcome.message


def test_a_failing_watcher_never_stops_the_paid_call(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    def broken(_text: str) -> None:
        raise RuntimeError("the window went away")

    outcome = OpenAIChatProvider(profile).run(
        JobView(STREAMED), RunContext(job_id="j", attempt=1, idempotency_key="k", partial=broken)
    )

    assert outcome.ok and outcome.result["text"] == "generated streamed text"


def test_stream_must_be_a_boolean(profile: OpenAIProfile) -> None:
    with pytest.raises(InvalidInput, match='"stream" must be true or false'):
        OpenAIChatProvider(profile).validate({"prompt": "x", "stream": "yes"})
