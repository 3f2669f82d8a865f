"""Emitting signals from Python must not eat references of ``True`` (PySide6 6.12.0 on CPython 3.11 did)."""

from __future__ import annotations

import sys
from typing import Any

from PySide6.QtCore import QObject, Signal

import desktop_queue.runtime  # noqa: F401  (importing the runtime installs the work-around)
from desktop_queue.runtime import qtcompat

EMITS = 2000  # far more than the few hundred references True starts with


class Emitter(QObject):
    bare = Signal()
    flag = Signal(bool)
    pair = Signal(str, str)


def test_emit_keeps_the_reference_count_of_true(qtbot: Any) -> None:
    emitter = Emitter()
    received: list[object] = []
    emitter.pair.connect(lambda *args: received.append(args))
    before = sys.getrefcount(True)

    for i in range(EMITS):
        emitter.bare.emit()
        emitter.flag.emit(i % 2 == 0)
        emitter.pair.emit("job", "succeeded")

    assert len(received) == EMITS
    assert abs(sys.getrefcount(True) - before) < 50


def test_the_probe_finds_nothing_to_fix_once_installed() -> None:
    assert qtcompat.emit_steals_true() is False
