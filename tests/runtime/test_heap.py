"""A long-running process gives back what it freed (glibc's malloc only: skipped elsewhere)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from desktop_queue.runtime import heap

pytestmark = pytest.mark.skipif(heap._glibc() is None, reason="glibc's malloc only")

_MALLINFO = """
import ctypes, sys
from desktop_queue.runtime import heap
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
"""


def _run(body: str, *args: str) -> list[int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", _MALLINFO + textwrap.dedent(body), *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    return [int(x) for x in out.stdout.split()]


def test_a_big_block_is_mapped_apart_even_after_a_bigger_one_was_freed() -> None:
    """glibc raises its threshold to the size of a freed mapped block: the next big blocks
    would come from the heap, and stay in the process when freed."""
    body = """
        if sys.argv[1] == "apart":
            assert heap.keep_big_blocks_apart()
        bigger = bytearray(8 << 20)
        del bigger
        before = libc.mallinfo2().hblks
        block = bytearray(1 << 20)
        print(libc.mallinfo2().hblks - before)
    """
    assert _run(body, "default") == [0]  # (from the heap)
    assert _run(body, "apart") == [1]  # a mapping of its own, unmapped when freed


def test_a_setting_of_the_user_s_own_is_kept() -> None:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    out = subprocess.run(
        [sys.executable, "-c", "from desktop_queue.runtime import heap; print(heap.keep_big_blocks_apart())"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    assert out.stdout.split() == ["False"]


def test_free_pages_inside_the_heap_go_back_to_the_system() -> None:
    """Blocks freed under one that lives on stay in the process until they are given back."""
    body = """
        blocks = [bytearray(64 << 10) for _ in range(800)]  # 50 MiB, from the heap
        pin = bytearray(1000)  # (lives on, above them)
        for b in blocks:
            b[0] = 1
        del blocks
        held = rss_kib()
        heap.give_back_free_memory()
        print(held, rss_kib())
    """
    held, after = _run(body)
    assert held - after > 40 << 10, (held, after)  # (KiB: most of the 50 MiB went back)
