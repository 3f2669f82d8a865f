"""The queue on PostgreSQL: one queue shared by several processes and machines.

:class:`~.backend.PgBackend` implements :class:`desktop_queue.core.backend.Backend` on a
PostgreSQL database (psycopg 3 and its pool, the optional ``postgres`` extra): the verbs
and invariants are those of the JSON store, with leasing by ``SELECT ... FOR UPDATE SKIP
LOCKED``, a unique index on live idempotency keys, and results, events and state changes
in one transaction. Its schema (:mod:`.schema`) is created or migrated when it opens.

This package imports psycopg; nothing else in the core imports it, so the JSON store,
the default, works without it (see :func:`desktop_queue.core.backend.store_options`).
"""

from __future__ import annotations

from desktop_queue.core.pg.backend import PgBackend, ServerClock
from desktop_queue.core.pg.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "PgBackend", "ServerClock"]
