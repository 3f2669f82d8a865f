"""Retry policy: full-jitter exponential backoff, attempt budget and a total deadline."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """How failures are retried.

    Attributes:
        base_s: the first backoff ceiling.
        cap_s: the largest backoff ceiling.
        max_attempts: default attempt budget for a job's run.
        deadline_s: how long after a run starts its retries may go on.
        poison_after: how many invalid outputs make a job poison.
        lease_s: default lease length.
    """

    base_s: float = 1.0
    cap_s: float = 60.0
    max_attempts: int = 5
    deadline_s: float = 24 * 3600.0
    poison_after: int = 3
    lease_s: float = 30.0

    def ceiling(self, attempt: int) -> float:
        """The backoff ceiling after ``attempt`` failed attempts (1-based)."""
        exponent = max(0, attempt - 1)
        if exponent >= 64:
            return self.cap_s
        return min(self.cap_s, self.base_s * (2**exponent))

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Full jitter: a uniform delay in ``[0, ceiling(attempt)]``."""
        return (rng or random).uniform(0.0, self.ceiling(attempt))

    @property
    def heartbeat_s(self) -> float:
        """Heartbeats come every third of a lease."""
        return self.lease_s / 3.0
