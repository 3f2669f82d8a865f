"""The local HTTP API: the command line's verbs over HTTP, and provider webhook intake.

Built on FastAPI (Starlette + pydantic): the server library parses HTTP and the request
bodies, and writes the OpenAPI document served at ``/openapi.json``. Every job route
needs the bearer token of :mod:`.token`; the webhook route is authenticated by the
provider's signature instead (a provider cannot know our token).

Errors are JSON, ``{"error": code, "message": text}``, with the command line's meanings
(``cli.py`` exit codes): a usage error (2) is 400 (422 when the request does not fit
the schema), no such job (3) is 404, not allowed in the job's state (4) is 409, a full
interactive lane is 429, a store that cannot be written is 503.

The route functions are plain ``def``: FastAPI runs them on its thread pool, as every
verb of :class:`~desktop_queue.core.queue.Queue` blocks on a file lock and an fsync.
"""

# (no "from __future__ import annotations": FastAPI reads the route signatures at run time,
# and the dependencies they name are local to create_app)

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from desktop_queue import __version__
from desktop_queue.api.token import token_matches
from desktop_queue.core.errors import (
    DuplicateKeyConflict,
    InputTooLarge,
    InvalidInput,
    NoSuchJob,
    NotAllowed,
    QueueError,
    QueueFull,
    StaleLease,
    StoreError,
)
from desktop_queue.core.model import Job, State
from desktop_queue.core.queue import MAX_INPUT_BYTES, Queue
from desktop_queue.core.records import JobDict
from desktop_queue.core.schedules import ScheduleError, Scheduler, entry_json, last_run, result_preview
from desktop_queue.core.webhooks import Applied, WebhookNotReady, parse_delivery

log = logging.getLogger(__name__)

#: actor of the events the API's verbs record
ACTOR = "api"
#: a request body larger than this is refused before it is read (an input is at most 1 MiB)
MAX_BODY_BYTES = 2 * MAX_INPUT_BYTES
LIST_DEFAULT_LIMIT = 1000
LIST_MAX_LIMIT = 10_000

#: (status, error code) per engine error, most specific first
_ERRORS: tuple[tuple[type[QueueError], int, str], ...] = (
    (InputTooLarge, 413, "input_too_large"),
    (InvalidInput, 400, "invalid_input"),
    (NoSuchJob, 404, "no_such_job"),
    (StaleLease, 409, "not_allowed"),
    (NotAllowed, 409, "not_allowed"),
    (DuplicateKeyConflict, 409, "key_conflict"),
    (QueueFull, 429, "queue_full"),
    (WebhookNotReady, 503, "not_ready"),
    (StoreError, 503, "store_unavailable"),
    (ScheduleError, 503, "store_unavailable"),  # a schedules file this version cannot read
)


def invalid_request_text(errors: Any) -> str:
    """One line for what FastAPI found wrong with a request: the first problem, said for
    people ("1: JSON decode error" and pydantic's "Input should be a valid dictionary or
    object to extract fields from" named neither the body nor what was wrong with it)."""
    first = errors[0] if errors else {}
    loc = tuple(first.get("loc", ()))
    kind = first.get("type", "")
    if kind == "json_invalid":
        why = (first.get("ctx") or {}).get("error") or "it cannot be parsed"
        at = f" at character {loc[-1]}" if loc and isinstance(loc[-1], int) else ""
        return f"the request body is not valid JSON: {why}{at}"
    if loc == ("body",) and kind in ("model_attributes_type", "dict_type", "missing"):
        return "the request body must be a JSON object, sent with Content-Type: application/json"
    where = ".".join(str(p) for p in loc if p != "body")
    return f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg", "invalid request"))


@dataclass(frozen=True)
class Webhooks:
    """What webhook intake needs to know about the provider profiles.

    Attributes:
        secret: profile -> its webhook secret (from the keyring), None when it has none.
        lookup: asks a job's provider what became of its provider job (a GET).
        profile_of: the profile a job runs on.
        spent: records in the spend ledger what the response of a job the webhook
            finished used (profile, job id); None: no ledger.
    """

    secret: Callable[[str], str | None]
    lookup: Callable[[Job], Any]
    profile_of: Callable[[JobDict], str | None]
    spent: Callable[[str, str], None] | None = None


class SubmitBody(BaseModel):
    """``POST /jobs``: the fields of ``desktop-queue submit``."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="job kind, e.g. demo or openai.chat")
    input: Any = Field(description="the job's input (JSON)")
    title: str | None = Field(default=None, description="a title for people (default: the start of the prompt)")
    priority: Literal["interactive", "background"] = "background"
    key: str | None = Field(default=None, description="idempotency key (default: a fingerprint of kind and input)")
    max_attempts: int | None = Field(default=None, description="attempt budget, 1 to 100")


class ReplayBody(BaseModel):
    """``POST /jobs/{id}/replay``: an edited input, or none for the original's."""

    model_config = ConfigDict(extra="forbid")

    input: Any = None
    title: str | None = None


class _Unauthorized(Exception):
    """The request has no valid bearer token."""


def error_body(code: str, message: str) -> dict[str, str]:
    return {"error": code, "message": message}


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(code, message), status_code=status, headers=headers)


def _job_json(job: Job, *, with_events: bool = True, with_input: bool = True, **extra: Any) -> dict[str, Any]:
    return {**job.to_json(with_events=with_events, with_input=with_input), **extra}


def read_schedules(queue: Queue) -> list[dict[str, Any]]:
    """The schedules for ``GET /schedules``: what ``schedule list --json`` prints.

    Raises:
        ScheduleError: the schedules file is from a newer version (a damaged one is set
            aside by the schedules module and reads as none).
    """
    scheduler = Scheduler(queue)
    try:
        entries = scheduler.book.load()
        ids = {i for e in entries for i in (e.state.last_job_id, e.state.last_good_job_id) if i}
        jobs = scheduler.jobs(ids)
        now = queue.clock.now()
        rows = []
        for entry in entries:
            row = entry_json(entry, now, jobs)
            row["last_good_preview"] = result_preview(queue, last_run(entry, jobs).good_job_id)
            rows.append(row)
        return rows
    finally:
        scheduler.close()


def create_app(queue: Queue, token: str, webhooks: Webhooks | None = None) -> FastAPI:
    """The API over ``queue``; requests must carry ``Authorization: Bearer <token>``.

    Args:
        queue: the open queue of the data dir (shared with the window when it runs there).
        token: the bearer token.
        webhooks: what webhook intake needs (None: ``/webhooks/...`` answers 404).
    """
    app = FastAPI(
        title="Desktop Queue local API",
        version=__version__,
        description="The desktop-queue command line's verbs over HTTP, on 127.0.0.1 only. "
        "Every /jobs, /dead, /stats and /schedules route needs `Authorization: Bearer <token>`, "
        "the token in the user config dir's api-token file.",
    )
    bearer = HTTPBearer(auto_error=False, description="the token in the user config dir's api-token file")

    def authorized(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        if credentials is None or not token_matches(token, credentials.credentials):
            raise _Unauthorized()

    auth = [Depends(authorized)]

    @app.exception_handler(_Unauthorized)
    def _unauthorized(_request: Request, _exc: _Unauthorized) -> JSONResponse:
        return _error(
            401,
            "unauthorized",
            "a valid bearer token is required (Authorization: Bearer <the api-token file's content>)",
            {"WWW-Authenticate": "Bearer"},
        )

    @app.exception_handler(QueueError)
    def _queue_error(_request: Request, exc: QueueError) -> JSONResponse:
        for kind, status, code in _ERRORS:
            if isinstance(exc, kind):
                headers = {"Retry-After": "5"} if status in (429, 503) else None
                return _error(status, code, str(exc), headers)
        log.warning("API request failed: %s", exc)
        return _error(500, "failed", str(exc))

    @app.exception_handler(RequestValidationError)
    def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, "invalid_request", invalid_request_text(exc.errors()))

    @app.middleware("http")
    async def _limit_body(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return _error(413, "input_too_large", f"the request body is over {MAX_BODY_BYTES:,} bytes")
        return await call_next(request)

    @app.post("/jobs", dependencies=auth, status_code=201, summary="Submit a job (as desktop-queue submit)")
    def submit(body: SubmitBody, response: Response) -> dict[str, Any]:
        from desktop_queue.core.inputspec import spec_of, title_for

        title = body.title
        if title is None:
            title = title_for(spec_of(queue.providers.get(body.kind)), body.input)
        result = queue.submit(
            body.kind,
            body.input,
            key=body.key,
            title=title,
            priority=body.priority,
            max_attempts=body.max_attempts,
            actor=ACTOR,
        )
        extra: dict[str, Any] = {"duplicate": result.duplicate}
        if result.duplicate:
            response.status_code = 200
            if result.result is not None:
                extra["result"] = result.result.get("result")
        return _job_json(result.job, **extra)

    @app.get("/jobs", dependencies=auth, summary="Jobs, newest first (as desktop-queue list)")
    def list_jobs(
        state: Annotated[State | None, Query(description="only jobs in this state")] = None,
        limit: Annotated[int, Query(ge=1, le=LIST_MAX_LIMIT)] = LIST_DEFAULT_LIMIT,
    ) -> list[dict[str, Any]]:
        jobs = queue.list(str(state) if state is not None else None, limit=limit)
        return [_job_json(j, with_events=False, with_input=False) for j in jobs]

    @app.get("/jobs/{job_id}", dependencies=auth, summary="One job with its event timeline (as desktop-queue show)")
    def show(job_id: Annotated[str, PathParam(max_length=100)]) -> dict[str, Any]:
        job = queue.get(job_id)
        data = _job_json(job)
        if job.result_ref:
            stored = queue.results.get(job.idempotency_key)
            data["result"] = stored.get("result") if stored else None
        return data

    @app.get("/dead", dependencies=auth, summary="Dead letters: dead jobs waiting for a person, newest first")
    def dead(limit: Annotated[int, Query(ge=1, le=LIST_MAX_LIMIT)] = LIST_DEFAULT_LIMIT) -> list[dict[str, Any]]:
        jobs = [j for j in queue.list(State.DEAD, limit=limit) if j.resolved_at is None]
        return [_job_json(j, with_events=False, with_input=False) for j in jobs]

    @app.post("/jobs/{job_id}/cancel", dependencies=auth, summary="Cancel a queued or running job")
    def cancel(job_id: Annotated[str, PathParam(max_length=100)]) -> dict[str, Any]:
        return _job_json(queue.cancel(job_id, ACTOR))

    @app.post("/jobs/{job_id}/retry", dependencies=auth, summary="Retry a dead or cancelled job (a new run)")
    def retry(job_id: Annotated[str, PathParam(max_length=100)]) -> dict[str, Any]:
        return _job_json(queue.retry(job_id, ACTOR))

    @app.post(
        "/jobs/{job_id}/replay",
        dependencies=auth,
        status_code=201,
        summary="A new job from a finished one, with the same or edited input",
    )
    def replay(job_id: Annotated[str, PathParam(max_length=100)], body: ReplayBody | None = None) -> dict[str, Any]:
        edited = body.input if body is not None else None
        return _job_json(queue.replay(job_id, edited, ACTOR, title=body.title if body is not None else None))

    @app.get("/stats", dependencies=auth, summary="Counts per state, wait and run times, retries, dead letters")
    def stats() -> dict[str, Any]:
        figures: dict[str, Any] = queue.stats().to_json()
        return figures

    @app.get("/schedules", dependencies=auth, summary="The schedules")
    def schedules() -> list[Any]:
        return read_schedules(queue)

    @app.post(
        "/webhooks/{profile}",
        summary="Provider webhook intake (Standard Webhooks signature; no bearer token)",
        responses={401: {"description": "bad or missing signature, or a timestamp over 5 minutes off"}},
    )
    async def webhook(
        profile: Annotated[str, PathParam(max_length=40)],
        request: Request,
        webhook_id: Annotated[str | None, Header()] = None,
        webhook_timestamp: Annotated[str | None, Header()] = None,
        webhook_signature: Annotated[str | None, Header()] = None,
    ) -> JSONResponse:
        from desktop_queue.api.signature import SignatureError, verify

        if webhooks is None:
            return _error(404, "no_webhooks", "webhook intake is not set up on this server")
        body = await request.body()
        secret = await run_in_threadpool(webhooks.secret, profile)
        if secret is None:
            return _error(404, "no_webhook_secret", f"profile {profile!r} has no webhook secret")
        try:
            # before anything looks at the body: an unsigned body is never parsed
            verify(body, request.headers, secret)
        except SignatureError as exc:
            return _error(401, "bad_signature", str(exc))
        delivery = parse_delivery(webhook_id or "", body, profile)
        result = await run_in_threadpool(queue.apply_webhook, delivery, webhooks.lookup, webhooks.profile_of)
        collected = result.status is Applied.APPLIED and result.state == State.SUCCEEDED
        if collected and result.job_id is not None and webhooks.spent is not None:
            try:
                await run_in_threadpool(webhooks.spent, profile, result.job_id)
            except QueueError as exc:  # the job is finished: a ledger that refuses must not undo that
                log.error("could not record the spend of job %s: %s", result.job_id, exc)
        return JSONResponse(result.to_json())

    return app
