"""``openai.image``: asked for as base64, a URL answer downloaded in the same attempt.

Against the fake server on 127.0.0.1, which answers like OpenAI's image API: base64
when asked for (or from a ``gpt-image`` model), else a signed link to ``/files/...``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from fakeserver import PNG_BYTES, Action, FakeOpenAI
from provider_helpers import CANARY_KEY, JobView, step

from desktop_queue.core import ErrorClass, Queue, RunContext, State
from desktop_queue.providers.openai_compat import OpenAIImageProvider, OpenAIProfile, make_providers

JPEG_BYTES = b"\xff\xd8\xff\xe0" + b"fake-jpeg" * 4


def ctx(key: str = "img-key", **kwargs: Any) -> RunContext:
    return RunContext(job_id="job-1", attempt=1, idempotency_key=key, **kwargs)


def image_provider(profile: OpenAIProfile, model: str = "dall-e-3") -> OpenAIImageProvider:
    provider = make_providers(profile)["openai.image"]
    assert isinstance(provider, OpenAIImageProvider)
    provider.profile = OpenAIProfile(**{**profile.__dict__, "image_model": model})
    return provider


def test_base64_is_asked_for_and_stored(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    outcome = image_provider(profile).run(JobView({"prompt": "a red fox"}), ctx())
    assert outcome.ok, outcome
    assert base64.b64decode(outcome.result["artifact_b64"]) == PNG_BYTES
    assert outcome.result["source"] == "b64" and outcome.result["artifact_name"] == "img-key.png"
    (request,) = server.of("images")
    assert request.body["response_format"] == "b64_json"


def test_gpt_image_models_are_not_sent_the_parameter_they_refuse(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    outcome = image_provider(profile, "gpt-image-1").run(JobView({"prompt": "a red fox"}), ctx())
    assert outcome.ok
    assert "response_format" not in server.of("images")[0].body


def test_a_url_answer_is_downloaded_in_the_same_attempt_without_the_key(
    server: FakeOpenAI, profile: OpenAIProfile
) -> None:
    server.image_answer = "url"
    recorded: list[str] = []
    outcome = image_provider(profile).run(JobView({"prompt": "a red fox"}), ctx(record_provider_job=recorded.append))
    assert outcome.ok, outcome
    assert base64.b64decode(outcome.result["artifact_b64"]) == PNG_BYTES
    assert outcome.result["source"] == "url" and outcome.result["mime"] == "image/png"
    assert server.count("images") == 1 and server.count("files") == 1
    (download,) = server.of("files")
    assert "authorization" not in download.headers  # the key never goes to the image host
    assert recorded and recorded[0].startswith(f"http://127.0.0.1:{server.port}/files/")


def test_a_server_that_refuses_response_format_is_asked_again_without_it_once(
    server: FakeOpenAI, profile: OpenAIProfile
) -> None:
    server.refused_params = {"response_format"}
    provider = image_provider(profile, "sd-xl")
    first = provider.run(JobView({"prompt": "a red fox"}), ctx())
    assert first.ok, first
    bodies = [r.body for r in server.of("images")]
    assert [("response_format" in b) for b in bodies] == [True, False]
    assert server.count("files") == 1  # that server answered with a link
    # the next job of that model does not ask with the refused parameter again
    assert provider.run(JobView({"prompt": "a grey wolf"}), ctx("other")).ok
    assert [("response_format" in r.body) for r in server.of("images")] == [True, False, False]


def test_a_rejection_for_another_reason_is_not_sent_again(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.push(
        "images", Action.error(400, "Your request was rejected by the safety system", "content_policy_violation")
    )
    outcome = image_provider(profile).run(JobView({"prompt": "a red fox"}), ctx())
    assert outcome.error_class is ErrorClass.FATAL
    assert server.count("images") == 1


def test_a_failed_download_is_retryable_never_poison_and_hides_the_link_signature(
    server: FakeOpenAI, profile: OpenAIProfile
) -> None:
    server.image_answer = "url"
    server.push("files", Action.text(503, "busy"))
    outcome = image_provider(profile).run(JobView({"prompt": "a red fox"}), ctx())
    assert outcome.error_class is ErrorClass.RETRYABLE, outcome
    assert outcome.message == f"openai.image: downloading the image from 127.0.0.1:{server.port} failed: HTTP 503"
    assert "SIGNATURE" not in outcome.message


def test_a_link_that_serves_no_image_is_retryable(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.image_answer = "url"
    server.push("files", Action.text(200, "<html>login</html>", "text/html"))
    outcome = image_provider(profile).run(JobView({"prompt": "a red fox"}), ctx())
    assert outcome.error_class is ErrorClass.RETRYABLE
    assert "answered text/html, not an image" in outcome.message


def test_the_download_stays_within_the_attempt_timeout(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.image_answer = "url"
    server.push("files", Action(delay_s=30.0))
    outcome = image_provider(profile).run(JobView({"prompt": "a red fox"}), ctx(timeout_s=0.5))
    assert outcome.error_class is ErrorClass.RETRYABLE
    assert outcome.message.endswith("no answer within 0.5 s (attempt timeout)")


def test_the_next_attempt_fetches_the_recorded_link_instead_of_paying_again(
    server: FakeOpenAI, profile: OpenAIProfile
) -> None:
    server.image_answer = "url"
    server.push("files", Action(drop=True))
    recorded: list[str] = []
    provider = image_provider(profile)
    lost = provider.run(JobView({"prompt": "a red fox"}), ctx(record_provider_job=recorded.append))
    assert lost.error_class is ErrorClass.RETRYABLE
    again = provider.run(JobView({"prompt": "a red fox"}), ctx(provider_job_id=recorded[0]))
    assert again.ok and base64.b64decode(again.result["artifact_b64"]) == PNG_BYTES
    assert server.count("images") == 1 and server.count("files") == 2


def test_an_expired_link_is_generated_again(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    expired = f"http://127.0.0.1:{server.port}/files/gone.png?sig=x"
    outcome = image_provider(profile).run(JobView({"prompt": "a red fox"}), ctx(provider_job_id=expired))
    assert outcome.ok and server.count("images") == 1


def test_lookup_of_an_orphan_with_a_link_fetches_the_image(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.files["made.png"] = PNG_BYTES
    link = f"http://127.0.0.1:{server.port}/files/made.png?sig=abc"
    provider = image_provider(profile)
    found = provider.lookup(JobView({"prompt": "a red fox"}, provider_job_id=link, kind="openai.image"))
    assert found.status == "finished" and base64.b64decode(found.result["artifact_b64"]) == PNG_BYTES
    assert provider.lookup(JobView({"prompt": "x"}, kind="openai.image")).status == "unknown"
    assert server.count("images") == 0


def test_the_file_type_comes_from_the_bytes(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.push(
        "images", Action(status=200, body={"created": 1, "data": [{"b64_json": base64.b64encode(JPEG_BYTES).decode()}]})
    )
    outcome = image_provider(profile).run(JobView({"prompt": "a red fox"}), ctx())
    assert outcome.ok and outcome.result["mime"] == "image/jpeg"
    assert outcome.result["artifact_name"] == "img-key.jpg"


def test_an_answer_with_neither_image_nor_link_is_poison(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.push(
        "images",
        Action(status=200, body={"created": 1, "data": []}),
        Action(status=200, body={"created": 1, "data": [{"b64_json": None, "url": "mock"}]}),
    )  # LiteLLM's mock
    provider = image_provider(profile)
    outcome = provider.run(JobView({"prompt": "a red fox"}), ctx())
    assert (
        outcome.error_class is ErrorClass.POISON and outcome.message == "openai.image: the response had no image data"
    )
    outcome = provider.run(JobView({"prompt": "a red fox"}), ctx())
    assert outcome.error_class is ErrorClass.POISON
    assert outcome.message == "openai.image: the response's image link is not a URL"


def test_through_a_queue_a_url_answer_becomes_the_stored_artifact(
    server: FakeOpenAI, profile: OpenAIProfile, open_queue: Callable[..., Queue]
) -> None:
    server.image_answer = "url"
    providers = make_providers(OpenAIProfile(**{**profile.__dict__, "image_model": "dall-e-3"}))
    queue = open_queue(providers)
    job = queue.submit("openai.image", {"prompt": "a lighthouse at dusk"}, max_attempts=1).job
    ran = step(queue, providers)
    assert ran is not None and ran[1].ok, ran
    done = queue.get(job.id)
    assert done.state == State.SUCCEEDED and done.attempts == 1
    artifact = queue.results.artifact_path(done.idempotency_key)
    assert artifact is not None and artifact.read_bytes() == PNG_BYTES
    assert server.count("images") == 1 and CANARY_KEY not in str(done.provider_job_id)
