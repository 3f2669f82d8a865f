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
errors, 408, 409 and 5xx are ``retryable``; 429 is ``throttled`` (waiting as
:func:`retry_after_from_headers` reads the headers, gateways' variants included);
400, 401, 403, 404, 422 and an exhausted quota are ``fatal``; a response without
the expected output is ``poison`` (the queue dead-letters it after three). A
profile that needs a key and has none is not a job's fault: it reports
:meth:`_OpenAIBase.unavailable_reason` so the runtime holds its jobs, and an
attempt that starts anyway ends ``retryable`` without sending anything.

Every blocking call is given the attempt's timeout (``RunContext.timeout_s``; the
profile's ``timeout_s`` when there is none), so a hung call ends as a retryable
timeout that says which limit it hit.

Artifacts (``openai.image``, ``openai.speech``) are returned base64-encoded in the
JSON result (``artifact_b64``, with ``artifact_name`` = idempotency key + extension
and ``mime``); the result store writes them as files next to the JSON result
(``results/ab/<key>.png``) and keeps only ``artifact_ref``, ``artifact_bytes`` and
``mime`` in the stored JSON (see :mod:`desktop_queue.core.results`).
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import http
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
from desktop_queue.core.inputspec import MODELS, PROFILES, Choice, FieldType, InputField, InputSpec
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
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "response_format",
    "presence_penalty",
    "frequency_penalty",
    "reasoning_effort",
)
_RESPONSES_OPTIONS = ("instructions", "max_output_tokens", "temperature", "top_p", "reasoning", "text")
_SPEECH_FORMATS = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/L16",
}


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
        env_key: ``OPENAI_API_KEY`` may stand in for a key missing from the keyring
            (False for a profile of another server: OpenAI's key is never sent there).
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
    env_key: bool = True
    poll_initial_s: float = 0.5
    poll_max_s: float = 10.0
    poll_growth: float = 1.6
    max_poll_s: float = 1800.0
    poll_error_budget: int = 5

    def resolved_base_url(self) -> str | None:
        """The profile's base URL, or ``OPENAI_BASE_URL``, or None (the SDK's default)."""
        return self.base_url or os.environ.get("OPENAI_BASE_URL") or None


#: the environment variable of one profile's key: this prefix, then the profile's name in
#: capitals with every character but letters and digits as "_" (``my-proxy``: ``..._MY_PROXY``)
PROFILE_KEY_PREFIX = "DESKTOP_QUEUE_API_KEY_"


def profile_key_variable(profile: str) -> str:
    """The environment variable that may hold ``profile``'s key where no OS keyring can:
    ``DESKTOP_QUEUE_API_KEY_LLAMACPP`` for ``llamacpp``. It is read for that profile only,
    so a proxy's key never goes to another server (``OPENAI_API_KEY`` stands in only for
    OpenAI's own endpoint)."""
    return PROFILE_KEY_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", profile).upper()


@dataclass(frozen=True)
class KeyLookup:
    """Where an API key came from.

    Attributes:
        key: the key (never printed: excluded from ``repr``).
        source: ``keyring``, ``environment`` or ``none``.
        notice: what people should know (e.g. no keyring available), or None.
        variable: the environment variable it came from (``source`` "environment").
    """

    key: str | None = field(repr=False)
    source: str
    notice: str | None = None
    variable: str | None = None


class KeyringUnavailable(RuntimeError):
    """No OS keyring can store the key (there is no plaintext fallback, on purpose)."""


def resolve_api_key(profile: str = DEFAULT_PROFILE, *, env: bool = True) -> KeyLookup:
    """Finds the API key of ``profile``: the OS keyring first, then the profile's own
    variable (:func:`profile_key_variable`), then ``OPENAI_API_KEY`` (if ``env``).

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
        notice = f"no usable OS keyring ({type(exc).__name__})"
    for variable in (profile_key_variable(profile), "OPENAI_API_KEY") if env else (profile_key_variable(profile),):
        value = os.environ.get(variable)
        if value:
            return KeyLookup(
                value, "environment", notice and f"{notice}; using the {variable} environment variable", variable
            )
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
            f"Set {profile_key_variable(profile)} in the environment instead (read for {profile} only)."
        ) from None


def delete_api_key(profile: str) -> bool:
    """Removes the keyring entry of ``profile``; True if there was one.

    Raises:
        KeyringUnavailable: the keyring cannot be reached (the entry may still be there).
    """
    try:
        import keyring
        import keyring.errors

        if keyring.get_password(KEYRING_SERVICE, profile) is None:
            return False
        keyring.delete_password(KEYRING_SERVICE, profile)
        return True
    except Exception as exc:
        raise KeyringUnavailable(
            f"the API key of {profile} could not be removed: no usable OS keyring ({type(exc).__name__})"
        ) from None


#: the fixed salt of :func:`key_fingerprint` (an app constant, not a secret)
_KEY_FP_SALT = b"desktop-queue/key-fingerprint/v1"
#: hex digits of a key fingerprint: 32 bits
KEY_FP_CHARS = 8


def key_fingerprint(key: str) -> str:
    """A short, one-way fingerprint of an API key: tells "the same key" from "another key".

    The first 8 hex digits (32 bits) of HMAC-SHA256 of the key under a fixed app salt.
    A job's ``last_error.key_fp`` keeps it after a 401/403, so that a replay preview can
    say whether the key has been changed since. Why it is safe to store:

    * It is not reversible: HMAC-SHA256 is one-way, and only 32 of its 256 bits are kept.
    * It cannot confirm a real key by brute force: an OpenAI-style key has far more
      than 128 random bits, so about 2**96 keys or more share each fingerprint; a
      fingerprint that matches a guess proves nothing about the guess.
    * The salt makes it specific to this app: it cannot be matched against a plain
      SHA-256 of the key another tool may have published or logged.

    A short password used as a key (a local server's ``test``) has few bits to begin
    with: a fingerprint can confirm a guess of it, as any hash of it could. Two different
    keys share a fingerprint once in about four billion (the preview would then call a
    changed key unchanged).
    """
    digest = hmac.new(_KEY_FP_SALT, key.encode("utf-8"), hashlib.sha256).hexdigest()
    return digest[:KEY_FP_CHARS]


def _sent_key(error: Any) -> str | None:
    """The API key a failed request was sent with (its ``Authorization: Bearer`` header), or None."""
    try:
        header = error.response.request.headers.get("authorization")
    except Exception:  # no response or request kept: fall back to the provider's key
        return None
    if isinstance(header, str) and header.lower().startswith("bearer "):
        return header[7:].strip() or None
    return None


# ---------------------------------------------------------------------- headers and errors


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(value: str | None) -> float | None:
    """Parses OpenAI's reset durations (``"1s"``, ``"6m0s"``, ``"20ms"``, ``"1h2m3.5s"``, ``"2.5"``)."""
    if value is None:
        return None
    text = value.strip()
    try:
        number = float(text)
    except ValueError:
        pass
    else:
        return number if math.isfinite(number) and number >= 0 else None
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


#: LiteLLM's proxy passes the upstream provider's headers through under this prefix
#: (docs/proxy/response_headers.md: "prefixed with llm_provider-").
GATEWAY_PREFIXES = ("", "llm_provider-")
#: ``x-ratelimit-reset`` values above this are epoch timestamps, not a delay (2001-09-09)
_EPOCH_S = 1e9
#: ... and above this, epoch milliseconds (OpenRouter sends those)
_EPOCH_MS = 1e12


def _gateway_header(headers: Any, name: str) -> str | None:
    """``name``, or the same header as a gateway passed it through (``llm_provider-<name>``)."""
    for prefix in GATEWAY_PREFIXES:
        value = _header(headers, prefix + name)
        if value is not None and value.strip():
            return value
    return None


def _int_header(headers: Any, name: str) -> int | None:
    value = _gateway_header(headers, name)
    try:
        return int(float(value)) if value is not None else None
    except (ValueError, OverflowError):  # garbled, "nan", "inf"
        return None


def _until(seconds: float | None, now: Callable[[], float]) -> float | None:
    """A reset given as a delay, or as an epoch timestamp (seconds or milliseconds) when large."""
    if seconds is None:
        return None
    if seconds >= _EPOCH_MS:
        return max(0.0, seconds / 1000.0 - now())
    if seconds >= _EPOCH_S:
        return max(0.0, seconds - now())
    return seconds


def rate_limit_info(headers: Any, now: Callable[[], float] = time.time) -> RateLimitInfo | None:
    """The ``x-ratelimit-*`` headers of a response, or None if it had none."""
    rem_req = _int_header(headers, "x-ratelimit-remaining-requests")
    rem_tok = _int_header(headers, "x-ratelimit-remaining-tokens")
    # some gateways send the reset as a timestamp where OpenAI sends a duration
    reset_req = _until(parse_duration(_gateway_header(headers, "x-ratelimit-reset-requests")), now)
    reset_tok = _until(parse_duration(_gateway_header(headers, "x-ratelimit-reset-tokens")), now)
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


def _seconds(value: str | None) -> float | None:
    """A non-negative, finite number of seconds, or None for anything garbled."""
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _retry_after_value(value: str | None, now: Callable[[], float]) -> float | None:
    """``Retry-After``: delay-seconds or an HTTP date (RFC 9110 section 10.2.3)."""
    seconds = _seconds(value)
    if seconds is not None or value is None:
        return seconds
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    try:
        return max(0.0, float(email.utils.mktime_tz(parsed)) - now())
    except (OverflowError, ValueError):
        return None


_IETF_RESET = re.compile(r"(?:^|;)\s*t\s*=\s*(\d+(?:\.\d+)?)\s*(?:;|,|$)")


def _ietf_ratelimit(value: str | None) -> float | None:
    """The ``t`` (seconds to reset) of the structured ``RateLimit`` header of newer IETF drafts."""
    if value is None:
        return None
    resets = [float(m.group(1)) for m in _IETF_RESET.finditer(value)]
    return max(resets) if resets else None


def retry_after_from_headers(headers: Any, now: Callable[[], float] = time.time) -> float | None:
    """Seconds a throttled client should wait, from whichever header the server sent.

    In order: ``retry-after-ms`` (OpenAI), ``Retry-After`` (seconds or HTTP date),
    ``x-ratelimit-reset-requests`` / ``-tokens`` (OpenAI durations such as ``6m0s``),
    ``x-ratelimit-reset`` (seconds or an epoch timestamp), ``ratelimit-reset`` and
    ``RateLimit: ...;t=N`` (IETF drafts); each also under a gateway's
    ``llm_provider-`` prefix (LiteLLM proxy). A garbled value is skipped, never
    guessed at: the caller then falls back to its own backoff.
    """
    ms = _seconds(_gateway_header(headers, "retry-after-ms"))
    if ms is not None:
        return ms / 1000.0
    plain = _retry_after_value(_gateway_header(headers, "retry-after"), now)
    if plain is not None:
        return plain
    info = rate_limit_info(headers, now)
    if info is not None and info.reset_s is not None:
        return info.reset_s
    reset = _until(_seconds(_gateway_header(headers, "x-ratelimit-reset")), now)
    if reset is not None:
        return reset
    ietf = _seconds(_gateway_header(headers, "ratelimit-reset"))
    if ietf is not None:
        return ietf
    return _ietf_ratelimit(_gateway_header(headers, "ratelimit"))


def _status_class(status: int) -> ErrorClass:
    if status in _STATUS_CLASS:
        return _STATUS_CLASS[status]
    return ErrorClass.RETRYABLE if status >= 500 else ErrorClass.FATAL


_HTML_TITLE = re.compile(r"<(?:title|h1)[^>]*>(.*?)</(?:title|h1)>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_BODY_TEXT_CHARS = 200


def _text_of(value: Any) -> str | None:
    """A short message from one error field: a string, or FastAPI / pydantic's list of problems."""
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, list):
        parts = []
        for item in value[:3]:
            if isinstance(item, Mapping) and isinstance(item.get("msg"), str):
                loc = item.get("loc")
                where = ".".join(str(p) for p in loc) if isinstance(loc, list) and loc else ""
                parts.append(f"{where}: {item['msg']}" if where else item["msg"])
            elif isinstance(item, str):
                parts.append(item)
        return "; ".join(parts) or None
    if isinstance(value, Mapping):
        return _text_of(value.get("message") or value.get("msg") or value.get("detail"))
    return None


def _error_body(body: Any) -> tuple[str | None, str | None, str | None]:
    """(code, type, message) of an error body, whatever server sent it.

    The SDK hands over an OpenAI error's inner ``error`` object, or the whole body
    when there is none. Besides OpenAI's ``{"error": {"message", "type", "code"}}``
    this reads ``{"error": "text"}`` (Ollama, llama.cpp), ``{"message": "..."}``,
    ``{"detail": "..."}`` and FastAPI's ``{"detail": [{"loc", "msg"}]}`` (vLLM,
    LiteLLM, most Python servers), and a plain-text or HTML body (Go servers' "404
    page not found", reverse proxies).
    """
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            code, kind = inner.get("code"), inner.get("type")
            msg = _text_of(inner.get("message")) or _text_of(inner.get("detail")) or _text_of(inner.get("msg"))
            if msg is None and inner is not body:
                msg = _text_of(body.get("message")) or _text_of(body.get("detail"))
            return (
                str(code) if code is not None and not isinstance(code, (dict, list)) else None,
                str(kind) if isinstance(kind, str) else None,
                msg,
            )
        return None, None, _text_of(inner) or _text_of(body.get("message")) or _text_of(body.get("detail"))
    if isinstance(body, str) and body.strip():
        text = body.strip()
        if text.startswith("<"):
            found = _HTML_TITLE.search(text)
            text = _TAG.sub(" ", found.group(1)) if found else ""
        text = " ".join(text.split())
        return None, None, (text[:_BODY_TEXT_CHARS] or None)
    return None, None, None


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def _request_line(error: Any) -> str | None:
    """``POST /v1/chat/completions``: the method and path the failed request went to (never the query)."""
    try:
        request = error.request if getattr(error, "request", None) is not None else error.response.request
        return f"{request.method} {request.url.path}"
    except (AttributeError, RuntimeError):
        return None


_NOT_A_ROUTE = re.compile(
    r"^(?:not found|404 page not found|404: not found|no route.*|unknown (?:url|endpoint|route).*)$", re.IGNORECASE
)


def _not_found_hint(line: str | None, detail: str | None) -> str | None:
    """For a 404 that reads like a wrong URL (no detail, or a router's generic "Not Found")."""
    if detail and not _NOT_A_ROUTE.match(detail.strip().rstrip(".")):
        return None  # a real answer, e.g. "the model `x` does not exist"
    if line is not None and "/v1/" not in line + "/":
        return "is the base URL right? (it should usually end in /v1)"
    return "is the base URL right, and does this server offer this endpoint?"


def _timeout_text(timeout: tuple[float, str] | None) -> str:
    if timeout is None:
        return "the request timed out"
    seconds, source = timeout
    return f"no answer within {seconds:g} s ({source})"


class MissingApiKey(InvalidInput):
    """The profile needs an API key and none is configured yet: its jobs wait for one.

    Not a fault of the job: once a key is entered (Preferences, keyring or
    ``OPENAI_API_KEY``) the same job runs as it is.
    """


def _never_connected(error: BaseException) -> bool:
    """True when the request failed before a connection was made (so nothing was sent).

    The SDK wraps httpx's ``ConnectError`` / ``ConnectTimeout``; they are told by name so
    that classifying needs no import of httpx.
    """
    cause = error.__cause__
    return type(cause).__name__ in ("ConnectError", "ConnectTimeout")


def classify_error(
    error: BaseException,
    *,
    job_input: Any = None,
    secrets: tuple[str, ...] = (),
    what: str = "openai",
    timeout: tuple[float, str] | None = None,
) -> Outcome:
    """Turns an SDK (or other) exception into a classified, redacted :class:`Outcome`.

    Args:
        error: what was raised.
        job_input: the job's input; any of its text is removed from the message.
        secrets: strings that must never appear (the API key).
        what: a short prefix for the message (the kind).
        timeout: (seconds, where they came from) of the request, to say so when it timed out.
    """

    def clean(text: str) -> str:
        return redact(f"{what}: {text}", job_input, secrets=secrets)

    if isinstance(error, _sdk().APITimeoutError):
        if _never_connected(error):
            return Outcome.failure(ErrorClass.RETRYABLE, clean("cannot connect (timed out)"), unreachable=True)
        return Outcome.failure(ErrorClass.RETRYABLE, clean(_timeout_text(timeout)))
    if isinstance(error, _sdk().APIConnectionError):
        cause = type(error.__cause__).__name__ if error.__cause__ is not None else "no response"
        if _never_connected(error):
            # nothing was sent: not paid for, and the profile is offline until a request connects
            return Outcome.failure(ErrorClass.RETRYABLE, clean(f"cannot connect ({cause})"), unreachable=True)
        return Outcome.failure(ErrorClass.RETRYABLE, clean(f"connection error ({cause})"))
    if isinstance(error, _sdk().APIStatusError):
        status = int(error.status_code)
        code, kind, detail = _error_body(error.body)
        text = f"HTTP {status}"
        if status == 404:
            line = _request_line(error)
            text += f" {_reason(status)}" + (f" at {line}" if line else "")
            hint = _not_found_hint(line, detail)
            text += (f": {detail}" if detail else "") + (f" — {hint}" if hint else "")
        else:
            text += (f" {code}" if code and code != str(status) else "") + (f": {detail}" if detail else "")
        if code in _QUOTA_CODES or kind in _QUOTA_CODES:
            return Outcome.failure(ErrorClass.FATAL, clean(f"quota exhausted ({text})"), status=status)
        error_class = _status_class(status)
        retry_after = retry_after_from_headers(error.response.headers) if status in (429, 503) else None
        return Outcome.failure(error_class, clean(text), status=status, retry_after=retry_after)
    if isinstance(error, _sdk().APIResponseValidationError):
        return Outcome.failure(ErrorClass.POISON, clean("the response did not have the expected shape"))
    if isinstance(error, MissingApiKey):
        # not the job's fault: retryable, so it never dead-letters for want of a key
        return Outcome.failure(ErrorClass.RETRYABLE, redact(str(error), job_input, secrets=secrets))
    if isinstance(error, InvalidInput):
        return Outcome.failure(ErrorClass.FATAL, clean(f"invalid input: {error}"))
    if isinstance(error, (TimeoutError, ConnectionError)):
        return Outcome.failure(ErrorClass.RETRYABLE, clean(type(error).__name__))
    return Outcome.failure(ErrorClass.RETRYABLE, clean(f"unexpected {type(error).__name__}"))


def _causes(error: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(chain) < 10:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def diagnose_connection(error: BaseException, base_url: str | None) -> str | None:
    """The exact reason a connection test failed, for people; None if nothing more precise is known.

    Tells apart a host name that does not resolve (DNS), a refused connection (nothing
    listens), a TLS failure (certificate, or https:// to a plain-http server), a timeout,
    a refused key (401/403) and a wrong path (404: the base URL probably lacks ``/v1``).
    """
    from urllib.parse import urlsplit

    parts = urlsplit(base_url or "https://api.openai.com/v1")
    host = parts.hostname or "?"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    where = f"{host}:{port}"
    if isinstance(error, _sdk().APIStatusError):
        status = int(error.status_code)
        if status == 401:
            return f"HTTP 401 from {host}: the API key was refused (wrong, revoked, or missing)"
        if status == 403:
            return f"HTTP 403 from {host}: the key may not list models (permissions, or the wrong organisation)"
        if status == 404:
            line = _request_line(error)
            return (
                f"HTTP 404 at {line or base_url}: no model list there. The base URL usually ends in /v1 "
                f"(e.g. {parts.scheme}://{where}/v1)"
            )
        return None
    text = " ".join(f"{type(e).__name__}: {e}" for e in _causes(error)).lower()
    if isinstance(error, _sdk().APITimeoutError) or "timed out" in text or "timeout" in text:
        return f"no answer from {where} in time: the server is slow, or a firewall drops the connection"
    dns_words = ("name or service not known", "nodename nor servname", "getaddrinfo", "name resolution", "gaierror")
    if any(word in text for word in dns_words):
        return f"DNS: the host name {host!r} does not resolve (a typo, or no network)"
    if "connection refused" in text or "errno 111" in text or "connectionrefused" in text:
        return f"connection refused at {where}: nothing listens there (is the server running, on that port?)"
    if "wrong version number" in text or "record layer failure" in text or "http request to an https" in text:
        return f"TLS handshake with {where} failed: the server speaks plain http; try http:// instead of https://"
    if "certificate" in text:
        return f"TLS: the certificate of {host} is not trusted (self-signed, expired, or for another name)"
    if "ssl" in text or "tls" in text:
        return f"TLS handshake with {where} failed"
    if "network is unreachable" in text or "no route to host" in text:
        return f"no route to {where}: the network is down or the address is not reachable"
    return None


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
    #: the attempt timeout when the job and settings give none. Generation is slow on
    #: laptops and local servers: 10 minutes covers a long chat answer or a large image
    #: from a local model, and a hung call still ends within the same order of time.
    default_timeout_s: float = 600.0
    #: lease length: short, because the runtime renews it whatever the provider is doing;
    #: it only bounds how long a dead holder keeps a job from being run again.
    lease_s: float = 30.0
    #: how long :meth:`unavailable_reason` trusts its last key lookup (a keyring read
    #: can take a while; a key entered later is still found within this)
    KEY_RECHECK_S = 5.0

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
        self._monotonic: Callable[[], float] = time.monotonic  # tests jump it
        self._key_checked: tuple[float, str | None] | None = None
        self._fp_checked: tuple[float, str | None] | None = None

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
            self._key_checked = None
            self._fp_checked = None

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
                found = resolve_api_key(self.profile.name, env=self.profile.env_key)
                key, self.key_notice = found.key, found.notice
                # (a server that needs no key runs the same without a keyring: nothing to warn of;
                # a key in the profile's own variable was put there for want of one: said once, quietly)
                if self.key_notice and (key or self.profile.require_key):
                    chosen = found.variable == profile_key_variable(self.profile.name)
                    log.log(
                        logging.INFO if chosen else logging.WARNING,
                        "profile %s: %s",
                        self.profile.name,
                        self.key_notice,
                    )
            if not key:
                if self.profile.require_key:
                    raise MissingApiKey(self._missing_key_text())
                key = "no-key-required"
            self._key = key
            self._client_obj = _sdk().OpenAI(
                api_key=key,
                base_url=self.profile.resolved_base_url(),
                max_retries=0,
                timeout=_sdk().Timeout(self.profile.timeout_s, connect=self.profile.connect_timeout_s),
            )
            return self._client_obj

    def _missing_key_text(self) -> str:
        # (OpenAI's endpoint: its own variable, which every OpenAI tool reads; the profile's works too)
        where = "OPENAI_API_KEY" if self.profile.env_key else profile_key_variable(self.profile.name)
        return f"no API key for profile {self.profile.name}: enter it in Preferences → Providers or set {where}"

    def unavailable_reason(self) -> str | None:
        """Why this profile's jobs cannot run now (no API key yet), or None when they can.

        The runtime asks before leasing, so such jobs wait with this reason instead of
        spending attempts. The key lookup is cached for :attr:`KEY_RECHECK_S`, so a key
        entered later is found soon without a keyring read per scheduler tick.
        """
        if self._explicit_key or not self.profile.require_key:
            return None
        now = self._monotonic()
        with self._lock:
            if self._client_obj is not None:
                return None
            checked = self._key_checked
            if checked is not None and now - checked[0] < self.KEY_RECHECK_S:
                return checked[1]
        found = resolve_api_key(self.profile.name, env=self.profile.env_key)  # outside the lock: a keyring may be slow
        reason = None if found.key else self._missing_key_text()
        with self._lock:
            self._key_checked = (now, reason)
        return reason

    def _timeout(self, context: RunContext | None) -> tuple[float, str]:
        """Seconds one blocking call may take: the attempt's timeout, else the profile's."""
        if context is not None and context.timeout_s is not None and context.timeout_s > 0:
            return float(context.timeout_s), "attempt timeout"
        return float(self.profile.timeout_s), "profile timeout"

    def _sdk_timeout(self, seconds: float) -> Any:
        seconds = max(0.001, seconds)
        return _sdk().Timeout(seconds, connect=min(self.profile.connect_timeout_s, seconds))

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

    def _fail(self, error: BaseException, job_input: Any, timeout: tuple[float, str] | None = None) -> Outcome:
        outcome = classify_error(error, job_input=job_input, secrets=self._secrets(), what=self.kind, timeout=timeout)
        if isinstance(error, MissingApiKey):
            # look again when the runtime's next check would
            return replace(outcome, retry_after=self.KEY_RECHECK_S)
        return self._with_key_fp(outcome, error)

    def _with_key_fp(self, outcome: Outcome, error: BaseException) -> Outcome:
        """``outcome`` with the refused key's fingerprint, for an authentication error (401/403)."""
        if outcome.status not in (401, 403):
            return outcome
        # which key was refused (as a fingerprint only), so a replay preview can tell a changed key
        key = _sent_key(error) or self._key
        return replace(outcome, key_fp=key_fingerprint(key)) if key else outcome

    def key_fingerprint(self) -> str | None:
        """The fingerprint (:func:`key_fingerprint`) of the key the next attempt would send, or None.

        The key this provider already holds (until Preferences changes the profile),
        else the keyring's or the environment's now; None when there is none.
        """
        with self._lock:
            key = self._explicit_key or self._key
            checked = self._fp_checked
        if key:
            return key_fingerprint(key)
        now = self._monotonic()
        if checked is not None and now - checked[0] < self.KEY_RECHECK_S:
            return checked[1]  # (a preview asks on every keystroke: not a keyring read each time)
        found = resolve_api_key(self.profile.name, env=self.profile.env_key)
        key = found.key or (None if self.profile.require_key else "no-key-required")
        fp = key_fingerprint(key) if key else None
        with self._lock:
            self._fp_checked = (now, fp)
        return fp

    def _check_profile(self, payload: Mapping[str, Any]) -> None:
        """Profiles are configuration: a job may name its provider's own profile, no other."""
        named = payload.get("profile")
        if named is not None and named != self.profile.name:
            raise InvalidInput(
                f"unknown profile {named!r}: jobs of {self.kind} run on profile {self.profile.name!r} "
                "(add one in Preferences → Providers or with desktop-queue profile add)"
            )

    def _model(self, payload: Mapping[str, Any], default: str) -> str:
        model = payload.get("model")
        return model if isinstance(model, str) and model else default

    # -- the Provider interface

    def classify(self, error: BaseException) -> Outcome:
        """Classifies an exception the attempt did not handle (no input known: key redacted only)."""
        return self._with_key_fp(classify_error(error, secrets=self._secrets(), what=self.kind), error)

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
            exact = diagnose_connection(exc, self.profile.resolved_base_url())
            message = self._fail(exc, None).message
            raise InvalidInput(redact(exact, None, secrets=self._secrets()) if exact else message) from None


def _require_dict(payload: Any, kind: str) -> Mapping[str, Any]:
    if not isinstance(payload, dict):
        raise InvalidInput(f"{kind} input must be a JSON object")
    model = payload.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise InvalidInput('"model" must be a non-empty string')
    profile = payload.get("profile")
    if profile is not None and not isinstance(profile, str):
        raise InvalidInput('"profile" must be a string')
    return payload


def _messages(payload: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    messages = payload.get("messages")
    if messages is not None:
        if not isinstance(messages, list) or not messages:
            raise InvalidInput(f'{kind}: "messages" must be a non-empty list')
        for message in messages:
            if not isinstance(message, dict) or not isinstance(message.get("role"), str) or "content" not in message:
                raise InvalidInput(f'{kind}: every message needs a "role" and a "content"')
        return list(messages)
    prompt = payload.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidInput(f'{kind} input needs "messages" or a non-empty "prompt"')
    return [{"role": "user", "content": prompt}]


def _check_max(payload: Mapping[str, Any], *names: str) -> None:
    for name in names:
        value = payload.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise InvalidInput(f'"{name}" must be a whole number of at least 1')


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


# ---------------------------------------------------------------------- input descriptions (forms)

#: the output formats the chat form offers, as ``response_format`` types
_OUTPUT_FORMATS = (
    Choice("text", "Text"),
    Choice("json_object", "JSON object"),
    Choice("json_schema", "JSON following a schema"),
)
_JSON_SCHEMA = ("json_schema",)
_STARTER_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
_IMAGE_SIZES = ("auto", "1024x1024", "1536x1024", "1024x1536", "512x512", "256x256", "1792x1024", "1024x1792")
_IMAGE_QUALITIES = ("auto", "high", "medium", "low", "hd", "standard")
_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse")
#: OpenAI's documented ranges, enforced by ``validate`` (a server would refuse them as 400)
TEMPERATURE_RANGE = (0.0, 2.0)
TOP_P_RANGE = (0.0, 1.0)
SPEED_RANGE = (0.25, 4.0)


def _check_range(payload: Mapping[str, Any], name: str, low: float, high: float) -> None:
    value = payload.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise InvalidInput(f'"{name}" must be a number from {low:g} to {high:g}')


def _profile_field(profile: OpenAIProfile) -> InputField:
    return InputField(
        "profile",
        FieldType.CHOICE,
        "Pro&file:",
        choices=(Choice(profile.name, profile.name),),
        choices_from=PROFILES,
        placeholder=f"{profile.name} (this kind's profile)",
        help="The provider profile that runs the job (configured in Preferences → Providers); "
        "the model list follows it.",
    )


def _model_field(default: str, what: str = "model") -> InputField:
    return InputField(
        "model",
        FieldType.STRING,
        "&Model:",
        choices=(Choice(default, default),),
        free_text=True,
        choices_from=MODELS,
        placeholder=f"{default} (the profile's default)",
        help=f"The {what} to use; empty: the profile's default. Any name the server knows works.",
    )


def _prompt_field(
    placeholder: str = "Your prompt (required)", name: str = "prompt", label: str = "&Prompt:"
) -> InputField:
    return InputField(
        name,
        FieldType.TEXT,
        label,
        default="",
        required=True,
        placeholder=placeholder,
        help="Up to the 1 MiB input limit; paste freely, nothing is cut.",
    )


def _temperature_field() -> InputField:
    return InputField(
        "temperature",
        FieldType.NUMBER,
        "&Temperature:",
        minimum=TEMPERATURE_RANGE[0],
        maximum=TEMPERATURE_RANGE[1],
        step=0.1,
        placeholder="server default",
        help="Higher is more varied, lower more focused (0 to 2); empty: the server's default.",
    )


def _top_p_field() -> InputField:
    return InputField(
        "top_p",
        FieldType.NUMBER,
        "Top &p:",
        minimum=TOP_P_RANGE[0],
        maximum=TOP_P_RANGE[1],
        step=0.05,
        advanced=True,
        placeholder="server default",
        help="Nucleus sampling (0 to 1); change this or the temperature, not both.",
    )


def _max_tokens_field(name: str) -> InputField:
    return InputField(
        name,
        FieldType.INTEGER,
        "Max &tokens:",
        minimum=1,
        unit="token",
        units="tokens",
        placeholder="server default",
        help="The longest answer, in tokens; empty: the server's default.",
    )


def _chat_encode(written: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: written.pop(k) for k in ("profile", "model") if k in written}
    system = written.pop("system", None)
    prompt = written.pop("prompt", "")
    if system:
        out["messages"] = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
    else:
        out["prompt"] = prompt
    fmt = written.pop("output_format", "text")
    name = written.pop("schema_name", None)
    schema = written.pop("schema", None)
    if fmt == "json_object":
        out["response_format"] = {"type": "json_object"}
    elif fmt == "json_schema":
        out["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": name or "output", "schema": schema if schema is not None else _STARTER_SCHEMA},
        }
    out.update(written)
    return out


def _chat_decode(body: Mapping[str, Any]) -> dict[str, Any]:
    values = dict(body)
    messages = values.pop("messages", None)
    if messages is not None:
        if "prompt" in values:
            raise ValueError('the input has both "messages" and "prompt"')
        roles = [m.get("role") if isinstance(m, dict) else None for m in messages] if isinstance(messages, list) else []
        shapes_ok = isinstance(messages, list) and all(
            isinstance(m, dict) and set(m) == {"role", "content"} and isinstance(m["content"], str) for m in messages
        )
        if not shapes_ok or roles not in (["user"], ["system", "user"]):
            raise ValueError("the form shows a system prompt and one user message; these messages are more")
        if roles == ["system", "user"]:
            values["system"] = messages[0]["content"]
        values["prompt"] = messages[-1]["content"]
    fmt = values.pop("response_format", None)
    if fmt is not None:
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind == "json_object" and set(fmt) == {"type"}:
            values["output_format"] = "json_object"
        elif kind == "json_schema" and set(fmt) == {"type", "json_schema"} and isinstance(fmt["json_schema"], dict):
            spec = fmt["json_schema"]
            if not set(spec) <= {"name", "schema"}:
                raise ValueError("the form shows a schema's name and body only")
            values["output_format"] = "json_schema"
            values["schema_name"] = spec.get("name")
            values["schema"] = spec.get("schema")
        else:
            raise ValueError("the form shows text, a JSON object or a JSON schema as the output format")
    return values


def chat_spec(profile: OpenAIProfile) -> InputSpec:
    """The ``openai.chat`` form: profile, model, system prompt, prompt, sampling, output format."""
    return InputSpec(
        kind="openai.chat",
        notes="One chat completion from an OpenAI-compatible server.",
        fields=(
            _profile_field(profile),
            _model_field(profile.model),
            InputField(
                "system",
                FieldType.TEXT,
                "S&ystem prompt:",
                placeholder="Optional: how the model should behave",
                help="Sent first, as the system message.",
            ),
            _prompt_field(),
            _temperature_field(),
            _max_tokens_field("max_tokens"),
            InputField(
                "output_format",
                FieldType.CHOICE,
                "&Output:",
                default="text",
                choices=_OUTPUT_FORMATS,
                help="JSON answers are checked: one that is not the JSON asked for is retried, "
                "and dead-lettered after three.",
            ),
            InputField(
                "schema_name",
                FieldType.STRING,
                "Schema &name:",
                placeholder="output",
                visible_when=("output_format", _JSON_SCHEMA),
                help="A short name for the schema (letters, digits, _ and -).",
            ),
            InputField(
                "schema",
                FieldType.JSON,
                "&Schema:",
                placeholder=json.dumps(_STARTER_SCHEMA),
                visible_when=("output_format", _JSON_SCHEMA),
                help="A JSON Schema the answer must follow; its required properties are checked.",
            ),
            _top_p_field(),
            InputField(
                "seed",
                FieldType.INTEGER,
                "S&eed:",
                advanced=True,
                placeholder="none",
                help="Servers that support it answer the same seed and input alike.",
            ),
        ),
        encode=_chat_encode,
        decode=_chat_decode,
    )


def responses_spec(profile: OpenAIProfile) -> InputSpec:
    """The ``openai.responses`` form: profile, model, instructions, prompt, sampling."""
    return InputSpec(
        kind="openai.responses",
        notes="The Responses API in background mode: a crash mid-answer resumes, not repeats.",
        fields=(
            _profile_field(profile),
            _model_field(profile.model),
            InputField(
                "instructions",
                FieldType.TEXT,
                "&Instructions:",
                placeholder="Optional: how the model should behave",
                help="The system prompt of the Responses API.",
            ),
            _prompt_field(),
            _temperature_field(),
            _max_tokens_field("max_output_tokens"),
            _top_p_field(),
        ),
    )


def image_spec(profile: OpenAIProfile) -> InputSpec:
    """The ``openai.image`` form: prompt, model, size, quality, count (one job per image)."""
    return InputSpec(
        kind="openai.image",
        notes="One generated image a job; a count of 4 makes 4 jobs.",
        count_field="count",
        fields=(
            _profile_field(profile),
            _model_field(profile.image_model, "image model"),
            _prompt_field("Describe the image (required)"),
            InputField(
                "size",
                FieldType.CHOICE,
                "Si&ze:",
                choices=tuple(Choice(s, s) for s in _IMAGE_SIZES),
                free_text=True,
                placeholder="server default",
                help="Width x height in pixels; which sizes work depends on the model.",
            ),
            InputField(
                "quality",
                FieldType.CHOICE,
                "&Quality:",
                choices=tuple(Choice(q, q) for q in _IMAGE_QUALITIES),
                free_text=True,
                placeholder="server default",
                help="Higher quality takes longer and may cost more.",
            ),
            InputField(
                "count",
                FieldType.INTEGER,
                "&Count:",
                default=1,
                minimum=1,
                maximum=10,
                unit="image",
                units="images",
                help='How many images: each is its own job (its input numbered by "copy"), '
                "retried and paid for on its own.",
            ),
        ),
    )


def speech_spec(profile: OpenAIProfile) -> InputSpec:
    """The ``openai.speech`` form: text, voice, format, speed."""
    return InputSpec(
        kind="openai.speech",
        notes="Text to speech; the audio is saved next to the result.",
        prompt_field="input",
        fields=(
            _profile_field(profile),
            _model_field(profile.speech_model, "speech model"),
            _prompt_field("The text to speak (required)", name="input", label="&Text:"),
            InputField(
                "voice",
                FieldType.CHOICE,
                "&Voice:",
                choices=tuple(Choice(v, v) for v in _VOICES),
                free_text=True,
                placeholder=f"{profile.voice} (the profile's default)",
                help="Which voices exist depends on the server and model.",
            ),
            InputField(
                "format",
                FieldType.CHOICE,
                "&Format:",
                default="mp3",
                choices=tuple(Choice(f, f) for f in _SPEECH_FORMATS),
                help="The audio file format.",
            ),
            InputField(
                "speed",
                FieldType.NUMBER,
                "&Speed:",
                minimum=SPEED_RANGE[0],
                maximum=SPEED_RANGE[1],
                step=0.25,
                unit="×",
                placeholder="normal",
                help="0.25 (slow) to 4 (fast); empty: normal speed.",
            ),
            InputField(
                "instructions",
                FieldType.TEXT,
                "&Instructions:",
                advanced=True,
                placeholder="Optional: tone, accent, pace (newer models)",
                help="How to speak the text; older models ignore it.",
            ),
        ),
    )


class OpenAIChatProvider(_OpenAIBase):
    """``openai.chat``: one chat completion.

    Input: ``{"model"?, "messages" | "prompt", "max_tokens"?, "temperature"?, ...}``.
    Result: ``{"text", "model", "finish_reason", "usage", "id", "provider"}``.
    """

    kind = "openai.chat"
    version = "1"
    #: a long answer from a local model on a laptop takes minutes; the SDK's own default is 10
    default_timeout_s = 600.0

    @property
    def default_model(self) -> str:
        """The model of a job whose input names none (the profile's)."""
        return self.profile.model

    def validate(self, payload: Any) -> None:
        """Checks the input's shape; raises :class:`InvalidInput` with the reason."""
        data = _require_dict(payload, self.kind)
        self._check_profile(data)
        _messages(data, self.kind)
        _check_max(data, "max_tokens", "max_completion_tokens")
        if "stream" in data and not isinstance(data["stream"], bool):
            raise InvalidInput(f'{self.kind}: "stream" must be true or false')
        _check_range(data, "temperature", *TEMPERATURE_RANGE)
        _check_range(data, "top_p", *TOP_P_RANGE)

    def input_spec(self) -> InputSpec:
        """The form of this kind's input (see :func:`chat_spec`)."""
        return chat_spec(self.profile)

    def run(self, job: Any, context: RunContext) -> Outcome:
        """Sends one chat completion; never raises for expected failures.

        With ``"stream": true`` in the input the answer is streamed: the text so far goes
        to ``context.partial`` as it arrives (for the window to show), and the result is
        the same as without streaming (only that final result is stored).
        """
        payload = job.input
        timeout = self._timeout(context)
        try:
            self.validate(payload)
            client = self.client()
            options = {k: payload[k] for k in _CHAT_OPTIONS if k in payload}
            if context.cancelled.is_set():
                return Outcome.failure(ErrorClass.RETRYABLE, f"{self.kind}: cancelled before it started")
            if payload.get("stream") is True:
                return self._run_streaming(client, payload, options, context, timeout)
            raw = client.chat.completions.with_raw_response.create(
                model=self._model(payload, self.profile.model),
                messages=_messages(payload, self.kind),  # type: ignore[arg-type]  # validated above
                extra_headers=self._headers(context.idempotency_key),
                timeout=self._sdk_timeout(timeout[0]),
                **options,
            )
            self._observe(raw.headers)
            completion = raw.parse()
        except Exception as exc:
            return self._fail(exc, payload, timeout)
        choices = getattr(completion, "choices", None) or []
        text = choices[0].message.content if choices and choices[0].message is not None else None
        if not isinstance(text, str):
            return Outcome.failure(ErrorClass.POISON, f"{self.kind}: the response had no text")
        problem = output_problem(text, payload.get("response_format"))
        if problem:
            return Outcome.failure(ErrorClass.POISON, f"{self.kind}: {problem}")
        return Outcome.success(
            {
                "text": text,
                "model": completion.model,
                "finish_reason": choices[0].finish_reason,
                "usage": _usage(completion.usage),
                "id": completion.id,
                "provider": self.kind,
            }
        )

    def _run_streaming(
        self,
        client: Any,
        payload: Mapping[str, Any],
        options: Mapping[str, Any],
        context: RunContext,
        timeout: tuple[float, str],
    ) -> Outcome:
        """One streamed chat completion: the text so far to ``context.partial``, the whole as the result.

        The attempt's timeout bounds the whole answer, not only each wait for a chunk. A
        stream that breaks off is a failure like any other (retryable): its partial text
        is never stored.
        """
        deadline = time.monotonic() + timeout[0]
        parts: list[str] = []
        finish: str | None = None
        usage: Any = None
        model: str | None = None
        response_id: str | None = None
        try:
            raw = client.chat.completions.with_raw_response.create(
                model=self._model(payload, self.profile.model),
                messages=_messages(payload, self.kind),
                extra_headers=self._headers(context.idempotency_key),
                timeout=self._sdk_timeout(timeout[0]),
                stream=True,
                stream_options={"include_usage": True},
                **options,
            )
            self._observe(raw.headers)
            stream = raw.parse()
            try:
                for chunk in stream:
                    if context.cancelled.is_set():
                        return Outcome.failure(ErrorClass.RETRYABLE, f"{self.kind}: cancelled while streaming")
                    if time.monotonic() > deadline:
                        return Outcome.failure(
                            ErrorClass.RETRYABLE,
                            f"{self.kind}: the streamed answer took longer than the {timeout[1]} of {timeout[0]:g} s",
                        )
                    model = getattr(chunk, "model", None) or model
                    response_id = getattr(chunk, "id", None) or response_id
                    usage = getattr(chunk, "usage", None) or usage
                    for choice in getattr(chunk, "choices", None) or []:
                        if getattr(choice, "index", 0) != 0:
                            continue
                        delta = getattr(choice, "delta", None)
                        content = getattr(delta, "content", None) if delta is not None else None
                        if isinstance(content, str) and content:
                            parts.append(content)
                            context.show_partial("".join(parts))
                        finish = getattr(choice, "finish_reason", None) or finish
            finally:
                stream.close()
        except Exception as exc:
            return self._fail(exc, payload, timeout)
        if finish is None:
            return Outcome.failure(ErrorClass.RETRYABLE, f"{self.kind}: the stream ended before the answer did")
        text = "".join(parts)
        problem = output_problem(text, payload.get("response_format"))
        if problem:
            return Outcome.failure(ErrorClass.POISON, f"{self.kind}: {problem}")
        return Outcome.success(
            {
                "text": text,
                "model": model,
                "finish_reason": finish,
                "usage": _usage(usage),
                "id": response_id,
                "provider": self.kind,
                "streamed": True,
            }
        )


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
    #: per call: in background mode every call returns at once, but a server that
    #: ignores ``background`` answers the create only when the whole text is done
    default_timeout_s = 600.0

    @property
    def default_model(self) -> str:
        """The model of a job whose input names none (the profile's)."""
        return self.profile.model

    def validate(self, payload: Any) -> None:
        """Checks the input's shape; raises :class:`InvalidInput` with the reason."""
        data = _require_dict(payload, self.kind)
        self._check_profile(data)
        if "input" in data:
            value = data["input"]
            if not ((isinstance(value, str) and value.strip()) or (isinstance(value, list) and value)):
                raise InvalidInput(f'{self.kind}: "input" must be a non-empty string or list')
        else:
            _messages(data, self.kind)
        _check_max(data, "max_output_tokens")
        _check_range(data, "temperature", *TEMPERATURE_RANGE)
        _check_range(data, "top_p", *TOP_P_RANGE)

    def input_spec(self) -> InputSpec:
        """The form of this kind's input (see :func:`responses_spec`)."""
        return responses_spec(self.profile)

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
        timeout = self._timeout(context)
        try:
            self.validate(payload)
            client = self.client()
        except Exception as exc:
            return self._fail(exc, payload)
        headers = self._headers(context.idempotency_key)
        response_id = context.provider_job_id
        if response_id:
            try:
                earlier = client.responses.retrieve(
                    response_id, extra_headers=headers, timeout=self._sdk_timeout(timeout[0])
                )
            except _sdk().NotFoundError:
                earlier = None  # the provider forgot it: create a new one
            except Exception as exc:
                return self._fail(exc, payload, timeout)
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
                timeout=self._sdk_timeout(timeout[0]),
                **options,
            )
            self._observe(raw.headers)
            created = raw.parse()
        except Exception as exc:
            return self._fail(exc, payload, timeout)
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
        timeout = self._timeout(context)
        profile = self.profile
        interval = profile.poll_initial_s
        deadline = time.monotonic() + profile.max_poll_s
        errors = 0
        while True:
            if context.cancelled.wait(interval):
                if context.stopping.is_set():
                    # not cancelled by a person: keep the paid-for provider job for the next attempt
                    return Outcome.failure(
                        ErrorClass.RETRYABLE,
                        f"{self.kind}: interrupted; the provider job keeps running and will be resumed",
                    )
                return self._cancel(client, response_id, headers)
            interval = min(profile.poll_max_s, interval * profile.poll_growth)
            if not context.beat():
                # lease lost (reaped or taken over): keep the provider job for the next holder
                return Outcome.failure(ErrorClass.RETRYABLE, f"{self.kind}: lease lost while polling")
            try:
                response = client.responses.retrieve(
                    response_id, extra_headers=headers, timeout=self._sdk_timeout(timeout[0])
                )
            except _sdk().NotFoundError as exc:
                outcome = self._fail(exc, payload)
                return Outcome.failure(ErrorClass.RETRYABLE, outcome.message, status=outcome.status)
            except Exception as exc:
                outcome = self._fail(exc, payload, timeout)
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
            client.responses.cancel(
                response_id, extra_headers=headers, timeout=self._sdk_timeout(self.profile.timeout_s)
            )
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
    """``openai.image``: one generated image, returned base64-encoded.

    Input: ``{"prompt", "model"?, "size"?, "quality"?}``.
    Result: ``{"artifact_b64", "artifact_name": "<key>.<ext>", "mime", "model", "source": "b64"|"url"}``.

    The image is asked for as base64 (``response_format="b64_json"``), except from
    ``gpt-image-*`` models, which always answer base64 and refuse the parameter. A
    server that refuses the parameter (400/422 naming it: nothing was generated, so
    nothing was paid) is asked once more without it, in the same attempt, and is not
    asked with it again. An answer with a URL instead is downloaded in the same
    attempt, within the attempt's timeout, without the API key; the URL is recorded
    as the provider job first, so an attempt (or a reconciliation after a crash) that
    finds it downloads the paid image instead of generating another.
    """

    kind = "openai.image"
    version = "1"
    #: a high-quality image takes a minute or two remotely, far longer on a local model
    default_timeout_s = 600.0
    #: an image file larger than this is not an image answer
    MAX_IMAGE_BYTES = 64 * 1024 * 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refuses_response_format: set[str] = set()

    @property
    def default_model(self) -> str:
        """The model of a job whose input names none (the profile's)."""
        return self.profile.image_model

    def validate(self, payload: Any) -> None:
        """Checks the input's shape; raises :class:`InvalidInput` with the reason."""
        data = _require_dict(payload, self.kind)
        self._check_profile(data)
        prompt = data.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidInput(f'{self.kind} input needs a non-empty "prompt"')
        for name in ("size", "quality"):
            if name in data and not isinstance(data[name], str):
                raise InvalidInput(f'"{name}" must be a string')

    def input_spec(self) -> InputSpec:
        """The form of this kind's input (see :func:`image_spec`)."""
        return image_spec(self.profile)

    def _asks_b64(self, model: str) -> bool:
        return not model.startswith("gpt-image") and model not in self._refuses_response_format

    def _generate(
        self,
        client: openai.OpenAI,
        model: str,
        payload: Mapping[str, Any],
        context: RunContext,
        deadline: float,
        b64: bool,
    ) -> Any:
        options: dict[str, Any] = {k: payload[k] for k in ("size", "quality") if k in payload}
        if b64:
            options["response_format"] = "b64_json"
        raw = client.images.with_raw_response.generate(
            model=model,
            prompt=payload["prompt"],
            n=1,
            extra_headers=self._headers(context.idempotency_key),
            timeout=self._sdk_timeout(deadline - self._monotonic()),
            **options,
        )
        self._observe(raw.headers)
        return raw.parse()

    def run(self, job: Any, context: RunContext) -> Outcome:
        """Generates one image (or fetches the one an earlier attempt was given a link to)."""
        payload = job.input
        timeout = self._timeout(context)
        deadline = self._monotonic() + timeout[0]
        try:
            self.validate(payload)
            client = self.client()
        except Exception as exc:
            return self._fail(exc, payload)
        model = self._model(payload, self.profile.image_model)
        earlier = context.provider_job_id
        if earlier and _is_image_link(earlier):
            fetched = self._fetch(earlier, deadline, timeout, payload)
            if isinstance(fetched, bytes):
                return Outcome.success(self._result(fetched, None, model, context, "url"))
            log.info("%s: the earlier image link failed (%s); generating again", self.kind, fetched.message)
        if context.cancelled.is_set():
            return Outcome.failure(ErrorClass.RETRYABLE, f"{self.kind}: cancelled before it started")
        b64 = self._asks_b64(model)
        try:
            try:
                images = self._generate(client, model, payload, context, deadline, b64)
            except _sdk().APIStatusError as exc:
                if not (b64 and _refuses_parameter(exc, "response_format")):
                    raise
                # refused as invalid before any work was done: ask as this server wants it
                self._refuses_response_format.add(model)
                images = self._generate(client, model, payload, context, deadline, False)
        except Exception as exc:
            return self._fail(exc, payload, timeout)
        data = images.data or []
        first = data[0] if data else None
        encoded = getattr(first, "b64_json", None)
        link = getattr(first, "url", None)
        usage = _usage(getattr(images, "usage", None))
        if encoded:
            try:
                content = base64.b64decode(encoded, validate=True)
            except ValueError:
                return Outcome.failure(ErrorClass.POISON, f"{self.kind}: the image data was not valid base64")
            return Outcome.success(self._result(content, None, model, context, "b64", usage))
        if isinstance(link, str) and _is_image_link(link):
            if context.record_provider_job is not None and not link.startswith("data:"):
                try:
                    context.record_provider_job(link)  # paid for: whoever runs the job next fetches it
                except Exception as exc:
                    log.warning("could not record the image link of %s: %s", context.job_id, type(exc).__name__)
                    return Outcome.failure(ErrorClass.RETRYABLE, f"{self.kind}: lease lost after the image was made")
            fetched = self._fetch(link, deadline, timeout, payload)
            if isinstance(fetched, Outcome):
                return fetched
            return Outcome.success(self._result(fetched, None, model, context, "url", usage))
        if isinstance(link, str) and link:
            # e.g. the LiteLLM proxy's mock answers "url": "mock"
            return Outcome.failure(ErrorClass.POISON, f"{self.kind}: the response's image link is not a URL")
        return Outcome.failure(ErrorClass.POISON, f"{self.kind}: the response had no image data")

    def _result(
        self,
        content: bytes,
        mime: str | None,
        model: str,
        context: RunContext,
        source: str,
        usage: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        mime = _image_mime(content) or mime or "image/png"
        result: dict[str, Any] = {
            "artifact_b64": base64.b64encode(content).decode("ascii"),
            "artifact_name": f"{context.idempotency_key}.{_IMAGE_EXTENSIONS.get(mime, 'png')}",
            "mime": mime,
            "model": model,
            "source": source,
            "provider": self.kind,
        }
        if usage is not None:
            result["usage"] = usage
        return result

    def _fetch(self, link: str, deadline: float, timeout: tuple[float, str], payload: Any) -> bytes | Outcome:
        """The image at ``link``, or a retryable failure (never poison: the image exists).

        A separate HTTP client: the API key must never go to the host that serves images.
        """
        if link.startswith("data:"):
            try:
                return base64.b64decode(link.split(",", 1)[1], validate=True)
            except (IndexError, ValueError):
                return Outcome.failure(ErrorClass.POISON, f"{self.kind}: the image data URL was not valid base64")
        host = _host_of(link)
        left = deadline - self._monotonic()
        if left <= 0:
            return Outcome.failure(ErrorClass.RETRYABLE, f"{self.kind}: {_timeout_text(timeout)} (before the download)")
        sdk = _sdk()
        try:
            with sdk.DefaultHttpxClient(timeout=self._sdk_timeout(left), follow_redirects=True) as http_client:
                with http_client.stream("GET", link) as response:
                    if response.status_code != 200:
                        return Outcome.failure(
                            ErrorClass.RETRYABLE,
                            f"{self.kind}: downloading the image from {host} failed: HTTP {response.status_code}",
                            status=response.status_code,
                        )
                    chunks: list[bytes] = []
                    size = 0
                    for chunk in response.iter_bytes():
                        size += len(chunk)
                        if size > self.MAX_IMAGE_BYTES:
                            return Outcome.failure(
                                ErrorClass.RETRYABLE, f"{self.kind}: the image at {host} is too large"
                            )
                        if self._monotonic() > deadline:
                            raise TimeoutError
                        chunks.append(chunk)
                    content_type = response.headers.get("content-type", "")
        except Exception as exc:
            if isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__:
                text = f"{self.kind}: downloading the image from {host}: {_timeout_text(timeout)}"
            else:
                text = f"{self.kind}: downloading the image from {host} failed ({type(exc).__name__})"
            return Outcome.failure(ErrorClass.RETRYABLE, redact(text, payload, secrets=self._secrets()))
        content = b"".join(chunks)
        if not content or (_image_mime(content) is None and not content_type.startswith("image/")):
            shown = content_type.split(";")[0] or "no content type"
            return Outcome.failure(
                ErrorClass.RETRYABLE, f"{self.kind}: the image link at {host} answered {shown}, not an image"
            )
        return content

    def lookup(self, job: Any) -> LookupResult:
        """An orphan that was given an image link: the image is fetched, not made again."""
        link = getattr(job, "provider_job_id", None)
        if not (isinstance(link, str) and _is_image_link(link)):
            return LookupResult(LookupResult.UNKNOWN)
        context = RunContext(
            job_id=str(getattr(job, "id", "")), attempt=0, idempotency_key=str(getattr(job, "idempotency_key", ""))
        )
        timeout = self._timeout(None)
        fetched = self._fetch(link, self._monotonic() + timeout[0], timeout, getattr(job, "input", None))
        if isinstance(fetched, Outcome):
            return LookupResult(LookupResult.UNKNOWN)
        payload = getattr(job, "input", None)
        model = self._model(payload if isinstance(payload, Mapping) else {}, self.profile.image_model)
        return LookupResult(LookupResult.FINISHED, result=self._result(fetched, None, model, context, "url"))


_IMAGE_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp", "image/gif": "gif"}


def _image_mime(content: bytes) -> str | None:
    """The image type by its magic bytes (servers' content types are often wrong)."""
    if content.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if content.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if content[:4] == b"RIFF" and content[8:12] == b"WEBP":
        return "image/webp"
    if content.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    return None


def _is_image_link(value: str) -> bool:
    return value.startswith(("https://", "http://", "data:image/"))


def _host_of(link: str) -> str:
    """Only the host of a link: image links carry signatures in their query."""
    from urllib.parse import urlsplit

    try:
        return urlsplit(link).netloc.rsplit("@", 1)[-1] or "the image host"
    except ValueError:
        return "the image host"


def _refuses_parameter(error: Any, name: str) -> bool:
    """A 400/422 that names ``name``: the server refused the request as invalid (nothing was made)."""
    if int(getattr(error, "status_code", 0)) not in (400, 422):
        return False
    body = getattr(error, "body", None)
    return name in (json.dumps(body, default=str) if body is not None else str(error))


class OpenAISpeechProvider(_OpenAIBase):
    """``openai.speech``: text to speech, returned base64-encoded.

    Input: ``{"input" | "text", "voice"?, "model"?, "format"?: mp3|opus|aac|flac|wav|pcm, "instructions"?}``.
    Result: ``{"artifact_b64", "artifact_name": "<key>.<format>", "mime", "bytes", "model"}``.
    """

    kind = "openai.speech"
    version = "1"
    #: speech is quicker than text or images: a full 4,096-character input takes well
    #: under a minute remotely; 5 minutes leaves room for a slow local TTS server.
    default_timeout_s = 300.0

    @property
    def default_model(self) -> str:
        """The model of a job whose input names none (the profile's)."""
        return self.profile.speech_model

    def validate(self, payload: Any) -> None:
        """Checks the input's shape; raises :class:`InvalidInput` with the reason."""
        data = _require_dict(payload, self.kind)
        self._check_profile(data)
        text = data.get("input", data.get("text"))
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(f'{self.kind} input needs a non-empty "input" text')
        fmt = data.get("format", "mp3")
        if fmt not in _SPEECH_FORMATS:
            raise InvalidInput(f'"format" must be one of {", ".join(_SPEECH_FORMATS)}')
        if "voice" in data and not isinstance(data["voice"], str):
            raise InvalidInput('"voice" must be a string')
        _check_range(data, "speed", *SPEED_RANGE)

    def input_spec(self) -> InputSpec:
        """The form of this kind's input (see :func:`speech_spec`)."""
        return speech_spec(self.profile)

    def run(self, job: Any, context: RunContext) -> Outcome:
        """Synthesises the audio."""
        payload = job.input
        timeout = self._timeout(context)
        try:
            self.validate(payload)
            client = self.client()
            model = self._model(payload, self.profile.speech_model)
            fmt = payload.get("format", "mp3")
            options: dict[str, Any] = (
                {"instructions": payload["instructions"]} if isinstance(payload.get("instructions"), str) else {}
            )
            if payload.get("speed") is not None:
                options["speed"] = payload["speed"]
            audio = client.audio.speech.create(
                model=model,
                voice=payload.get("voice", self.profile.voice),
                input=payload.get("input", payload.get("text")),
                response_format=fmt,
                extra_headers=self._headers(context.idempotency_key),
                timeout=self._sdk_timeout(timeout[0]),
                **options,
            )
            self._observe(audio.response.headers)
            content = audio.content
        except Exception as exc:
            return self._fail(exc, payload, timeout)
        if not content:
            return Outcome.failure(ErrorClass.POISON, f"{self.kind}: the response had no audio")
        return Outcome.success(
            {
                "artifact_b64": base64.b64encode(content).decode("ascii"),
                "artifact_name": f"{context.idempotency_key}.{fmt}",
                "mime": _SPEECH_FORMATS[fmt],
                "bytes": len(content),
                "model": model,
                "provider": self.kind,
            }
        )


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
    "delete_api_key",
    "diagnose_connection",
    "make_providers",
    "parse_duration",
    "rate_limit_info",
    "resolve_api_key",
    "retry_after_from_headers",
    "store_api_key",
    "with_profile",
    "key_fingerprint",
]
