"""Python thread states that last as long as the Qt pool threads they belong to.

A ``QThreadPool`` thread is no Python thread. Each time it runs a Python callable,
PySide takes the GIL with ``PyGILState_Ensure``, which finds no thread state for the
thread, makes one (and its first frame stack chunk, an ``mmap``), and deletes both
again with ``PyGILState_Release`` when the callable returns. A worker would pay that
(two system calls and the state's set-up and tear-down) for every attempt it starts and
every sync it hands off, and a ``threading.local`` set by one attempt would be gone by
the next on the same thread.

:func:`keep_thread_state`, called first thing in the callable, takes one more
reference to the thread state, so that the release at the end of the call leaves it
in place and the next call finds it. The reference is never given back: the state
lives as long as the thread. A pool thread that expires takes no Python code with it,
but its state stays behind until the interpreter ends, so pools that run such
callables keep their threads (:func:`keep_threads`): at most their maximum thread
count of states, each a few KiB.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

_kept = threading.local()

# CPython's C API; an interpreter without it (PyPy) keeps paying for a state per call
_pythonapi: Any = getattr(ctypes, "pythonapi", None)
_ensure: Any = getattr(_pythonapi, "PyGILState_Ensure", None)
if _ensure is not None:
    _ensure.restype = ctypes.c_int
    _ensure.argtypes = []


def keep_thread_state() -> bool:
    """Keeps the calling thread's Python thread state after the running call returns.

    Idempotent per thread (the flag lives in the state it keeps). A no-op in a thread
    that Python started, whose state lives as long as the thread anyway. Returns
    whether this call took the reference.
    """
    if _ensure is None or getattr(_kept, "on", False):
        return False
    _kept.on = True
    if not isinstance(threading.current_thread(), threading._DummyThread):  # noqa: SLF001
        return False  # a Python thread: its state is already its own
    _ensure()  # (the GIL is held: this only counts one more user of the state)
    return True


def keep_threads(pool: Any) -> None:
    """Makes ``pool`` (a ``QThreadPool``) keep its threads instead of ending idle ones.

    A thread that ran :func:`keep_thread_state` leaves its Python state behind when it
    ends; a pool that never ends its threads holds at most its maximum thread count
    of them, where one that ends idle threads (after 30 s by default) and starts new
    ones for the next burst would add a few every time.
    """
    pool.setExpiryTimeout(-1)
