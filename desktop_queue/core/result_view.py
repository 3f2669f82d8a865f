"""What a job's result is, for people: text, JSON, an image or an audio file, or why there is none.

Shared by the window's Result and Details views and the command line's ``result`` and
``show``, so both read a result document the same way (no Qt).

A provider's result is a JSON value; the result store keeps it inside a document (see
:mod:`desktop_queue.core.results`):

- chat and Responses jobs answer ``{"text": ..., "model", "usage", ...}``: **text**;
- image and speech jobs answer an artifact, which the store keeps as a file next to
  the document (``artifact_ref``, ``mime``, ``artifact_bytes``): **image**, **audio**,
  or any other **file**;
- a plain string is **text**; anything else is shown as pretty-printed **JSON**.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import enum
import os
import re
import wave
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from desktop_queue.core.flow import default_profile_of
from desktop_queue.core.ledger import LedgerEntry, Usage, format_usd, usage_of
from desktop_queue.core.model import Job, State
from desktop_queue.core.present import error_text
from desktop_queue.core.results import ResultProblem, ResultStore

#: text larger than this (UTF-8 bytes) is read and laid out off the window's thread
LARGE_TEXT_BYTES = 256 * 1024
#: an artifact larger than this is decoded off the window's thread (every image is, in practice)
LARGE_ARTIFACT_BYTES = 256 * 1024
#: the window shows at most this much text (Copy and Save as… take all of it)
SHOWN_TEXT_LIMIT = 2 * 1024 * 1024
#: ``show`` prints at most this many characters of a text result (``result`` prints all)
SHOW_TEXT_CHARS = 4000
#: OpenAI's ``pcm`` speech format: raw 24 kHz, 16-bit, mono samples
PCM_RATE, PCM_SAMPLE_BYTES = 24_000, 2


class ResultKind(enum.StrEnum):
    """How a result is shown."""

    NONE = "none"
    TEXT = "text"
    JSON = "json"
    IMAGE = "image"
    AUDIO = "audio"
    FILE = "file"


@dataclass(frozen=True)
class ResultContent:
    """A job's result as a view shows it.

    Attributes:
        kind: text, json, image, audio, file, or none (then :attr:`message` says why).
        message: one line for people: why there is no result, or what the result is
            (``text · 1,204 characters · gpt-4o-mini · finish: stop``).
        text: the text (``TEXT``) or the pretty-printed JSON (``JSON``); None otherwise.
        path: the artifact file (``IMAGE``, ``AUDIO``, ``FILE``).
        mime: the artifact's media type, ``text/plain`` or ``application/json``.
        size: bytes: the text's UTF-8 length, or the artifact file's length.
        duration_s: an audio artifact's length in seconds, when it can be told.
        problem: set when the job should have a result and it cannot be read.
        meta: what the provider said about the result (model, finish reason, usage, ids).
    """

    kind: ResultKind
    message: str
    text: str | None = None
    path: Path | None = None
    mime: str | None = None
    size: int | None = None
    duration_s: float | None = None
    problem: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def has_result(self) -> bool:
        return self.kind is not ResultKind.NONE

    @property
    def is_artifact(self) -> bool:
        return self.kind in (ResultKind.IMAGE, ResultKind.AUDIO, ResultKind.FILE)


def human_bytes(n: int | None) -> str:
    """``812 B``, ``3.4 KiB``, ``12.0 MiB``."""
    if n is None:
        return "?"
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    if n < 1024**3:
        return f"{n / 1024 / 1024:.1f} MiB"
    return f"{n / 1024**3:.1f} GiB"


def duration_text(seconds: float | None) -> str:
    """``0:07``, ``3:25``, ``1:02:03`` (or ``?``)."""
    if seconds is None:
        return "?"
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def no_result_reason(job: Job | Mapping[str, Any]) -> str:
    """Why a job has no result (yet): ``queued — no result yet``, ``dead: fatal HTTP 401: …``."""
    data = _job_mapping(job)
    state = data.get("state")
    if state == State.QUEUED:
        return "queued — no result yet" if not data.get("total_attempts") else "queued to retry — no result yet"
    if state == State.RUNNING:
        return "running — no result yet"
    if state == State.DEAD:
        return f"dead: {error_text(data) or 'no attempts left'}"
    if state == State.CANCELLED:
        return "cancelled — no result"
    if state == State.SUCCEEDED:
        return "succeeded without a stored result"
    return f"{state} — no result"


def _job_mapping(job: Job | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(job, Mapping):
        return job
    return {
        "state": job.state,
        "total_attempts": job.total_attempts,
        "last_error": job.last_error,
        "result_ref": job.result_ref,
    }


def audio_duration(path: Path, mime: str | None) -> float | None:
    """The length of a WAV (or OpenAI ``pcm``) file in seconds; None for other formats or a bad file."""
    name = path.name.lower()
    kind = (mime or "").split(";", 1)[0].strip().lower()
    if name.endswith(".wav") or kind in ("audio/wav", "audio/x-wav", "audio/wave"):
        try:
            with wave.open(str(path), "rb") as fh:
                rate = fh.getframerate()
                return fh.getnframes() / rate if rate else None
        except (OSError, EOFError, wave.Error):
            return None
    if name.endswith(".pcm") or kind in ("audio/pcm", "audio/l16"):
        with contextlib.suppress(OSError):
            return os.path.getsize(path) / (PCM_RATE * PCM_SAMPLE_BYTES)
    return None


def _meta(result: Mapping[str, Any]) -> dict[str, Any]:
    keep = ("model", "finish_reason", "status", "usage", "id", "provider", "provider_job_id", "source")
    return {k: result[k] for k in keep if result.get(k) is not None}


def _text_message(text: str, meta: Mapping[str, Any], size: int) -> str:
    parts = [f"text · {len(text):,} characters"]
    if size >= 1024:
        parts.append(human_bytes(size))
    if meta.get("model"):
        parts.append(str(meta["model"]))
    if meta.get("finish_reason"):
        parts.append(f"finish: {meta['finish_reason']}")
    return " · ".join(parts)


def describe_document(
    job: Job | Mapping[str, Any],
    doc: Mapping[str, Any] | None,
    *,
    problem: ResultProblem | None = None,
    resolve: Any = None,
) -> ResultContent:
    """What a result document holds, as a view shows it (reads an artifact's file size and audio length).

    Args:
        job: the job (its state says why there is no result).
        doc: the stored result document (:meth:`ResultStore.get`), or None.
        problem: why a job with a ``result_ref`` has no readable document.
        resolve: ``ref -> Path`` for an artifact's ``artifact_ref`` (:meth:`ResultStore.resolve`).
    """
    data = _job_mapping(job)
    if doc is None:
        if problem is not None:
            why = f"the result file is missing or damaged: {problem.message}"
            return ResultContent(ResultKind.NONE, why, problem=why)
        if data.get("result_ref"):
            why = "the result file is missing or damaged: it could not be read"
            return ResultContent(ResultKind.NONE, why, problem=why)
        return ResultContent(ResultKind.NONE, no_result_reason(data))
    result = doc.get("result")
    if isinstance(result, str):
        size = len(result.encode())
        return ResultContent(
            ResultKind.TEXT, _text_message(result, {}, size), text=result, mime="text/plain", size=size
        )
    if isinstance(result, Mapping):
        meta = _meta(result)
        ref = result.get("artifact_ref")
        if isinstance(ref, str):
            return _artifact(result, ref, meta, resolve)
        text = result.get("text")
        if isinstance(text, str):
            size = len(text.encode())
            return ResultContent(
                ResultKind.TEXT, _text_message(text, meta, size), text=text, mime="text/plain", size=size, meta=meta
            )
    pretty = orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
    size = len(pretty.encode())
    return ResultContent(
        ResultKind.JSON,
        f"JSON · {human_bytes(size)}",
        text=pretty,
        mime="application/json",
        size=size,
        meta=_meta(result) if isinstance(result, Mapping) else {},
    )


def _artifact(result: Mapping[str, Any], ref: str, meta: dict[str, Any], resolve: Any) -> ResultContent:
    mime = str(result.get("mime") or "application/octet-stream")
    kind = (
        ResultKind.IMAGE
        if mime.startswith("image/")
        else ResultKind.AUDIO
        if mime.startswith("audio/")
        else ResultKind.FILE
    )
    try:
        path = Path(resolve(ref)) if resolve is not None else Path(ref)
    except ValueError:
        why = f"the result's artifact {ref} lies outside the result store; not shown"
        return ResultContent(ResultKind.NONE, why, problem=why, meta=meta)
    try:
        size = path.stat().st_size
    except OSError:
        why = f"the result file is missing or damaged: the artifact {path} is not there"
        return ResultContent(ResultKind.NONE, why, problem=why, path=path, mime=mime, meta=meta)
    expected = result.get("artifact_bytes")
    if isinstance(expected, int) and expected != size:
        why = f"the result file is missing or damaged: the artifact {path} has {size:,} bytes, not {expected:,}"
        return ResultContent(ResultKind.NONE, why, problem=why, path=path, mime=mime, meta=meta)
    duration = None
    if kind is ResultKind.AUDIO:
        duration = audio_duration(path, mime)
        if duration is None:
            stated = result.get("seconds", result.get("duration"))
            duration = float(stated) if isinstance(stated, (int, float)) and not isinstance(stated, bool) else None
    noun = {ResultKind.IMAGE: "image", ResultKind.AUDIO: "audio"}.get(kind, "file")
    parts = [f"{noun} · {mime} · {human_bytes(size)}"]
    if duration is not None:
        parts.append(duration_text(duration))
    if meta.get("model"):
        parts.append(str(meta["model"]))
    return ResultContent(kind, " · ".join(parts), path=path, mime=mime, size=size, duration_s=duration, meta=meta)


def read_result(results: ResultStore, job: Job) -> ResultContent:
    """The result of ``job`` from the store (reads its document and artifact: may take a while for big ones)."""
    if not job.result_ref:
        return ResultContent(ResultKind.NONE, no_result_reason(job))
    doc = results.get(job.idempotency_key)
    problem = results.problem(job.idempotency_key) if doc is None else None
    return describe_document(job, doc, problem=problem, resolve=results.artifact_file)


def result_size_hint(results: ResultStore, job: Job) -> int | None:
    """The size of ``job``'s result file in bytes, told by one ``stat`` (None: not a file yet, or none).

    Lets a view decide before reading whether to read off its thread and say "loading…".
    """
    if not job.result_ref:
        return None
    try:
        return results.path_for(job.idempotency_key).stat().st_size
    except OSError:
        return None


_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_BLOCK_START = re.compile(r"^\s{0,3}(#{1,6}\s|[-*+]\s|\d+[.)]\s|>|\|)")


def with_line_breaks(markdown: str) -> str:
    """``markdown`` with each line break kept as a break, as chat answers are written.

    CommonMark joins consecutive lines into one paragraph, which runs a poem's or an
    address's lines together; models mean a newline as a newline. A line followed by
    another line of the same paragraph gets a hard break (a trailing backslash); code
    fences, blank lines and lines that start a block (headings, list items, quotes,
    table rows) are left alone.
    """
    lines = markdown.split("\n")
    out: list[str] = []
    in_fence = False
    for index, line in enumerate(lines):
        if _FENCE.match(line):
            in_fence = not in_fence
            out.append(line)
            continue
        following = lines[index + 1] if index + 1 < len(lines) else ""
        joins = (
            not in_fence
            and line.strip()
            and following.strip()
            and not _FENCE.match(following)
            and not _BLOCK_START.match(following)
            and not line.startswith("    ")
            and not line.rstrip().endswith(("\\", "|"))
            and not line.endswith("  ")
            and not re.match(r"^\s{0,3}#{1,6}\s", line)
        )
        out.append(line.rstrip() + "\\" if joins else line)
    return "\n".join(out)


def show_text(text: str, limit: int = SHOW_TEXT_CHARS) -> tuple[str, bool]:
    """``text`` cut at about ``limit`` characters (at a line end when one is near); True if cut."""
    if len(text) <= limit:
        return text, False
    cut = text.rfind("\n", int(limit * 0.8), limit)
    return text[: cut if cut > 0 else limit], True


# ---------------------------------------------------------------------- details


@dataclass(frozen=True)
class JobDetails:
    """What the Details view lists, in order: ``(label, value)`` rows and the input.

    Attributes:
        rows: label and text, e.g. ``("Model", "gpt-4o-mini")``; values are plain text.
        input_text: the job's input, pretty-printed JSON (the user's own data: shown
            here only, never put in events or logs).
        prompt: the prompt text when the input has one (``prompt``, ``input``, ``text``
            or the last user message), for a Copy button.
    """

    rows: list[tuple[str, str]]
    input_text: str
    prompt: str | None


def prompt_of(payload: Any) -> str | None:
    """The prompt a person wrote: ``prompt``, ``input`` or ``text`` as a string, or the last user message."""
    if not isinstance(payload, Mapping):
        return None
    for key in ("prompt", "input", "text"):
        value = payload.get(key)
        if isinstance(value, str):
            return value
    messages = payload.get("messages")
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, Mapping) and message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, str):
                    return content
    return None


def _iso(ts: float | None) -> str:
    if ts is None:
        return "—"
    return _dt.datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def usage_text(usage: Usage) -> str:
    """``1,200 tokens in, 350 out`` / ``1 image`` / ``420 characters spoken`` / ``—``."""
    parts = []
    if usage.tokens_in or usage.tokens_out:
        parts.append(f"{usage.tokens_in:,} tokens in, {usage.tokens_out:,} out")
    if usage.images:
        parts.append(f"{usage.images} image{'s' if usage.images != 1 else ''}")
    if usage.speech_chars:
        parts.append(f"{usage.speech_chars:,} characters spoken")
    if usage.speech_seconds:
        parts.append(f"{usage.speech_seconds:.1f} s of audio")
    return ", ".join(parts) or "—"


def cost_text(entries: list[LedgerEntry] | None) -> str:
    """What the spend ledger recorded for a job's attempts: ``$0.0012 (2 attempts)``."""
    if entries is None:
        return "—"
    if not entries:
        return "nothing recorded"
    known = [e.usd for e in entries if e.usd is not None]
    unknown = len(entries) - len(known)
    text = format_usd(sum(known)) if known else "unknown"
    notes = []
    if len(entries) > 1:
        notes.append(f"{len(entries)} attempts")
    if unknown and known:
        notes.append(f"{unknown} of unknown price")
    return text + (f" ({', '.join(notes)})" if notes else "")


def job_details(
    job: Job,
    doc: Mapping[str, Any] | None = None,
    *,
    spend: list[LedgerEntry] | None = None,
    profile: str | None = None,
) -> JobDetails:
    """The Details view of a job: input, kind, model, profile, usage and cost, ids, key, attempts, times.

    Args:
        job: the job (with its input).
        doc: its result document, if any (the model and usage it reports).
        spend: the ledger entries of its attempts (None: not looked up).
        profile: the profile that runs it (default: the kind's, see ``default_profile_of``).
    """
    payload = job.input
    result = doc.get("result") if doc is not None else None
    result_map: Mapping[str, Any] = result if isinstance(result, Mapping) else {}
    asked = payload.get("model") if isinstance(payload, Mapping) else None
    reported = result_map.get("model")
    if reported and asked and reported != asked:
        model = f"{reported} (asked for {asked})"
    else:
        model = str(reported or asked or "— (the profile's default)")
    text = payload.get("input") if isinstance(payload, Mapping) else None
    usage = usage_of(job.kind, result_map, input_chars=len(text) if isinstance(text, str) else None) if doc else None
    request_id = result_map.get("id") or result_map.get("provider_job_id")
    rows: list[tuple[str, str]] = [
        ("Title", job.title),
        ("Job id", job.id),
        ("Kind", job.kind),
        ("State", job.state + (f" — {error_text(_job_mapping(job))}" if job.last_error else "")),
        ("Model", model),
        ("Profile", profile or default_profile_of(job.kind, payload)),
        ("Priority", job.priority),
        ("Usage", usage_text(usage) if usage is not None else "— (no result yet)"),
        ("Cost", cost_text(spend)),
        ("Provider request id", str(request_id) if request_id else "—"),
        ("Provider job id", job.provider_job_id or "—"),
        ("Idempotency key", f"{job.idempotency_key} ({job.key_source})"),
        (
            "Attempts",
            f"{job.attempts} of {job.max_attempts} this run (run {job.run}), {job.total_attempts} in all",
        ),
        ("Submitted", _iso(job.created_at)),
        ("Started", _iso(job.started_at)),
        ("Finished", _iso(job.finished_at)),
        ("Updated", _iso(job.updated_at)),
    ]
    if job.replay_of:
        rows.append(("Replay of", job.replay_of))
    if job.replayed_as:
        rows.append(("Replayed as", ", ".join(job.replayed_as)))
    input_text = orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
    return JobDetails(rows, input_text, prompt_of(payload))


def spend_of(entries: Any, job_id: str) -> list[LedgerEntry]:
    """The ledger entries of one job (from :meth:`SpendLedger.entries`)."""
    return [e for e in entries if e.job_id == job_id]


__all__ = [
    "LARGE_ARTIFACT_BYTES",
    "LARGE_TEXT_BYTES",
    "SHOWN_TEXT_LIMIT",
    "SHOW_TEXT_CHARS",
    "JobDetails",
    "ResultContent",
    "ResultKind",
    "audio_duration",
    "cost_text",
    "describe_document",
    "duration_text",
    "human_bytes",
    "job_details",
    "no_result_reason",
    "prompt_of",
    "read_result",
    "result_size_hint",
    "show_text",
    "spend_of",
    "usage_text",
]
