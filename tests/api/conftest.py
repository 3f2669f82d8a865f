"""Fixtures for the local API tests: a real uvicorn server on 127.0.0.1, a real HTTP client.

The ``openai.responses`` jobs run against the fake OpenAI server of the provider tests
(also a real HTTP server on 127.0.0.1); the keyring is an in-memory one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "providers"))

from fakeserver import FakeOpenAI  # noqa: E402
from provider_helpers import CANARY_KEY, memory_keyring  # noqa: E402, F401  (fixture)

from desktop_queue.api.server import ApiServer, webhooks_for  # noqa: E402
from desktop_queue.api.token import load_or_create_token  # noqa: E402
from desktop_queue.core import Queue  # noqa: E402
from desktop_queue.providers.demo import DemoProvider  # noqa: E402
from desktop_queue.providers.openai_compat import OpenAIProfile, make_providers  # noqa: E402
from desktop_queue.providers.profiles import ProfileSet, store_webhook_secret  # noqa: E402
from desktop_queue.providers.setup import ProfileConfig  # noqa: E402

#: a Standard Webhooks secret: ``whsec_`` and base64 of the key bytes
SECRET = "whsec_" + base64.b64encode(b"desktop-queue-test-webhook-key-32b").decode()
PROFILE = "openai"


@dataclass(frozen=True)
class Reply:
    """One HTTP answer."""

    status: int
    body: Any
    headers: dict[str, str]


class Client:
    """A plain HTTP/1.1 client (the standard library's) for the API on ``port``."""

    def __init__(self, port: int, token: str | None) -> None:
        self.port = port
        self.token = token

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        token: str | None | bool = True,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        """Sends one request; ``token=True`` sends the client's token, a string that one, None none."""
        sent = dict(headers or {})
        bearer = self.token if token is True else token
        if isinstance(bearer, str):
            sent["Authorization"] = f"Bearer {bearer}"
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        if data is not None:
            sent.setdefault("Content-Type", "application/json")
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=data, headers=sent)
            response = conn.getresponse()
            payload = response.read()
            found = {k.lower(): v for k, v in response.getheaders()}
        finally:
            conn.close()
        try:
            decoded = json.loads(payload) if payload else None
        except ValueError:
            decoded = payload.decode(errors="replace")
        return Reply(response.status, decoded, found)


def sign(secret: str, delivery_id: str, timestamp: int, body: bytes) -> str:
    """The Standard Webhooks signature (``v1,`` + base64 HMAC-SHA256 of ``id.timestamp.body``)."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{delivery_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def event_body(event_type: str, response_id: str) -> bytes:
    """A webhook body as OpenAI sends one."""
    return json.dumps(
        {
            "id": f"evt_{response_id}",
            "object": "event",
            "created_at": int(time.time()),
            "type": event_type,
            "data": {"id": response_id},
        }
    ).encode()


@dataclass
class Env:
    """A running API and what it serves."""

    queue: Queue
    server: ApiServer
    client: Client
    fake: FakeOpenAI
    token: str
    providers: dict[str, Any]

    def deliver(
        self,
        event_type: str,
        response_id: str,
        delivery_id: str,
        *,
        timestamp: int | None = None,
        secret: str = SECRET,
        body: bytes | None = None,
        profile: str = PROFILE,
    ) -> Reply:
        """Posts a signed webhook delivery (signed with ``secret``, at ``timestamp``: now)."""
        data = body if body is not None else event_body(event_type, response_id)
        ts = int(time.time()) if timestamp is None else timestamp
        headers = {
            "webhook-id": delivery_id,
            "webhook-timestamp": str(ts),
            "webhook-signature": sign(secret, delivery_id, ts, data),
        }
        return self.client.call("POST", f"/webhooks/{profile}", raw=data, token=None, headers=headers)


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
