"""The Qt-side runtime: the QThreadPool lease driver shared by ``desktop-queue work`` and the window."""

from desktop_queue.runtime.driver import JobRunnable, LeaseDriver, RunReport

__all__ = ["JobRunnable", "LeaseDriver", "RunReport"]
