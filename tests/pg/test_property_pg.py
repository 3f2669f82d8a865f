"""The queue's Hypothesis state machine (tests/core/test_property.py) over PostgreSQL, with a server restart rule.

The machine, its model and its invariants are the JSON store's own; here each example
gets a schema of its own on a server of this test's own, "crash and reopen" closes
the backend (its open lock goes, so the next opener is the first and reconciles), and
a further rule restarts the server (``pg_ctl restart -m fast``) between any two steps:
nothing acknowledged may be lost, and the next verb reconnects by itself.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant, precondition, rule, run_state_machine_as_test

from desktop_queue.core import Queue
from desktop_queue.core.pg import PgBackend


@pytest.mark.slow
def test_queue_state_machine_on_postgresql(own_server: Any, pg_harness: Any, core_tests: Callable[[str], Any]) -> None:
    prop = core_tests("test_property.py")

    class PgQueueMachine(prop.QueueMachine):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            self.schema = f"p_{secrets.token_hex(6)}"
            with psycopg.connect(own_server.dsn, autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {self.schema}")
            self.dsn = pg_harness.schema_dsn(own_server.dsn, self.schema)
            self.restarts = 0
            super().__init__()

        def _open(self) -> Queue:
            return Queue.open(
                self.data_dir, backend=PgBackend(self.dsn), clock=self.clock, policy=prop.POLICY, rng=self.rng
            )

        def teardown(self) -> None:
            super().teardown()
            with psycopg.connect(own_server.dsn, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {self.schema} CASCADE")

        @precondition(lambda self: self.restarts < 2)  # (a restart is a fifth of a second: a few an example)
        @rule()
        def restart_the_server(self) -> None:
            self.restarts += 1
            own_server.restart()

        @invariant()  # (replaces the base class's invariant of this name: no StoreState here)
        def the_indexes_match_a_recount(self) -> None:
            queued = [m for m in self.jobs.values() if m.state == "queued"]

            def recount(view: Any) -> tuple[bool, bool, int, int]:
                return (
                    view.queued_of_kinds(["demo"]),
                    view.queued_of_kinds(["openai.chat"]),
                    view.queued_in_lane("interactive"),
                    view.queued_in_lane("background"),
                )

            assert self.queue.store.read(recount) == (
                bool(queued),
                False,
                sum(1 for m in queued if m.priority == "interactive"),
                sum(1 for m in queued if m.priority == "background"),
            )

        @invariant()
        def store_reopens_identically(self) -> None:
            # another process opening the same queue sees exactly the same jobs
            other = Queue.open(self.data_dir, backend=PgBackend(self.dsn), clock=self.clock, policy=prop.POLICY)
            try:
                assert not other.report.first
                assert other.report.notices == []
                mine = {j.id: j.to_json() for j in self.queue.list(with_events=True)}
                theirs = {j.id: j.to_json() for j in other.list(with_events=True)}
                assert theirs == mine
            finally:
                other.close()

    run_state_machine_as_test(
        PgQueueMachine,
        settings=settings(
            max_examples=15,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
