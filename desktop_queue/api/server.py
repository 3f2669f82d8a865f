"""Runs the local API with uvicorn on 127.0.0.1: in the foreground (``serve``) or on a thread (the window).

The listening socket is bound here, before uvicorn starts, so that a port in use is a
clear error in the caller and port 0 (any free port) is known at once.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Mapping
from typing import Any

import uvicorn

from desktop_queue.api import DEFAULT_PORT, HOST
from desktop_queue.api.app import Webhooks, create_app
from desktop_queue.core.ledger import SpendLedger, usage_of
from desktop_queue.core.model import Job
from desktop_queue.core.outcome import LookupResult
from desktop_queue.core.queue import Queue
from desktop_queue.core.records import JobDict
from desktop_queue.core.webhooks import RESPONSES_KIND

#: how long stopping waits for requests in flight
STOP_TIMEOUT_S = 10.0


class ApiServerError(OSError):
    """The API cannot listen (the port is taken, or not allowed)."""


def webhooks_for(queue: Queue, profiles: Any) -> Webhooks:
    """Webhook intake for the provider profiles ``profiles`` (a ``ProfileSet``).

    Secrets come from the keyring at each delivery, so a secret set while the server
    runs applies at once.
    """
    from desktop_queue.providers.profiles import webhook_secret

    def secret(profile: str) -> str | None:
        if profiles.get(profile) is None and profile != profiles.default_name():
            return None
        return webhook_secret(profile)

    def lookup(job: Job) -> LookupResult:
        provider = queue.providers.get(job.kind)
        ask = getattr(provider, "lookup", None) if provider is not None else None
        if not callable(ask):
            return LookupResult(LookupResult.UNKNOWN)
        found: LookupResult = ask(job)
        return found

    def profile_of(job: JobDict) -> str | None:
        name: str | None = profiles.profile_of(job["kind"], job.get("input"))
        return name

    ledger = SpendLedger(queue.data_dir, queue.clock)

    def spent(profile: str, job_id: str) -> None:
        # the attempt that polled this response ends without the usage when the webhook
        # finished the job first: the webhook records what the response used instead
        job = queue.get(job_id)
        stored = queue.results.get(job.idempotency_key)
        result = stored.get("result") if stored is not None else None
        if not isinstance(result, Mapping):
            return
        text = job.input.get("input") if isinstance(job.input, Mapping) else None
        used = usage_of(job.kind, result, input_chars=len(text) if isinstance(text, str) else None)
        if used.is_empty():
            return
        config = profiles.get(profile)
        ledger.record(
            profile=profile,
            model=str(result.get("model") or ""),
            kind=job.kind,
            usage=used,
            job_id=job.id,
            attempt=job.attempts,
            local=bool(config is not None and config.is_local()),
        )

    return Webhooks(secret=secret, lookup=lookup, profile_of=profile_of, spent=spent)


class _Server(uvicorn.Server):
    """uvicorn's server, telling a waiting thread when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()


class ApiServer:
    """The API of ``queue`` on ``127.0.0.1:port`` (0: any free port).

    Args:
        queue: the open queue.
        token: the bearer token requests must carry.
        port: the TCP port.
        webhooks: webhook intake (None: none).

    Raises:
        ApiServerError: the port cannot be bound.
    """

    def __init__(self, queue: Queue, token: str, port: int = DEFAULT_PORT, webhooks: Webhooks | None = None) -> None:
        self.app = create_app(queue, token, webhooks)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind((HOST, port))
            # listening at once: a client that connects before uvicorn runs waits in the backlog
            self._socket.listen(2048)
        except OSError as exc:
            self._socket.close()
            raise ApiServerError(f"cannot listen on {HOST}:{port}: {exc.strerror or exc}") from None
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off", log_config=None)
        self._server = _Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def run(self) -> None:
        """Serves in this thread until stopped (Ctrl+C in the foreground, or :meth:`stop`)."""
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self._socket.close()
            self._server.ready.set()  # (a server that failed to start wakes its starter too)

    def start(self, timeout_s: float = 10.0) -> None:
        """Serves on a daemon thread; returns once it accepts connections.

        Raises:
            ApiServerError: it did not start within ``timeout_s``.
        """
        # uvicorn skips signal handlers off the main thread: the window's thread keeps its own
        self._thread = threading.Thread(target=self.run, name="desktop-queue-api", daemon=True)
        self._thread.start()
        if not self._server.ready.wait(timeout_s) or not self._server.started:
            self.stop()
            raise ApiServerError(f"the API did not start on {self.url} within {timeout_s:g} s")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stops serving (requests in flight finish first, up to ``timeout_s``)."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self._server.force_exit = True
                self._thread.join(timeout_s)
            self._thread = None
        else:
            self._socket.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


__all__ = ["DEFAULT_PORT", "HOST", "RESPONSES_KIND", "ApiServer", "ApiServerError", "webhooks_for"]
