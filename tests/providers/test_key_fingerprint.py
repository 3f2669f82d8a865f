"""A 401 records which key was refused (a fingerprint, never the key); the replay preview reads it.

Real HTTP: a fake OpenAI server on 127.0.0.1 that accepts one key; keys come from an
in-memory keyring (``memory_keyring``), changed between the 401 and the preview as a
person would in Preferences.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeOpenAI
from provider_helpers import CANARY_PROMPT, MemoryKeyring, step

from desktop_queue.core import Queue
from desktop_queue.core.model import State
from desktop_queue.core.preview import Level, preview_replay
from desktop_queue.providers.openai_compat import KEYRING_SERVICE, key_fingerprint, make_providers
from desktop_queue.providers.setup import ProfileConfig, profile_providers

GOOD_KEY = "sk-good-0b1c2d3e4f5a6b7c8d9e0f1a2b3c"
OLD_KEY = "sk-revoked-9e8d7c6b5a4f3e2d1c0b9a8f"
NEW_KEY = "sk-rotated-1a2b3c4d5e6f7a8b9c0d1e2f"


@pytest.fixture
def strict() -> Any:
    fake = FakeOpenAI(api_key=GOOD_KEY)
    fake.start()
    yield fake
    fake.stop()


def findings(preview: Any) -> list[tuple[str, str]]:
    return [(str(f.level), f.text) for f in preview.findings]


def test_the_fingerprint_is_short_stable_and_not_the_key() -> None:
    fp = key_fingerprint(OLD_KEY)
    assert len(fp) == 8 and int(fp, 16) >= 0
    assert fp == key_fingerprint(OLD_KEY) and fp != key_fingerprint(NEW_KEY)
    assert fp not in OLD_KEY and OLD_KEY[:8] != fp


def test_a_401_records_the_refused_keys_fingerprint_and_the_preview_compares_it(
    strict: FakeOpenAI,
    memory_keyring: MemoryKeyring,
    open_queue: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    memory_keyring.set_password(KEYRING_SERVICE, "lab", OLD_KEY)
    configs = [
        ProfileConfig(name="main", base_url=strict.url, model="m"),
        ProfileConfig(name="lab", base_url=strict.url, model="m"),
    ]
    providers = profile_providers(configs, None)
    queue: Queue = open_queue(providers)
    job = queue.submit("openai.chat", {"prompt": CANARY_PROMPT, "profile": "lab"}, max_attempts=1).job
    assert step(queue, providers) is not None
    dead = queue.get(job.id)
    assert dead.state == State.DEAD and dead.last_error is not None
    assert dead.last_error["status"] == 401
    assert dead.last_error.get("key_fp") == key_fingerprint(OLD_KEY)

    # the key itself is nowhere in the data dir, nor in the logs; nor is its fingerprint in an event
    queue.store.compact_now()
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert OLD_KEY.encode() not in data, path
    assert OLD_KEY not in caplog.text
    assert all(key_fingerprint(OLD_KEY) not in str(e.detail) for e in dead.events)

    # the key is unchanged: the preview says it will fail the same way, naming the profile
    fresh = profile_providers(configs, None)  # (another process: the CLI's dry run)
    same = preview_replay(dead, fresh)
    assert same.verdict is Level.FAIL
    assert any(
        level == "fail" and "profile lab is unchanged since the 401" in text for level, text in findings(same)
    ), findings(same)

    # a new key in the keyring: the preview says so, and nothing stands in the way
    memory_keyring.set_password(KEYRING_SERVICE, "lab", NEW_KEY)
    changed = preview_replay(dead, profile_providers(configs, None))
    assert changed.verdict is Level.OK, findings(changed)
    assert any("key of profile lab has changed since" in text for _, text in findings(changed))
    assert queue.counts()["queued"] == 0  # previews queue nothing


def test_a_running_provider_reports_the_key_it_holds_until_preferences_change_it(
    strict: FakeOpenAI, memory_keyring: MemoryKeyring, open_queue: Any
) -> None:
    memory_keyring.set_password(KEYRING_SERVICE, "openai", OLD_KEY)
    config = ProfileConfig(name="openai", base_url=strict.url, model="m")
    providers = make_providers(config.openai_profile())
    queue: Queue = open_queue(providers)
    job = queue.submit("openai.chat", {"prompt": "hello"}, max_attempts=1).job
    step(queue, providers)
    dead = queue.get(job.id)
    assert dead.last_error is not None and dead.last_error.get("key_fp") == key_fingerprint(OLD_KEY)
    # the key changed in the keyring behind this window's back: its provider still sends the old one
    memory_keyring.set_password(KEYRING_SERVICE, "openai", NEW_KEY)
    assert preview_replay(dead, providers).verdict is Level.FAIL
    # Preferences' OK reconfigures the provider: the next attempt looks the key up again
    providers["openai.chat"].reconfigure(config.openai_profile())
    assert providers["openai.chat"].key_fingerprint() == key_fingerprint(NEW_KEY)
    assert preview_replay(dead, providers).verdict is Level.OK
    # and with the new key it does work against the server that accepts it
    memory_keyring.set_password(KEYRING_SERVICE, "openai", GOOD_KEY)
    providers["openai.chat"].reconfigure(config.openai_profile())
    again = queue.replay(job.id)
    step(queue, providers)
    assert queue.get(again.id).state == State.SUCCEEDED


def test_a_server_error_records_no_fingerprint(
    server: FakeOpenAI, memory_keyring: MemoryKeyring, open_queue: Any
) -> None:
    from fakeserver import Action

    memory_keyring.set_password(KEYRING_SERVICE, "openai", OLD_KEY)
    providers = make_providers(ProfileConfig(name="openai", base_url=server.url, model="m").openai_profile())
    queue: Queue = open_queue(providers)
    server.push("chat", Action.error(400, "bad request"))
    job = queue.submit("openai.chat", {"prompt": "hello"}, max_attempts=1).job
    step(queue, providers)
    error = queue.get(job.id).last_error
    assert error is not None and error["status"] == 400 and "key_fp" not in error
