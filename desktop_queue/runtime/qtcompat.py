"""A guard against a Qt binding that would otherwise crash a long-running process.

PySide6 6.12.0 on CPython 3.11 hands back ``None`` from every void method (``setText``,
``QTimer.singleShot``, ``QThreadPool.start``...) and ``True``/``False`` from every
``Signal.emit()`` without taking a reference to them. Each call steals one reference;
once a count reaches zero the interpreter aborts (``Fatal Python error: none_dealloc``
or ``bool_dealloc``): the window died after about two minutes, a ``work`` process after
about 500 demo jobs. CPython 3.12+ makes these singletons immortal, and other PySide6
releases take their references properly.

``pyproject.toml`` excludes that release; :func:`install` covers environments that
have it anyway. It measures the leak once and, only if it is there, does what CPython
3.12 does: it pins ``None``, ``True`` and ``False`` with a huge reference count that no
leak can exhaust. Elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import sys

from PySide6.QtCore import QObject, Signal

log = logging.getLogger(__name__)

#: what :func:`install` adds to the reference counts of None, True and False
_PINNED = 1 << 40
_PROBES = 64
_installed = False


class _Probe(QObject):
    ping = Signal()


def _give_back(singleton: object, count: int) -> None:
    if count > 0:
        ctypes.c_ssize_t.from_address(id(singleton)).value += count


def binding_steals_none() -> bool:
    """True when a void Qt method called from Python steals a reference of ``None``."""
    if sys.version_info >= (3, 12):
        return False
    probe = QObject()
    before = sys.getrefcount(None)
    for _ in range(_PROBES):
        probe.setObjectName("probe")
    lost = before - sys.getrefcount(None)
    _give_back(None, lost)  # give back what the probe itself took
    return lost >= _PROBES // 2


def emit_steals_true() -> bool:
    """True when ``Signal.emit()`` steals a reference of ``True``."""
    if sys.version_info >= (3, 12):
        return False
    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(_PROBES):
        probe.ping.emit()
    lost = before - sys.getrefcount(True)
    _give_back(True, lost)
    return lost >= _PROBES // 2


def install() -> bool:
    """Pins ``None``, ``True`` and ``False`` if (and only if) the binding leaks them.

    Idempotent. Returns whether the guard is active.
    """
    global _installed
    if _installed:
        return True
    if not (binding_steals_none() or emit_steals_true()):
        return False
    for singleton in (None, True, False):
        _give_back(singleton, _PINNED)
    _installed = True
    log.warning("this PySide6 build leaks references of None/True; pinned them (install PySide6 != 6.12.0)")
    return True
