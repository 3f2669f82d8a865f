"""Helpers shared by the provider tests: canary secrets, job views, an in-process run loop."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import keyring
import pytest
from fakeserver import FakeOpenAI
from keyring.backend import KeyringBackend

from desktop_queue.core import Lease, Outcome, Queue, RunContext
from desktop_queue.core.flow import FlowControl

CANARY_KEY = "sk-canary-7f3a9c1e5b2d4f6a8c0e"
CANARY_PROMPT = "canary prompt: the purple walrus sings at midnight"


class MemoryKeyring(KeyringBackend):
    """A keyring that lives in a dict (the tests never touch the user's real keyring)."""

    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.store: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.store.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.store[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.store.pop((service, username), None)


@dataclass
class JobView:
    """What a provider reads from a job."""

    input: Any
    idempotency_key: str = "key-1"
    id: str = "job-1"
    kind: str = "openai.chat"
    provider_job_id: str | None = None
    total_attempts: int = 1


def context_for(queue: Queue, lease: Lease, **kwargs: Any) -> RunContext:
    """A RunContext wired to ``queue`` the way the lease driver wires it."""

    def beat() -> bool:
        queue.heartbeat(lease)
        return True

    return RunContext(
        job_id=lease.job_id,
        attempt=lease.attempt,
        idempotency_key=lease.job.idempotency_key,
        heartbeat=beat,
        record_provider_job=lambda pid: queue.record_provider_job(lease, pid),
        provider_job_id=lease.job.provider_job_id,
        **kwargs,
    )


def step(queue: Queue, providers: dict[str, Any], flow: FlowControl | None = None) -> tuple[Lease, Outcome] | None:
    """One lease -> run -> complete/fail round, in-process (no LeaseDriver)."""
    lease = queue.lease("test-worker", accept=flow.accept if flow is not None else None)
    if lease is None:
        return None
    if flow is not None:
        flow.on_start(lease.job)
    outcome = providers[lease.job.kind].run(lease.job, context_for(queue, lease))
    if outcome.ok:
        queue.complete(lease, outcome.result)
    else:
        queue.fail(lease, outcome)
    if flow is not None:
        flow.on_outcome(lease.job, outcome)
    return lease, outcome


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
    """The fake OpenAI-compatible server on 127.0.0.1, expecting the canary key."""
    fake = FakeOpenAI(api_key=CANARY_KEY)
    fake.start()
    yield fake
    fake.stop()
