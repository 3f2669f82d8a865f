"""A real OpenAI-compatible HTTP server on 127.0.0.1 for the provider tests.

Not a mock: the ``openai`` SDK talks to it over TCP. Behaviour is scripted per
route with :class:`Action` entries (a 429 with ``Retry-After``, bursts of 500, slow
answers, a connection dropped after the request was read); without a script each
route answers like the real API. Every request is recorded (method, path, headers,
body) and in-flight requests are counted.

Routes: ``chat`` (POST /v1/chat/completions), ``responses.create`` (POST
/v1/responses), ``responses.get`` (GET /v1/responses/{id}), ``responses.cancel``
(POST /v1/responses/{id}/cancel), ``images`` (POST /v1/images/generations),
``speech`` (POST /v1/audio/speech), ``models`` (GET /v1/models), and ``files``
(GET /files/{name}: where image answers given as a URL point, like OpenAI's
signed image links; no API key needed).
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PNG_BYTES = b"\x89PNG\r\n\x1a\n" + b"fake-image-data" * 4
AUDIO_BYTES = b"ID3" + b"fake-audio-frames" * 8


@dataclass
class Action:
    """One scripted answer.

    Attributes:
        status: HTTP status (None: answer normally after ``delay_s``).
        body: JSON body for a scripted status.
        headers: extra response headers.
        delay_s: wait this long before answering (released early when the server stops).
        drop: read the request, then close the connection without any answer.
        echo: put the request's Authorization header and body into the error message
            (like a provider that quotes what it got), to prove redaction.
        raw: send these bytes as the body instead of ``body`` as JSON (a plain-text or
            HTML error page, an image file).
        content_type: the Content-Type of ``raw``.
    """

    status: int | None = None
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    drop: bool = False
    echo: bool = False
    raw: bytes | None = None
    content_type: str = "text/plain; charset=utf-8"

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "error",
        code: str | None = None,
        *,
        headers: dict[str, str] | None = None,
        echo: bool = False,
    ) -> Action:
        body = {"error": {"message": message, "type": code or "error", "code": code, "param": None}}
        return cls(status=status, body=body, headers=headers or {}, echo=echo)

    @classmethod
    def text(cls, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> Action:
        """A non-JSON answer (a Go server's "404 page not found", a proxy's HTML page)."""
        return cls(status=status, raw=text.encode(), content_type=content_type)


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    route: str
    headers: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)  # when the request was read (monotonic)


class FakeOpenAI:
    """The scripted server.

    Args:
        api_key: the only key accepted (None: any key).
        polls_to_complete: GETs of a background response before it is ``completed``.
    """

    def __init__(self, api_key: str | None = None, polls_to_complete: int = 2) -> None:
        self.api_key = api_key
        self.polls_to_complete = polls_to_complete
        self.requests: list[Recorded] = []
        self.scripts: dict[str, deque[Action]] = {}
        self.responses: dict[str, dict[str, Any]] = {}
        self.created = 0
        self.by_idempotency_key: dict[str, str] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.default_delay_s = 0.0
        #: (monotonic deadline, status): until then every API request answers ``status``
        #: with no Retry-After header (a 429 storm, a 500 outage), like a busy gateway
        self.outage: tuple[float, int] | None = None
        self.usage_tokens: int | None = None
        self.rate_headers: dict[str, str] = {}
        #: how ``images`` answers: ``b64``, ``url`` (a link to ``files``), or ``auto``: base64
        #: when asked for (``response_format="b64_json"``) or from a ``gpt-image`` model,
        #: else a link, as OpenAI's image API does
        self.image_answer = "auto"
        #: request parameters refused with 400 "Unrecognized request argument", like
        #: servers that do not know them
        self.refused_params: set[str] = set()
        self.files: dict[str, bytes] = {}
        #: a chat request with ``"stream": true`` is answered with these pieces of text as
        #: server-sent events, one event each
        self.stream_chunks: list[str] = ["generated", " streamed", " text"]
        #: when set, the server sends the first piece, then waits for this event before
        #: the rest (so a test can look at what a client shows mid-stream)
        self.stream_gate: threading.Event | None = None
        #: close the connection after the first piece, without ending the stream
        self.stream_break = False
        self.lock = threading.Lock()
        self.release = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()

    # ------------------------------------------------------------------ control

    def start(self, port: int = 0) -> str:
        """Starts serving (on an ephemeral port, or ``port`` to come back where a stopped
        server was); returns the base URL (``.../v1``)."""
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self.release.clear()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-openai", daemon=True
        )
        self._thread.start()
        return self.url

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def port(self) -> int:
        assert self._httpd is not None
        return int(self._httpd.server_address[1])

    def stop(self) -> None:
        """Stops like a real server going down: no new connections, open ones closed.

        Handler threads are daemons that ``server_close`` does not wait for, so without
        closing their sockets a stopped server would go on answering every client that
        still holds a keep-alive connection.
        """
        self.release.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)
        with self.lock:
            connections, self._connections = set(self._connections), set()
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the client

    def push(self, route: str, *actions: Action) -> None:
        """Queues scripted answers for ``route`` (consumed one per request, in order)."""
        with self.lock:
            self.scripts.setdefault(route, deque()).extend(actions)

    def count(self, route: str | None = None) -> int:
        with self.lock:
            return sum(1 for r in self.requests if route is None or r.route == route)

    def of(self, route: str) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.route == route]

    def finish(self, response_id: str, status: str = "completed", error: dict[str, Any] | None = None) -> None:
        """Forces a background response into a final state."""
        with self.lock:
            self.responses[response_id]["status"] = status
            if error is not None:
                self.responses[response_id]["error"] = error

    # ------------------------------------------------------------------ behaviour

    def _next_action(self, route: str) -> Action | None:
        with self.lock:
            script = self.scripts.get(route)
            return script.popleft() if script else None

    def answer(
        self, route: str, method: str, path: str, headers: dict[str, str], body: Any
    ) -> tuple[int, dict[str, str], bytes]:
        """The default (unscripted) answer of ``route``."""
        if route == "files":  # signed links: no API key, like a storage service
            name = path.split("?")[0].rsplit("/", 1)[-1]
            with self.lock:
                data = self.files.get(name)
            if data is None:
                return 404, {"Content-Type": "text/plain"}, b"no such file"
            return 200, {"Content-Type": "image/png"}, data
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            sent = headers.get("authorization", "")
            return _json(
                401,
                {
                    "error": {
                        "message": f"Incorrect API key provided: {sent[7:]}.",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                        "param": None,
                    }
                },
            )
        refused = sorted(p for p in self.refused_params if isinstance(body, dict) and p in body)
        if refused:
            return _json(
                400,
                {
                    "error": {
                        "message": f"Unrecognized request argument supplied: {refused[0]}",
                        "type": "invalid_request_error",
                        "code": None,
                        "param": refused[0],
                    }
                },
            )
        extra = dict(self.rate_headers)
        if route == "chat":
            prompt_tokens = len(json.dumps(body.get("messages", ""))) // 4
            total = self.usage_tokens if self.usage_tokens is not None else prompt_tokens + 5
            doc = {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": 1,
                "model": body.get("model"),
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "generated text"}}
                ],
                "usage": {"prompt_tokens": total - 5, "completion_tokens": 5, "total_tokens": total},
            }
            return _json(200, doc, extra)
        if route == "responses.create":
            key = headers.get("idempotency-key")
            with self.lock:
                if key and key in self.by_idempotency_key:
                    return _json(200, self.responses[self.by_idempotency_key[key]], extra)
                self.created += 1
                response_id = f"resp_{self.created:04d}"
                doc = _response_doc(response_id, "queued", body.get("model"))
                doc["_polls_left"] = self.polls_to_complete
                self.responses[response_id] = doc
                if key:
                    self.by_idempotency_key[key] = response_id
                return _json(200, _public(doc), extra)
        if route in ("responses.get", "responses.cancel"):
            response_id = path.split("/")[3]
            with self.lock:
                doc = self.responses.get(response_id)
                if doc is None:
                    return _json(
                        404,
                        {
                            "error": {
                                "message": "No response found",
                                "type": "invalid_request_error",
                                "code": None,
                                "param": None,
                            }
                        },
                    )
                if route == "responses.cancel":
                    if doc["status"] in ("queued", "in_progress"):
                        doc["status"] = "cancelled"
                elif doc["status"] in ("queued", "in_progress"):
                    doc["_polls_left"] -= 1
                    doc["status"] = "in_progress"
                    if doc["_polls_left"] <= 0:
                        doc["status"] = "completed"
                if doc["status"] == "completed" and not doc["output"]:
                    doc["output"] = [
                        {
                            "type": "message",
                            "id": "msg_1",
                            "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": "background text", "annotations": []}],
                        }
                    ]
                    doc["usage"] = {
                        "input_tokens": 10,
                        "output_tokens": 20,
                        "total_tokens": 30,
                        "input_tokens_details": {"cached_tokens": 0},
                        "output_tokens_details": {"reasoning_tokens": 0},
                    }
                return _json(200, _public(doc))
        if route == "images":
            answer = self.image_answer
            if answer == "auto":
                wants_b64 = body.get("response_format") == "b64_json" or str(body.get("model", "")).startswith(
                    "gpt-image"
                )
                answer = "b64" if wants_b64 else "url"
            if answer == "b64":
                return _json(200, {"created": 1, "data": [{"b64_json": base64.b64encode(PNG_BYTES).decode()}]}, extra)
            with self.lock:
                name = f"img-{len(self.files) + 1}.png"
                self.files[name] = PNG_BYTES
            link = f"http://127.0.0.1:{self.port}/files/{name}?se=2030-01-01&sig=SIGNATURE-secret-0123456789"
            return _json(200, {"created": 1, "data": [{"url": link}]}, extra)
        if route == "speech":
            return 200, {"Content-Type": "audio/mpeg", **extra}, AUDIO_BYTES
        if route == "models":
            return _json(
                200,
                {
                    "object": "list",
                    "data": [
                        {"id": "model-a", "object": "model", "created": 1, "owned_by": "t"},
                        {"id": "model-b", "object": "model", "created": 1, "owned_by": "t"},
                    ],
                },
            )
        return _json(404, {"error": {"message": f"no route {method} {path}", "type": "not_found", "code": None}})


def _response_doc(response_id: str, status: str, model: str | None) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1,
        "status": status,
        "model": model or "m",
        "output": [],
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "background": True,
        "usage": None,
    }


def _public(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if not k.startswith("_")}


def _json(status: int, doc: Any, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(doc).encode()


def _route(method: str, path: str) -> str:
    parts = path.split("?")[0].rstrip("/").split("/")
    tail = "/".join(parts[2:])  # after /v1
    if method == "POST" and tail == "chat/completions":
        return "chat"
    if method == "POST" and tail == "responses":
        return "responses.create"
    if tail.startswith("responses/") and tail.endswith("/cancel") and method == "POST":
        return "responses.cancel"
    if tail.startswith("responses/") and method == "GET":
        return "responses.get"
    if method == "POST" and tail == "images/generations":
        return "images"
    if method == "POST" and tail == "audio/speech":
        return "speech"
    if method == "GET" and tail == "models":
        return "models"
    if method == "GET" and path.startswith("/files/"):
        return "files"
    return "unknown"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_fake: FakeOpenAI

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        return

    def setup(self) -> None:
        super().setup()
        with self.server_fake.lock:
            self.server_fake._connections.add(self.connection)

    def finish(self) -> None:
        with self.server_fake.lock:
            self.server_fake._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass  # the socket was shut down by stop()

    def _handle(self, method: str) -> None:
        fake = self.server_fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        headers = {k.lower(): v for k, v in self.headers.items()}
        route = _route(method, self.path)
        with fake.lock:
            fake.requests.append(Recorded(method, self.path, route, headers, body))
            fake.in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
        try:
            action = fake._next_action(route)
            outage = fake.outage
            if action is None and outage is not None and route != "files" and time.monotonic() < outage[0]:
                action = Action.error(
                    outage[1],
                    "rate limit reached" if outage[1] == 429 else "server error",
                    "rate_limit_exceeded" if outage[1] == 429 else "server_error",
                )
            delay = action.delay_s if action is not None else fake.default_delay_s
            if delay:
                fake.release.wait(delay)
            if action is not None and action.drop:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if action is not None and action.status is not None and action.raw is not None:
                status, out_headers, payload = (
                    action.status,
                    {"Content-Type": action.content_type, **action.headers},
                    action.raw,
                )
            elif action is not None and action.status is not None:
                doc = action.body
                if action.echo and isinstance(doc, dict):
                    doc = json.loads(json.dumps(doc))
                    doc["error"]["message"] += f" (auth: {headers.get('authorization')}; request: {json.dumps(body)})"
                status, out_headers, payload = _json(action.status, doc, action.headers)
            else:
                status, out_headers, payload = fake.answer(route, method, self.path, headers, body)
                out_headers.update(action.headers if action is not None else {})
                if route == "chat" and status == 200 and isinstance(body, dict) and body.get("stream") is True:
                    self._stream_chat(body, out_headers)
                    return
            try:
                self.send_response(status)
                for name, value in out_headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:  # the client gave up (timed out) before the answer
                self.close_connection = True
        finally:
            with fake.lock:
                fake.in_flight -= 1

    def _stream_chat(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        """Answers a streamed chat completion as OpenAI does: ``data: {chunk}`` events, then ``[DONE]``."""
        fake = self.server_fake
        with fake.lock:
            number = len(fake.requests)
        base = {"id": f"chatcmpl-{number}", "object": "chat.completion.chunk", "created": 1, "model": body.get("model")}

        def event(doc: Any) -> bytes:
            return b"data: " + json.dumps(doc).encode() + b"\n\n"

        def delta(content: str | None, finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": {"content": content} if content is not None else {}, "finish_reason": finish}
            return event({**base, "choices": [choice]})

        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            for name, value in headers.items():
                if name.lower() != "content-type":
                    self.send_header(name, value)
            self.end_headers()
            self.wfile.write(
                event({**base, "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]})
            )
            for i, piece in enumerate(fake.stream_chunks):
                self.wfile.write(delta(piece))
                self.wfile.flush()
                if i == 0 and fake.stream_break:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if i == 0 and fake.stream_gate is not None:
                    fake.stream_gate.wait(10)
            self.wfile.write(delta(None, "stop"))
            if (body.get("stream_options") or {}).get("include_usage"):
                usage = {
                    "prompt_tokens": 7,
                    "completion_tokens": len(fake.stream_chunks),
                    "total_tokens": 7 + len(fake.stream_chunks),
                }
                self.wfile.write(event({**base, "choices": [], "usage": usage}))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:  # the client went away mid-stream
            pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")
