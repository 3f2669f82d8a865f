"""Many :class:`~desktop_queue.core.model.Job` views at once, for the verbs that list jobs.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: for
:class:`Job`'s 30 fields that is most of building a view, and building a thousand views
was most of what ``list --state queued`` spent once the store was open.
:func:`job_views` gives each new instance its field dict instead, which is what
``__init__`` would have left.

This lives here, beside the store, and not in the model: ``Job`` stays a plain frozen
dataclass that everything else builds through its constructor. It is sound only while
``Job`` has no ``__post_init__``, no ``__slots__`` and no field that ``__init__`` leaves
out; :func:`check_job_shape` says so at import, and the tests compare every view with
the one the constructor builds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from desktop_queue.core.model import Job, job_fields
from desktop_queue.core.records import JobDict


def check_job_shape() -> None:
    """Raises ``TypeError`` if :class:`Job` has grown something that its ``__init__`` does
    beyond storing its fields (then :func:`job_views` would build a different object)."""
    if hasattr(Job, "__post_init__") or "__slots__" in vars(Job):
        raise TypeError("Job has a __post_init__ or __slots__: job_views must build it through Job(...)")
    if any(not f.init for f in dataclasses.fields(Job)):
        raise TypeError("Job has a field that __init__ does not set: job_views must build it through Job(...)")


check_job_shape()

_new = object.__new__
_set = object.__setattr__


def job_views(raws: Iterable[JobDict], *, with_events: bool = False) -> list[Job]:
    """``[Job.from_dict(raw, with_events) for raw in raws]``, equal field for field."""
    out: list[Job] = []
    append = out.append
    for raw in raws:
        view = _new(Job)
        _set(view, "__dict__", job_fields(raw, with_events))
        append(view)
    return out
