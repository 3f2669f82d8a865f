"""Keeps secrets and prompt text out of stored error messages (invariant 7)."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from typing import Any

_SECRET_PATTERNS = [
    re.compile(r"sk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)bearer\s+[A-Za-z0-9_\-\.=]+"),
    re.compile(r"(?i)(api[_-]?key|authorization|token|secret|password)(\s*[:=]\s*)\S+"),
]
REDACTED = "[redacted]"
MAX_MESSAGE = 300
#: Quoted input is found as runs of this many words shared with the input.
OVERLAP_WORDS = 3
#: Longer input strings are only found through shared word runs (a regex that long is too slow).
MAX_PATTERN_CHARS = 2000
# a word, or a JSON escape (``\n``, ``\"``...) that separates words in a quoted request body
_TOKEN = re.compile(r'\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])|(\w+)')


def strings_in(value: Any) -> Iterator[str]:
    """Every string inside a JSON value (object values, array items), depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from strings_in(item)


def redact(message: str, job_input: Any = None, secrets: tuple[str, ...] = ()) -> str:
    """Removes API keys, bearer tokens and any input text (6+ characters) from ``message``.

    The result is also cut to :data:`MAX_MESSAGE` characters.
    """
    text = str(message)
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    fragments = sorted({s for s in strings_in(job_input) if len(s) >= 6}, key=len, reverse=True)
    for fragment in fragments:
        text = text.replace(fragment, REDACTED)
        # quoted in another case, with its whitespace collapsed, or JSON-escaped
        if len(fragment) <= MAX_PATTERN_CHARS and fragment.strip():
            text = _loose_pattern(fragment).sub(REDACTED, text)
    if fragments:
        # ... or any part of it: every run of words it shares with the input
        text = _redact_overlap(text, fragments)
    for fragment in fragments:
        # a provider may quote only the start of a long prompt
        if len(fragment) > 24:
            text = text.replace(fragment[:24], REDACTED)
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) + m.group(2) + REDACTED) if m.lastindex == 2 else REDACTED, text)
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def _loose_pattern(fragment: str) -> re.Pattern[str]:
    """Matches ``fragment`` in any case, with any whitespace, or as a JSON string body."""
    words = []
    for word in fragment.split():
        words.append("".join("\\\\?" + re.escape(c) if c in '"\\' else re.escape(c) for c in word))
    return re.compile(r"(?:\s|\\[nrt])+".join(words), re.IGNORECASE)


def _redact_overlap(text: str, fragments: list[str]) -> str:
    """Replaces every run of :data:`OVERLAP_WORDS`+ consecutive words that also occurs in a fragment."""
    tokens = [(m.start(), m.end(), m.group(1).lower()) for m in _TOKEN.finditer(text) if m.group(1)]
    if len(tokens) < OVERLAP_WORDS:
        return text
    grams: dict[tuple[str, ...], list[int]] = {}
    for i in range(len(tokens) - OVERLAP_WORDS + 1):
        grams.setdefault(tuple(t[2] for t in tokens[i : i + OVERLAP_WORDS]), []).append(i)
    hit = [False] * len(tokens)
    for fragment in fragments:
        window: deque[str] = deque(maxlen=OVERLAP_WORDS)
        for m in _TOKEN.finditer(fragment):
            if m.group(1):
                window.append(m.group(1).lower())
                for i in grams.get(tuple(window), ()) if len(window) == OVERLAP_WORDS else ():
                    hit[i : i + OVERLAP_WORDS] = [True] * OVERLAP_WORDS
    out = []
    pos = 0
    i = 0
    while i < len(tokens):
        if not hit[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(tokens) and hit[j + 1]:
            j += 1
        out.append(text[pos : tokens[i][0]])
        out.append(REDACTED)
        pos = tokens[j][1]
        i = j + 1
    out.append(text[pos:])
    return "".join(out)
