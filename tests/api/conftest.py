"""Fixtures for the local API tests: a real uvicorn server on 127.0.0.1, a real HTTP client.

The ``openai.responses`` jobs run against the fake OpenAI server of the provider tests
(also a real HTTP server on 127.0.0.1); the keyring is an in-memory one.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "providers"))
sys.path.insert(0, str(Path(__file__).parent))

from api_helpers import PROFILE, SECRET, Client, Env  # noqa: E402
from fakeserver import FakeOpenAI  # noqa: E402
from provider_helpers import CANARY_KEY, memory_keyring  # noqa: E402, F401  (fixture)

from desktop_queue.api.server import ApiServer, webhooks_for  # noqa: E402
from desktop_queue.api.token import load_or_create_token  # noqa: E402
from desktop_queue.core import Queue  # noqa: E402
from desktop_queue.providers.demo import DemoProvider  # noqa: E402
from desktop_queue.providers.openai_compat import OpenAIProfile, make_providers  # noqa: E402
from desktop_queue.providers.profiles import ProfileSet, store_webhook_secret  # noqa: E402
from desktop_queue.providers.setup import ProfileConfig  # noqa: E402


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    """The fake OpenAI server; a background response completes only when a test says so."""
    server = FakeOpenAI(api_key=CANARY_KEY, polls_to_complete=1_000_000)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def env(tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, memory_keyring: Any) -> Iterator[Env]:
    """The API of a fresh data dir on an ephemeral port, with webhook intake for profile ``openai``."""
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    profile = OpenAIProfile(
        base_url=fake.url,
        model="test-model",
        timeout_s=5.0,
        connect_timeout_s=2.0,
        poll_initial_s=0.005,
        poll_max_s=0.02,
        max_poll_s=30.0,
    )
    providers: dict[str, Any] = {"demo": DemoProvider(), **make_providers(profile)}
    queue = Queue.open(tmp_path / "data", providers, background_compaction=False)
    profiles = ProfileSet((ProfileConfig(name=PROFILE, base_url=fake.url),), PROFILE)
    store_webhook_secret(PROFILE, SECRET)
    token = load_or_create_token()
    server = ApiServer(queue, token, 0, webhooks_for(queue, profiles))
    server.start()
    try:
        yield Env(queue, server, Client(server.port, token), fake, token, providers)
    finally:
        server.stop()
        for provider in providers.values():
            close = getattr(provider, "close", None)
            if callable(close):
                close()
        queue.close()


@pytest.fixture
def responses_job(env: Env) -> Callable[[], tuple[Any, str]]:
    """Makes a running ``openai.responses`` job whose background response exists at the fake
    server and is recorded as its provider job: returns (lease, response id)."""

    def make() -> tuple[Any, str]:
        job = env.queue.submit("openai.responses", {"input": f"write a haiku {time.monotonic_ns()}"}).job
        lease = env.queue.lease("poller", kinds={"openai.responses"})
        assert lease is not None and lease.job_id == job.id
        client = env.providers["openai.responses"].client()
        created = client.responses.create(model="test-model", input="write a haiku", background=True)
        env.queue.record_provider_job(lease, created.id)
        return lease, created.id

    return make
