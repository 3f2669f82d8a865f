"""providers.setup: one function builds the runtime's providers and flow control."""

from __future__ import annotations

from desktop_queue.core import FakeClock
from desktop_queue.core.flow import WAITING_CONCURRENCY
from desktop_queue.providers.openai_compat import OpenAIResponsesProvider
from desktop_queue.providers.setup import ProfileConfig, apply, build


def test_build_defaults_keep_demo_and_configure_openai() -> None:
    providers, flow = build(None, FakeClock())
    assert {"demo", "openai.chat", "openai.responses", "openai.image", "openai.speech"} <= set(providers)
    assert flow.profiles() == ["openai"]
    assert flow.snapshot("openai")["concurrency_cap"] is None


def test_build_uses_the_first_profile_and_its_limits() -> None:
    config = ProfileConfig(base_url="http://127.0.0.1:9/v1", model="m", rpm=30, tpm=1000, concurrency=1)
    providers, flow = build([config], FakeClock(), plugins=False)
    responses = providers["openai.responses"]
    assert isinstance(responses, OpenAIResponsesProvider)
    assert responses.profile.base_url == "http://127.0.0.1:9/v1" and responses.profile.model == "m"
    assert responses.rate_limit_listener == flow.observe_rate_limit
    snap = flow.snapshot("openai")
    assert snap["requests_budget"] == 30 and snap["tokens_budget"] == 1000 and snap["concurrency_cap"] == 1
    job = {"id": "a", "kind": "openai.chat", "input": {"prompt": "hi"}}
    assert flow.accept(job)
    flow.on_start(job)
    assert flow.waiting_reason({"id": "b", "kind": "openai.chat", "state": "queued"}) == WAITING_CONCURRENCY


def test_apply_changes_endpoint_and_limits_of_running_providers() -> None:
    providers, flow = build([ProfileConfig(model="old")], FakeClock(), plugins=False)
    apply(providers, flow, ProfileConfig(base_url="http://127.0.0.1:9/v1", model="new", concurrency=2))
    assert providers["openai.chat"].profile.model == "new"  # type: ignore[attr-defined]
    assert flow.snapshot("openai")["concurrency_cap"] == 2
