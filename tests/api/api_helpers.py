"""Helpers of the local API tests: a real HTTP client, webhook signing, the test environment.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent / "providers"))

from fakeserver import FakeOpenAI  # noqa: E402

from desktop_queue.api.server import ApiServer  # noqa: E402
from desktop_queue.core import Queue  # noqa: E402

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
