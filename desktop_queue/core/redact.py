"""Keeps secrets and prompt text out of stored error messages (invariant 7)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

_SECRET_PATTERNS = [
    re.compile(r"sk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)bearer\s+[A-Za-z0-9_\-\.=]+"),
    re.compile(r"(?i)(api[_-]?key|authorization|token|secret|password)(\s*[:=]\s*)\S+"),
]
REDACTED = "[redacted]"
MAX_MESSAGE = 300


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def redact(message: str, job_input: Any = None, secrets: tuple[str, ...] = ()) -> str:
    """Removes API keys, bearer tokens and any input text (6+ characters) from ``message``.

    The result is also cut to :data:`MAX_MESSAGE` characters.
    """
    text = str(message)
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    fragments = sorted({s for s in _strings(job_input) if len(s) >= 6}, key=len, reverse=True)
    for fragment in fragments:
        text = text.replace(fragment, REDACTED)
        # a provider may quote only the start of a long prompt
        if len(fragment) > 24:
            text = text.replace(fragment[:24], REDACTED)
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) + m.group(2) + REDACTED) if m.lastindex == 2 else REDACTED, text)
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"
