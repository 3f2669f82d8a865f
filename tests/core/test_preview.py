"""The replay preview: what will happen, said before anything is queued."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from desktop_queue.core import FakeClock, InvalidInput, Outcome, Queue
from desktop_queue.core.preview import Level, preview_replay, replay_title


@dataclass
class Profile:
    name: str = "openai"


class FakeChat:
    """A provider with a profile, a key check and a validator."""

    kind = "openai.chat"
    version = "1"

    def __init__(self) -> None:
        self.profile = Profile()
        self.missing: str | None = None

    def validate(self, payload: Any) -> None:
        if not isinstance(payload, dict) or not str(payload.get("prompt", "")).strip():
            raise InvalidInput('openai.chat input needs a non-empty "prompt"')

    def unavailable_reason(self) -> str | None:
        return self.missing


class FakeFlow:
    def __init__(self, reason: str | None) -> None:
        self.reason = reason
        self.asked: list[dict[str, Any]] = []

    def waiting_reason(self, job: dict[str, Any]) -> str | None:
        self.asked.append(job)
        return self.reason


def dead_job(queue: Queue, clock: FakeClock, payload: Any, klass: str, status: int | None, message: str) -> Any:
    job = queue.submit("openai.chat", payload, title="Ask about tides", max_attempts=1).job
    lease = queue.lease("w")
    assert lease is not None
    clock.advance(2)
    queue.fail(lease, Outcome.failure(klass, message, status=status))
    return queue.get(job.id)


@pytest.fixture
def chat() -> FakeChat:
    return FakeChat()


@pytest.fixture
def queue(open_queue: Any, chat: FakeChat) -> Queue:
    return open_queue(providers={"openai.chat": chat})


def test_an_auth_error_with_the_same_key_will_fail_again(queue: Queue, clock: FakeClock, chat: FakeChat) -> None:
    job = dead_job(queue, clock, {"prompt": "tides"}, "fatal", 401, "openai: invalid API key")
    preview = preview_replay(job, {"openai.chat": chat})
    assert preview.verdict is Level.FAIL
    assert "fatal HTTP 401 error: openai: invalid API key" in preview.ended
    assert any("refused the API key (HTTP 401)" in f.text and "profile openai" in f.text for f in preview.findings)
    # a fingerprint recorded with the error tells whether the key changed since
    recorded = {**job.last_error, "key_fp": "fp-1"}
    same = preview_replay(_with_error(job, recorded), {"openai.chat": chat}, key_fingerprint=lambda profile: "fp-1")
    assert any("unchanged" in f.text for f in same.findings if f.level is Level.FAIL)
    changed = preview_replay(_with_error(job, recorded), {"openai.chat": chat}, key_fingerprint=lambda p: "fp-2")
    assert changed.verdict is Level.OK
    assert any("has changed since" in f.text for f in changed.findings)
    assert queue.counts()["queued"] == 0  # a preview queues nothing


def test_the_status_is_said_once(queue: Queue, clock: FakeClock, chat: FakeChat) -> None:
    """ "with a fatal HTTP 400 error: openai.chat: HTTP 400: …" (LiteLLM's unknown model)."""
    job = dead_job(queue, clock, {"prompt": "x"}, "fatal", 400, "openai.chat: HTTP 400: Invalid model name")
    preview = preview_replay(job, {"openai.chat": chat})
    assert "with a fatal error: openai.chat: HTTP 400: Invalid model name" in preview.ended


def _with_error(job: Any, error: dict[str, Any]) -> Any:
    import dataclasses

    return dataclasses.replace(job, last_error=error)


def test_an_unconfigured_or_held_profile_waits(queue: Queue, clock: FakeClock, chat: FakeChat) -> None:
    job = dead_job(queue, clock, {"prompt": "tides"}, "retryable", 503, "openai: unavailable")
    chat.missing = "no API key for profile openai"
    flow = FakeFlow("waiting: budget of profile openai reached, $5.00 of $5.00 today")
    preview = preview_replay(job, {"openai.chat": chat}, flow=flow)
    assert preview.verdict is Level.WAIT
    texts = [f.text for f in preview.findings]
    assert "profile openai cannot run jobs now: no API key for profile openai" in texts
    assert any("budget of profile openai reached" in t for t in texts)
    assert any("may well succeed now" in t for t in texts)
    assert flow.asked[0]["input"] == {"prompt": "tides"} and flow.asked[0]["state"] == "queued"
    assert [f.level for f in preview.findings] == sorted(
        (f.level for f in preview.findings), key=[Level.FAIL, Level.WAIT, Level.INFO, Level.OK].index
    )


def test_an_input_still_invalid_is_named_and_an_edit_can_fix_it(queue: Queue, clock: FakeClock, chat: FakeChat) -> None:
    job = dead_job(queue, clock, {"prompt": "tides"}, "fatal", 400, "openai: bad request")
    unchanged = preview_replay(job, {"openai.chat": chat})
    assert any("input is unchanged" in f.text for f in unchanged.findings)
    broken = preview_replay(job, {"openai.chat": chat}, new_input={"prompt": "  "})
    assert any(f.text.startswith("the input is invalid: openai.chat input needs") for f in broken.findings)
    fixed = preview_replay(job, {"openai.chat": chat}, new_input={"prompt": "Tides of the\nNorth Sea"})
    assert fixed.verdict is Level.OK and fixed.edited
    assert fixed.title == "Tides of the"
    doc = fixed.to_json()
    assert doc["dry_run"] and doc["error"]["status"] == 400 and doc["verdict"] == "ok"


def test_no_provider_for_the_kind(queue: Queue, clock: FakeClock, chat: FakeChat) -> None:
    job = dead_job(queue, clock, {"prompt": "tides"}, "poison", None, "invalid output")
    preview = preview_replay(job, {})
    assert preview.verdict is Level.FAIL
    assert "no provider runs 'openai.chat' jobs here" in preview.lines()[3]


def test_a_replay_with_an_edited_prompt_is_named_by_it(queue: Queue, clock: FakeClock, chat: FakeChat) -> None:
    job = dead_job(queue, clock, {"prompt": "tides"}, "fatal", 400, "bad")
    assert replay_title(job) == "Ask about tides (replay)"
    same = queue.replay(job.id, {"prompt": "tides"})
    assert same.title == "Ask about tides (replay)"
    edited = queue.replay(job.id, {"prompt": "Why do spring tides happen?\nExplain simply."})
    assert edited.title == "Why do spring tides happen?"
    assert replay_title(job, {"prompt": "x" * 100}).endswith("…")
