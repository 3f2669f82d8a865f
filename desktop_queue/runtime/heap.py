"""Keeps a long-running process from holding on to memory it freed (glibc's malloc, Linux).

A ``work`` process or the window runs for days. What grew their memory with the jobs
they ran was mostly not live data but freed blocks that glibc's malloc keeps: after a
large block (a journal segment read, a page of archived jobs) is freed, malloc raises
the size from which it maps blocks apart (up to 32 MiB), so the next large blocks come
from the heap, where a small block that outlives them pins the heap's top and the space
is never given back. Two measures, both only where glibc is the C library:

* :func:`keep_big_blocks_apart`, at start-up: blocks of 128 KiB and more always get a
  mapping of their own, which goes back to the system when they are freed.
* :func:`give_back_free_memory` (``malloc_trim``), now and then on a timer
  (:func:`start_giving_back`): the free pages inside the heap go back to the system.

Neither changes what the process computes; a user who set glibc's own
``MALLOC_MMAP_THRESHOLD_`` keeps that setting.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from typing import Any

from PySide6.QtCore import QObject, QTimer

log = logging.getLogger(__name__)

#: ``mallopt``'s parameter for the size from which blocks are mapped apart (glibc's malloc.h)
_M_MMAP_THRESHOLD = -3
#: blocks of this size and more are mapped apart (glibc's own initial threshold, held there)
BIG_BLOCK = 128 * 1024
#: how often a long-running process gives free heap pages back
GIVE_BACK_EVERY_MS = 60_000

_libc: Any = None


def _glibc() -> Any:
    """The C library if it is glibc (None elsewhere: macOS, Windows, musl)."""
    global _libc
    if _libc is None:
        _libc = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL("libc.so.6")
                libc.gnu_get_libc_version  # noqa: B018 - only glibc has it
                libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
                libc.malloc_trim.argtypes = (ctypes.c_size_t,)
                _libc = libc
            except (OSError, AttributeError):
                pass
    return _libc or None


def keep_big_blocks_apart() -> bool:
    """Maps every block of :data:`BIG_BLOCK` bytes and more apart from now on; whether it did."""
    libc = _glibc()
    if libc is None or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, BIG_BLOCK))


def give_back_free_memory() -> bool:
    """Gives the heap's free pages back to the system; whether any were."""
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


def start_giving_back(parent: QObject, every_ms: int = GIVE_BACK_EVERY_MS) -> QTimer | None:
    """Keeps big blocks apart and gives free pages back every ``every_ms`` (None: not glibc)."""
    if _glibc() is None:
        return None
    keep_big_blocks_apart()
    timer = QTimer(parent)
    timer.setObjectName("giveBackMemory")
    timer.setInterval(every_ms)
    timer.timeout.connect(give_back_free_memory)
    timer.start()
    return timer
