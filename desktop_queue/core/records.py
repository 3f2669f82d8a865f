"""The shapes of a stored job and of the journal records, defined once.

These are :class:`~typing.TypedDict` definitions: at run time a job and a record are the
plain dicts that orjson reads and writes (nothing is converted or checked on the hot
path), while mypy checks every field name the store, the queue and the views use.

A field is ``NotRequired`` when a stored job may lack it: snapshots leave out fields
whose value is None (see :func:`~desktop_queue.core.store.snapshot.encode_snapshot`), stores
written before a field existed do not have it, and :meth:`Queue.raw_jobs` copies leave
out ``events`` and ``lease_token``. Readers use ``.get`` for those.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict, final

__all__ = [
    "ErrorDict",
    "EventDict",
    "HeaderRecord",
    "JobChanges",
    "JobDict",
    "NewRecord",
    "PurgeRecord",
    "Record",
    "SealRecord",
    "UpdateRecord",
]


class EventDict(TypedDict):
    """One timeline entry as stored (``shared/DESIGN.md`` section 1; built by ``queue._event_dict``).

    Snapshots leave out empty values (a None worker, an empty detail): only ``type`` and
    ``at`` are always there.
    """

    type: str
    at: float
    attempt: NotRequired[int]
    epoch: NotRequired[int]
    worker: NotRequired[str | None]
    actor: NotRequired[str]
    detail: NotRequired[dict[str, Any]]


#: a job's last error (``class`` is a keyword, hence the functional form); ``key_fp``:
#: a one-way fingerprint of the API key an authentication error (401/403) refused
#: (:attr:`Outcome.key_fp`), never the key
ErrorDict = TypedDict("ErrorDict", {"class": str, "message": str, "status": int | None, "key_fp": NotRequired[str]})


class JobChanges(TypedDict, total=False):
    """The fields an update record may set (``UpdateRecord["set"]``); every one may be absent."""

    state: str
    attempts: int
    total_attempts: int
    run: int
    updated_at: float
    run_after: float
    deadline_at: float | None
    lease_token: str | None
    lease_epoch: int
    lease_expires_at: float | None
    #: the process that renews the lease (``liveness.this_process()``), None for a plain lease
    lease_owner: str | None
    heartbeat_at: float
    worker: str | None
    last_error: ErrorDict | None
    result_ref: str | None
    provider_job_id: str | None
    replayed_as: list[str]
    poison_count: int
    poison: bool
    started_at: float | None
    finished_at: float | None
    #: a person closed this dead letter without retrying it (see ``Queue.resolve``)
    resolved_at: float | None
    #: the ids of the provider webhook deliveries that changed this job (newest last,
    #: bounded): recorded in the commit of their effect, so a redelivery changes nothing
    webhook_deliveries: list[str]


class _JobFixed(TypedDict):
    """The fields set at submission that every stored job has and no update changes."""

    id: str
    seq: int
    kind: str
    priority: str
    key: str
    max_attempts: int
    created_at: float


class JobDict(_JobFixed, JobChanges, total=False):
    """A stored job: what ``Queue._submission`` creates, as updates have changed it since.

    ``events`` is the timeline: parsed dicts, or the JSON text a snapshot kept until
    :func:`~desktop_queue.core.model.events_of` first parses it.
    """

    title: str
    input: Any
    input_digest: str
    key_source: str
    replay_of: str | None
    events: list[EventDict] | bytes | str


@final  # (so that mypy tells the records apart by their keys)
class NewRecord(TypedDict):
    """Creates ``job`` with the timeline ``ev``."""

    op: Literal["new"]
    job: JobDict
    ev: list[EventDict]
    n: NotRequired[int]  # the record's number: 1, 2, ... store-wide (see storage.read_segment)


@final
class UpdateRecord(TypedDict):
    """Sets fields of job ``id`` and appends ``ev`` to its timeline.

    ``res`` is the result document of a job that succeeded, carried in the record so
    that one fsync makes the result and the state durable together. ``res_new`` (only
    for a backend with ``checks_new_results``, never journaled) says that the verb did
    not look up a stored result for the key: the commit checks that there is none.
    """

    op: Literal["upd"]
    id: str
    set: JobChanges
    ev: list[EventDict]
    res: NotRequired[dict[str, Any]]
    res_new: NotRequired[bool]
    n: NotRequired[int]


@final
class HeaderRecord(TypedDict):
    """The first record of every journal segment."""

    op: Literal["header"]
    format: str
    schema_version: int
    gen: int
    n: NotRequired[int]  # (never set: headers and seals are not numbered)


@final
class SealRecord(TypedDict):
    """The last record of a closed segment: the next one is ``next``."""

    op: Literal["seal"]
    next: int
    n: NotRequired[int]


@final
class PurgeRecord(TypedDict):
    """Removes every finished job ``filter`` matches (see :class:`~desktop_queue.core.store.archive.PurgeFilter`).

    One record for any number of jobs: hot ones go when it is applied, archived ones
    when the next compaction writes their segments again without them.
    """

    op: Literal["purge"]
    filter: dict[str, Any]
    at: float
    n: NotRequired[int]


@final
class BatchRecord(TypedDict):
    """Creates every job of ``new`` at once (``Queue.submit_many``).

    One line, so that a crash leaves all of the batch or none of it: a torn line is
    refused whole, where several ``new`` lines could be cut between two of them.
    """

    op: Literal["batch"]
    new: list[NewRecord]
    n: NotRequired[int]


#: any journal record (a checksummed record of an unknown ``op`` is read, and changes nothing)
Record = NewRecord | UpdateRecord | HeaderRecord | SealRecord | PurgeRecord | BatchRecord
