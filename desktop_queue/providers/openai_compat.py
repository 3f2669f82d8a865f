"""OpenAI-compatible providers: ``openai.chat``, ``openai.responses``, ``openai.image``, ``openai.speech``.

One module for every service that speaks the OpenAI API: OpenAI itself and the
local servers people run (Ollama, llama.cpp, vLLM, LM Studio). It uses the official
``openai`` SDK with its own retries off (``max_retries=0``): the queue owns retries.

Configuration comes from an :class:`OpenAIProfile` (base URL, default models,
timeouts, polling). The API key comes from the OS keyring (service
``desktop-queue``, user = the profile name) or from ``OPENAI_API_KEY``; the base
URL from the profile or ``OPENAI_BASE_URL``. The key is never logged, stored or
put in a message: every failure text goes through
:func:`desktop_queue.core.redact.redact` with the key as a secret and the job's
input as text to hide.

Every request carries ``Idempotency-Key: <the job's key>``, so providers that
honour it deduplicate on their side too.

Failures are classified per shared/DESIGN.md section 2: timeouts, connection
errors, 408, 409 and 5xx are ``retryable``; 429 is ``throttled`` (honouring
``retry-after-ms``, ``Retry-After`` and ``x-ratelimit-reset-*``); 400, 401, 403,
404, 422 and an exhausted quota are ``fatal``; a response without the expected
output is ``poison`` (the queue dead-letters it after three).

Artifacts (``openai.image``, ``openai.speech``) are returned base64-encoded in the
JSON result (``artifact_b64``, with ``artifact_name`` = idempotency key + extension
and ``mime``); the result store writes them as files next to the JSON result
(``results/ab/<key>.png``) and keeps only ``artifact_ref``, ``artifact_bytes`` and
``mime`` in the stored JSON (see :mod:`desktop_queue.core.results`).
"""

from __future__ import annotations

import base64
import email.utils
import json
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the SDK takes about a second to import: only when a job needs it
    import openai

from desktop_queue.core.errors import InvalidInput
from desktop_queue.core.flow import RateLimitInfo
from desktop_queue.core.model import ErrorClass
from desktop_queue.core.outcome import LookupResult, Outcome, RunContext
from desktop_queue.core.redact import redact

log = logging.getLogger(__name__)


def _sdk() -> Any:
    """The ``openai`` module, imported on first use (keeps start-up and CLI commands fast)."""
    import openai

    return openai

KEYRING_SERVICE = "desktop-queue"
DEFAULT_PROFILE = "openai"
IDEMPOTENCY_HEADER = "Idempotency-Key"

_STATUS_CLASS = {408: ErrorClass.RETRYABLE, 409: ErrorClass.RETRYABLE, 429: ErrorClass.THROTTLED}
_QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "quota_exceeded"})
_RESPONSE_RUNNING = frozenset({"queued", "in_progress"})
_CHAT_OPTIONS = (
    "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed", "response_format",
    "presence_penalty", "frequency_penalty", "reasoning_effort",
)
_RESPONSES_OPTIONS = ("instructions", "max_output_tokens", "temperature", "top_p", "reasoning", "text")
_SPEECH_FORMATS = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac",
                   "wav": "audio/wav", "pcm": "audio/L16"}


# ---------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class OpenAIProfile:
    """One OpenAI-compatible endpoint.

    Attributes:
        name: the profile name (also the keyring user name and the flow-control profile).
        base_url: the API base URL (None: ``OPENAI_BASE_URL``, else the SDK's default).
        model: default chat / responses model.
        image_model: default ``openai.image`` model.
        speech_model: default ``openai.speech`` model.
        voice: default ``openai.speech`` voice.
        timeout_s: read timeout of one request.
        connect_timeout_s: connect timeout of one request.
        require_key: False for local servers that need no key (a placeholder is sent).
        poll_initial_s: first wait between two polls of a background response.
        poll_max_s: the longest wait between two polls.
        poll_growth: each wait is the previous one times this.
        max_poll_s: an attempt stops polling after this long (the next attempt resumes
            the same provider job).
        poll_error_budget: consecutive failed polls tolerated before the attempt gives up.
    """

    name: str = DEFAULT_PROFILE
    base_url: str | None = None
    model: str = "gpt-4o-mini"
    image_model: str = "gpt-image-1"
    speech_model: str = "gpt-4o-mini-tts"
    voice: str = "alloy"
    timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    require_key: bool = True
    poll_initial_s: float = 0.5
    poll_max_s: float = 10.0
    poll_growth: float = 1.6
    max_poll_s: float = 1800.0
    poll_error_budget: int = 5

    def resolved_base_url(self) -> str | None:
        """The profile's base URL, or ``OPENAI_BASE_URL``, or None (the SDK's default)."""
        return self.base_url or os.environ.get("OPENAI_BASE_URL") or None


@dataclass(frozen=True)
class KeyLookup:
    """Where an API key came from.

    Attributes:
        key: the key (never printed: excluded from ``repr``).
        source: ``keyring``, ``environment`` or ``none``.
        notice: what people should know (e.g. no keyring available), or None.
    """

    key: str | None = field(repr=False)
    source: str
    notice: str | None = None


class KeyringUnavailable(RuntimeError):
    """No OS keyring can store the key (there is no plaintext fallback, on purpose)."""


def resolve_api_key(profile: str = DEFAULT_PROFILE) -> KeyLookup:
    """Finds the API key of ``profile``: the OS keyring first, then ``OPENAI_API_KEY``.

    Never reads a key from the task store, settings or a file of ours.
    """
    notice = None
    try:
        import keyring
        import keyring.errors

        key = keyring.get_password(KEYRING_SERVICE, profile)
        if key:
            return KeyLookup(key, "keyring")
    except Exception as exc:  # NoKeyringError, a locked or broken backend: say so, never crash
        notice = (
            f"no usable OS keyring ({type(exc).__name__}); using the OPENAI_API_KEY environment variable"
        )
    env = os.environ.get("OPENAI_API_KEY")
    if env:
        return KeyLookup(env, "environment", notice)
    return KeyLookup(None, "none", notice)


def store_api_key(profile: str, key: str) -> None:
    """Saves ``key`` for ``profile`` in the OS keyring.

    Raises:
        KeyringUnavailable: no keyring backend can store it (the key is not saved anywhere).
    """
    try:
        import keyring

        keyring.set_password(KEYRING_SERVICE, profile, key)
    except Exception as exc:
        raise KeyringUnavailable(
            f"the API key could not be saved: no usable OS keyring ({type(exc).__name__}). "
            "Set OPENAI_API_KEY in the environment instead."
        ) from None


# ---------------------------------------------------------------------- headers and errors


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(value: str | None) -> float | None:
    """Parses OpenAI's reset durations (``"1s"``, ``"6m0s"``, ``"20ms"``, ``"1h2m3.5s"``, ``"2.5"``)."""
    if value is None:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.replace(" ", ""):
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def _header(headers: Mapping[str, str] | Any, name: str) -> str | None:
    try:
        value = headers.get(name)
    except AttributeError:
        return None
    return None if value is None else str(value)


def _int_header(headers: Any, name: str) -> int | None:
    value = _header(headers, name)
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


def rate_limit_info(headers: Any) -> RateLimitInfo | None:
    """The ``x-ratelimit-*`` headers of a response, or None if it had none."""
    rem_req = _int_header(headers, "x-ratelimit-remaining-requests")
    rem_tok = _int_header(headers, "x-ratelimit-remaining-tokens")
    reset_req = parse_duration(_header(headers, "x-ratelimit-reset-requests"))
    reset_tok = parse_duration(_header(headers, "x-ratelimit-reset-tokens"))
    if rem_req is None and rem_tok is None and reset_req is None and reset_tok is None:
        return None
    resets = []
    if rem_req == 0 and reset_req is not None:
        resets.append(reset_req)
    if rem_tok == 0 and reset_tok is not None:
        resets.append(reset_tok)
    if not resets:
        resets = [r for r in (reset_req, reset_tok) if r is not None]
    return RateLimitInfo(rem_req, rem_tok, max(resets) if resets else None)


def retry_after_from_headers(headers: Any, now: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait, from ``retry-after-ms``, ``Retry-After`` (seconds or HTTP date) or ``x-ratelimit-reset-*``."""
    ms = _header(headers, "retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if math.isfinite(value):
                return max(0.0, value)
        except ValueError:
            pass
    plain = _header(headers, "retry-after")
    if plain is not None:
        try:
            value = float(plain)
            if math.isfinite(value):
                return max(0.0, value)
        except ValueError:
            parsed = email.utils.parsedate_tz(plain)
            if parsed is not None:
                return max(0.0, float(email.utils.mktime_tz(parsed)) - now())
    info = rate_limit_info(headers)
    return info.reset_s if info is not None else None


def _status_class(status: int) -> ErrorClass:
    if status in _STATUS_CLASS:
        return _STATUS_CLASS[status]
    return ErrorClass.RETRYABLE if status >= 500 else ErrorClass.FATAL


def _error_body(body: Any) -> tuple[str | None, str | None, str | None]:
    """(code, type, message) of an OpenAI-style error body."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            code, kind, msg = inner.get("code"), inner.get("type"), inner.get("message")
            return (
                str(code) if code is not None else None,
                str(kind) if kind is not None else None,
                str(msg) if msg is not None else None,
            )
        if isinstance(inner, str):
            return None, None, inner
    return None, None, None


def classify_error(
    error: BaseException, *, job_input: Any = None, secrets: tuple[str, ...] = (), what: str = "openai"
) -> Outcome:
    """Turns an SDK (or other) exception into a classified, redacted :class:`Outcome`.

    Args:
        error: what was raised.
        job_input: the job's input; any of its text is removed from the message.
        secrets: strings that must never appear (the API key).
        what: a short prefix for the message (the kind).
    """

    def clean(text: str) -> str:
        return redact(f"{what}: {text}", job_input, secrets=secrets)

    if isinstance(error, _sdk().APITimeoutError):
        return Outcome.failure(ErrorClass.RETRYABLE, clean("the request timed out"))
    if isinstance(error, _sdk().APIConnectionError):
        cause = type(error.__cause__).__name__ if error.__cause__ is not None else "no response"
        return Outcome.failure(ErrorClass.RETRYABLE, clean(f"connection error ({cause})"))
    if isinstance(error, _sdk().APIStatusError):
        status = int(error.status_code)
        code, kind, detail = _error_body(error.body)
        text = f"HTTP {status}" + (f" {code}" if code else "") + (f": {detail}" if detail else "")
        if code in _QUOTA_CODES or kind in _QUOTA_CODES:
            return Outcome.failure(ErrorClass.FATAL, clean(f"quota exhausted ({text})"), status=status)
        error_class = _status_class(status)
        retry_after = retry_after_from_headers(error.response.headers) if status in (429, 503) else None
        return Outcome.failure(error_class, clean(text), status=status, retry_after=retry_after)
    if isinstance(error, _sdk().APIResponseValidationError):
        return Outcome.failure(ErrorClass.POISON, clean("the response did not have the expected shape"))
    if isinstance(error, InvalidInput):
        return Outcome.failure(ErrorClass.FATAL, clean(f"invalid input: {error}"))
    if isinstance(error, (TimeoutError, ConnectionError)):
        return Outcome.failure(ErrorClass.RETRYABLE, clean(type(error).__name__))
    return Outcome.failure(ErrorClass.RETRYABLE, clean(f"unexpected {type(error).__name__}"))


def _usage(usage: Any) -> dict[str, Any] | None:
    if usage is None:
        return None
    dump = usage.model_dump() if hasattr(usage, "model_dump") else dict(usage)
    return {k: v for k, v in dump.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


# ---------------------------------------------------------------------- providers


class _OpenAIBase:
    """What every OpenAI-compatible kind shares: client, key, headers, classification.

    Args:
        profile: the endpoint (default: the ``openai`` profile from the environment).
        api_key: a key to use instead of the keyring / environment (e.g. Preferences'
            "Test connection" before saving).
        rate_limit_listener: called with (profile name, :class:`RateLimitInfo`) for
            every response carrying rate-limit headers (flow control listens).
    """

    kind = "openai"
    version = "1"

    def __init__(
        self,
        profile: OpenAIProfile | None = None,
        *,
        api_key: str | None = None,
        rate_limit_listener: Callable[[str, RateLimitInfo], None] | None = None,
    ) -> None:
        self.profile = profile or OpenAIProfile()
        self._explicit_key = api_key
        self.rate_limit_listener = rate_limit_listener
        self._client_obj: openai.OpenAI | None = None
        self._key: str | None = None
        self._retired_keys: set[str] = set()
        self._lock = threading.Lock()
        self.key_notice: str | None = None

    # -- plumbing

    def _secrets(self) -> tuple[str, ...]:
        keys = set(self._retired_keys)
        if self._key:
            keys.add(self._key)
        return tuple(keys)

    def reconfigure(self, profile: OpenAIProfile) -> None:
        """Uses ``profile`` (and a fresh key lookup) from the next attempt on.

        Attempts already running finish on the old client; their errors still redact
        the old key.
        """
        with self._lock:
            if self._key:
                self._retired_keys.add(self._key)
            self.profile = profile
            self._client_obj = None
            self._key = None

    def client(self) -> openai.OpenAI:
        """The SDK client (created on first use: no keyring access at discovery time).

        Raises:
            InvalidInput: no API key is configured and the profile requires one.
        """
        with self._lock:
            if self._client_obj is not None:
                return self._client_obj
            if self._explicit_key:
                key: str | None = self._explicit_key
            else:
                found = resolve_api_key(self.profile.name)
                key, self.key_notice = found.key, found.notice
                if self.key_notice:
                    log.warning("profile %s: %s", self.profile.name, self.key_notice)
            if not key:
                if self.profile.require_key:
                    raise InvalidInput(
                        f"no API key for profile {self.profile.name!r}: enter it in Preferences "
                        "(saved to the OS keyring) or set OPENAI_API_KEY"
                    )
                key = "no-key-required"
            self._key = key
            self._client_obj = _sdk().OpenAI(
                api_key=key,
                base_url=self.profile.resolved_base_url(),
                max_retries=0,
                timeout=_sdk().Timeout(self.profile.timeout_s, connect=self.profile.connect_timeout_s),
            )
            return self._client_obj

    def close(self) -> None:
        """Closes the HTTP connections (a new client is made on next use)."""
        with self._lock:
            if self._client_obj is not None:
                self._client_obj.close()
                self._client_obj = None

    @staticmethod
    def _headers(key: str) -> dict[str, str]:
        return {IDEMPOTENCY_HEADER: key}

    def _observe(self, headers: Any) -> None:
        if self.rate_limit_listener is None:
            return
        info = rate_limit_info(headers)
        if info is not None:
            try:
                self.rate_limit_listener(self.profile.name, info)
            except Exception:  # a listener must not break an attempt
                log.exception("rate-limit listener failed")

    def _fail(self, error: BaseException, job_input: Any) -> Outcome:
        return classify_error(error, job_input=job_input, secrets=self._secrets(), what=self.kind)

    def _model(self, payload: Mapping[str, Any], default: str) -> str:
        model = payload.get("model")
        return model if isinstance(model, str) and model else default

    # -- the Provider interface

    def classify(self, error: BaseException) -> Outcome:
        """Classifies an exception the attempt did not handle (no input known: key redacted only)."""
        return classify_error(error, secrets=self._secrets(), what=self.kind)

    def lookup(self, job: Any) -> LookupResult:
        """Synchronous kinds cannot be looked up: the outcome of an orphan is unknown."""
        return LookupResult(LookupResult.UNKNOWN)

    def test_connection(self) -> list[str]:
        """Lists the endpoint's models (for Preferences' "Test connection").

        Raises:
            InvalidInput: no key; or a redacted message of what went wrong.
        """
        try:
            return sorted(m.id for m in self.client().models.list())
        except InvalidInput:
            raise
        except Exception as exc:
            raise InvalidInput(self._fail(exc, None).message) from None


def _require_dict(payload: Any, kind: str) -> Mapping[str, Any]:
    if not isinstance(payload, dict):
        raise InvalidInput(f"{kind} input must be a JSON object")
    model = payload.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise InvalidInput("\"model\" must be a non-empty string")
    profile = payload.get("profile")
    if profile is not None and not isinstance(profile, str):
        raise InvalidInput("\"profile\" must be a string")
    return payload


def _messages(payload: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    messages = payload.get("messages")
    if messages is not None:
        if not isinstance(messages, list) or not messages:
            raise InvalidInput(f"{kind}: \"messages\" must be a non-empty list")
        for message in messages:
            if not isinstance(message, dict) or not isinstance(message.get("role"), str) or "content" not in message:
                raise InvalidInput(f"{kind}: every message needs a \"role\" and a \"content\"")
        return list(messages)
    prompt = payload.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidInput(f"{kind} input needs \"messages\" or a non-empty \"prompt\"")
    return [{"role": "user", "content": prompt}]


def _check_max(payload: Mapping[str, Any], *names: str) -> None:
    for name in names:
        value = payload.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise InvalidInput(f"\"{name}\" must be a whole number of at least 1")


def output_problem(text: str, response_format: Any) -> str | None:
    """Why ``text`` is not the output the job asked for, or None if it is.

    A job that asks for JSON (``response_format`` ``json_object`` or ``json_schema``) must
    get a JSON object back, with every ``required`` top-level property of the schema.
    An output that fails this is ``poison``: the queue retries it and dead-letters the
    job after three such outputs for the same input (shared/DESIGN.md section 2).
    """
    if not isinstance(response_format, Mapping):
        return None
    kind = response_format.get("type")
    if kind not in ("json_object", "json_schema"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return "the output is not the JSON the job asked for"
    if not isinstance(value, dict):
        return "the output is JSON but not an object"
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, Mapping) else None
    required = schema.get("required") if isinstance(schema, Mapping) else None
    if isinstance(required, list):
        missing = [name for name in required if isinstance(name, str) and name not in value]
        if missing:
            return f"the output misses required field(s): {', '.join(missing[:5])}"
    return None


class OpenAIChatProvider(_OpenAIBase):
    """``openai.chat``: one chat completion.

    Input: ``{"model"?, "messages" | "prompt", "max_tokens"?, "temperature"?, ...}``.
    Result: ``{"text", "model", "finish_reason", "usage", "id", "provider"}``.
    """

    kind = "openai.chat"
    version = "1"

    def validate(self, payload: Any) -> None:
        """Checks the input's shape; raises :class:`InvalidInput` with the reason."""
        data = _require_dict(payload, self.kind)
        _messages(data, self.kind)
        _check_max(data, "max_tokens", "max_completion_tokens")

    def run(self, job: Any, context: RunContext) -> Outcome:
        """Sends one chat completion; never raises for expected failures."""
        payload = job.input
        try:
            self.validate(payload)
            client = self.client()
            options = {k: payload[k] for k in _CHAT_OPTIONS if k in payload}
            if context.cancelled.is_set():
                return Outcome.failure(ErrorClass.RETRYABLE, f"{self.kind}: cancelled before it started")
            raw = client.chat.completions.with_raw_response.create(
                model=self._model(payload, self.profile.model),
                messages=_messages(payload, self.kind),  # type: ignore[arg-type]  # validated above
                extra_headers=self._headers(context.idempotency_key),
                **options,
            )
            self._observe(raw.headers)
            completion = raw.parse()
        except Exception as exc:
            return self._fail(exc, payload)
        choices = getattr(completion, "choices", None) or []
        text = choices[0].message.content if choices and choices[0].message is not None else None
        if not isinstance(text, str):
            return Outcome.failure(ErrorClass.POISON, f"{self.kind}: the response had no text")
        problem = output_problem(text, payload.get("response_format"))
        if problem:
            return Outcome.failure(ErrorClass.POISON, f"{self.kind}: {problem}")
        return Outcome.success({
            "text": text,
            "model": completion.model,
            "finish_reason": choices[0].finish_reason,
            "usage": _usage(completion.usage),
            "id": completion.id,
            "provider": self.kind,
        })


class OpenAIResponsesProvider(_OpenAIBase):
    """``openai.responses``: the Responses API in background mode; survives a crash mid-generation.

    Input: ``{"model"?, "input" | "prompt" | "messages", "instructions"?, "max_output_tokens"?, ...}``.
    Result: ``{"text", "model", "status", "usage", "provider_job_id", "provider"}``.

    The attempt creates the background response and commits its id
    (``context.record_provider_job``) before doing anything else, then polls it with
    growing intervals while heartbeating. An attempt that finds a provider job id
    from an earlier attempt resumes it instead of creating (and paying for) another.
    """

    kind = "openai.responses"
    version = "1"

    def validate(self, payload: Any) -> None:
        """Checks the input's shape; raises :class:`InvalidInput` with the reason."""
        data = _require_dict(payload, self.kind)
        if "input" in data:
            value = data["input"]
            if not ((isinstance(value, str) and value.strip()) or (isinstance(value, list) and value)):
                raise InvalidInput(f"{self.kind}: \"input\" must be a non-empty string or list")
        else:
            _messages(data, self.kind)
        _check_max(data, "max_output_tokens")

    def _input(self, payload: Mapping[str, Any]) -> Any:
        if "input" in payload:
            return payload["input"]
        return _messages(payload, self.kind)

    def _result(self, response: Any) -> dict[str, Any]:
        return {
            "text": response.output_text,
            "model": response.model,
            "status": response.status,
            "usage": _usage(response.usage),
            "provider_job_id": response.id,
            "provider": self.kind,
        }

    def _terminal(self, response: Any, payload: Any) -> Outcome | None:
        """The outcome of a finished response, or None while it is still running."""
        status = getattr(response, "status", None)
        if status in _RESPONSE_RUNNING:
            return None
        if status in ("completed", "incomplete"):
            result = self._result(response)
            if status == "completed" and not result["text"]:
                return Outcome.failure(ErrorClass.POISON, f"{self.kind}: the response had no text")
            return Outcome.success(result)
        if status == "cancelled":
            return Outcome.failure(ErrorClass.FATAL, f"{self.kind}: the response was cancelled at the provider")
        error = getattr(response, "error", None)
        code = str(getattr(error, "code", "") or "")
        message = str(getattr(error, "message", "") or "the provider reported a failure")
        if code in _QUOTA_CODES:
            error_class = ErrorClass.FATAL
        elif code == "rate_limit_exceeded":
            error_class = ErrorClass.THROTTLED
        elif code in ("server_error", "") or "timeout" in code:
            error_class = ErrorClass.RETRYABLE
        else:
            error_class = ErrorClass.FATAL
        text = f"{self.kind}: response {status}" + (f" ({code})" if code else "") + f": {message}"
        return Outcome.failure(error_class, redact(text, payload, secrets=self._secrets()))

    def run(self, job: Any, context: RunContext) -> Outcome:
        """Creates (or resumes) the background response and polls it to the end."""
        payload = job.input
        try:
            self.validate(payload)
            client = self.client()
        except Exception as exc:
            return self._fail(exc, payload)
        headers = self._headers(context.idempotency_key)
        response_id = context.provider_job_id
        if response_id:
            try:
                earlier = client.responses.retrieve(response_id, extra_headers=headers)
            except _sdk().NotFoundError:
                earlier = None  # the provider forgot it: create a new one
            except Exception as exc:
                return self._fail(exc, payload)
            if earlier is not None:
                done = self._terminal(earlier, payload)
                if done is None:
                    return self._poll(client, response_id, context, payload)
                if done.ok:
                    return done
                # that provider job failed and the failure was already reported: start afresh
        if context.cancelled.is_set():
            return Outcome.failure(ErrorClass.RETRYABLE, f"{self.kind}: cancelled before it started")
        try:
            options = {k: payload[k] for k in _RESPONSES_OPTIONS if k in payload}
            raw = client.responses.with_raw_response.create(
                model=self._model(payload, self.profile.model),
                input=self._input(payload),
                background=True,
                store=True,
                extra_headers=headers,
                **options,
            )
            self._observe(raw.headers)
            created = raw.parse()
        except Exception as exc:
            return self._fail(exc, payload)
        response_id = created.id
        if context.record_provider_job is not None:
            try:
                context.record_provider_job(response_id)  # committed before anything else happens
            except Exception as exc:
                # the lease is gone: leave the provider job running for whoever holds the job now
                log.warning("could not record provider job for %s: %s", context.job_id, type(exc).__name__)
                return Outcome.failure(ErrorClass.RETRYABLE, f"{self.kind}: lease lost after creating the response")
        done = self._terminal(created, payload)
        if done is not None:
            return done
        return self._poll(client, response_id, context, payload)

    def _poll(self, client: openai.OpenAI, response_id: str, context: RunContext, payload: Any) -> Outcome:
        headers = self._headers(context.idempotency_key)
        profile = self.profile
        interval = profile.poll_initial_s
        deadline = time.monotonic() + profile.max_poll_s
        errors = 0
        while True:
            if context.cancelled.wait(interval):
                if context.stopping.is_set():
                    # not cancelled by a person: keep the paid-for provider job for the next attempt
                    return Outcome.failure(
                        ErrorClass.RETRYABLE, f"{self.kind}: interrupted; the provider job keeps running and will be resumed"
                    )
                return self._cancel(client, response_id, headers)
            interval = min(profile.poll_max_s, interval * profile.poll_growth)
            if not context.beat():
                # lease lost (reaped or taken over): keep the provider job for the next holder
                return Outcome.failure(ErrorClass.RETRYABLE, f"{self.kind}: lease lost while polling")
            try:
                response = client.responses.retrieve(response_id, extra_headers=headers)
            except _sdk().NotFoundError as exc:
                outcome = self._fail(exc, payload)
                return Outcome.failure(ErrorClass.RETRYABLE, outcome.message, status=outcome.status)
            except Exception as exc:
                outcome = self._fail(exc, payload)
                if outcome.error_class is ErrorClass.FATAL:
                    return outcome
                errors += 1
                if errors >= profile.poll_error_budget:
                    return outcome  # the next attempt resumes the same provider job
                if outcome.retry_after:
                    interval = max(interval, min(outcome.retry_after, profile.poll_max_s))
                continue
            errors = 0
            done = self._terminal(response, payload)
            if done is not None:
                return done
            if time.monotonic() >= deadline:
                return Outcome.failure(
                    ErrorClass.RETRYABLE, f"{self.kind}: still running after {profile.max_poll_s:g} s; polling resumes"
                )

    def _cancel(self, client: openai.OpenAI, response_id: str, headers: dict[str, str]) -> Outcome:
        try:
            client.responses.cancel(response_id, extra_headers=headers)
            note = "the provider job was cancelled"
        except Exception as exc:
            note = f"cancelling the provider job failed ({type(exc).__name__})"
        return Outcome.failure(ErrorClass.RETRYABLE, f"{self.kind}: cancelled; {note}")

    def lookup(self, job: Any) -> LookupResult:
        """What became of an orphan's background response (by its provider job id)."""
        response_id = getattr(job, "provider_job_id", None)
        if not response_id:
            return LookupResult(LookupResult.UNKNOWN)
        payload = getattr(job, "input", None)
        key = getattr(job, "idempotency_key", "")
        try:
            response = self.client().responses.retrieve(response_id, extra_headers=self._headers(key))
        except _sdk().NotFoundError:
            return LookupResult(LookupResult.UNKNOWN)
        except Exception as exc:
            log.warning("lookup of %s failed: %s", response_id, self._fail(exc, payload).message)
            return LookupResult(LookupResult.UNKNOWN)
        done = self._terminal(response, payload)
        if done is None:
            return LookupResult(LookupResult.RUNNING)
        if done.ok:
            return LookupResult(LookupResult.FINISHED, result=done.result)
        return LookupResult(LookupResult.FAILED, outcome=done)


class OpenAIImageProvider(_OpenAIBase):
    """``openai.image``: one generated image (PNG), returned base64-encoded.

    Input: ``{"prompt", "model"?, "size"?, "quality"?}``.
    Result: ``{"artifact_b64", "artifact_name": "<key>.png", "mime": "image/png", "model", "revised_prompt"?}``.
    """

    kind = "openai.image"
    version = "1"

    def validate(self, payload: Any) -> None:
        """Checks the input's shape; raises :class:`InvalidInput` with the reason."""
        data = _require_dict(payload, self.kind)
        prompt = data.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidInput(f"{self.kind} input needs a non-empty \"prompt\"")
        for name in ("size", "quality"):
            if name in data and not isinstance(data[name], str):
                raise InvalidInput(f"\"{name}\" must be a string")

    def run(self, job: Any, context: RunContext) -> Outcome:
        """Generates one image."""
        payload = job.input
        try:
            self.validate(payload)
            client = self.client()
            model = self._model(payload, self.profile.image_model)
            options: dict[str, Any] = {k: payload[k] for k in ("size", "quality") if k in payload}
            if model.startswith("dall-e"):
                options["response_format"] = "b64_json"
            raw = client.images.with_raw_response.generate(
                model=model, prompt=payload["prompt"], n=1,
                extra_headers=self._headers(context.idempotency_key), **options,
            )
            self._observe(raw.headers)
            images = raw.parse()
        except Exception as exc:
            return self._fail(exc, payload)
        data = images.data or []
        b64 = data[0].b64_json if data else None
        if not b64:
            return Outcome.failure(ErrorClass.POISON, f"{self.kind}: the response had no image data")
        result: dict[str, Any] = {
            "artifact_b64": b64,
            "artifact_name": f"{context.idempotency_key}.png",
            "mime": "image/png",
            "model": model,
            "provider": self.kind,
        }
        if getattr(images, "usage", None) is not None:
            result["usage"] = _usage(images.usage)
        return Outcome.success(result)


class OpenAISpeechProvider(_OpenAIBase):
    """``openai.speech``: text to speech, returned base64-encoded.

    Input: ``{"input" | "text", "voice"?, "model"?, "format"?: mp3|opus|aac|flac|wav|pcm, "instructions"?}``.
    Result: ``{"artifact_b64", "artifact_name": "<key>.<format>", "mime", "bytes", "model"}``.
    """

    kind = "openai.speech"
    version = "1"

    def validate(self, payload: Any) -> None:
        """Checks the input's shape; raises :class:`InvalidInput` with the reason."""
        data = _require_dict(payload, self.kind)
        text = data.get("input", data.get("text"))
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(f"{self.kind} input needs a non-empty \"input\" text")
        fmt = data.get("format", "mp3")
        if fmt not in _SPEECH_FORMATS:
            raise InvalidInput(f"\"format\" must be one of {', '.join(_SPEECH_FORMATS)}")
        if "voice" in data and not isinstance(data["voice"], str):
            raise InvalidInput("\"voice\" must be a string")

    def run(self, job: Any, context: RunContext) -> Outcome:
        """Synthesises the audio."""
        payload = job.input
        try:
            self.validate(payload)
            client = self.client()
            model = self._model(payload, self.profile.speech_model)
            fmt = payload.get("format", "mp3")
            options = {"instructions": payload["instructions"]} if isinstance(payload.get("instructions"), str) else {}
            audio = client.audio.speech.create(
                model=model, voice=payload.get("voice", self.profile.voice),
                input=payload.get("input", payload.get("text")), response_format=fmt,
                extra_headers=self._headers(context.idempotency_key), **options,
            )
            self._observe(audio.response.headers)
            content = audio.content
        except Exception as exc:
            return self._fail(exc, payload)
        if not content:
            return Outcome.failure(ErrorClass.POISON, f"{self.kind}: the response had no audio")
        return Outcome.success({
            "artifact_b64": base64.b64encode(content).decode("ascii"),
            "artifact_name": f"{context.idempotency_key}.{fmt}",
            "mime": _SPEECH_FORMATS[fmt],
            "bytes": len(content),
            "model": model,
            "provider": self.kind,
        })


def make_providers(
    profile: OpenAIProfile | None = None,
    *,
    api_key: str | None = None,
    rate_limit_listener: Callable[[str, RateLimitInfo], None] | None = None,
) -> dict[str, _OpenAIBase]:
    """Every OpenAI-compatible kind for one profile, keyed by kind."""
    profile = profile or OpenAIProfile()
    kinds = (OpenAIChatProvider, OpenAIResponsesProvider, OpenAIImageProvider, OpenAISpeechProvider)
    made = [cls(profile, api_key=api_key, rate_limit_listener=rate_limit_listener) for cls in kinds]
    return {p.kind: p for p in made}


def with_profile(profile: OpenAIProfile, **changes: Any) -> OpenAIProfile:
    """A copy of ``profile`` with ``changes`` (a small helper for Preferences)."""
    return replace(profile, **changes)


__all__ = [
    "IDEMPOTENCY_HEADER",
    "KEYRING_SERVICE",
    "KeyLookup",
    "KeyringUnavailable",
    "OpenAIChatProvider",
    "OpenAIImageProvider",
    "OpenAIProfile",
    "OpenAIResponsesProvider",
    "OpenAISpeechProvider",
    "classify_error",
    "make_providers",
    "parse_duration",
    "rate_limit_info",
    "resolve_api_key",
    "retry_after_from_headers",
    "store_api_key",
    "with_profile",
]
