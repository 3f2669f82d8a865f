"""What a verb reads on PostgreSQL (:class:`PgView`), and writing the records it returns.

A :class:`PgView` lives for one transaction. Its reads are SQL: a job by id, the job
holding a key, the next runnable job of a lane (``FOR UPDATE SKIP LOCKED``: two workers
never get the same job, and neither waits for the other), counts by state. In a writing
transaction a job read by id is locked (``FOR UPDATE``), so two verbs on one job take
turns; a job read in bulk is not locked, and the update of it checks that its ``rev`` is
still the one read (else :class:`Conflict`, and the backend runs the verb again).

:meth:`PgView.apply` turns the records into ``INSERT`` and ``UPDATE`` statements of the
same transaction: a job's events are appended and a success's result document stored
with the state they belong to.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import select
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence, ValuesView
from typing import Any, cast

import orjson
from psycopg import errors as pg_errors
from psycopg.pq import ExecStatus

from desktop_queue.core.backend import NextLease
from desktop_queue.core.model import Priority, State
from desktop_queue.core.records import (
    BatchRecord,
    EventDict,
    JobChanges,
    JobDict,
    NewRecord,
    PurgeRecord,
    Record,
    UpdateRecord,
)
from desktop_queue.core.search import escape_like, prompt_text
from desktop_queue.core.store.archive import FINISHED_STATES, RESOLVED, ArchivedRow, HistoryQuery, PurgeFilter
from desktop_queue.core.store.compaction import KEEP_FINISHED

log = logging.getLogger(__name__)

LIVE_OR_DONE = (str(State.QUEUED), str(State.RUNNING), str(State.SUCCEEDED))
#: the same as SQL, spelled out as the unique index of live keys says it (see _HOLDER)
_LIVE_STATES = "(" + ", ".join(f"'{s}'" for s in LIVE_OR_DONE) + ")"

#: what a lease renewal changes (see :meth:`PgView.apply`: no notification for it alone)
_RENEWAL = frozenset({"lease_expires_at", "heartbeat_at"})

#: the job fields that also have a column of their own (indexed, or compared in SQL)
_COLUMNS = ("state", "run_after", "lease_expires_at")

# the job and its timeline (as JSON text, parsed only if someone reads it: model.events_of)
_SELECT = "SELECT j.doc::text, j.rev, j.events::text, j.id FROM dq_jobs j"


_RUNNABLE_WHERE = (
    " WHERE j.state = 'queued' AND j.priority = %s AND j.run_after <= %s AND NOT (j.id = ANY(%s))"
    " ORDER BY j.run_after, j.seq LIMIT %s"
)
_RUNNABLE = _SELECT + _RUNNABLE_WHERE
# the writing scan reserves the lease epoch of the job it locks in the same round trip (a
# sequence: unique and increasing across every transaction, as View.epoch asks; an epoch
# reserved for a job then passed over is simply never used)
_RUNNABLE_LOCK = (
    _SELECT.replace(" FROM dq_jobs j", ", nextval('dq_lease_epoch') FROM dq_jobs j")
    + _RUNNABLE_WHERE
    + (" FOR UPDATE OF j SKIP LOCKED")
)
_LANES = tuple(str(p) for p in Priority)
# the running jobs whose lease expired before a time (it is asked twice: pass it twice,
# _EXPIRED_TIMES). Almost always there is none, and the EXISTS answers that: a plain
# index scan in expiry order, which marks the index entries of dead rows as such (the
# old versions of every job leased and finished since the last vacuum are still in the
# partial index, with their past expiry) so that the next scan skips them without a
# heap visit. Listing the ids outright lets the planner pick a bitmap scan, which marks
# nothing and reads every such row's heap page again at each lease: a cost that grew
# with the jobs finished since autovacuum last ran (2 % of the table on a large one)
_EXPIRED = (
    "SELECT CASE WHEN EXISTS (SELECT 1 FROM dq_jobs WHERE state = 'running' AND lease_expires_at < %s)"
    " THEN array(SELECT id FROM dq_jobs WHERE state = 'running' AND lease_expires_at < %s ORDER BY id)"
    " ELSE '{}' END"
)
_EXPIRED_TIMES = 2
# the earliest lease expiry of a running job not under one of the given tokens; the
# partial index on running jobs' expiries is walked in order, so this reads the first
# few rows, not every running job
_NEXT_EXPIRY = (
    "SELECT lease_expires_at FROM dq_jobs WHERE state = 'running' AND lease_expires_at IS NOT NULL"
    " AND NOT (doc->>'lease_token' = ANY(%s)) ORDER BY lease_expires_at LIMIT 1"
)
# the first job due in lane order that no one holds, locked: the id chosen (and locked)
# lane by lane, the row read and locked again by the outer query, so that a row changed
# and committed meanwhile is read as it now is and still checked to be queued
_PICK_ID = (
    "coalesce("
    + ", ".join(
        f"(SELECT id FROM dq_jobs WHERE state = 'queued' AND priority = '{lane}' AND run_after <= %s"
        " ORDER BY run_after, seq LIMIT 1 FOR UPDATE SKIP LOCKED)"
        for lane in _LANES
    )
    + ")"
)
_PICK = (
    _SELECT.replace(" FROM dq_jobs j", ", nextval('dq_lease_epoch') FROM dq_jobs j")
    + " WHERE j.state = 'queued' AND j.id = "
    + _PICK_ID
    + " FOR UPDATE OF j"
)
# both in one statement (one snapshot, one statement less per lease): the expired leases,
# and beside them the job picked (its columns all null when there is none to take)
_EXPIRED_AND_PICK = "SELECT x.ids, p.* FROM (" + _EXPIRED + " AS ids) x LEFT JOIN LATERAL (" + _PICK + ") p ON true"
# a whole lease in one statement (PgView.lease_next): the job picked as above, leased
# with the verb's changes and the counts that depend on the job (one more attempt, a new
# epoch, drawn once for the document and the event alike: drawn too when no job is taken,
# an epoch never used, as the scanning lease's), its leased event appended; nothing if a
# lease has expired. Beside it: whether one had, and the job as leased
_LEASE_NEXT = (
    "WITH x AS (" + _EXPIRED + " AS ids), n AS (SELECT nextval('dq_lease_epoch') AS epoch),"
    " u AS (UPDATE dq_jobs j SET doc = j.doc || %s::jsonb || jsonb_build_object("
    "'attempts', (j.doc->>'attempts')::int + 1,"
    " 'total_attempts', coalesce((j.doc->>'total_attempts')::int, 0) + 1,"
    " 'lease_epoch', n.epoch),"
    " events = j.events || jsonb_build_array(%s::jsonb || jsonb_build_object("
    "'attempt', (j.doc->>'attempts')::int + 1, 'epoch', n.epoch)),"
    " rev = j.rev + 1, txid = pg_current_xact_id(), state = %s, lease_expires_at = %s, worker_id = %s"
    " FROM n WHERE cardinality((SELECT ids FROM x)) = 0 AND j.state = 'queued' AND j.id = " + _PICK_ID + ""
    " RETURNING j.id, j.doc, j.rev, j.events)"
    " SELECT cardinality(x.ids), u.doc::text, u.rev, u.events::text, u.id FROM x LEFT JOIN u ON true"
)
# how many jobs each state holds, and how many dead letters a person resolved, in one
# statement (PgView.state_counts). Each state but one is counted through its partial index
# (queued: dq_jobs_runnable, running: the expiry index, dead and cancelled: dq_jobs_stopped;
# resolved reads the dead ones only); succeeded, nearly all of a long history, is the rest
# of an index-only count of the table. Reading every job's id, as the other backends'
# count does, shipped a million ids at a million jobs, on the window's thread, at each change
_COUNTED = tuple(str(s) for s in State if s != State.SUCCEEDED)
_STATE_COUNTS = (
    "SELECT (SELECT count(*) FROM dq_jobs), "
    + ", ".join(f"(SELECT count(*) FROM dq_jobs WHERE state = '{s}')" for s in _COUNTED)
    + f", (SELECT count(*) FROM dq_jobs WHERE state = '{State.DEAD}' AND doc->>'resolved_at' IS NOT NULL)"
)
# the state spelled out, so that the prepared plan can use the partial index of that state
# (schema version 4 keeps no index over every job's state)
_IDS_IN = {str(s): f"SELECT id FROM dq_jobs WHERE state = '{s}' ORDER BY id" for s in State}
_FINISHED = "(" + ", ".join(f"'{s}'" for s in FINISHED_STATES) + ")"
# a job as _SELECT reads it, with its submission number to order a union of several reads by
_SELECT_SEQ = "SELECT j.doc::text AS doc, j.rev, j.events::text AS events, j.id, j.seq FROM dq_jobs j"
#: how many finished jobs the window holds beside the unfinished ones, newest first (the
#: data dir's hot set keeps as many): the older ones are paged (PgView.history_rows)
HOT_FINISHED = KEEP_FINISHED


def _hot(select: str, *, queued: bool = True, finished: str = f"ORDER BY seq DESC LIMIT {HOT_FINISHED}") -> str:
    """``select`` (columns and ``FROM dq_jobs``, its alias ``j`` if any) of every unfinished
    job (each state apart: an ``IN`` list of both cannot use their partial indexes) and of
    the finished ones ``finished`` keeps (by default the newest, through
    dq_jobs_finished_seq: with the unfinished ones, the window's hot set). A ``UNION ALL``
    of its parts, in no order."""
    parts = [f"{select} WHERE state = '{State.QUEUED}'"] if queued else []
    parts.append(f"{select} WHERE state = '{State.RUNNING}'")
    parts.append(f"({select} WHERE state IN {_FINISHED} {finished})")
    return " UNION ALL ".join(parts)


# what the window's models take of each job (Queue.raw_jobs: no timeline, which the row
# does not hold, no lease token, and the input of queued jobs only), shaped by the server:
# the window's hot set, or some ids
_WINDOW_DOC = f"(CASE WHEN state = '{State.QUEUED}' THEN doc ELSE doc - 'input' END - 'lease_token')::text"
_WINDOW_HOT = _hot(f"SELECT {_WINDOW_DOC}, seq FROM dq_jobs") + " ORDER BY 2"
_WINDOW_IDS = f"SELECT {_WINDOW_DOC} FROM dq_jobs WHERE id = ANY(%s) ORDER BY seq"
# which of some ids the window's hot set holds (PgView.hot_among)
_HOT_AMONG = "SELECT id FROM (" + _hot("SELECT id FROM dq_jobs") + ") h WHERE id = ANY(%s)"
# the same hot set whole, timelines and inputs included (PgView.hot_set)
_HOT_SET = f"SELECT doc, rev, events, id FROM ({_hot(_SELECT_SEQ)}) h ORDER BY seq"
# what the windowed metrics fold (PgView.horizon_ids): the unfinished jobs and the finished
# ones changed since a time; and the older dead letters still waiting (through dq_jobs_stopped)
_UPDATED = "coalesce((doc->>'updated_at')::float8, 0)"
_HORIZON_IDS = _hot("SELECT id FROM dq_jobs", finished=f"AND {_UPDATED} >= %s")
# the jobs that ended in a state since a time (PgView.finished_since): a finished job
# changed when it finished, so dq_jobs_finished_updated finds them (the state list and
# the expression spelled as the index's)
_FINISHED_SINCE = (
    f"SELECT id, (doc->>'finished_at')::float8 FROM dq_jobs WHERE state IN {_FINISHED} AND {_UPDATED} >= %s"
    " AND state = %s AND (doc->>'finished_at')::float8 >= %s"
)
_WAITING_BEFORE = (
    f"SELECT id FROM dq_jobs WHERE state = '{State.DEAD}' AND doc->>'resolved_at' IS NULL AND {_UPDATED} < %s"
)
# every job of a state, timelines as text (PgView.jobs_in; the state spelled out: see above)
_JOBS_IN = {str(s): _SELECT + f" WHERE j.state = '{s}' ORDER BY j.id" for s in State}
# what stats reads of every job (PgView.timelines): a page at a time, in id order
_TIMELINES = "SELECT id, state, events::text FROM dq_jobs WHERE id > %s ORDER BY id LIMIT %s"
#: jobs read per statement by PgView.timelines (a bounded memory whatever the history)
TIMELINE_PAGE = 5000
# what the prompt search reads of the hot jobs whose rows do not carry their input
_INPUT = "id, doc->>'input_digest', (doc->'input')::text"
_INPUTS_NOT_QUEUED = _hot(f"SELECT {_INPUT} FROM dq_jobs", queued=False)
# the newest jobs (of a state) submitted before a number, newest first, with their
# timelines (PgView.newest): a page read as a page through an index (the state spelled
# out: see above). Of every state: the newest finished ones through theirs, merged with
# the unfinished ones (as few as the backlog), where ordering the whole table read every
# job. Its arguments: (before, limit) for each read, then the limit of the merge
_PAGE = "AND j.seq < %s ORDER BY j.seq DESC LIMIT %s"


def _newest(state: State | None) -> str:
    if state is not None:
        return f"{_SELECT} WHERE j.state = '{state}' {_PAGE}"
    parts = (f"j.state IN {_FINISHED}", f"j.state = '{State.QUEUED}'", f"j.state = '{State.RUNNING}'")
    reads = " UNION ALL ".join(f"({_SELECT_SEQ} WHERE {where} {_PAGE})" for where in parts)
    return f"SELECT doc, rev, events, id FROM ({reads}) u ORDER BY seq DESC LIMIT %s"


_NEWEST: dict[str | None, str] = {None: _newest(None), **{str(s): _newest(s) for s in State}}
#: the bound of a first page (above every submission number)
_NO_BOUND = 2**63 - 1
# a page of finished jobs for the window's history (PgView.history_rows): what the data
# dir's archive index knows of each (ArchivedRow), and what the filters done here read
_HISTORY_COLUMNS = (
    "seq, id, state, kind, doc->>'title', doc->'created_at', doc->'finished_at', doc->'updated_at',"
    " doc->'last_error', doc->'resolved_at', doc->'profile', doc->'input'"
)
#: finished jobs read per statement when a filter is checked here (text, error signature)
_HISTORY_SCAN = 500
_SEQ = "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM dq_job_seq"
# the states spelled out as the unique index's predicate is: a parameter there (state =
# ANY(%s)) makes the prepared plan unable to use that index, and every submission would
# read every live job
_HOLDER = f"SELECT (SELECT id FROM dq_jobs WHERE key = %s AND state IN {_LIVE_STATES} LIMIT 1), (" + _SEQ + ")"

# a new job with its first events, its submission number from the sequence (not from
# what the verb read: two concurrent submissions must not share one, and the document must
# say the same), in one statement
_INSERT = (
    "WITH s AS (SELECT nextval('dq_job_seq') AS seq),"
    " j AS (INSERT INTO dq_jobs (id, seq, kind, priority, key, state, run_after, lease_expires_at, doc, events)"
    " SELECT %s, s.seq, %s, %s, %s, %s, %s, %s, %s::jsonb || jsonb_build_object('seq', s.seq), %s::jsonb"
    " FROM s RETURNING id, seq)"
    " SELECT seq FROM j"
)

# the same, for a submission that did not look for the key's holder (PgView.guess_keys):
# the statement looks, and a held key inserts nothing (no row comes back, and the backend
# runs the verb again, looking first). The look comes before the sequence, so that a
# duplicate takes no submission number; a holder committed between the two is still
# caught by the unique index of live keys (ON CONFLICT: nothing inserted either)
_INSERT_GUESSED = _INSERT.replace(
    "WITH s AS (SELECT nextval('dq_job_seq') AS seq),",
    "WITH s AS (SELECT nextval('dq_job_seq') AS seq"
    f" WHERE NOT EXISTS (SELECT 1 FROM dq_jobs WHERE key = %s AND state IN {_LIVE_STATES})),",
).replace(
    " FROM s RETURNING id, seq)",
    f" FROM s ON CONFLICT (key) WHERE state IN {_LIVE_STATES} DO NOTHING RETURNING id, seq)",
)


class Conflict(Exception):
    """A job changed after this transaction read it without a lock: run the verb again."""


def _ran(cursor: Any) -> bool:
    """Whether the statement of ``cursor`` ran and succeeded (a pipelined one: once its answer came)."""
    result = getattr(cursor, "pgresult", None)
    return result is not None and result.status in (ExecStatus.COMMAND_OK, ExecStatus.TUPLES_OK)


def _readable(conn: Any) -> bool:
    """Whether ``conn``'s socket has something to read now (an idle connection has nothing: see PgView.can_send_alone)."""
    poller = select.poll()
    poller.register(conn.pgconn.socket, select.POLLIN)
    return bool(poller.poll(0))


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _appended(old: Any, new: list[Any], new_text: str | None) -> Any:
    """A job's events (JSON text as read, or already parsed) with ``new`` appended."""
    if new_text is None:
        return old if old is not None else "[]"
    if isinstance(old, list):
        return [*old, *orjson.loads(new_text)]
    if isinstance(old, bytes):
        old = old.decode()
    if not isinstance(old, str) or old.strip() in ("", "[]"):
        return new_text
    return old.rstrip()[:-1] + "," + new_text[1:]


def _purge_where(purge: PurgeFilter) -> tuple[str, list[Any]]:
    """``PurgeFilter.matches`` as SQL: the condition and its arguments."""
    where = "state = ANY(%s) AND (doc->>'finished_at')::float8 < %s"
    args: list[Any] = [list(purge.states), purge.before]
    if purge.ids is not None:
        where += " AND id = ANY(%s)"
        args.append(sorted(purge.ids))
    return where, args


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _history_row(r: Sequence[Any]) -> ArchivedRow:
    """An :class:`ArchivedRow` of a row of ``_HISTORY_COLUMNS``, as the data dir's archive index has it."""
    error = r[8] if isinstance(r[8], dict) else None
    profile = r[10] if isinstance(r[10], str) else None
    if profile is None and isinstance(r[11], dict) and isinstance(r[11].get("profile"), str):
        profile = r[11]["profile"]
    signature = None
    if r[2] == State.DEAD:
        # imported here, as the archive does: ``present`` pulls in flow control and the ledger
        from desktop_queue.core.present import error_signature

        signature = error_signature({"last_error": error})
    return ArchivedRow(
        int(r[0]),
        str(r[1]),
        str(r[2]),
        r[3],
        profile,
        r[4],
        _float(r[5]),
        _float(r[6]),
        _float(r[7]),
        error.get("class") if error is not None else None,
        resolved_at=_float(r[9]),
        signature=signature,
    )


def _mentions(r: Sequence[Any], needle: str) -> bool:
    """Whether the title or the prompt (as the archive indexes it) of a ``_HISTORY_COLUMNS`` row holds ``needle`` (casefolded)."""
    title = r[4]
    return (isinstance(title, str) and needle in title.casefold()) or needle in prompt_text(r[11]).casefold()


class PgJobs(Mapping[str, JobDict]):
    """Every job, by id, read through the view (``View.hot_jobs``: on PostgreSQL every job is hot)."""

    def __init__(self, view: PgView) -> None:
        self._view = view

    def __getitem__(self, job_id: str) -> JobDict:
        job = self._view.read_job(job_id, lock=False)
        if job is None:
            raise KeyError(job_id)
        return job

    def __contains__(self, job_id: object) -> bool:
        return isinstance(job_id, str) and self._view.exists(job_id)

    def __iter__(self) -> Iterator[str]:
        rows = self._view._conn.execute("SELECT id FROM dq_jobs ORDER BY seq").fetchall()
        return iter([r[0] for r in rows])

    def __len__(self) -> int:
        row = self._view._conn.execute("SELECT count(*) FROM dq_jobs").fetchone()
        return int(row[0]) if row else 0

    def values(self) -> ValuesView[JobDict]:
        return cast(ValuesView[JobDict], self._view.all_jobs())

    def items(self) -> Any:
        return [(j["id"], j) for j in self._view.all_jobs()]


class PgView:
    """A :class:`~desktop_queue.core.backend.View` over one transaction of ``conn``.

    Args:
        conn: a psycopg connection inside a transaction.
        write: the transaction will write (reads by id lock their rows; the lease scan
            locks the job it takes).
        worker: the ``dq_workers`` row of this process: a lease written here names it.
        artifacts: ``ref -> bytes`` of an artifact file in this machine's data dir: a
            success whose result refers to one stores its bytes (:meth:`_update`).
        pipeline: enters ``conn``'s pipeline, which the transaction is in from then on,
            and returns it (None: it is in one already). Until then nothing is sent: the writes are
            held, and the first read sends them before itself (see :meth:`send_alone`).
    """

    archive = None  # (every job stays in the table: there is no separate archive to ask)
    #: a new job whose random id is taken fails its insert (the primary key), and the
    #: backend runs the verb again, which draws another: a submission need not ask first
    refuses_taken_ids = True

    def __init__(
        self,
        conn: Any,
        *,
        write: bool,
        worker: str | None = None,
        images: Callable[[str], tuple[JobDict, int] | None] | None = None,
        guess_keys: bool = False,
        artifacts: Callable[[str], bytes | None] | None = None,
        pipeline: Callable[[], Any] | None = None,
    ) -> None:
        self._raw = conn
        self._enter_pipeline = pipeline
        #: the psycopg pipeline the transaction entered (see :meth:`pipelined`; None: not yet, or never)
        self.pipeline: Any = None
        #: writes not sent yet (cursor, statement, parameters): until the pipeline is entered
        self._held: list[tuple[Any, str, Sequence[Any]]] = []
        self._artifacts = artifacts
        self.write = write
        #: the writing transaction became an explicit block (see :attr:`conn`): it ends with COMMIT
        self.block = False
        self.worker = worker
        #: id -> (the job as a commit of this process left it, its rev then), or None: what a
        #: read by id of a writing view takes instead of reading and locking the row (see
        #: :meth:`read_job`)
        self._images = images if write else None
        #: ids of the jobs read from ``images`` and not written (checked by :meth:`validate`)
        self._optimistic: set[str] = set()
        #: a job was read from ``images`` (a verb that then raises is run again without them)
        self.used_images = False
        #: id -> the rev a job has once this transaction commits, for each one in ``_after``
        self._after_rev: dict[str, int] = {}
        #: ids of the jobs :meth:`apply` changed (None: a purge, "everything"), renewals of a
        #: lease aside: what the commit notifies
        self.changed: set[str] | None = set()
        #: id -> (job, rev) of every job read here; a locked id is also in ``_locked``
        self._seen: dict[str, tuple[JobDict, int]] = {}
        self._locked: set[str] = set()
        self._version: int | None = None
        #: id -> the job as this transaction leaves it, for each job it wrote from a known
        #: state (see :meth:`after_images`)
        self._after: dict[str, JobDict] = {}
        #: read with the key look-up a submission makes (see :meth:`holder_id`)
        self._seq: int | None = None
        #: a lease epoch reserved by the lease scan, handed out by the next :attr:`epoch`
        self._epoch: int | None = None
        self._purged = False
        #: (now, the job locked for the lease scan or None) as :meth:`expired_leases` took it
        self._pick: tuple[float, JobDict | None] | None = None
        self._picked_epoch: int | None = None
        #: lane -> the time at which a writing scan found nothing in it that it could take:
        #: empty for the rest of this transaction at that time or before (see runnable)
        self._empty: dict[str, float] = {}
        #: new jobs, and the statements that gave them their submission number
        self._numbered: list[tuple[JobDict, Any]] = []
        #: leases in one statement (lease_next): what each took, and its statement
        self._leases_next: list[tuple[NextLease, Any]] = []
        #: ids of the jobs leased so, known once the commit answered: what it notifies then
        self.changed_late: set[str] = set()
        #: the cursor of the last write sent (see :meth:`wrote_all`)
        self._last_write: Any = None
        #: a key look-up answers "no holder" without asking (see :meth:`holder_id`)
        self._guess_keys = guess_keys and write
        #: the keys answered so: their insert is the check
        self.guessed: set[str] = set()
        #: a guessed key turned out held: nothing was inserted for it (see :meth:`after_images`)
        self.missed = False
        #: a success's result was written as new for its key (``res_new``): a race lost
        #: by this transaction may be a stored result (see PgBackend.commit)
        self.checks_new_result = False

    @property
    def _conn(self) -> Any:
        """The connection, in the transaction's pipeline (entered now if it was not, held writes sent first)."""
        if self._enter_pipeline is not None:
            self.pipelined()
        return self._raw

    def pipelined(self) -> None:
        """Enters the transaction's pipeline if it is not in it, and sends the writes held until then."""
        enter, self._enter_pipeline = self._enter_pipeline, None
        if enter is None:
            return
        self.pipeline = enter()
        for cursor, sql, params in self._held:
            cursor.execute(sql, params)
        self._held.clear()

    def can_send_alone(self) -> bool:
        """Whether the transaction is one write at most, sent nothing yet, on a connection the server left quiet.

        Such a transaction needs no pipeline (see :meth:`send_alone`). The server speaks
        on an idle connection only to end it (it shut down, or died): a connection with
        something to read goes the pipeline's way, where the held writes are sent before
        the sync, so that its loss is met before anything could commit.
        """
        return self._enter_pipeline is not None and len(self._held) <= 1 and not _readable(self._raw)

    def send_alone(self) -> None:
        """Sends the transaction's one write as a statement of its own (see :meth:`can_send_alone`).

        On an autocommit connection, outside a pipeline, the statement is its own
        transaction, committed by the sync libpq sends with it: one message to the server
        and one answer, where in the pipeline the statement, the commit's sync and the
        pipeline's closing sync were three sends, each a wake-up of the server's process.
        Its answer, or its error, is in by the time this returns.
        """
        self._enter_pipeline = None
        if self._held:
            cursor, sql, params = self._held.pop()
            cursor.execute(sql, params)

    def abandon(self) -> None:
        """Makes sure nothing of the transaction commits (a verb failed, perhaps after sending writes).

        Held writes are simply never sent. Once something was sent, ``BEGIN`` turns the
        implicit transaction into a block (statements already run included) that
        ``ROLLBACK`` then undoes: a ``ROLLBACK`` alone would be refused with a warning in
        the server's log, and the pipeline's sync would commit what was sent.
        """
        self._held.clear()
        if self._enter_pipeline is not None:
            return  # (nothing sent)
        with contextlib.suppress(pg_errors.Error):
            if not self.block:
                self._raw.execute("BEGIN")
            self._raw.execute("ROLLBACK")

    @property
    def conn(self) -> Any:
        """The transaction's connection, for statements of a caller's own (a copy's bulk inserts).

        A writing transaction is implicit (the backend's pipeline, up to its sync), and
        psycopg may sync on its own inside a caller's statements (``executemany`` does):
        asked for the connection, the view makes the transaction an explicit block first,
        statements already run included, so that nothing commits before the backend does.
        """
        if self.write and not self.block:
            self._conn.execute("BEGIN")
            self.block = True
        return self._conn

    # ------------------------------------------------------------------ reading jobs

    def _job_of(self, row: Sequence[Any]) -> JobDict:
        job = cast(JobDict, orjson.loads(row[0]))
        job["events"] = row[2]
        self._seen[job["id"]] = (job, int(row[1]))
        return job

    def read_job(self, job_id: str, *, lock: bool) -> JobDict | None:
        """The job ``job_id`` (locked for this transaction when ``lock`` and writing)."""
        lock = lock and self.write
        seen = self._seen.get(job_id)
        if seen is not None and (not lock or job_id in self._locked):
            return seen[0]
        if lock and seen is None and self._images is not None:
            # optimistic: the job as this process's last commit of it left it, unlocked; its
            # update checks that its rev is still that one (else Conflict, and the verb runs
            # again reading the row), and a job read so and left alone is checked before the
            # COMMIT (validate): either way the transaction commits only if what it decided
            # on was the job's current state (one statement less for a complete, a heartbeat)
            image = self._images(job_id)
            if image is not None:
                job = cast(JobDict, dict(image[0]))
                self._seen[job_id] = (job, image[1])
                self._optimistic.add(job_id)
                self.used_images = True
                return job
        sql = _SELECT + " WHERE j.id = %s" + (" FOR UPDATE OF j" if lock else "")
        row = self._conn.execute(sql, (job_id,)).fetchone()
        if row is None:
            return None
        if lock:
            self._locked.add(job_id)
        return self._job_of(row)

    def all_jobs(self) -> list[JobDict]:
        rows = self._conn.execute(_SELECT + " ORDER BY j.seq").fetchall()
        return [self._seen[r[3]][0] if r[3] in self._locked else self._job_of(r) for r in rows]

    # ------------------------------------------------------------------ backend.View

    @property
    def version(self) -> int:
        """A transaction id no job change unseen here is older than (``changed_since`` finds those).

        The oldest transaction still running when this view's snapshot was taken would
        do: every change older than it is visible here. But transactions that change no
        job (heartbeats of the worker rows, notifications) move that on too, and a version
        should move only with the jobs; so it is the lesser of that and one past the last
        job change (or purge) seen here: no job change lies between the two.
        """
        if self._version is None:
            row = self._conn.execute(
                "SELECT least(pg_snapshot_xmin(pg_current_snapshot())::text::bigint, 1 + greatest(0,"
                " (SELECT txid FROM dq_jobs ORDER BY txid DESC LIMIT 1)::text::bigint,"
                " (SELECT txid FROM dq_purges ORDER BY txid DESC LIMIT 1)::text::bigint))"
            ).fetchone()
            self._version = int(row[0]) if row else 0
        return self._version

    @property
    def seq(self) -> int:
        """The highest submission number given out (a new job's own is taken when it is inserted).

        Read once per transaction, with the key look-up when a submission made one: the
        sequence moves under every transaction anyway, and the number a verb puts in a
        new job is replaced by the sequence's own when the row is inserted.
        """
        if self._seq is None:
            if self.guessed:
                # a guessed submission's own number (replaced by the sequence's at the
                # insert): the one change a guess is kept for (see holder_id)
                return 0
            row = self._conn.execute(_SEQ).fetchone()
            self._seq = int(row[0]) if row else 0
        return self._seq

    @property
    def epoch(self) -> int:
        """One less than a lease epoch no one else has: each read reserves a new one.

        The lease verb reads ``epoch + 1`` as its new lease's epoch; a sequence makes
        that strictly increasing and unique across every concurrent transaction.
        """
        reserved, self._epoch = self._epoch, None
        if reserved is not None:
            return reserved - 1  # (taken with the job the lease scan locked: one round trip less)
        row = self._conn.execute("SELECT nextval('dq_lease_epoch') - 1").fetchone()
        return int(row[0]) if row else 0

    def job(self, job_id: str) -> JobDict | None:
        return self.read_job(job_id, lock=True)

    def hot(self, job_id: str) -> JobDict | None:
        return self.read_job(job_id, lock=True)

    def holder(self, key: str) -> JobDict | None:
        while True:
            held = self.holder_id(key)
            if held is None:
                return None
            job = self.read_job(held, lock=True)
            # (the lock may have waited for a transaction that cancelled or purged it: look again)
            if job is not None and job["key"] == key and job["state"] in LIVE_OR_DONE:
                return job

    def holder_id(self, key: str) -> str | None:
        """The id of the live (or succeeded) job holding ``key``, or None.

        A view told to ``guess_keys`` answers None without asking, and the new job's
        insert checks instead (``ON CONFLICT`` on the unique index of live keys): most
        submissions are new, and the look-up was a statement of their own. The backend
        guesses only for a change of one new job, and runs the verb again, looking, when
        the insert found the key held (:attr:`missed`) or the verb did anything else.
        """
        known = self._known_holder(key)
        if known is not None:
            return known
        if self._guess_keys:
            self.guessed.add(key)
            return None
        # (with the submission number: a submission asks for both, one round trip)
        row = self._conn.execute(_HOLDER, (key,)).fetchone()
        if row is None:
            return None
        if self._seq is None:
            self._seq = int(row[1])
        return None if row[0] is None else str(row[0])

    def _known_holder(self, key: str) -> str | None:
        """A job of this transaction that holds ``key``: one it locked, wrote, or read from an
        image its COMMIT checks, that is live or succeeded (the unique index of live keys
        lets no other job hold the key then); None if it knows of none.

        A completion asks whether its own job still holds its key: the job in hand answers
        without a statement (and without a guess that would run the verb again).
        """
        if key in self.guessed:
            return None  # (its insert, if any, may find the key held: only the guess's check knows)
        for job_id in (*self._locked, *self._optimistic, *self._after):
            after = self._after.get(job_id)
            seen = self._seen.get(job_id)
            job = after if after is not None else (seen[0] if seen is not None else None)
            if job is not None and job.get("key") == key and job.get("state") in LIVE_OR_DONE:
                return job_id
        return None

    def exists(self, job_id: str) -> bool:
        return self._conn.execute("SELECT 1 FROM dq_jobs WHERE id = %s", (job_id,)).fetchone() is not None

    def hot_jobs(self) -> PgJobs:
        return PgJobs(self)

    def next_expiry(self, kept: Collection[str]) -> float | None:
        """The earliest lease expiry of a running job whose token is not in ``kept`` (None: none).

        What an idle lease driver sleeps until (:meth:`Queue.wake_times
        <desktop_queue.core.queue.Queue.wake_times>`), asked of the partial index on the
        expiry of running jobs instead of by reading each running job.
        """
        row = self._conn.execute(_NEXT_EXPIRY, (list(kept),)).fetchone()
        return float(row[0]) if row is not None else None

    def expired_leases(self, now: float) -> list[str]:
        """Ids of the running jobs whose lease expired before ``now`` (what a lease reaps first).

        The partial index on the expiry of running jobs answers it without reading the
        running jobs themselves (schema version 4): a lease no longer costs a read of every
        busy worker's job. The jobs found are read (unlocked, rev-checked) by the reaper.

        A writing view also takes, in the same statement, the job the lease scans for
        next: the first one due at ``now``, in lane order, that no other transaction holds
        (``FOR UPDATE SKIP LOCKED``, as :meth:`runnable`), which :meth:`runnable` then hands
        out instead of asking again. Found none: every lane is empty for this transaction
        (a job that becomes due in between is taken by the next lease, as if it came a
        moment later). A job taken this way and not leased (another lane asked for, a
        filter that passes over it) stays locked until this transaction ends, as one that
        :meth:`runnable` passes over does.
        """
        if not self.write:
            row = self._conn.execute(_EXPIRED, (now,) * _EXPIRED_TIMES).fetchone()
            return list(row[0]) if row is not None else []
        row = self._conn.execute(_EXPIRED_AND_PICK, (now,) * (_EXPIRED_TIMES + len(_LANES))).fetchone()
        if row is None:  # (the outer query always has its one row)
            return []
        found = row[1:]
        job = self._job_of(found) if found[0] is not None else None
        if job is not None:
            self._locked.add(job["id"])
            self._picked_epoch = int(found[4])
        self._pick = (now, job)
        # (the pick is the first free job in lane order: the lanes before its own have none)
        for lane in _LANES[: _LANES.index(str(job["priority"])) if job is not None else len(_LANES)]:
            self._empty[lane] = now
        return list(row[0]) if row[0] is not None else []

    def lease_next(self, changes: JobChanges, event: EventDict, now: float) -> NextLease:
        """Leases the first job due at ``now`` in lane order that no one holds, in one statement.

        The lease is ``changes`` and ``event`` with the job's counts filled in (see
        :class:`NextLease`), unless a lease has expired: then nothing is written, and the
        verb leases the usual way, which reaps it first. What was taken is known once the
        commit answered (:meth:`after_images` fills it in): the statement is sent with the
        transaction's end, and a lease costs one round trip.
        """
        taken = NextLease()
        cursor = self._write(
            _LEASE_NEXT,
            (
                *(now,) * _EXPIRED_TIMES,
                _dumps(changes),
                _dumps(event),
                str(changes["state"]),
                changes["lease_expires_at"],
                self.worker,
                *(now for _ in _LANES),
            ),
        )
        self._leases_next.append((taken, cursor))
        return taken

    def _took(self) -> None:
        """Fills in what each :meth:`lease_next` took, and that job's image, from its answer."""
        for taken, cursor in self._leases_next:
            row = cursor.fetchone()
            if row is None:
                continue
            taken.expired = bool(row[0])
            if row[4] is None:
                continue
            job = cast(JobDict, orjson.loads(row[1]))
            job["events"] = row[3]
            job_id = str(row[4])
            self._after[job_id] = job
            self._after_rev[job_id] = int(row[2])
            self.changed_late.add(job_id)
            taken.job_id, taken.epoch, taken.attempt = job_id, int(job["lease_epoch"]), int(job["attempts"])
        self._leases_next.clear()

    def newest(self, state: str | None, limit: int, before_seq: int | None = None) -> list[JobDict]:
        """The ``limit`` newest jobs (in ``state``, a :class:`State`; submitted before ``before_seq``),
        newest first: a page of :meth:`Queue.list <desktop_queue.core.queue.Queue.list>` or of
        :meth:`Queue.find_jobs <desktop_queue.core.queue.Queue.find_jobs>`, read as a page."""
        page = (_NO_BOUND if before_seq is None else before_seq, limit)
        args = page if state is not None else (*page * 3, limit)
        rows = self._conn.execute(_NEWEST[None if state is None else str(state)], args).fetchall()
        return [self._job_of(r) for r in rows]

    def history_rows(self, query: HistoryQuery) -> list[ArchivedRow]:
        """Finished jobs newest first, filtered as the data dir's archive filters them
        (:meth:`Archive.rows <desktop_queue.core.store.archive.Archive.rows>`): what
        :meth:`Queue.history <desktop_queue.core.queue.Queue.history>` pages on PostgreSQL.

        Every row is the job's only copy, so the window's hot ones are not left out
        (it drops the rows it holds already). The fields are filtered by the server
        through dq_jobs_finished_seq; ``text`` (in the title or the prompt, any case)
        by the server in the title and the input's JSON, then here in the prompt's text
        as the data dir indexes it; ``signature`` here (it is worked out in Python).
        """
        state, text, signature = query.get("state"), query.get("text"), query.get("signature")
        limit, resolved = query.get("limit"), query.get("resolved")
        if state is not None and state not in FINISHED_STATES:
            return []  # (the history holds finished jobs only)
        where = [f"state = '{State(state)}'" if state is not None else f"state IN {_FINISHED}"]
        args: list[Any] = []
        for sql, value in (
            ("kind = %s", query.get("kind")),
            ("coalesce(doc->>'profile', doc->'input'->>'profile') = %s", query.get("profile")),
            ("doc->'last_error'->>'class' = %s", query.get("error_class")),
            ("(doc->>'created_at')::float8 >= %s", query.get("created_after")),
            ("(doc->>'created_at')::float8 < %s", query.get("created_before")),
        ):
            if value is not None:
                where.append(sql)
                args.append(value)
        if resolved is not None:
            where.append(f"doc->>'resolved_at' IS {'NOT ' if resolved else ''}NULL")
        needle = text.casefold() if text else None
        if text:
            pattern = "%" + escape_like(text) + "%"
            if any(c in text for c in '"\\') or any(ord(c) < 0x20 for c in text):
                where.append("(doc->>'title' ILIKE %s OR doc ? 'input')")  # (escaped in the JSON: found here)
                args.append(pattern)
            else:
                where.append("(doc->>'title' ILIKE %s OR (doc->'input')::text ILIKE %s)")
                args += [pattern, pattern]
        checked = needle is not None or signature is not None
        out: list[ArchivedRow] = []
        cursor = query.get("before_seq")
        while limit is None or len(out) < limit:
            page = _HISTORY_SCAN if checked or limit is None else limit - len(out)
            sql = f"SELECT {_HISTORY_COLUMNS} FROM dq_jobs WHERE " + " AND ".join(where)
            if cursor is not None:
                sql += " AND seq < %s"
            rows = self._conn.execute(
                sql + " ORDER BY seq DESC LIMIT %s", (*args, *(() if cursor is None else (cursor,)), page)
            ).fetchall()
            for r in rows:
                row = _history_row(r)
                if needle is not None and not _mentions(r, needle):
                    continue
                if signature is not None and row.signature != signature:
                    continue
                out.append(row)
            if len(rows) < page:
                break
            cursor = int(rows[-1][0])
        return out if limit is None else out[:limit]

    def jobs_by_id(self, ids: Sequence[str]) -> list[JobDict]:
        """The jobs of ``ids`` that exist, in that order, with their timelines, in one statement
        (a batch of ``migrate``'s copy, where a read per job was a round trip per job)."""
        rows = self._conn.execute(_SELECT + " WHERE j.id = ANY(%s)", (list(ids),)).fetchall()
        found = {job["id"]: job for job in (self._job_of(r) for r in rows)}
        return [found[i] for i in ids if i in found]

    def window_jobs(self, ids: Collection[str] | None = None) -> list[JobDict]:
        """The window's hot set (or the jobs of ``ids`` that exist) as :meth:`Queue.raw_jobs
        <desktop_queue.core.queue.Queue.raw_jobs>` hands them to the window, in one statement.

        The hot set is every unfinished job and the :data:`HOT_FINISHED` newest finished
        ones: the window pages older ones through :meth:`history_rows`, as it pages the
        data dir's archive. Without timelines (read per job with its row, they were most
        of the window's first look) and trimmed by the server; the jobs of a refresh's
        changed ids in one statement, where reading them one by one cost a query each.
        """
        if ids is None:
            rows = self._conn.execute(_WINDOW_HOT).fetchall()
        else:
            rows = self._conn.execute(_WINDOW_IDS, (list(ids),)).fetchall()
        return [cast(JobDict, orjson.loads(r[0])) for r in rows]

    def hot_among(self, ids: Collection[str]) -> set[str]:
        """Which of ``ids`` the window's hot set holds (see :meth:`window_jobs`), in one
        statement: the window's tables let go of the rows of the others, and page them."""
        return {r[0] for r in self._conn.execute(_HOT_AMONG, (list(ids),)).fetchall()}

    def hot_set(self) -> list[JobDict]:
        """The jobs of :meth:`window_jobs` whole, timelines and inputs included, in one
        statement: what a pass over the hot jobs reads (:func:`~desktop_queue.core.backend.scan_jobs`)."""
        return [self._job_of(r) for r in self._conn.execute(_HOT_SET).fetchall()]

    def ids_with_prefix(self, prefix: str, limit: int = 3) -> list[str]:
        """Up to ``limit`` ids starting with ``prefix`` (what a short id a person typed names),
        found by the server: through the primary key where the collation allows (C), else by
        a scan there, where reading every id here shipped them all."""
        rows = self._conn.execute(
            "SELECT id FROM dq_jobs WHERE id LIKE %s ORDER BY id LIMIT %s", (escape_like(prefix) + "%", limit)
        )
        return [r[0] for r in rows.fetchall()]

    def count_matching(self, purge: PurgeFilter) -> int:
        """How many jobs ``purge`` matches (:meth:`PurgeFilter.matches
        <desktop_queue.core.store.archive.PurgeFilter.matches>`), counted by the server."""
        where, args = _purge_where(purge)
        row = self._conn.execute(f"SELECT count(*) FROM dq_jobs WHERE {where}", args).fetchone()
        return int(row[0]) if row is not None else 0

    def jobs_in(self, state: str) -> list[JobDict]:
        """Every job in ``state`` (a :class:`State`), in one statement: the dead letters that
        the error groups and "retry all matching" look through, where reading them by id
        cost a statement each."""
        sql = _JOBS_IN.get(str(state))
        if sql is None:  # (not a state: none is in it)
            return []
        return [self._job_of(r) for r in self._conn.execute(sql).fetchall()]

    def timelines(self) -> Iterator[JobDict]:
        """Every job's id, state and timeline (as JSON text, parsed by ``events_of``), a page
        of :data:`TIMELINE_PAGE` at a time: what ``stats`` derives its figures from, where
        reading every whole job at once held them all in memory (gigabytes at a million)."""
        after = ""
        while True:
            rows = self._conn.execute(_TIMELINES, (after, TIMELINE_PAGE)).fetchall()
            for r in rows:
                yield cast(JobDict, {"id": r[0], "state": r[1], "events": r[2]})
            if len(rows) < TIMELINE_PAGE:
                return
            after = rows[-1][0]

    def horizon_ids(self, floor: float) -> tuple[list[str], list[str]]:
        """What :class:`~desktop_queue.core.windowed.WindowedMetrics` folds when it rebuilds,
        where a data dir folds its hot set and the archived jobs changed since ``floor``:
        the unfinished jobs and the finished ones changed since ``floor``; and, apart, the
        dead letters still waiting that changed before it (counted, not folded)."""
        recent = [r[0] for r in self._conn.execute(_HORIZON_IDS, (floor,)).fetchall()]
        waiting = [r[0] for r in self._conn.execute(_WAITING_BEFORE, (floor,)).fetchall()]
        return recent, waiting

    def finished_since(self, cutoff: float, state: str) -> dict[str, float]:
        """Every job that ended in ``state`` at or after ``cutoff``, by id, with when (through
        dq_jobs_finished_updated, where the window's hot set holds only the newest)."""
        rows = self._conn.execute(_FINISHED_SINCE, (cutoff, str(state), cutoff)).fetchall()
        return {str(r[0]): float(r[1]) for r in rows}

    def inputs_not_queued(self) -> list[tuple[str, str, Any]]:
        """``(id, input digest, input)`` of the hot jobs not queued (see :meth:`window_jobs`),
        in one statement: what the window's prompt search (:meth:`Queue.prompt_matches
        <desktop_queue.core.queue.Queue.prompt_matches>`) looks through, where reading the
        jobs one by one cost a query each (3.7 s at 20,000 jobs). Older jobs are searched
        by :meth:`history_rows`."""
        rows = self._conn.execute(_INPUTS_NOT_QUEUED).fetchall()
        return [(str(r[0]), r[1] or "", orjson.loads(r[2]) if r[2] is not None else None) for r in rows]

    def state_counts(self) -> dict[str, int]:
        """How many jobs each state holds, and ``resolved``: the dead letters a person resolved (still counted as dead).

        What :meth:`Queue.counts <desktop_queue.core.queue.Queue.counts>` asks a view
        that can count without listing every job: one statement, through the indexes.
        """
        row = self._conn.execute(_STATE_COUNTS).fetchone()
        assert row is not None  # (an aggregate always answers one row)
        total, *counted, resolved = (int(n) for n in row)
        out = dict(zip(_COUNTED, counted, strict=True))
        out[str(State.SUCCEEDED)] = total - sum(counted)
        return {str(s): out[str(s)] for s in State} | {RESOLVED: resolved}

    def ids_in(self, state: str) -> Collection[str]:
        sql = _IDS_IN.get(str(state))
        if sql is None:  # (not a state: none is in it)
            return []
        return [r[0] for r in self._conn.execute(sql).fetchall()]

    def purged(self, job: JobDict) -> bool:
        return False  # (a purge deletes the rows it matches in its own transaction)

    def queued_in_lane(self, lane: str) -> int:
        row = self._conn.execute(
            "SELECT count(*) FROM dq_jobs WHERE state = 'queued' AND priority = %s", (str(lane),)
        ).fetchone()
        return int(row[0]) if row else 0

    def queued_of_kinds(self, kinds: Iterable[str]) -> bool:
        """Whether a queued job of one of ``kinds`` waits (what a lease asks before it scans).

        A writing view that has just taken its pick (:meth:`expired_leases`) answers from
        it when it can: no free job due in any lane means none this transaction could
        lease, and a picked job of one of ``kinds`` is one.
        """
        kinds = list(kinds)
        if self.write and self._pick is not None:
            picked = self._pick[1]
            if picked is None:
                return False
            if picked["kind"] in kinds:
                return True
        row = self._conn.execute(
            "SELECT EXISTS (SELECT 1 FROM dq_jobs WHERE state = 'queued' AND kind = ANY(%s))", (kinds,)
        ).fetchone()
        return bool(row and row[0])

    def runnable(self, lane: str, now: float, skip: Callable[[JobDict], bool] | None = None) -> JobDict | None:
        """The next queued job of ``lane`` due at ``now``, locked, skipping jobs other transactions hold.

        A writing view takes it with ``FOR UPDATE SKIP LOCKED``: a concurrent lease
        passes over it instead of waiting, and takes the next one.
        """
        passed: list[str] = []
        if self.write and now <= self._empty.get(str(lane), -math.inf):
            return None  # (found empty in this transaction; one due since is the next lease's)
        if self._pick is not None and self.write and now <= self._pick[0]:
            picked = self._pick[1]
            if picked is None:
                return None  # (none due in any lane that no one holds: see expired_leases)
            if picked["priority"] == lane:
                self._pick = None
                self._epoch = self._picked_epoch
                if skip is None or not skip(picked):
                    return picked
                passed.append(picked["id"])
            elif _LANES.index(str(picked["priority"])) > _LANES.index(str(lane)):
                return None  # (the first lane held nothing free: the pick came from a later one)
        # a writing scan locks every row it returns: one at a time, or it would hold (and
        # hide from other workers) a page of jobs it does not take. It passes over every
        # job this transaction holds already (leased in it, or passed over): SKIP LOCKED
        # skips only others' locks, so they would come back first, a round trip each
        page = 1 if self.write else 16
        while True:
            excluded = [*self._locked, *passed] if self.write else passed
            rows = self._conn.execute(
                _RUNNABLE_LOCK if self.write else _RUNNABLE, (str(lane), now, excluded, page)
            ).fetchall()
            for row in rows:
                job = self._job_of(row)
                if self.write:
                    self._locked.add(job["id"])
                    self._epoch = int(row[4])
                if skip is not None and skip(job):
                    passed.append(job["id"])
                    continue
                return job
            if len(rows) < page:
                if self.write:
                    self._empty[str(lane)] = now
                return None

    def next_wake(self) -> float | None:
        row = self._conn.execute("SELECT min(run_after) FROM dq_jobs WHERE state = 'queued'").fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def changed_since(self, version: int) -> tuple[int, set[str] | None]:
        """Ids of the jobs written by transactions not yet finished at ``version`` (and since).

        A few of them may have been seen already; none is missed. A purge since then
        answers None (the caller reloads).
        """
        now = self.version
        since = max(version, 0)
        purged = self._conn.execute(
            "SELECT EXISTS (SELECT 1 FROM dq_purges WHERE txid >= %s::text::xid8)", (str(since),)
        ).fetchone()
        if purged and purged[0]:
            return now, None
        rows = self._conn.execute("SELECT id FROM dq_jobs WHERE txid >= %s::text::xid8", (str(since),)).fetchall()
        return now, {r[0] for r in rows}

    # ------------------------------------------------------------------ writing records

    def apply(self, records: Sequence[Record]) -> None:
        """Writes ``records`` in this transaction.

        Raises:
            Conflict: a job read without a lock was changed by another transaction since.
            psycopg.errors.UniqueViolation: a new live job's key is held (a concurrent
                submission won): the backend runs the verb again, and it finds that job.
        """
        for record in records:
            op = record.get("op")
            if op == "new":
                self._insert(cast(NewRecord, record))
            elif op == "batch":
                for sub in cast(BatchRecord, record)["new"]:
                    self._insert(sub)
            elif op == "upd":
                self._update(cast(UpdateRecord, record))
            elif op == "purge":
                self._purge(cast(PurgeRecord, record))

    def _write(self, sql: str, params: Sequence[Any]) -> Any:
        """Sends one write of this transaction (in a pipeline its answer comes with the commit).

        Before the pipeline is entered, the write is held (its cursor answers once it is
        sent: with the next read, or at the commit).
        """
        if self._enter_pipeline is None:
            cursor = self._raw.execute(sql, params)
        else:
            cursor = self._raw.cursor()
            self._held.append((cursor, sql, params))
        self._last_write = cursor
        return cursor

    def commit_block(self) -> None:
        """Sends the ``COMMIT`` of a transaction made a block (see :attr:`conn`), as its last write."""
        self._write("COMMIT", ())

    @property
    def wrote_all(self) -> bool:
        """Whether every write sent ran and succeeded (asked once the pipeline has answered).

        In a pipeline a failed statement makes the server skip every later one until the
        sync, so the last write's own success says all of them succeeded.
        """
        return self._last_write is None or _ran(self._last_write)

    def _insert(self, record: NewRecord) -> None:
        job: dict[str, Any] = dict(record["job"])
        job.pop("events", None)
        events = _dumps(list(record.get("ev") or ()))
        doc = _dumps(job)
        guessed = job["key"] in self.guessed
        cursor = self._write(
            _INSERT_GUESSED if guessed else _INSERT,
            (
                *((job["key"],) if guessed else ()),
                job["id"],
                job["kind"],
                job["priority"],
                job["key"],
                job.get("state", State.QUEUED),
                job.get("run_after") or 0.0,
                job.get("lease_expires_at"),
                doc,
                events,
            ),
        )
        after = cast(JobDict, orjson.loads(doc))
        after["events"] = events
        self._after[job["id"]] = after
        self._after_rev[job["id"]] = 0  # (the column's default)
        self._numbered.append((after, cursor))  # (its number is read once the statement ran)
        self._changed(job["id"])

    def _changed(self, job_id: str | None) -> None:
        if job_id is None:
            self.changed = None
        elif self.changed is not None:
            self.changed.add(job_id)

    def _update(self, record: UpdateRecord) -> None:
        """One statement: the row (rev-checked if it was read without a lock), its events, its result."""
        job_id = record["id"]
        changes: dict[str, Any] = dict(record.get("set") or {})
        set_text = _dumps(changes)
        assignments = ["doc = doc || %s::jsonb", "rev = rev + 1", "txid = pg_current_xact_id()"]
        params: list[Any] = [set_text]
        for column in _COLUMNS:
            if column in changes:
                value = changes[column]
                assignments.append(f"{column} = %s")
                params.append(value or 0.0 if column == "run_after" else value)
        if "lease_token" in changes:
            # a new lease belongs to this process's worker row; a cleared one to no one
            assignments.append("worker_id = %s")
            params.append(self.worker if changes["lease_token"] else None)
        events = list(record.get("ev") or ())
        events_text = _dumps(events) if events else None
        if events_text is not None:
            assignments.append("events = events || %s::jsonb")
            params.append(events_text)
        sql = f"WITH u AS (UPDATE dq_jobs SET {', '.join(assignments)} WHERE id = %s"
        params.append(job_id)
        seen = self._seen.get(job_id)
        if seen is not None and job_id not in self._locked:
            sql += " AND rev = %s"
            params.append(seen[1])
        sql += " RETURNING id)"
        doc = record.get("res")
        check = " SELECT dq_expect_one(count(*)) FROM u"
        if isinstance(doc, dict) and isinstance(doc.get("key"), str):
            # the result in the statement (so the transaction) of its job's success
            new = bool(record.get("res_new"))
            sql += (
                ", r AS (INSERT INTO dq_results (key, doc) SELECT %s, %s::jsonb FROM u ON CONFLICT (key) "
                + ("DO NOTHING" if new else "DO UPDATE SET doc = EXCLUDED.doc")
                + " RETURNING 1)"
            )
            if new:
                # the verb did not look for a result stored for the key: none may be, or the
                # transaction aborts (and the backend tells the verb, which looks it up)
                check = " SELECT dq_expect_one(count(*)), dq_expect_one((SELECT count(*) FROM r)) FROM u"
                self.checks_new_result = True
            params.extend((doc["key"], _dumps(doc)))
            artifact = self.artifact_of(doc)
            if artifact is not None:
                # the bytes in the statement of the success, so that every machine sharing
                # the queue finds the artifact of every result it finds (a reused result's
                # artifact is there already: kept as it is)
                sql += (
                    ", a AS (INSERT INTO dq_artifacts (ref, key, sha256, data) SELECT %s, %s, %s, %s FROM u"
                    " ON CONFLICT (ref) DO NOTHING RETURNING 1)"
                )
                params.extend((artifact[0], doc["key"], artifact[1], artifact[2]))
        # (the check is the server's: in a pipelined transaction the statement goes with the
        # COMMIT, and a lost race aborts the transaction instead of being seen here)
        try:
            self._write(sql + check, params)
        except pg_errors.SerializationFailure:
            raise Conflict(f"job {job_id} changed meanwhile (or is gone)") from None
        base = self._after.get(job_id) or (seen[0] if seen is not None else None)
        rev = self._after_rev.get(job_id)
        if rev is None and seen is not None:
            rev = seen[1]
        if seen is not None:
            self._seen[job_id] = (seen[0], seen[1] + 1)
        self._optimistic.discard(job_id)  # (checked by this update's WHERE)
        if base is not None:
            # (what the row now holds: the document read, with this change merged in as
            # ``doc || change`` merges it, and the events appended)
            after = cast(JobDict, {**base, **orjson.loads(set_text)})
            after["events"] = _appended(base.get("events"), events, events_text)
            self._after[job_id] = after
            if rev is not None:
                self._after_rev[job_id] = rev + 1
            else:
                self._after_rev.pop(job_id, None)
        else:
            self._after.pop(job_id, None)
            self._after_rev.pop(job_id, None)
        if events or not changes.keys() <= _RENEWAL:
            self._changed(job_id)  # (a lease renewal alone wakes no one: nothing a reader shows moved)

    def artifact_of(self, doc: dict[str, Any]) -> tuple[str, str, bytes] | None:
        """(ref, sha256, bytes) of the artifact file a result document refers to, if this machine has it intact."""
        result = doc.get("result")
        ref = result.get("artifact_ref") if isinstance(result, dict) else None
        if self._artifacts is None or not isinstance(ref, str):
            return None
        data = self._artifacts(ref)
        if data is None:
            return None  # (made elsewhere: stored there; or lost here, which the result view tells)
        digest = hashlib.sha256(data).hexdigest()
        expected = result.get("artifact_sha256") if isinstance(result, dict) else None
        if isinstance(expected, str) and expected != digest:
            log.warning("the artifact %s is not the one its result describes; not shared", ref)
            return None
        return ref, digest, data

    def validate(self) -> None:
        """Checks, in the transaction (before its COMMIT), that each job read optimistically and not written is unchanged.

        A job :meth:`read_job` took from this process's own images instead of the row is
        current only if its rev still is the one of that image: the check aborts the
        transaction otherwise (a serialization failure, which the backend runs again).
        """
        if self._optimistic:
            ids = sorted(self._optimistic)
            revs = [self._seen[i][1] for i in ids]
            self._write(
                "SELECT dq_expect_one((SELECT count(*) FROM dq_jobs j, unnest(%s::text[], %s::bigint[]) AS x(id, rev)"
                " WHERE j.id = x.id AND j.rev = x.rev) - %s + 1)",
                (ids, revs, len(ids)),
            )

    def committed_images(self) -> dict[str, tuple[JobDict, int]]:
        """id -> (job, rev) of each job this transaction wrote from a known state, as it commits them."""
        if self._purged:
            return {}
        return {i: (job, self._after_rev[i]) for i, job in self._after.items() if i in self._after_rev}

    def after_images(self) -> dict[str, JobDict]:
        """The jobs as this transaction leaves them: each one it wrote, and each one it locked.

        A job written from what this transaction read of it (locked, or checked by its
        rev) is that with the change applied; a job locked and left alone is as read. Once
        the transaction committed, these are the jobs as the database holds them at that
        commit, so the verb's answer needs no second read (:meth:`PgBackend.peek`).
        """
        for job, cursor in self._numbered:
            row = cursor.fetchone()
            if row is not None:
                job["seq"] = int(row[0])
            elif job["key"] in self.guessed:
                self.missed = True  # (the key was held: no row, nothing written)
        self._numbered.clear()
        self._took()
        if self._purged:
            return {}
        images = {job_id: self._seen[job_id][0] for job_id in self._locked if job_id in self._seen}
        images.update(self._after)
        return images

    def _purge(self, record: PurgeRecord) -> None:
        where, args = _purge_where(PurgeFilter.from_json(record["filter"]))
        # (matched by the server: reading every finished job to match them here held a long
        # history in memory; their timelines go with their rows)
        keys = [r[0] for r in self._conn.execute(f"DELETE FROM dq_jobs WHERE {where} RETURNING key", args).fetchall()]
        if keys:
            # a key's result (and its artifact) goes with its job, unless a job still here holds the key
            for table in ("dq_results", "dq_artifacts"):
                self._write(
                    f"DELETE FROM {table} r WHERE r.key = ANY(%s)"
                    " AND NOT EXISTS (SELECT 1 FROM dq_jobs j WHERE j.key = r.key AND j.state = 'succeeded')",
                    (keys,),
                )
        self._changed(None)
        self._purged = True  # (what it deleted must not be answered from this transaction)
        self._write(
            "INSERT INTO dq_purges (at, filter) VALUES (%s, %s::jsonb)", (record.get("at"), _dumps(record["filter"]))
        )
