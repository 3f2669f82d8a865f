"""Times and durations as people type them: ``90s``, ``1h30m``, ``2026-12-02T14:00`` (no Qt).

Shared by ``submit --at/--delay`` and the New dialog, so both accept the same words and
refuse bad ones with the same one-line message.
"""

from __future__ import annotations

import datetime as _dt
import math
import re

from desktop_queue.core.errors import InvalidInput

_UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+)([dhms])")
#: the longest delay or the farthest time accepted (a typo of a year should not hide a job)
MAX_AHEAD_S = 366 * 86_400
#: how far in the past ``--at`` may lie (a script's "now" computed a moment ago)
PAST_SLACK_S = 60.0


def parse_duration(text: str) -> float:
    """Seconds in ``text``: ``90s``, ``15m``, ``1h``, ``2d``, or combined largest first (``1h30m``).

    Raises:
        InvalidInput: anything else, zero, or over a year (one line for people).
    """
    clean = text.strip().lower().replace(" ", "")
    pos, total, last = 0, 0, math.inf
    for match in _PART.finditer(clean):
        unit = _UNITS[match.group(2)]
        if match.start() != pos or unit >= last:  # gaps, repeats or out of order: "1m1h", "1h1h"
            break
        total += int(match.group(1)) * unit
        pos, last = match.end(), unit
    if not clean or pos != len(clean):
        raise InvalidInput(f"not a duration: {text!r} (e.g. 90s, 15m, 1h, 2d, 1h30m)")
    if total <= 0:
        raise InvalidInput(f"a delay must be longer than zero, not {text!r}")
    if total > MAX_AHEAD_S:
        raise InvalidInput(f"a delay is at most a year, not {text!r}")
    return float(total)


def parse_time(text: str, now: float) -> float:
    """The wall time of an ISO 8601 date or time (``2026-12-02T14:00``, ``…+01:00``, ``…Z``).

    A time without a zone is local, as people mean it; a bare date is its midnight.

    Raises:
        InvalidInput: not ISO 8601, more than a minute in the past, or over a year ahead.
    """
    try:
        moment = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(
            f"not an ISO 8601 time: {text!r} (e.g. 2026-12-02T14:00 or 2026-12-02T14:00+01:00)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local
    when = moment.timestamp()
    if when < now - PAST_SLACK_S:
        raise InvalidInput(f"{text!r} is in the past")
    if when > now + MAX_AHEAD_S:
        raise InvalidInput(f"{text!r} is more than a year ahead")
    return max(when, now)
