"""What a replay will do, said before anything is queued (a pure function of what is known now).

:func:`preview_replay` repeats how the original ended (its error class and message)
and checks what would make the new job fail again or wait: an authentication error
with a key that has not changed, a profile that cannot run (no key, offline, breaker
open, over budget, rate-limited), an input its provider still refuses. The Replay
dialog shows it; ``desktop-queue replay ID --dry-run`` prints it.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from desktop_queue.core.errors import QueueError
from desktop_queue.core.fingerprint import canonical_json
from desktop_queue.core.model import ErrorClass, Job, State
from desktop_queue.core.search import prompt_text
from desktop_queue.core.wording import status_words

#: the Replay dialog's and the CLI's title of a replay: from its prompt when that was edited
TITLE_CHARS = 60
_SAME: Any = object()


class Level(StrEnum):
    """How much a finding matters."""

    FAIL = "fail"  # it will fail again unless something changes
    WAIT = "wait"  # it will be queued, and wait before it runs
    INFO = "info"  # worth knowing
    OK = "ok"  # nothing stands in the way


@dataclass(frozen=True)
class Finding:
    level: Level
    text: str

    def to_json(self) -> dict[str, str]:
        return {"level": str(self.level), "text": self.text}


@dataclass(frozen=True)
class ReplayPreview:
    """What replaying a job will do.

    Attributes:
        job_id: the original.
        kind: the new job's kind (the original's).
        state: the original's state.
        ended: how the original ended, for people (``dead: fatal HTTP 401: …``).
        error_class, error_status, error_message: its last error (None: none).
        edited: the new input differs from the original's.
        title: the new job's title.
        findings: what was checked, worst first.
    """

    job_id: str
    kind: str
    state: str
    ended: str
    error_class: str | None
    error_status: int | None
    error_message: str | None
    edited: bool
    title: str
    findings: tuple[Finding, ...] = field(default=())

    @property
    def verdict(self) -> Level:
        """The worst finding's level (``ok`` when nothing stands in the way)."""
        for level in (Level.FAIL, Level.WAIT):
            if any(f.level is level for f in self.findings):
                return level
        return Level.OK

    @property
    def headline(self) -> str:
        return {
            Level.FAIL: "This replay is likely to fail again",
            Level.WAIT: "This replay will be queued, but will wait before it runs",
            Level.OK: "Nothing known stands in the way of this replay",
            Level.INFO: "",
        }[self.verdict]

    def lines(self) -> list[str]:
        """The preview as text lines (the CLI's output)."""
        out = [f"replay of {self.job_id} ({self.kind}), which ended {self.ended}"]
        out.append(f"new job: {self.title!r}" + (" with an edited input" if self.edited else " with the same input"))
        out.append(f"verdict: {self.headline}")
        for finding in self.findings:
            out.append(f"  [{finding.level}] {finding.text}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "kind": self.kind,
            "state": self.state,
            "ended": self.ended,
            "error": None
            if self.error_class is None
            else {"class": self.error_class, "status": self.error_status, "message": self.error_message},
            "edited": self.edited,
            "title": self.title,
            "verdict": str(self.verdict),
            "headline": self.headline,
            "findings": [f.to_json() for f in self.findings],
            "dry_run": True,
        }


def replay_title(job: Job, new_input: Any = _SAME) -> str:
    """The new job's title: from the edited prompt's first line, else ``<title> (replay)``."""
    if new_input is not _SAME:
        before, after = prompt_text(job.input), prompt_text(new_input)
        if after.strip() and after != before:
            line = after.strip().splitlines()[0].strip()
            return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"
    return job.title if job.title.endswith("(replay)") else f"{job.title} (replay)"


def _when(ts: float | None) -> str:
    """A time people read at a glance: ``2026-11-30 14:03`` (local)."""
    if ts is None:
        return "an unknown time"
    return _dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def _profile(provider: Any) -> str | None:
    name = getattr(getattr(provider, "profile", None), "name", None)
    return name if isinstance(name, str) else None


def _route(provider: Any, payload: Any) -> tuple[Any, str | None]:
    """The provider a job with ``payload`` runs on, and its profile name.

    A kind over several profiles (a router with ``pick``) runs each job on the profile
    its input names: a dead job of profile ``lab`` is previewed against ``lab``. The
    provider is None when the input names a profile that is not configured.
    """
    pick = getattr(provider, "pick", None)
    if not callable(pick):
        return provider, _profile(provider)
    try:
        target = pick(payload)
    except Exception:  # a preview must never break on a provider's routing
        target = None
    if target is not None:
        return target, _profile(target)
    named = payload.get("profile") if isinstance(payload, Mapping) else None
    return None, named if isinstance(named, str) else None


#: :func:`_current_fp`'s answer when the profile has no key at all now
NO_KEY = ""


def _current_fp(target: Any, profile: str | None, key_fingerprint: Callable[[str], str | None] | None) -> str | None:
    """The fingerprint of the key ``profile`` would send now (never the key).

    :data:`NO_KEY` when the routed provider says it has none; None when it cannot be told.
    """
    try:
        if key_fingerprint is not None:
            return key_fingerprint(profile) if profile else None
        ask = getattr(target, "key_fingerprint", None)
        if not callable(ask):
            return None
        found = ask()
    except Exception:  # a keyring that cannot be read: the preview says it cannot tell
        return None
    if found is None:
        return NO_KEY
    return found if isinstance(found, str) else None


def preview_replay(
    job: Job,
    providers: Mapping[str, Any],
    *,
    flow: Any = None,
    new_input: Any = _SAME,
    key_fingerprint: Callable[[str], str | None] | None = None,
) -> ReplayPreview:
    """Says what replaying ``job`` (with ``new_input``, default its own) will do.

    Args:
        job: the finished original (with its input).
        providers: kind -> provider (``validate``, optional ``unavailable_reason()``).
        flow: the data dir's flow control (``waiting_reason``), or None.
        new_input: the edited input (default: the original's).
        key_fingerprint: profile -> a fingerprint of its API key now (never the key), to
            compare with the one an authentication error recorded (``key_fp``);
            default: the routed provider's own ``key_fingerprint()``.

    With a provider that routes by profile (``pick``), the new job's profile (the one
    its input names, else the default) is the one checked: its key, whether it can run.
    """
    payload = job.input if new_input is _SAME else new_input
    try:
        edited = canonical_json(payload) != canonical_json(job.input)
    except TypeError:
        edited = True
    error: dict[str, Any] = dict(job.last_error or {})
    klass = error.get("class")
    status = error.get("status")
    message = error.get("message")
    when = _when(job.finished_at)
    if job.state == State.DEAD and klass:
        ended = (
            f"dead at {when} with a {klass}{status_words(status, str(message or ''))} error: {message or 'no message'}"
        )
    else:
        ended = f"{job.state} at {when}"
    findings: list[Finding] = []
    reason: Any = None
    provider = providers.get(job.kind)
    target, profile = _route(provider, payload)
    original_profile = _route(provider, job.input)[1] if edited else profile

    if job.state not in (State.SUCCEEDED, State.DEAD, State.CANCELLED):
        findings.append(Finding(Level.FAIL, f"job {job.id} is {job.state}: only finished jobs can be replayed"))
    if provider is None:
        known = ", ".join(sorted(providers)) or "none"
        findings.append(Finding(Level.FAIL, f"no provider runs {job.kind!r} jobs here (known kinds: {known})"))
    else:
        validate = getattr(provider, "validate", None)
        if callable(validate):
            try:
                validate(payload)
            except QueueError as exc:
                again = "still " if not edited and klass == ErrorClass.FATAL else ""
                findings.append(Finding(Level.FAIL, f"the input is {again}invalid: {exc}"))
        ask = getattr(target, "unavailable_reason", None)
        if callable(ask):
            try:
                reason = ask()
            except Exception as exc:  # a preview must never break on a provider's check
                reason = f"its provider could not say whether it can run ({type(exc).__name__})"
            if isinstance(reason, str) and reason:
                where = f"profile {profile}" if profile else job.kind
                findings.append(Finding(Level.WAIT, f"{where} cannot run jobs now: {reason}"))

    if klass == ErrorClass.FATAL and status in (401, 403) and original_profile != profile:
        findings.append(
            Finding(
                Level.INFO,
                f"profile {original_profile or 'of the original'} refused the key (HTTP {status}); "
                f"the replay runs on profile {profile or 'the default'} instead",
            )
        )
    elif klass == ErrorClass.FATAL and status in (401, 403):
        findings.append(_auth_finding(status, error, profile, _current_fp(target, profile, key_fingerprint), when))
    elif klass == ErrorClass.FATAL and status in (400, 404, 422) and not edited:
        what = "model or endpoint was not found" if status == 404 else "request was refused"
        findings.append(
            Finding(Level.FAIL, f"the {what} (HTTP {status}) and the input is unchanged: it will likely fail again")
        )
    elif klass == ErrorClass.FATAL and not edited:
        findings.append(Finding(Level.FAIL, "it failed with a fatal error and the input is unchanged"))
    elif klass == ErrorClass.POISON and not edited:
        findings.append(
            Finding(Level.FAIL, "the same input kept producing invalid output; unchanged, it will likely do so again")
        )
    elif klass in (ErrorClass.RETRYABLE, ErrorClass.THROTTLED):
        findings.append(
            Finding(Level.INFO, f"it ran out of attempts on {klass} errors: these pass, it may well succeed now")
        )

    if flow is not None and provider is not None:
        probe = {"id": f"replay-preview-{job.id}", "kind": job.kind, "input": payload, "state": "queued"}
        try:
            waiting = flow.waiting_reason(probe)
        except Exception as exc:  # (a damaged shared state: say so, do not fail the preview)
            waiting = f"flow control could not be read ({type(exc).__name__})"
        if waiting and not (reason and reason in waiting):  # (said once: a held profile repeats it)
            findings.append(Finding(Level.WAIT, f"flow control holds it back now: {waiting}"))

    if edited:
        findings.append(Finding(Level.INFO, "the input was edited: the new job runs with your changes"))
    if not any(f.level in (Level.FAIL, Level.WAIT) for f in findings):
        findings.append(Finding(Level.OK, f"the {job.kind} provider accepts the input and can run it now"))
    order = {Level.FAIL: 0, Level.WAIT: 1, Level.INFO: 2, Level.OK: 3}
    findings.sort(key=lambda f: order[f.level])
    return ReplayPreview(
        job_id=job.id,
        kind=job.kind,
        state=job.state,
        ended=ended,
        error_class=klass,
        error_status=status,
        error_message=message,
        edited=edited,
        title=replay_title(job, new_input),
        findings=tuple(findings),
    )


def _auth_finding(status: int, error: Mapping[str, Any], profile: str | None, now: str | None, when: str) -> Finding:
    what = "refused the API key" if status == 401 else "refused access with this key"
    where = f"profile {profile}" if profile else "its profile"
    recorded = error.get("key_fp")
    if now == NO_KEY:
        return Finding(
            Level.FAIL,
            f"the provider {what} (HTTP {status}), and {where} has no key now: enter one in Preferences → Providers",
        )
    if isinstance(recorded, str) and now is not None:
        if now == recorded:
            return Finding(
                Level.FAIL,
                f"the provider {what} (HTTP {status}), and the key of {where} is unchanged since the {status}: "
                "this replay will fail the same way (enter a new key in Preferences → Providers)",
            )
        return Finding(
            Level.INFO,
            f"the provider {what} (HTTP {status}); the key of {where} has changed since, so this replay may work",
        )
    return Finding(
        Level.FAIL,
        f"the provider {what} (HTTP {status}): unless the key of {where} was changed since {when}, it will fail again",
    )
