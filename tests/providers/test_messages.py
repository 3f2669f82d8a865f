"""Messages a user can act on: error bodies of any server, 404s that name the path,
a missing key that makes jobs wait, attempt timeouts, profiles that are configuration.

Against the fake server on 127.0.0.1 through the real ``openai`` SDK.
"""

from __future__ import annotations

from typing import Any

import pytest
from fakeserver import Action, FakeOpenAI
from provider_helpers import CANARY_KEY, CANARY_PROMPT, JobView, MemoryKeyring

from desktop_queue.core import ErrorClass, InvalidInput, RunContext
from desktop_queue.providers.openai_compat import (
    MissingApiKey,
    OpenAIChatProvider,
    OpenAIProfile,
    make_providers,
)

CHAT = {"prompt": "write a haiku about queues"}


def ctx(**kwargs: Any) -> RunContext:
    return RunContext(job_id="job-1", attempt=1, idempotency_key="key-1", **kwargs)


def run_chat(profile: OpenAIProfile, payload: Any = None, **kwargs: Any) -> Any:
    return OpenAIChatProvider(profile).run(JobView(payload or CHAT), ctx(**kwargs))


# ---------------------------------------------------------------------- error bodies of non-OpenAI servers


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (
            Action(status=400, body={"detail": "prompt is too long for this model"}),
            "openai.chat: HTTP 400: prompt is too long for this model",
        ),
        (
            Action(status=400, body={"message": "unsupported parameter: logit_bias"}),
            "openai.chat: HTTP 400: unsupported parameter: logit_bias",
        ),
        (
            Action(status=500, body={"error": "model runner has unexpectedly stopped"}),  # Ollama
            "openai.chat: HTTP 500: model runner has unexpectedly stopped",
        ),
        (
            Action(
                status=422,
                body={
                    "detail": [  # FastAPI / pydantic validation
                        {"type": "missing", "loc": ["body", "messages"], "msg": "Field required", "input": {"x": 1}},
                        {
                            "type": "int_parsing",
                            "loc": ["body", "max_tokens"],
                            "msg": "Input should be a valid integer",
                        },
                    ]
                },
            ),
            "openai.chat: HTTP 422: body.messages: Field required; body.max_tokens: Input should be a valid integer",
        ),
        (
            Action(
                status=400,
                body={"error": {"message": "n must be 1", "type": "invalid_request_error", "code": "invalid_value"}},
            ),
            "openai.chat: HTTP 400 invalid_value: n must be 1",
        ),
        (
            Action(
                status=400,
                body={"error": {"message": "Invalid model name", "type": "invalid_request_error", "code": "400"}},
            ),  # LiteLLM repeats the status as code
            "openai.chat: HTTP 400: Invalid model name",
        ),
        (
            Action.text(502, "upstream connect error or disconnect/reset before headers"),
            "openai.chat: HTTP 502: upstream connect error or disconnect/reset before headers",
        ),
        (
            Action.text(
                503,
                "<html><head><title>503 Service Temporarily Unavailable</title></head>"
                "<body><center><h1>503 Service Temporarily Unavailable</h1></center></body></html>",
                "text/html",
            ),
            "openai.chat: HTTP 503: 503 Service Temporarily Unavailable",
        ),
    ],
    ids=["detail", "message", "error-string", "fastapi-list", "openai", "litellm-code", "plain-text", "html"],
)
def test_error_bodies_of_any_server_are_shown(
    server: FakeOpenAI, profile: OpenAIProfile, action: Action, expected: str
) -> None:
    server.push("chat", action)
    outcome = run_chat(profile)
    assert outcome.message == expected


def test_an_error_body_that_quotes_key_and_prompt_is_redacted(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.push("chat", Action(status=400, body={"detail": f"bad prompt {CANARY_PROMPT!r} with key {CANARY_KEY}"}))
    outcome = run_chat(profile, {"prompt": CANARY_PROMPT})
    assert outcome.message.startswith("openai.chat: HTTP 400: bad prompt")
    assert CANARY_KEY not in outcome.message and "walrus" not in outcome.message


# ---------------------------------------------------------------------- 404 names the path


def test_a_404_names_the_method_and_path_and_suggests_v1(server: FakeOpenAI) -> None:
    no_v1 = server.url.removesuffix("/v1")  # a common mistake: the server root
    profile = OpenAIProfile(base_url=no_v1, timeout_s=2.0)
    outcome = OpenAIChatProvider(profile, api_key=CANARY_KEY).run(JobView(CHAT), ctx())
    assert outcome.error_class is ErrorClass.FATAL and outcome.status == 404
    assert outcome.message.startswith("openai.chat: HTTP 404 Not Found at POST /chat/completions")
    assert outcome.message.endswith("— is the base URL right? (it should usually end in /v1)")


def test_a_404_from_a_router_with_v1_in_the_path(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.push("chat", Action(status=404, body={"detail": "Not Found"}))  # FastAPI's (LiteLLM's) router
    outcome = run_chat(profile)
    assert outcome.message == (
        "openai.chat: HTTP 404 Not Found at POST /v1/chat/completions: Not Found"
        " — is the base URL right, and does this server offer this endpoint?"
    )


def test_a_404_that_explains_itself_gets_no_url_hint(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.push("chat", Action.error(404, "The model `gpt-9` does not exist", "model_not_found"))
    outcome = run_chat(profile)
    assert outcome.message == (
        "openai.chat: HTTP 404 Not Found at POST /v1/chat/completions: The model `gpt-9` does not exist"
    )


def test_a_plain_text_404_of_a_go_server(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.push("chat", Action.text(404, "404 page not found\n"))
    outcome = run_chat(profile)
    assert (
        "HTTP 404 Not Found at POST /v1/chat/completions: 404 page not found — is the base URL right" in outcome.message
    )


# ---------------------------------------------------------------------- no API key: wait, never dead-letter


class Ticks:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_unavailable_reason_until_a_key_is_entered_and_looked_up_at_most_every_5_s(
    server: FakeOpenAI, memory_keyring: MemoryKeyring, monkeypatch: pytest.MonkeyPatch
) -> None:
    lookups = []
    real_get = memory_keyring.get_password

    def counting_get(service: str, username: str) -> str | None:
        lookups.append(username)
        return real_get(service, username)

    monkeypatch.setattr(memory_keyring, "get_password", counting_get)
    provider = OpenAIChatProvider(OpenAIProfile(base_url=server.url))
    ticks = Ticks()
    provider._monotonic = ticks
    reason = "no API key for profile openai: enter it in Preferences → Providers or set OPENAI_API_KEY"
    assert provider.unavailable_reason() == reason
    for _ in range(50):  # a scheduler asking on every tick
        assert provider.unavailable_reason() == reason
    assert len(lookups) == 1
    memory_keyring.set_password("desktop-queue", "openai", CANARY_KEY)  # entered in Preferences
    ticks.now += 4.9
    assert provider.unavailable_reason() == reason  # not looked again yet
    ticks.now += 0.2
    assert provider.unavailable_reason() is None
    assert len(lookups) == 2
    outcome = provider.run(JobView(CHAT), ctx())
    assert outcome.ok and server.count() == 1


def test_unavailable_reason_is_none_when_no_key_is_needed_or_one_is_given(server: FakeOpenAI) -> None:
    local = OpenAIProfile(name="ollama", base_url=server.url, require_key=False)
    assert OpenAIChatProvider(local).unavailable_reason() is None
    assert OpenAIChatProvider(OpenAIProfile(base_url=server.url), api_key=CANARY_KEY).unavailable_reason() is None


def test_the_environment_key_counts(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    assert OpenAIChatProvider(OpenAIProfile(base_url=server.url)).unavailable_reason() is None


@pytest.mark.parametrize("kind", ["openai.chat", "openai.responses", "openai.image", "openai.speech"])
def test_run_without_a_key_is_retryable_for_every_kind_and_sends_nothing(server: FakeOpenAI, kind: str) -> None:
    payloads = {
        "openai.chat": CHAT,
        "openai.responses": {"input": "x"},
        "openai.image": {"prompt": "a fox"},
        "openai.speech": {"input": "hello"},
    }
    provider = make_providers(OpenAIProfile(name="work", base_url=server.url))[kind]
    outcome = provider.run(JobView(payloads[kind], kind=kind), ctx())
    assert outcome.error_class is ErrorClass.RETRYABLE and outcome.retry_after == 5.0
    assert outcome.message.startswith("no API key for profile work:")
    assert server.count() == 0


def test_test_connection_without_a_key_still_says_so(server: FakeOpenAI) -> None:
    with pytest.raises(MissingApiKey, match="no API key for profile openai"):
        OpenAIChatProvider(OpenAIProfile(base_url=server.url)).test_connection()


def test_a_placeholder_key_does_not_mangle_the_message(server: FakeOpenAI) -> None:
    """A local server's dummy key ("x") must not cut words such as max_tokens apart."""
    local = OpenAIProfile(base_url=server.url, timeout_s=2.0)
    server.api_key = None
    server.push("chat", Action.error(400, "max_tokens must be at least 1, got 0 (x-request-id: abc)"))
    outcome = OpenAIChatProvider(local, api_key="x").run(
        JobView({"prompt": "hello there", "model": "qwen2.5:7b"}), ctx()
    )
    assert outcome.message == "openai.chat: HTTP 400: max_tokens must be at least 1, got 0 (x-request-id: abc)"


# ---------------------------------------------------------------------- the attempt's timeout


@pytest.mark.parametrize(
    ("kind", "payload", "route"),
    [
        ("openai.chat", CHAT, "chat"),
        ("openai.image", {"prompt": "a fox"}, "images"),
        ("openai.speech", {"input": "hello"}, "speech"),
        ("openai.responses", {"input": "x"}, "responses.create"),
    ],
)
def test_a_hung_call_ends_at_the_attempt_timeout_as_retryable(
    server: FakeOpenAI, profile: OpenAIProfile, kind: str, payload: dict[str, Any], route: str
) -> None:
    server.push(route, Action(delay_s=30.0))  # released when the server stops
    provider = make_providers(profile)[kind]  # the profile says 2 s: the attempt's 0.3 s wins
    outcome = provider.run(JobView(payload, kind=kind), ctx(timeout_s=0.3))
    assert outcome.error_class is ErrorClass.RETRYABLE
    assert outcome.message == f"{kind}: no answer within 0.3 s (attempt timeout)"
    assert server.count(route) == 1


def test_without_an_attempt_timeout_the_profile_timeout_applies(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    server.push("chat", Action(delay_s=30.0))
    quick = OpenAIProfile(base_url=server.url, timeout_s=0.25, connect_timeout_s=0.25)
    outcome = OpenAIChatProvider(quick).run(JobView(CHAT), ctx())
    assert outcome.message == "openai.chat: no answer within 0.25 s (profile timeout)"


def test_an_attempt_timeout_longer_than_the_profile_timeout_lets_a_slow_answer_finish(
    server: FakeOpenAI, profile: OpenAIProfile
) -> None:
    server.push("chat", Action(delay_s=0.4))
    quick = OpenAIProfile(base_url=server.url, timeout_s=0.1, connect_timeout_s=0.1)
    assert OpenAIChatProvider(quick).run(JobView(CHAT), ctx(timeout_s=5.0)).ok


def test_every_kind_declares_its_default_timeout_and_lease() -> None:
    providers = make_providers(OpenAIProfile())
    assert {k: p.default_timeout_s for k, p in providers.items()} == {
        "openai.chat": 600.0,
        "openai.responses": 600.0,
        "openai.image": 600.0,
        "openai.speech": 300.0,
    }
    assert {p.lease_s for p in providers.values()} == {30.0}


# ---------------------------------------------------------------------- profiles are configuration


@pytest.mark.parametrize("kind", ["openai.chat", "openai.responses", "openai.image", "openai.speech"])
def test_validate_refuses_another_profile_in_the_input(kind: str) -> None:
    provider = make_providers(OpenAIProfile(name="openai"))[kind]
    payload = {
        "openai.chat": CHAT,
        "openai.responses": {"input": "x"},
        "openai.image": {"prompt": "a fox"},
        "openai.speech": {"input": "hello"},
    }[kind]
    with pytest.raises(InvalidInput) as info:
        provider.validate({**payload, "profile": "anything"})
    assert str(info.value) == (
        f"unknown profile 'anything': jobs of {kind} run on profile 'openai' "
        "(add one in Preferences → Providers or with desktop-queue profile add)"
    )
    provider.validate({**payload, "profile": "openai"})  # its own profile is fine
    provider.validate(payload)


def test_a_job_naming_another_profile_is_fatal_without_a_request(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    outcome = run_chat(profile, {**CHAT, "profile": "anything"})
    assert outcome.error_class is ErrorClass.FATAL and "unknown profile 'anything'" in outcome.message
    assert server.count() == 0
