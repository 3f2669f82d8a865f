"""The store's change log: what the window, the outbox and the change feed read changes from."""

from __future__ import annotations

import pytest

from desktop_queue.core.store import state as state_module
from desktop_queue.core.store.state import StoreState


def test_a_reader_is_told_what_changed_or_everything_once_it_fell_behind_the_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(state_module, "CHANGE_LOG_MAX", 10)
    st = StoreState()
    for i in range(25):  # job i changes at version i + 1
        st.version += 1
        st.changes.append(st.version, f"j{i}")
    assert 5 <= len(st.changes) <= 10  # (the older half went each time it grew past 10)
    assert st.changed_since(25) == (25, set())
    assert st.changed_since(24) == (25, {"j24"})
    assert st.changed_since(20) == (25, {f"j{i}" for i in range(20, 25)})
    assert st.changed_since(2) == (25, None)  # its changes are gone: read everything
    assert list(st.changes)[-1] == (25, "j24")
    st.touch_all()
    assert st.changed_since(25) == (26, None)
