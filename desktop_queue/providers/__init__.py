"""Providers: one module per job kind, behind one small interface.

A provider has a ``kind`` and a ``version`` (part of the idempotency fingerprint),
``validate(input)``, ``run(job, context) -> Outcome``, ``classify(error) -> Outcome``
and optionally ``lookup(job) -> LookupResult`` for start-up reconciliation. Providers
are discovered through the entry-point group ``desktop_queue.providers``, so another
package can add kinds without touching this one.

A provider may also describe its input with ``input_spec() -> InputSpec``
(:mod:`desktop_queue.core.inputspec`): fields with a type (string, multi-line text,
integer, number, boolean, choice, JSON), a default, the limits its ``validate``
enforces, help text and an "advanced" flag, and which field a line of a plain-text
batch goes into. The New dialog then generates a form for the kind, and
``desktop-queue submit KIND --batch FILE`` reads prompts and CSV columns into it. A
provider without one (or whose ``input_spec`` fails) gets the JSON editor only. For
example::

    from desktop_queue.core.inputspec import FieldType, InputField, InputSpec

    def input_spec(self) -> InputSpec:
        return InputSpec(kind=self.kind, fields=(
            InputField("prompt", FieldType.TEXT, "&Prompt:", default="", required=True),
            InputField("steps", FieldType.INTEGER, "&Steps:", default=20, minimum=1, maximum=150),
        ))
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
