"""The ``demo`` provider: offline, no account, deterministic, and able to fail on purpose.

Input::

    {"prompt": str, "duration_s": float = 1.0, "fail_times": int = 0,
     "fail_with": "retryable" | "throttled" | "fatal" | "poison" | <HTTP status>,
     "retry_after_s": float}

It "generates" a text derived from the prompt (so results are visible and the same
input always gives the same text), heartbeats and honours cancellation while it
works, and fails the first ``fail_times`` attempts, counted over ``total_attempts``
so that a retried dead letter succeeds once its failures are used up.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

from desktop_queue.core.errors import InvalidInput
from desktop_queue.core.inputspec import Choice, FieldType, InputField, InputSpec
from desktop_queue.core.model import ErrorClass
from desktop_queue.core.outcome import LookupResult, Outcome, RunContext

FAIL_WITH = ("retryable", "throttled", "fatal", "poison")
MAX_DURATION_S = 3600.0
_STATUS_CLASS = {
    408: ErrorClass.RETRYABLE,
    409: ErrorClass.RETRYABLE,
    429: ErrorClass.THROTTLED,
    500: ErrorClass.RETRYABLE,
    502: ErrorClass.RETRYABLE,
    503: ErrorClass.RETRYABLE,
    504: ErrorClass.RETRYABLE,
    400: ErrorClass.FATAL,
    401: ErrorClass.FATAL,
    403: ErrorClass.FATAL,
    404: ErrorClass.FATAL,
    422: ErrorClass.FATAL,
}
_WORDS = [
    "amber",
    "harbor",
    "quiet",
    "lattice",
    "ember",
    "willow",
    "signal",
    "orbit",
    "meadow",
    "cobalt",
    "lantern",
    "river",
    "granite",
    "echo",
    "velvet",
    "summit",
    "drift",
    "falcon",
    "prism",
    "tide",
    "cedar",
    "aurora",
    "pebble",
    "quartz",
]


#: the HTTP statuses the form offers for "fail with" (any 100-599 is accepted)
FORM_STATUSES = (429, 500, 503, 400, 401)


def input_spec() -> InputSpec:
    """The demo's input as a form: a prompt and a duration; the fault knobs under Advanced."""
    fail_with = tuple(
        [
            Choice("retryable", "retryable (a connection reset)"),
            Choice("throttled", "throttled (a 429 rate limit)"),
            Choice("fatal", "fatal (an invalid request)"),
            Choice("poison", "poison (output that fails its schema)"),
        ]
        + [Choice(status, f"HTTP {status}") for status in FORM_STATUSES]
    )
    return InputSpec(
        kind="demo",
        notes="The offline demo: no account needed. It writes a made-up text from your prompt.",
        fields=(
            InputField(
                "prompt",
                FieldType.TEXT,
                "&Prompt:",
                default="",
                required=True,
                placeholder="What should the demo generate? (required)",
                help="Any text; the same prompt always gives the same made-up answer.",
            ),
            InputField(
                "duration_s",
                FieldType.NUMBER,
                "&Duration:",
                default=1.0,
                minimum=0.0,
                maximum=MAX_DURATION_S,
                unit="s",
                step=0.5,
                help="How long the demo pretends to work, heartbeating its lease.",
            ),
            InputField(
                "fail_times",
                FieldType.INTEGER,
                "Fail the &first:",
                default=0,
                minimum=0,
                unit="attempt",
                units="attempts",
                advanced=True,
                help="A testing tool: the first N attempts (over every run) fail, then it succeeds.",
            ),
            InputField(
                "fail_with",
                FieldType.CHOICE,
                "Fail &with:",
                choices=fail_with,
                placeholder="retryable (the default)",
                advanced=True,
                implies=(("fail_times", 1),),
                help="A testing tool: how those attempts fail (default: retryable). "
                "Any HTTP status 100-599 works from the JSON tab.",
            ),
            InputField(
                "retry_after_s",
                FieldType.NUMBER,
                "Retry-&After:",
                minimum=0.0,
                placeholder="none",
                unit="s",
                advanced=True,
                help="A testing tool: the Retry-After a failure reports (empty: none).",
            ),
        ),
    )


def classify_status(status: int) -> ErrorClass:
    """The failure class of an HTTP status (shared/DESIGN.md section 2)."""
    if status in _STATUS_CLASS:
        return _STATUS_CLASS[status]
    return ErrorClass.RETRYABLE if status >= 500 else ErrorClass.FATAL


def generate(prompt: str, words: int = 48) -> str:
    """A deterministic pseudo-text seeded by the prompt."""
    seed = hashlib.sha256(prompt.encode("utf-8")).digest()
    out = []
    for i in range(words):
        out.append(_WORDS[(seed[i % len(seed)] + i * 7) % len(_WORDS)])
    text = " ".join(out)
    return text[0].upper() + text[1:] + "."


class DemoProvider:
    """The built-in offline provider."""

    kind = "demo"
    version = "1"
    #: an attempt costs nothing: the runtime need not keep its answer on disk before
    #: the commit (a crash in between makes the text again; a provider without this
    #: attribute is treated as paid)
    paid = False

    def __init__(self, tick_s: float = 0.05) -> None:
        self.tick_s = tick_s

    def input_spec(self) -> InputSpec:
        """The form of the demo's input (see :func:`input_spec`)."""
        return input_spec()

    def validate(self, payload: Any) -> None:
        """Checks the demo input's shape; raises :class:`InvalidInput` with the reason."""
        if not isinstance(payload, dict):
            raise InvalidInput('demo input must be a JSON object with a "prompt"')
        prompt = payload.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidInput('demo input needs a non-empty "prompt" string')
        duration = payload.get("duration_s", 1.0)
        if not isinstance(duration, (int, float)) or isinstance(duration, bool) or not 0 <= duration <= MAX_DURATION_S:
            raise InvalidInput(f'"duration_s" must be a number between 0 and {MAX_DURATION_S:g}')
        fail_times = payload.get("fail_times", 0)
        if not isinstance(fail_times, int) or isinstance(fail_times, bool) or fail_times < 0:
            raise InvalidInput('"fail_times" must be a whole number of at least 0')
        fail_with = payload.get("fail_with", "retryable")
        if isinstance(fail_with, bool) or not (
            fail_with in FAIL_WITH or (isinstance(fail_with, int) and 100 <= fail_with <= 599)
        ):
            raise InvalidInput(f'"fail_with" must be one of {", ".join(FAIL_WITH)} or an HTTP status')
        retry_after = payload.get("retry_after_s")
        if retry_after is not None and (not isinstance(retry_after, (int, float)) or retry_after < 0):
            raise InvalidInput('"retry_after_s" must be a number of seconds')

    def run(self, job: Any, context: RunContext) -> Outcome:
        """Works for ``duration_s`` (heartbeating, honouring cancel), then fails or succeeds."""
        payload = job.input
        duration = float(payload.get("duration_s", 1.0))
        deadline = time.monotonic() + duration
        next_beat = time.monotonic() + max(self.tick_s, 1.0)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if context.cancelled.wait(min(self.tick_s, left)):
                return Outcome.failure(ErrorClass.RETRYABLE, "cancelled before it finished")
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + 1.0
                if not context.beat():
                    return Outcome.failure(ErrorClass.RETRYABLE, "lease lost while working")
        # fail_times counts over every attempt ever made (total_attempts includes this one)
        if job.total_attempts <= int(payload.get("fail_times", 0)):
            return self._failure(payload)
        text = generate(payload["prompt"])
        audit = os.environ.get("DESKTOP_QUEUE_DEMO_AUDIT")
        if audit:  # test hook: one line per produced result, to count productions
            with open(audit, "a", encoding="utf-8") as fh:
                fh.write(f"{job.idempotency_key}\n")
        return Outcome.success({"text": text, "words": len(text.split()), "provider": "demo", "model": "demo-1"})

    def _failure(self, payload: dict[str, Any]) -> Outcome:
        how = payload.get("fail_with", "retryable")
        retry_after = payload.get("retry_after_s")
        if isinstance(how, int):
            cls = classify_status(how)
            return Outcome.failure(cls, f"demo: simulated HTTP {how}", status=how, retry_after=retry_after)
        messages = {
            "retryable": "demo: simulated connection reset",
            "throttled": "demo: simulated rate limit (429)",
            "fatal": "demo: simulated invalid request (400)",
            "poison": "demo: the output failed its schema",
        }
        status = {"throttled": 429, "fatal": 400}.get(how)
        return Outcome.failure(ErrorClass(how), messages[how], status=status, retry_after=retry_after)

    def classify(self, error: BaseException) -> Outcome:
        """Unexpected exceptions are retryable, with only their type recorded (no text)."""
        if isinstance(error, (TimeoutError, ConnectionError)):
            return Outcome.failure(ErrorClass.RETRYABLE, f"demo: {type(error).__name__}")
        return Outcome.failure(ErrorClass.RETRYABLE, f"demo: unexpected {type(error).__name__}")

    def lookup(self, job: Any) -> LookupResult:
        """The demo keeps no server-side record: an orphan's outcome is unknown."""
        return LookupResult(LookupResult.UNKNOWN)
