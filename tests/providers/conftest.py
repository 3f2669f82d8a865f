"""Fixtures for the provider tests: the fake OpenAI server, canary secrets, an isolated keyring."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import keyring
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fakeserver import FakeOpenAI  # noqa: E402
from provider_helpers import CANARY_KEY, MemoryKeyring  # noqa: E402

from desktop_queue.core import FakeClock, Queue  # noqa: E402
from desktop_queue.providers.openai_compat import OpenAIProfile  # noqa: E402


@pytest.fixture(autouse=True)
def memory_keyring(monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryKeyring]:
    """An empty in-memory keyring and no key or base URL in the environment."""
    previous = keyring.get_keyring()
    ring = MemoryKeyring()
    keyring.set_keyring(ring)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    yield ring
    keyring.set_keyring(previous)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI(api_key=CANARY_KEY)
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def profile(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> OpenAIProfile:
    """A profile for the fake server; the canary key comes from OPENAI_API_KEY."""
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    return OpenAIProfile(
        base_url=server.url, model="test-model", timeout_s=2.0, connect_timeout_s=1.0,
        poll_initial_s=0.005, poll_max_s=0.02, poll_growth=2.0, max_poll_s=10.0,
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_queue(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., Queue]]:
    opened: list[Queue] = []

    def _open(providers: dict[str, Any], **kwargs: Any) -> Queue:
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("rng", random.Random(7))
        kwargs.setdefault("background_compaction", False)
        queue = Queue.open(tmp_path / "data", providers, **kwargs)
        opened.append(queue)
        return queue

    yield _open
    for queue in opened:
        if not queue.store._closed:
            queue.close()
