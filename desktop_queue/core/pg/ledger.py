"""The spend ledger of a PostgreSQL queue: :class:`PgSpendStore`, the rows of ``dq_spend``.

A :class:`~desktop_queue.core.ledger.SpendLedger` given this store keeps its entries in
the queue's database instead of ``<data dir>/ledger``, so every machine's budgets are
measured against one ledger. The totals a budget asks for are sums over an index
(profile, time) between the bounds of the local day or month
(:func:`~desktop_queue.core.ledger.period_bounds`).

An entry recorded inside a flow session (an attempt's outcome) is inserted in that
session's transaction (:class:`~.flowstate.FlowLink`): the attempt leaves the in-flight
list and enters the ledger in one commit, and no other process's session can see one
without the other. Within a session the totals are asked once per profile and period
(every writer holds the session's row lock, so they cannot change meanwhile). An entry
whose commit failed or went unanswered is kept and written again (``ON CONFLICT DO
NOTHING`` on its id) before the next read or write.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import psycopg

from desktop_queue.core.errors import StoreError
from desktop_queue.core.ledger import LedgerEntry, Spent, Usage
from desktop_queue.core.pg.flowstate import FlowLink

log = logging.getLogger(__name__)

_COLUMNS = "at, profile, model, kind, tokens_in, tokens_out, images, speech_chars, speech_seconds, usd, job_id, attempt"


class PgSpendStore:
    """:class:`~desktop_queue.core.ledger.SpendStore` in the table ``dq_spend``.

    Args:
        link: the process's connection to the queue's database (shared with its flow state).
    """

    def __init__(self, link: FlowLink) -> None:
        self.link = link
        self._written: list[tuple[str, LedgerEntry]] = []  # in the transaction under way
        self._unsure: list[tuple[str, LedgerEntry]] = []  # their commit failed: written again
        self._cache: dict[tuple[str, float, float], Spent] = {}
        link.on_end.append(self._ended)

    def _ended(self, committed: bool) -> None:
        if not committed:
            self._unsure.extend(self._written)
        self._written = []
        self._cache.clear()

    @staticmethod
    def _insert(conn: Any, ident: str, entry: LedgerEntry) -> None:
        u = entry.usage
        conn.execute(
            f"INSERT INTO dq_spend (id, {_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (id) DO NOTHING",
            (
                ident,
                entry.at,
                entry.profile,
                entry.model,
                entry.kind,
                u.tokens_in,
                u.tokens_out,
                u.images,
                u.speech_chars,
                u.speech_seconds,
                entry.usd,
                entry.job_id,
                entry.attempt,
            ),
        )

    def _carry_unsure(self, conn: Any) -> None:
        unsure, self._unsure = self._unsure, []
        self._written.extend(unsure)  # (if this transaction fails too, they are kept again)
        for ident, entry in unsure:
            self._insert(conn, ident, entry)

    def _in_transaction(self, fn: Any) -> Any:
        """``fn(conn)`` in the session's transaction if this thread holds one open, else in its own."""
        with self.link.lock:
            if self.link.in_transaction:
                try:
                    self._carry_unsure(self.link.conn)
                    return fn(self.link.conn)
                except psycopg.Error as exc:
                    raise StoreError(f"the PostgreSQL spend ledger refused: {exc}") from None

            def first(conn: Any) -> Any:
                # (run again on a new connection after a lost one: whatever the lost
                # transaction had written is written again in this one)
                self._unsure[:0], self._written = self._written, []
                self._carry_unsure(conn)
                return fn(conn)

            try:
                value = self.link.run(first)
            except BaseException:
                self.link.rollback()  # (whatever broke, the connection is left idle)
                self._ended(False)
                raise
            self._ended(self.link.commit())
            return value

    def append(self, entry: LedgerEntry) -> None:
        ident = secrets.token_hex(12)

        def insert(conn: Any) -> None:
            self._insert(conn, ident, entry)
            self._written.append((ident, entry))
            self._cache.clear()

        try:
            self._in_transaction(insert)
        except StoreError as exc:
            # the server is away (a restart): written with the next transaction that goes through
            with self.link.lock:
                if (ident, entry) not in self._written:
                    self._unsure.append((ident, entry))
            log.warning("the spend of job %s is kept until the database answers: %s", entry.job_id, exc)

    def totals(self, profile: str, start: float, end: float) -> Spent:
        key = (profile, start, end)
        cached = self._cache.get(key)
        if cached is not None and self.link.in_transaction:
            return cached

        def total(conn: Any) -> Spent:
            row = conn.execute(
                "SELECT coalesce(sum(tokens_in + tokens_out), 0), coalesce(sum(usd), 0),"
                " coalesce(bool_or(usd IS NULL AND (tokens_in + tokens_out + images + speech_chars > 0"
                " OR speech_seconds > 0)), false)"
                " FROM dq_spend WHERE profile = %s AND at >= %s AND at < %s",
                (profile, start, end),
            ).fetchone()
            spent = Spent(int(row[0]), float(row[1]), bool(row[2])) if row is not None else Spent()
            self._cache[key] = spent
            return spent

        result: Spent = self._in_transaction(total)
        return result

    def entries_since(self, start: float | None) -> list[LedgerEntry]:
        def rows(conn: Any) -> list[LedgerEntry]:
            found = conn.execute(
                f"SELECT {_COLUMNS} FROM dq_spend WHERE at >= %s ORDER BY n",
                (start if start is not None else float("-inf"),),
            ).fetchall()
            return [
                LedgerEntry(
                    at=float(r[0]),
                    profile=str(r[1]),
                    model=str(r[2]),
                    kind=str(r[3]),
                    usage=Usage(
                        tokens_in=int(r[4]),
                        tokens_out=int(r[5]),
                        images=int(r[6]),
                        speech_chars=int(r[7]),
                        speech_seconds=float(r[8]),
                    ),
                    usd=None if r[9] is None else float(r[9]),
                    job_id=str(r[10]),
                    attempt=int(r[11]),
                )
                for r in found
            ]

        result: list[LedgerEntry] = self._in_transaction(rows)
        return result


__all__ = ["PgSpendStore"]
