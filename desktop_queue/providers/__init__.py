"""Providers: one module per job kind, behind one small interface.

A provider has a ``kind`` and a ``version`` (part of the idempotency fingerprint),
``validate(input)``, ``run(job, context) -> Outcome``, ``classify(error) -> Outcome``
and optionally ``lookup(job) -> LookupResult`` for start-up reconciliation. Providers
are discovered through the entry-point group ``desktop_queue.providers``, so another
package can add kinds without touching this one.
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points
from typing import Any

from desktop_queue.core.outcome import Provider

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "desktop_queue.providers"


def builtin_providers() -> dict[str, Provider]:
    """The kinds that ship with Desktop Queue (used if entry points are unavailable)."""
    from desktop_queue.providers.demo import DemoProvider

    demo = DemoProvider()
    return {demo.kind: demo}


def discover(settings: dict[str, Any] | None = None) -> dict[str, Provider]:
    """Every installed provider, keyed by kind: the built-ins plus entry-point plug-ins.

    A plug-in that fails to load is logged and skipped; it never stops the app.
    """
    found: dict[str, Provider] = dict(builtin_providers())
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            factory = ep.load()
            provider = factory()
        except Exception as exc:  # a broken plug-in must not break the queue
            log.warning("provider plug-in %s could not be loaded: %s", ep.name, exc)
            continue
        found.setdefault(provider.kind, provider)
    return found


__all__ = ["ENTRY_POINT_GROUP", "Provider", "builtin_providers", "discover"]
