"""Issue 13's "done when": two windows on two machines and a worker on a third share one PostgreSQL queue.

Three network namespaces on a bridge (the setup of :mod:`test_netns`), each with a host
name of its own (``unshare --uts``): ``hosta`` and ``hostb`` each run the real window
(:mod:`window_host`: :func:`desktop_queue.app.start`, shown on the offscreen platform,
or on ``$DQ_DONE_WHEN_DISPLAY`` for a look), ``hostc`` runs ``desktop-queue work``.
Nothing is shared but the database, reached over the bridge.

The windows' fallback timer is an hour: what one window shows of the other's job comes
by the change feed (``LISTEN/NOTIFY``). Their own workers are paused (the toolbar's
Pause), so that the job runs on the work host, as a team whose render box does the
work would have it; after the work host is killed, one window resumes and takes over.

For a look at the windows: ``Xvfb :91 -screen 0 1280x800x24 &``, then run this test with
``DQ_DONE_WHEN_DISPLAY=:91 DQ_DONE_WHEN_SHOTS=/tmp``: the windows open on that display
(``xcb``) and ``import -window root`` takes ``/tmp/pglive-*.png`` when window b shows
each timeline.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from test_netns import (  # (the namespaces and the server of the multi-host tests, one per module)
    REPO,
    Host,
    Network,
    Productions,
    network,
    pg_harness_module,
    server,
)

from desktop_queue.core import Queue, RetryPolicy, State, SystemClock

pytestmark = pytest.mark.slow

__all__ = ["network", "pg_harness_module", "server"]  # (fixtures, imported to be used here)

#: the windows' fallback read: an hour, so a job seen across machines came by the feed
NEVER_MS = 3_600_000
#: the work host's lease length: its leases come back this long after it was killed
LEASE_S = 3.0
START_S = 90.0
RUN_S = 90.0
WINDOW = Path(__file__).with_name("window_host.py")
# run inside the namespace: take this host's name, then run the window script
_BOOT_WINDOW = (
    "import runpy, socket, sys; socket.sethostname(sys.argv[1]); sys.argv = sys.argv[2:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
_BOOT_CLI = (
    "import runpy, socket, sys; socket.sethostname(sys.argv[1]); sys.argv = ['desktop-queue', *sys.argv[2:]]; "
    "runpy.run_module('desktop_queue', run_name='__main__', alter_sys=True)"
)


class Peer:
    """A process in a host's namespace whose stdout is JSON lines, read as they come on a thread."""

    def __init__(self, name: str, proc: subprocess.Popen[str]) -> None:
        self.name = name
        self.proc = proc
        self.lines: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                item = json.loads(line)
            except ValueError:
                item = {"event": "text", "text": line.rstrip()}
            with self._cond:
                self.lines.append(item)
                self._cond.notify_all()
        with self._cond:
            self.lines.append({"event": "exited"})
            self._cond.notify_all()

    def send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def wait(self, check: Callable[[dict[str, Any]], bool], timeout_s: float, what: str) -> dict[str, Any]:
        """The first line ``check`` accepts (waiting for it); fails saying ``what`` was awaited."""

        def found() -> dict[str, Any] | None:
            return next((item for item in self.lines if check(item)), None)

        with self._cond:
            if self._cond.wait_for(lambda: found() is not None or self.lines[-1:] == [{"event": "exited"}], timeout_s):
                item = found()
                if item is not None:
                    return item
        errors = [i for i in self.lines if i.get("event") in ("error", "failed", "text")]
        raise AssertionError(f"{self.name}: no {what} within {timeout_s} s; {errors[-5:]}")

    def state(self, job_id: str, state: str, timeout_s: float) -> dict[str, Any]:
        return self.wait(
            lambda i: i.get("event") == "state" and i.get("id") == job_id and i.get("state") == state,
            timeout_s,
            f"{state} for job {job_id}",
        )


def _env(host: Host, home: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
        "DESKTOP_QUEUE_DEMO_AUDIT": str(host.fifo),
        # each machine its own profile (settings, keyring files, caches)
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "share"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_RUNTIME_DIR": str(home / "run"),
    }
    display = os.environ.get("DQ_DONE_WHEN_DISPLAY")
    if display:  # (a look at the windows: `Xvfb :91 &`, DQ_DONE_WHEN_DISPLAY=:91)
        env.update(DISPLAY=display, QT_QPA_PLATFORM="xcb")
    else:
        env["QT_QPA_PLATFORM"] = "offscreen"
    env.pop("DESKTOP_QUEUE_STORE", None)
    env.pop("DESKTOP_QUEUE_DATA_DIR", None)
    return env


class Machines:
    """The test's processes on the three hosts (windows on a and b, the worker on c)."""

    def __init__(self, network: Network, uri: str, root: Path) -> None:
        self.network = network
        self.uri = uri
        self.root = root
        self.procs: list[subprocess.Popen[str]] = []
        self.logs: list[IO[str]] = []

    def _spawn(self, host: Host, argv: list[str], *, stdin: bool) -> subprocess.Popen[str]:
        home = self.root / f"{host.name}-home"
        (home / "run").mkdir(parents=True, exist_ok=True)
        os.chmod(home / "run", 0o700)
        log = open(self.root / f"{host.name}-{len(self.procs)}.stderr", "w", encoding="utf-8")  # noqa: SIM115
        self.logs.append(log)
        proc = subprocess.Popen(
            ["ip", "netns", "exec", host.netns, "unshare", "--uts", sys.executable, *argv],
            cwd=REPO,
            env=_env(host, home),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def window(self, host: Host, geometry: str) -> Peer:
        argv = ["-c", _BOOT_WINDOW, host.name, str(WINDOW), "--data-dir", str(host.data_dir), "--store", self.uri]
        argv += ["--fallback-ms", str(NEVER_MS), "--geometry", geometry]
        peer = Peer(host.name, self._spawn(host, argv, stdin=True))
        ready = peer.wait(lambda i: i.get("event") in ("ready", "failed"), START_S, "ready")
        assert ready["event"] == "ready" and ready["host"] == host.name, ready
        # (in front, it reads the store once more; what it shows after that comes by the feed)
        peer.wait(lambda i: i.get("event") == "app_state" and i.get("active") is True, START_S, "the window in front")
        return peer

    def work(self, host: Host) -> subprocess.Popen[str]:
        argv = ["-c", _BOOT_CLI, host.name, "--data-dir", str(host.data_dir), "--store", self.uri]
        argv += ["work", "--concurrency", "1", "--lease-s", str(LEASE_S), "--json"]
        return self._spawn(host, argv, stdin=False)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                if proc.stdin is not None:
                    try:
                        proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                        proc.stdin.close()
                    except (BrokenPipeError, ValueError):
                        pass
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(15)
        for host in self.network.hosts:
            self.network.kill(host)
        for log in self.logs:
            log.close()

    def stderr(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(encoding='utf-8')[-3000:]}" for p in sorted(self.root.glob("*.stderr"))
        )


@pytest.fixture
def machines(network: Network, server: Any, pg_harness_module: Any, tmp_path: Path) -> Iterator[tuple[Machines, Queue]]:
    """A fresh schema, the three hosts' processes (closed after), and a queue of the test's own on it."""
    import psycopg

    from desktop_queue.core.pg import PgBackend

    harness = pg_harness_module
    schema = f"d_{secrets.token_hex(6)}"
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    for host in network.hosts:
        host.produced.clear()
        shutil.rmtree(host.data_dir, ignore_errors=True)
        host.data_dir.mkdir()
    made = Machines(network, harness.as_uri(harness.schema_dsn(server.tcp_dsn, schema)), tmp_path)
    queue = Queue.open(
        tmp_path / "checker",
        backend=PgBackend(harness.schema_dsn(server.dsn, schema)),
        clock=SystemClock(),
        policy=RetryPolicy(lease_s=LEASE_S),
    )
    try:
        yield made, queue
    finally:
        made.close()
        queue.close()
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _shot(name: str) -> None:
    """A screenshot of the display the windows are on, when a person asked for one (``$DQ_DONE_WHEN_SHOTS``)."""
    folder = os.environ.get("DQ_DONE_WHEN_SHOTS")
    display = os.environ.get("DQ_DONE_WHEN_DISPLAY")
    if folder and display:
        path = Path(folder) / f"pglive-{name}.png"
        subprocess.run(["import", "-display", display, "-window", "root", str(path)], check=True, timeout=60)
        print(f"screenshot: {path}")


def _named(host: str, pid: int) -> str:
    return f"{host} (pid {pid})"


def test_two_windows_and_a_worker_on_three_machines_share_one_queue(
    machines: tuple[Machines, Queue], network: Network
) -> None:
    hosts, queue = machines
    desk_a, desk_b, render = network.hosts
    productions = Productions(network.hosts)
    try:
        a = hosts.window(desk_a, "0,0,640,800")
        b = hosts.window(desk_b, "640,0,640,800")
        for window in (a, b):  # the job is for the render box: the desks' own workers wait
            window.send(cmd="pause")
            window.wait(lambda i: i.get("event") == "pause" and i.get("paused") is True, 30, "pause")
        work = hosts.work(render)

        # 1. submitted on one window, on the other within a second (by the feed), run once on the work host
        a.send(cmd="submit", kind="demo", input={"prompt": "made on hosta", "duration_s": 0.5}, title="from a")
        made = a.wait(lambda i: i.get("event") in ("submitted", "error"), 30, "the submission")
        assert made["event"] == "submitted", made
        job_id = made["id"]
        seen = b.wait(lambda i: i.get("event") == "state" and i.get("id") == job_id, 10, "the job on window b")
        assert seen["t"] - made["t"] < 1.0, f"window b showed it {seen['t'] - made['t']:.2f} s after the commit"
        assert seen["by_feed"] and seen["following"], f"shown by a refresh the change feed triggered: {seen}"
        b.state(job_id, State.SUCCEEDED, RUN_S)
        a.state(job_id, State.SUCCEEDED, RUN_S)
        job = queue.get(job_id)
        kinds = Counter(e.type for e in job.events)
        assert (job.total_attempts, kinds["leased"], kinds["succeeded"]) == (1, 1, 1), kinds
        assert productions.wait_for(render, 1, 30)
        assert (render.produced, desk_a.produced, desk_b.produced) == ([job.idempotency_key], [], [])
        # its timeline, on window b, names the machine that ran it
        b.send(cmd="timeline", id=job_id)
        shown = b.wait(lambda i: i.get("event") == "timeline" and i.get("id") == job_id, 30, "the timeline")
        ran = _named(render.name, work.pid)
        text = "\n".join(shown["rows"])
        assert f"leased by {ran}" in text and f"completed by {ran}" in text, text
        assert f"attempt 1 on {ran}" in shown["heading"], shown["heading"]
        _shot("ran-on-hostc")
        print(f"window b showed window a's job {seen['t'] - made['t']:.3f} s after its commit; timeline:\n{text}")

        # 2. the work host dies mid-run (SIGKILL of its processes): nothing is lost
        a.send(cmd="submit", kind="demo", input={"prompt": "long, on hosta", "duration_s": 6}, title="long")
        made = a.wait(lambda i: i.get("event") == "submitted" and i.get("id") != job_id, 30, "the second submission")
        long_id = made["id"]
        running = b.state(long_id, State.RUNNING, RUN_S)
        assert running["by_feed"], running  # (window b learns of the lease by the feed too)
        leased = [e for e in queue.get(long_id).events if e.type == "leased"]
        assert [e.worker for e in leased] == [f"{render.name}:{work.pid}"]
        killed_at = time.time()
        assert network.kill(render), "nothing ran on the work host"
        assert work.wait(30) == -signal.SIGKILL
        key = queue.get(long_id).idempotency_key
        assert key not in render.produced, "not mid-run: the work host had produced the result"
        # the desk on hosta resumes its worker: it takes the job once its lease has expired
        a.send(cmd="resume")
        a.wait(lambda i: i.get("event") == "resume" and i.get("paused") is False, 30, "resume")
        b.state(long_id, State.SUCCEEDED, RUN_S)
        job = queue.get(long_id)
        types = [e.type for e in job.events]
        assert types[:2] == ["submitted", "leased"] and types[-1] == "succeeded", types
        expired = next(e for e in job.events if e.type == "lease_expired")
        assert expired.worker == f"{render.name}:{work.pid}"
        assert expired.at >= killed_at + LEASE_S * 0.5, "taken back by expiry, not before"
        relet = [e for e in job.events if e.type == "leased"][1:]
        assert relet and all(e.worker and e.worker.startswith(f"{desk_a.name}:") for e in relet), relet
        assert Counter(types)["succeeded"] == 1 and job.state == State.SUCCEEDED
        assert productions.wait_for(desk_a, 1, 30)
        assert desk_a.produced == [key] and desk_b.produced == [] and render.produced.count(key) == 0
        b.send(cmd="timeline", id=long_id)
        shown = b.wait(lambda i: i.get("event") == "timeline" and i.get("id") == long_id, 30, "the second timeline")
        text = "\n".join(shown["rows"])
        assert f"the lease of {ran}" in text and f"completed by {desk_a.name} (pid " in text, text
        _shot("recovered-on-hosta")
        print(f"after the work host was killed:\n{text}")
        # nothing lost anywhere: both jobs succeeded, each key once
        jobs = queue.list(with_events=True)
        assert sorted(str(j.state) for j in jobs) == [State.SUCCEEDED, State.SUCCEEDED]
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{hosts.stderr()}") from None
    finally:
        hosts.close()
        productions.close()
