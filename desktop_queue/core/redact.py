"""Keeps secrets and prompt text out of stored error messages (invariant 7).

Redaction must not make the message useless: it hides what is secret (API keys,
the job's own text) and leaves the rest readable. So:

- a secret is hidden only when it could be one (:data:`MIN_SECRET_CHARS` or more):
  placeholder keys such as ``x`` or ``ollama`` would otherwise cut words such as
  ``max_tokens`` apart;
- input text is found only as whole words (never inside a longer word), and only
  from the input's text, not from its settings (``model``, ``role``, ``format``...);
- a match that is nothing but a setting of the same input (the model name, say, when
  a prompt happens to repeat it) stays readable: that value is no secret.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from typing import Any

_SECRET_PATTERNS = [
    re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9_\-\.=]+"),
    re.compile(r"(?i)(api[_-]?key|authorization|token|secret|password)(\s*[:=]\s*)\S+"),
]
REDACTED = "[redacted]"
MAX_MESSAGE = 300
#: A shorter secret is a placeholder (``x``, ``ollama``, ``no-key``), not a key.
MIN_SECRET_CHARS = 8
#: Input strings shorter than this are not looked for (they match too much by chance).
MIN_FRAGMENT_CHARS = 6
#: Quoted input is found as runs of this many words shared with the input ...
OVERLAP_WORDS = 3
#: ... that together make at least this many characters ("is not a" is no quote).
OVERLAP_MIN_CHARS = 12
#: Longer input strings are only found through shared word runs (a regex that long is too slow).
MAX_PATTERN_CHARS = 2000
#: A provider may quote only the start of a long prompt: this much of it is looked for.
PREFIX_CHARS = 24
#: Input keys whose values are settings, not text: not hidden, and kept readable.
SETTING_KEYS = frozenset(
    {
        "model",
        "role",
        "type",
        "voice",
        "format",
        "size",
        "quality",
        "profile",
        "reasoning_effort",
        "effort",
        "detail",
        "tool_choice",
        "required",
        "output_format",
    }
)
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


def _text_and_settings(value: Any, setting: bool = False) -> Iterator[tuple[str, bool]]:
    """Every string of the input with whether it is a setting (under a :data:`SETTING_KEYS` key)."""
    if isinstance(value, str):
        yield value, setting
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _text_and_settings(item, setting or key in SETTING_KEYS)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _text_and_settings(item, setting)


def redact(message: str, job_input: Any = None, secrets: tuple[str, ...] = ()) -> str:
    """Removes API keys, bearer tokens and the input's text from ``message``.

    Hidden: every ``secrets`` entry of :data:`MIN_SECRET_CHARS`+ characters, anywhere;
    the input's text strings of :data:`MIN_FRAGMENT_CHARS`+ characters as whole words,
    in any case, with any whitespace or JSON-escaped; the first :data:`PREFIX_CHARS`
    characters of long ones; any run of :data:`OVERLAP_WORDS`+ words shared with them;
    and anything shaped like a key (``sk-...``, ``Bearer ...``, ``api_key=...``).
    The result is also cut to :data:`MAX_MESSAGE` characters.
    """
    text = str(message)
    spans: list[tuple[int, int]] = []
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET_CHARS:
            spans.extend(_occurrences(text, secret))
    keep = _merge(spans)  # secrets go whatever else is found
    texts: set[str] = set()
    settings: set[str] = set()
    for value, setting in _text_and_settings(job_input):
        (settings if setting else texts).add(value)
    fragments = sorted((s for s in texts if len(s.strip()) >= MIN_FRAGMENT_CHARS), key=len, reverse=True)
    found: list[tuple[int, int]] = []
    for fragment in fragments:
        if len(fragment) <= MAX_PATTERN_CHARS:
            found.extend(m.span() for m in _loose_pattern(fragment).finditer(text))
        else:
            found.extend(_occurrences(text, fragment))
        if len(fragment) > PREFIX_CHARS:
            # a provider may quote only the start of a long prompt (up to the end of a cut word)
            found.extend(m.span() for m in _loose_pattern(fragment[:PREFIX_CHARS], open_end=True).finditer(text))
    if fragments:
        found.extend(_overlaps(text, fragments))
    readable = {s.strip().casefold() for s in settings if s.strip()}
    for start, end in _merge(found):
        if text[start:end].strip().casefold() not in readable:
            keep.append((start, end))
    text = _apply(text, _merge(keep))
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) + m.group(2) + REDACTED) if m.lastindex == 2 else REDACTED, text)
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def _occurrences(text: str, needle: str) -> Iterator[tuple[int, int]]:
    start = text.find(needle)
    while start >= 0:
        yield start, start + len(needle)
        start = text.find(needle, start + len(needle))


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping or touching spans joined, in order."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _apply(text: str, spans: list[tuple[int, int]]) -> str:
    out = []
    pos = 0
    for start, end in spans:
        out.append(text[pos:start])
        out.append(REDACTED)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _loose_pattern(fragment: str, open_end: bool = False) -> re.Pattern[str]:
    """Matches ``fragment`` as whole words, in any case, with any whitespace, or as a JSON string body.

    With ``open_end`` the match runs on to the end of the word the fragment stops in.
    """
    words = []
    for word in fragment.split():
        words.append("".join("\\\\?" + re.escape(c) if c in '"\\' else re.escape(c) for c in word))
    body = r"(?:\s|\\[nrt])+".join(words)
    stripped = fragment.strip()
    head = r"(?<!\w)" if stripped[:1].isalnum() or stripped[:1] == "_" else ""
    if open_end:
        tail = r"\w*"
    else:
        tail = r"(?!\w)" if stripped[-1:].isalnum() or stripped[-1:] == "_" else ""
    return re.compile(head + body + tail, re.IGNORECASE)


def _overlaps(text: str, fragments: list[str]) -> list[tuple[int, int]]:
    """Spans of every run of :data:`OVERLAP_WORDS`+ consecutive words that also occurs in a fragment."""
    tokens = [(m.start(), m.end(), m.group(1).lower()) for m in _TOKEN.finditer(text) if m.group(1)]
    if len(tokens) < OVERLAP_WORDS:
        return []
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
    spans = []
    i = 0
    while i < len(tokens):
        if not hit[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(tokens) and hit[j + 1]:
            j += 1
        start, end = tokens[i][0], tokens[j][1]
        if sum(len(t[2]) for t in tokens[i : j + 1]) >= OVERLAP_MIN_CHARS:
            spans.append((start, end))
        i = j + 1
    return spans
