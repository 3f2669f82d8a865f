"""Power cuts: real workers and a real submitter on a file system that forgets what was not synced.

The data dir lies on :mod:`crashfs` (FUSE), which can take back everything not made
durable, as a power cut does. A ``desktop-queue work`` process runs chat jobs against the
fake OpenAI server while a submitter process adds jobs and prints each id once its submit
has returned. Both are killed (SIGKILL), the cut is made, and then:

* every acknowledged job is there, and every job that had succeeded has its result;
* a job that had succeeded is never asked of the provider again;
* a worker started after the cut finishes every job.

Three cuts in a row, with a worker running to idle between them: the last closer folds
the journal into a snapshot, so a later cut also tests what a fold made durable.

Needs ``mfusepy`` (the test extra), libfuse and ``/dev/fuse``; skipped without them.
``syncfs(2)`` does not reach a FUSE file system, so the processes here sync result files
one by one (the path taken where there is no ``syncfs``): see ``_SITE``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
sys.path.insert(0, str(TESTS / "providers"))

from fakeserver import FakeOpenAI  # noqa: E402
from workerproc import env_for, server, wait_for  # noqa: E402, F401  (server: a fixture)

from desktop_queue.core import Queue, State  # noqa: E402
from desktop_queue.core import results as results_module  # noqa: E402
from desktop_queue.providers import discover  # noqa: E402

pytestmark = [pytest.mark.drill, pytest.mark.slow]

#: every process of the drill imports this first: result files synced one by one (see the docstring)
_SITE = "from desktop_queue.core import results\nresults._syncfs = None\n"

#: adds jobs until killed; prints each id once its submit returned (acknowledged)
_SUBMITTER = r"""
import sys, threading
from desktop_queue.core import Queue
from desktop_queue.providers import discover
pace = threading.Event()
with Queue.open(sys.argv[1], discover()) as queue:
    n = int(sys.argv[2])
    while True:
        pace.wait(0.02)  # a person's scripts, not a flood: the worker keeps up
        n += 1
        if n % 3 == 0:
            job = queue.submit("openai.chat", {"prompt": f"power cut question {n}", "max_tokens": 8}).job
        else:
            job = queue.submit("demo", {"prompt": f"power cut demo {n}", "duration_s": 0.05}).job
        print(job.id, flush=True)
"""


def _fuse_usable() -> str | None:
    """Why the drill cannot run here (None: it can)."""
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:  # OSError: mfusepy finds no libfuse
        return f"mfusepy or libfuse is missing ({exc})"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not usable here"
    return None


@pytest.fixture
def crashfs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The mount and its control directory (the drill is skipped if it cannot mount)."""
    why = _fuse_usable()
    if why is not None:
        pytest.skip(why)
    backing, mount, control = tmp_path / "backing", tmp_path / "mount", tmp_path / "control"
    for d in (backing, mount, control):
        d.mkdir()
    log = (tmp_path / "crashfs.log").open("wb")
    fs = subprocess.Popen(
        [sys.executable, str(TESTS / "drills" / "crashfs.py"), str(backing), str(mount), str(control)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: os.path.ismount(mount) or fs.poll() is not None, 20, "the mount")
        if fs.poll() is not None:
            pytest.skip(f"crashfs could not mount: {(tmp_path / 'crashfs.log').read_text()[-500:]}")
        yield mount, control
    finally:
        fusermount = shutil.which("fusermount") or shutil.which("fusermount3")
        if fusermount is not None:
            subprocess.run([fusermount, "-u", "-z", str(mount)], check=False, capture_output=True)
        else:
            subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)
        fs.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            fs.wait(10)
        if fs.poll() is None:
            fs.kill()
        log.close()


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[Any]]]:
    """The drill's processes: any still running at the end (a failed wait) is killed."""
    procs: list[subprocess.Popen[Any]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def _env(server: FakeOpenAI, site: Path) -> dict[str, str]:
    env = env_for(server)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO), env.get("PYTHONPATH", "")])
    return env


def _work(data_dir: Path, env: dict[str, str], log: Path, *flags: str) -> subprocess.Popen[bytes]:
    """``desktop-queue work FLAGS`` on ``data_dir``; what it says goes to ``log`` (a pipe nobody reads would fill)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), "work", *flags],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _cut(control: Path) -> str:
    (control / "cmd").write_text("cut")
    state = control / "state"
    wait_for(lambda: state.exists() and state.read_text().startswith("done"), 60, "the power cut")
    said = state.read_text()
    state.unlink()
    return said


def _asked(server: FakeOpenAI) -> dict[str, int]:
    """How many times each chat prompt went to the provider."""
    counts: dict[str, int] = {}
    for request in server.of("chat"):
        prompt = str((request.body or {}).get("messages", [{}])[-1].get("content", ""))
        counts[prompt] = counts.get(prompt, 0) + 1
    return counts


def test_power_cuts_lose_no_acknowledged_job_or_result_and_pay_no_answer_twice(
    crashfs: tuple[Path, Path],
    server: FakeOpenAI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spawned: list[subprocess.Popen[Any]],
) -> None:
    mount, control = crashfs
    monkeypatch.setattr(results_module, "_syncfs", None)  # this process folds too, when it closes last
    data_dir = mount / "data"
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITE)
    env = _env(server, site)
    server.default_delay_s = 0.05
    acknowledged: list[str] = []
    for cut in range(3):
        worker = _work(data_dir, env, tmp_path / f"worker-{cut}.log", "--concurrency", "4")
        spawned.append(worker)
        submitter = subprocess.Popen(
            [sys.executable, "-c", _SUBMITTER, str(data_dir), str(cut * 100_000)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        spawned.append(submitter)
        before = len(server.of("chat"))
        wait_for(lambda: len(server.of("chat")) >= before + 12, 120, "answers to be paid for")  # noqa: B023
        for proc in (submitter, worker):
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
        out, _err = submitter.communicate(timeout=30)
        acknowledged += [line for line in out.split() if len(line) == 10]
        said = _cut(control)
        assert said.startswith("done names taken back"), said

        with Queue.open(data_dir, discover()) as queue:
            jobs = {job.id: job for job in queue.list(limit=None)}
            missing = [i for i in acknowledged if i not in jobs]
            assert not missing, f"cut {cut}: {len(missing)} acknowledged jobs lost ({said})"
            done = [job for job in jobs.values() if job.state == State.SUCCEEDED]
            without = [j.id for j in done if queue.results.get(j.idempotency_key) is None]
            assert not without, f"cut {cut}: {len(without)} succeeded jobs lost their result ({said})"
            paid = {str(j.input["prompt"]) for j in done if j.kind == "openai.chat"}
        asked_at_cut = _asked(server)

        log = tmp_path / f"finisher-{cut}.log"
        finisher = _work(data_dir, env, log, "--until-idle", "--max-seconds", "120")
        spawned.append(finisher)
        assert finisher.wait(300) == 0, log.read_text()[-2000:]
        asked = _asked(server)
        again = [p for p in paid if asked.get(p, 0) != asked_at_cut.get(p, 0)]
        assert not again, f"cut {cut}: answers already committed were paid for again: {again[:5]}"
        with Queue.open(data_dir, discover()) as queue:
            states: dict[str, Any] = {job.id: job.state for job in queue.list(limit=None)}
        stuck = [i for i in acknowledged if states[i] != State.SUCCEEDED]
        assert not stuck, f"cut {cut}: {len(stuck)} jobs not finished by a worker run to idle"
    assert len(acknowledged) > 30
