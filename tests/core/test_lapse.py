"""A failure that recurs at every tick is logged when its spell starts and when it ends, not each time."""

from __future__ import annotations

import errno
import logging
import os

import pytest

from desktop_queue.core.lapse import Lapse, os_reason

log = logging.getLogger("tests.lapse")


def lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == log.name and r.levelno == level]


def test_a_spell_is_one_warning_then_one_line_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=log.name)
    lapse = Lapse(log, "could not save the state", "saved the state again")
    assert lapse.failed("disk full") is True
    for _ in range(40):
        assert lapse.failed("disk full") is False
    assert lapse.failing()
    lapse.ended()
    lapse.ended()  # no spell open: nothing more to say
    assert lines(caplog, logging.WARNING) == ["could not save the state: disk full"]
    assert lines(caplog, logging.INFO) == ["saved the state again (it had failed 41 times in a row)"]
    assert len(lines(caplog, logging.DEBUG)) == 40  # the repeats are there for whoever asks for them
    assert not lapse.failing()

    lapse.failed("disk full")  # a new spell is told again
    lapse.ended()
    assert lines(caplog, logging.WARNING)[1:] == ["could not save the state: disk full"]
    assert lines(caplog, logging.INFO)[1:] == ["saved the state again (it had failed once)"]


def test_keyed_spells_are_apart_and_a_forgotten_one_ends_silently(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=log.name)
    lapse = Lapse(log, "the outcome of {key} waits for the store", "the store took the outcome of {key}")
    for _ in range(3):
        lapse.failed(key="a")
        lapse.failed(key="b")
    lapse.ended("a")
    lapse.forget("b")
    lapse.ended("b")
    assert lines(caplog, logging.WARNING) == [
        "the outcome of a waits for the store",
        "the outcome of b waits for the store",
    ]
    assert lines(caplog, logging.INFO) == ["the store took the outcome of a (it had failed 3 times in a row)"]


def test_an_os_error_reads_as_its_path_and_reason() -> None:
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/data/outbox.jsonl")
    assert os_reason(full) == "/data/outbox.jsonl: No space left on device"
    assert os_reason(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))) == "No space left on device"
    assert os_reason(ValueError("bad")) == "bad"
