"""Work-arounds for bugs in the Qt binding that would otherwise crash a long-running worker.

PySide6 6.12.0 on CPython 3.11: ``SignalInstance.emit()`` returns ``True`` without
taking a new reference to it. Every ``emit`` from Python therefore steals one
reference of ``True``; after a few hundred emits its count reaches zero and the
interpreter aborts with ``Fatal Python error: bool_dealloc`` (a ``work`` process died
that way after about 500 demo jobs, the test suite at exit). CPython 3.12+ makes
``True`` immortal and PySide6 6.11 returns a new reference, so neither is affected.

:func:`install` measures the leak once and, only if it is there, wraps ``emit`` to
give back the stolen reference. It is a no-op everywhere else.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

from PySide6.QtCore import QObject, Signal, SignalInstance

_PROBES = 4
_installed = False


class _Probe(QObject):
    ping = Signal()


def _incref_true(times: int = 1) -> None:
    for _ in range(times):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(True))


def emit_steals_true() -> bool:
    """True when ``emit()`` leaks a reference of ``True`` (the lost references are given back)."""
    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(_PROBES):
        probe.ping.emit()
    lost = before - sys.getrefcount(True)
    if lost > 0:
        _incref_true(lost)
    return lost == _PROBES


def install() -> bool:
    """Patches ``SignalInstance.emit`` if (and only if) this binding needs it; returns whether it did."""
    global _installed
    if _installed:
        return True
    if sys.version_info >= (3, 12) or not emit_steals_true():
        return False
    original = SignalInstance.emit

    def emit(self: SignalInstance, *args: Any) -> Any:
        result = original(self, *args)
        if result is True or result is False:  # the reference emit() forgot to take
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(result))
        return result

    emit.__doc__ = original.__doc__
    SignalInstance.emit = emit  # type: ignore[method-assign]
    _installed = True
    return True
