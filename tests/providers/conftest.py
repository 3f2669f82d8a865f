"""Fixtures for the provider tests: the fake OpenAI server, canary secrets, an isolated keyring."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fakeserver import FakeOpenAI  # noqa: E402
from provider_helpers import CANARY_KEY, memory_keyring, server  # noqa: E402, F401  (fixtures)

from desktop_queue.core import FakeClock, Queue  # noqa: E402
from desktop_queue.providers.openai_compat import OpenAIProfile  # noqa: E402


@pytest.fixture
def profile(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> OpenAIProfile:
    """A profile for the fake server; the canary key comes from OPENAI_API_KEY."""
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    return OpenAIProfile(
        base_url=server.url,
        model="test-model",
        timeout_s=2.0,
        connect_timeout_s=1.0,
        poll_initial_s=0.005,
        poll_max_s=0.02,
        poll_growth=2.0,
        max_poll_s=10.0,
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_queue(tmp_path: Path, clock: FakeClock, opened_queues: list[Queue]) -> Callable[..., Queue]:
    """Opens queues with these providers (fake clock, seeded rng); closes them all at teardown."""

    def _open(providers: dict[str, Any], **kwargs: Any) -> Queue:
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("rng", random.Random(7))
        kwargs.setdefault("background_compaction", False)
        queue = Queue.open(tmp_path / "data", providers, **kwargs)
        opened_queues.append(queue)
        return queue

    return _open
