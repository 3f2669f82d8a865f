"""Usage, prices, budgets and the spend ledger (issue 9: "Budgets and a spend ledger")."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from desktop_queue.core import FakeClock
from desktop_queue.core.errors import StoreError
from desktop_queue.core.ledger import (
    DEFAULT_PRICES,
    PRICES_FILE,
    Budget,
    Price,
    PriceTable,
    SpendLedger,
    Spent,
    Usage,
    budget_reason,
    decode_line,
    encode_line,
    estimate_usage,
    is_local_url,
    usage_of,
)

REPO = Path(__file__).resolve().parents[2]
SUBPROCESS_TIMEOUT_S = 120.0


def local_ts(text: str) -> float:
    """A local wall time ``YYYY-MM-DD HH:MM`` as epoch seconds (budgets count local days)."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M").timestamp()


# ---------------------------------------------------------------------- usage


@pytest.mark.parametrize(
    ("kind", "result", "extra", "expected"),
    [
        (
            "openai.chat",
            {"usage": {"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42}},
            {},
            Usage(tokens_in=12, tokens_out=30),
        ),
        (
            "openai.responses",
            {"usage": {"input_tokens": 7, "output_tokens": 5, "total_tokens": 12}},
            {},
            Usage(tokens_in=7, tokens_out=5),
        ),
        ("openai.chat", {"usage": {"total_tokens": 40}}, {}, Usage(tokens_in=40)),
        ("openai.chat", {"text": "hi", "usage": None}, {}, Usage()),
        ("openai.chat", None, {}, Usage()),
        ("openai.image", {"artifact_b64": "AAAA", "model": "dall-e-3"}, {}, Usage(images=1)),
        (
            "openai.image",
            {"artifact_sha256": "ab", "usage": {"input_tokens": 9, "output_tokens": 4160}},
            {},
            Usage(tokens_in=9, tokens_out=4160, images=1),
        ),
        ("openai.speech", {"artifact_b64": "AAAA", "bytes": 4}, {"input_chars": 120}, Usage(speech_chars=120)),
        ("openai.speech", {"usage": {"input_characters": 33}}, {"input_chars": 120}, Usage(speech_chars=33)),
        ("openai.chat", {"usage": {"prompt_tokens": True, "completion_tokens": -3}}, {}, Usage()),
        ("openai.transcription", {"text": "x", "duration": 61.5}, {}, Usage(speech_seconds=61.5)),
    ],
)
def test_usage_is_normalised_from_each_kind_of_result(kind: str, result: object, extra: dict, expected: Usage) -> None:
    assert usage_of(kind, result, **extra) == expected


def test_estimated_usage_before_a_job_runs() -> None:
    assert estimate_usage("openai.chat", {"prompt": "x" * 400, "max_tokens": 50}) == Usage(tokens_in=100, tokens_out=50)
    assert estimate_usage("openai.image", {"prompt": "a cat"}) == Usage(images=1)
    assert estimate_usage("openai.speech", {"input": "hello"}) == Usage(speech_chars=5)


# ---------------------------------------------------------------------- prices


@pytest.mark.parametrize(
    ("model", "usage", "usd"),
    [
        ("gpt-4o", Usage(tokens_in=1_000_000, tokens_out=1_000_000), 12.50),
        ("gpt-4o-mini-2024-07-18", Usage(tokens_in=2_000_000), 0.30),  # dated name: priced as gpt-4o-mini
        ("gpt-4o-2024-08-06", Usage(tokens_out=100_000), 1.00),
        ("gpt-4.1-nano", Usage(tokens_in=1_000_000, tokens_out=1_000_000), 0.50),
        ("openai/gpt-4.1", Usage(tokens_in=500_000), 1.00),  # a gateway's provider prefix
        ("o3-mini", Usage(tokens_out=1_000_000), 4.40),
        ("dall-e-3", Usage(images=3), 0.12),
        ("gpt-image-1", Usage(tokens_in=20, tokens_out=4000, images=1), 0.042),  # per image, tokens not twice
        ("tts-1", Usage(speech_chars=1_000_000), 15.0),
        ("gpt-4o-mini-tts", Usage(speech_chars=200_000), 3.0),
        ("whisper-1", Usage(speech_seconds=120), 0.012),
        ("gpt-4o", Usage(), 0.0),
        ("llama-3-8b-instruct", Usage(tokens_in=10), None),  # unknown: not free, unknown
        ("llama-3-8b-instruct", Usage(), 0.0),
        ("dall-e-3", Usage(tokens_in=10), None),  # nothing it used is priced
    ],
)
def test_cost_of_builtin_prices(model: str, usage: Usage, usd: float | None) -> None:
    cost = PriceTable().cost_usd(model, usage)
    assert cost == (None if usd is None else pytest.approx(usd))


def test_every_default_is_marked_as_an_estimate() -> None:
    assert DEFAULT_PRICES
    for name, price in DEFAULT_PRICES.items():
        assert price.estimate, name
        assert "change" in price.note, name


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:8080/v1", True),
        ("http://localhost:11434/v1", True),
        ("http://[::1]:8000/v1", True),
        ("http://127.5.0.1/v1", True),
        ("localhost:1234", True),
        ("https://api.openai.com/v1", False),
        ("http://192.168.1.10:8080/v1", False),
        ("http://localhost.example.com/v1", False),
        (None, False),
        ("", False),
    ],
)
def test_local_servers(url: str | None, local: bool) -> None:
    assert is_local_url(url) is local


def test_a_local_profile_costs_nothing_unless_the_user_priced_the_model(tmp_path: Path) -> None:
    table = PriceTable.load(tmp_path)
    usage = Usage(tokens_in=1_000_000)
    assert table.cost_usd("gpt-4o", usage, local=True) == 0.0
    assert table.cost_usd("anything-at-all", usage, local=True) == 0.0
    table.set_price("gpt-4o", Price(input_per_1m=2.0, output_per_1m=8.0))  # a local proxy in front of a paid API
    assert table.cost_usd("gpt-4o", usage, local=True) == pytest.approx(2.0)


def test_user_prices_override_defaults_and_survive_a_reload(tmp_path: Path) -> None:
    table = PriceTable.load(tmp_path)
    table.set_price("gpt-4o", Price(input_per_1m=1.0, output_per_1m=2.0))
    table.set_price("my-model", Price(input_per_1m=3.0))
    doc = orjson.loads((tmp_path / PRICES_FILE).read_bytes())
    assert (
        doc["format"] == "desktop-queue.prices" and doc["schema_version"] == 1 and doc["checksum"].startswith("sha256:")
    )
    assert doc["models"]["gpt-4o"] == {"input_per_1m": 1.0, "output_per_1m": 2.0}

    other = PriceTable.load(tmp_path)  # another process
    assert other.cost_usd("gpt-4o", Usage(tokens_in=1_000_000, tokens_out=1_000_000)) == pytest.approx(3.0)
    assert other.cost_usd("my-model-v2", Usage(tokens_in=1_000_000)) == pytest.approx(3.0)
    # the user's gpt-4o does not swallow gpt-4o-mini, which has its own (default) price
    assert other.price("gpt-4o-mini") == DEFAULT_PRICES["gpt-4o-mini"]
    assert other.default_price("gpt-4o") == DEFAULT_PRICES["gpt-4o"]

    other.set_price("gpt-4o", None)  # back to the estimate
    table.refresh()
    assert table.price("gpt-4o") == DEFAULT_PRICES["gpt-4o"]
    assert set(table.user_prices()) == {"my-model"}


def test_damaged_prices_are_kept_aside_and_newer_ones_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / PRICES_FILE
    table = PriceTable.load(tmp_path)
    table.set_price("gpt-4o", Price(input_per_1m=1.0))
    doc = orjson.loads(path.read_bytes())
    doc["models"]["gpt-4o"]["input_per_1m"] = 0.0001  # changed without its checksum
    path.write_bytes(orjson.dumps(doc))
    damaged = PriceTable.load(tmp_path)
    assert damaged.price("gpt-4o") == DEFAULT_PRICES["gpt-4o"]
    assert damaged.notices and "kept as" in damaged.notices[0]
    assert not path.exists() and list(tmp_path.glob(f"{PRICES_FILE}.corrupt-*"))

    del doc["checksum"]  # a file edited by hand without a checksum is taken as it is
    path.write_bytes(orjson.dumps(doc))
    assert PriceTable.load(tmp_path).user_price("gpt-4o") == Price(input_per_1m=0.0001)

    newer = orjson.dumps({"format": "desktop-queue.prices", "schema_version": 99, "models": {}})
    path.write_bytes(newer)
    table = PriceTable.load(tmp_path)
    assert "newer" in table.notices[0]
    with pytest.raises(StoreError):
        table.set_price("gpt-4o", Price(input_per_1m=5.0))
    assert path.read_bytes() == newer


# ---------------------------------------------------------------------- budgets


@pytest.mark.parametrize(
    ("budget", "day", "month", "tokens", "usd", "reason"),
    [
        (Budget(), Spent(10**9, 10**6), Spent(10**9, 10**6), 10, 1.0, None),
        (Budget(usd_per_day=5), Spent(0, 4.98), Spent(0, 4.98), 100, 0.01, None),
        (
            Budget(usd_per_day=5),
            Spent(0, 4.98),
            Spent(0, 4.98),
            100,
            0.03,
            "waiting: budget of profile openai reached, $4.98 of $5.00 today",
        ),
        (Budget(usd_per_day=5), Spent(0, 5.0), Spent(0, 5.0), 0, 0.0, None),  # a free job still fits
        (
            Budget(tokens_per_month=10_000),
            Spent(0),
            Spent(9_800),
            300,
            None,
            "waiting: budget of profile openai reached, 9,800 of 10,000 tokens this month",
        ),
        (Budget(tokens_per_month=10_000), Spent(0), Spent(9_800), 200, None, None),
        (
            Budget(tokens_per_day=1_000),
            Spent(900),
            Spent(900),
            200,
            0.0,
            "waiting: budget of profile openai reached, 900 of 1,000 tokens today",
        ),
        # the month holds longest: it is named first
        (
            Budget(usd_per_day=1, usd_per_month=10),
            Spent(0, 1.0),
            Spent(0, 10.0),
            1,
            0.5,
            "waiting: budget of profile openai reached, $10.00 of $10.00 this month",
        ),
        (
            Budget(usd_per_day=1),
            Spent(0, 0.5, True),
            Spent(0, 0.5, True),
            1,
            0.6,
            "waiting: budget of profile openai reached, $0.50 of $1.00 today (and some spend of unknown price)",
        ),
        (
            Budget(tokens_per_day=1_000),
            Spent(0),
            Spent(0),
            5_000,
            0.0,
            "waiting: budget of profile openai: the job's estimate of 5,000 tokens is more than the whole budget of 1,000 a day",
        ),
        (
            Budget(usd_per_month=2),
            Spent(0),
            Spent(0),
            0,
            3.0,
            "waiting: budget of profile openai: the job's estimate of $3.00 is more than the whole budget of $2.00 a month",
        ),
    ],
)
def test_budget_reason_table(
    budget: Budget, day: Spent, month: Spent, tokens: int, usd: float | None, reason: str | None
) -> None:
    assert budget_reason("openai", budget, day, month, tokens, usd) == reason


def test_an_unknown_cost_waits_under_a_money_budget_and_says_how_to_fix_it() -> None:
    reason = budget_reason("openai", Budget(usd_per_day=5), Spent(), Spent(), 10, None)
    assert reason is not None and reason.startswith("waiting: budget of profile openai")
    assert "set a price" in reason
    assert budget_reason("openai", Budget(tokens_per_day=100), Spent(), Spent(), 10, None) is None


money = st.floats(min_value=0, max_value=1e4, allow_nan=False)
tokens = st.integers(min_value=0, max_value=10**9)
limit_usd = st.none() | st.floats(min_value=0.01, max_value=1e4, allow_nan=False)
limit_tokens = st.none() | st.integers(min_value=1, max_value=10**9)


@given(
    budget=st.builds(
        Budget,
        usd_per_day=limit_usd,
        usd_per_month=limit_usd,
        tokens_per_day=limit_tokens,
        tokens_per_month=limit_tokens,
    ),
    day_tokens=tokens,
    day_usd=money,
    extra_tokens=tokens,
    extra_usd=money,
    est_tokens=tokens,
    est_usd=st.none() | money,
)
def test_budget_reason_admits_exactly_what_stays_within_every_limit(
    budget: Budget,
    day_tokens: int,
    day_usd: float,
    extra_tokens: int,
    extra_usd: float,
    est_tokens: int,
    est_usd: float | None,
) -> None:
    day = Spent(day_tokens, day_usd)
    month = Spent(day_tokens + extra_tokens, day_usd + extra_usd)  # a month holds at least its day
    reason = budget_reason("p", budget, day, month, est_tokens, est_usd)
    fits = not (budget.needs_usd() and est_usd is None)
    for limit, spent in ((budget.usd_per_day, day.usd), (budget.usd_per_month, month.usd)):
        if limit is not None and est_usd is not None:
            fits = fits and spent + est_usd <= limit + 1e-9
    for tlimit, tspent in ((budget.tokens_per_day, day.tokens), (budget.tokens_per_month, month.tokens)):
        if tlimit is not None:
            fits = fits and tspent + est_tokens <= tlimit
    assert (reason is None) is fits
    if reason is not None:
        assert reason.startswith("waiting: budget of profile p")


# ---------------------------------------------------------------------- the ledger


def test_record_spent_and_report_in_local_days_and_months(tmp_path: Path) -> None:
    clock = FakeClock(local_ts("2031-03-30 10:00"))
    ledger = SpendLedger(tmp_path, clock=clock)
    chat = Usage(tokens_in=1_000_000, tokens_out=100_000)  # gpt-4o-mini: 0.15 + 0.06
    ledger.record(profile="openai", model="gpt-4o-mini", kind="openai.chat", usage=chat, job_id="a", attempt=1)
    ledger.record(
        profile="openai",
        model="dall-e-3",
        kind="openai.image",
        usage=Usage(images=2),
        job_id="b",
        attempt=1,
        at=local_ts("2031-03-30 23:59"),
    )
    ledger.record(
        profile="openai",
        model="gpt-4o-mini",
        kind="openai.chat",
        usage=chat,
        job_id="c",
        attempt=2,
        at=local_ts("2031-03-31 00:01"),
    )
    ledger.record(
        profile="local",
        model="llama3",
        kind="openai.chat",
        usage=Usage(tokens_in=5000),
        job_id="d",
        attempt=1,
        local=True,
    )
    ledger.record(
        profile="openai",
        model="mystery",
        kind="openai.chat",
        usage=Usage(tokens_in=10),
        job_id="e",
        attempt=1,
        at=local_ts("2031-04-01 00:00"),
    )

    day = ledger.spent("openai", "day")
    assert day == Spent(tokens=1_100_000, usd=pytest.approx(0.21 + 0.08), unknown_cost=False)
    assert ledger.spent("openai", "day", at=local_ts("2031-03-31 12:00")).usd == pytest.approx(0.21)
    month = ledger.spent("openai", "month", at=local_ts("2031-03-31 12:00"))
    assert month.tokens == 2_200_000 and month.usd == pytest.approx(0.50) and not month.unknown_cost
    april = ledger.spent("openai", "month", at=local_ts("2031-04-15 12:00"))
    assert april == Spent(tokens=10, usd=0.0, unknown_cost=True)
    assert ledger.spent("local", "day") == Spent(tokens=5000, usd=0.0, unknown_cost=False)
    assert ledger.spent("nobody", "month") == Spent()

    by_day = ledger.report("day")
    assert [row["day"] for row in by_day] == ["2031-03-30", "2031-03-31", "2031-04-01"]
    assert by_day[0]["entries"] == 3 and by_day[0]["images"] == 2
    by_model = {row["model"]: row for row in ledger.report("model")}
    assert by_model["gpt-4o-mini"]["tokens"] == 2_200_000 and by_model["gpt-4o-mini"]["usd"] == pytest.approx(0.42)
    assert by_model["mystery"]["unknown_cost"] is True
    by_profile = {row["profile"]: row for row in ledger.report("profile", since="2031-03-31")}
    assert by_profile["openai"]["entries"] == 2 and "local" not in by_profile
    assert sorted(p.name for p in (tmp_path / "ledger").iterdir()) == ["spend-2031-03.jsonl", "spend-2031-04.jsonl"]


def test_a_second_ledger_sees_the_first_ones_appends_by_reading_only_the_tail(tmp_path: Path) -> None:
    writer = SpendLedger(tmp_path)
    reader = SpendLedger(tmp_path)
    now = time.time()
    assert reader.spent("openai", "day", now) == Spent()
    writer.record(
        profile="openai", model="gpt-4o", kind="openai.chat", usage=Usage(tokens_in=10), job_id="a", attempt=1, at=now
    )
    assert reader.spent("openai", "day", now).tokens == 10
    name = writer.path_for(datetime.fromtimestamp(now).strftime("%Y-%m")).name
    offset = reader._files[name].offset
    assert offset == os.path.getsize(tmp_path / "ledger" / name)
    writer.record(
        profile="openai", model="gpt-4o", kind="openai.chat", usage=Usage(tokens_in=5), job_id="b", attempt=1, at=now
    )
    assert reader.spent("openai", "day", now).tokens == 15
    assert reader._files[name].lines == 3  # header + two entries: each read once


def test_a_torn_last_line_is_ignored_and_never_blocks_an_append(tmp_path: Path) -> None:
    at = time.time()
    ledger = SpendLedger(tmp_path)
    ledger.record(
        profile="openai", model="gpt-4o", kind="openai.chat", usage=Usage(tokens_in=100), job_id="a", attempt=1, at=at
    )
    path = next((tmp_path / "ledger").iterdir())
    whole = encode_line(
        {
            "at": at,
            "profile": "openai",
            "model": "gpt-4o",
            "kind": "openai.chat",
            "usage": {"tokens_in": 1000},
            "usd": 1.0,
            "job_id": "torn",
            "attempt": 1,
        }
    )
    with path.open("ab") as fh:
        fh.write(whole[: len(whole) // 2])  # a writer killed mid-line
    reader = SpendLedger(tmp_path)
    assert reader.spent("openai", "day", at).tokens == 100
    ledger.record(
        profile="openai", model="gpt-4o", kind="openai.chat", usage=Usage(tokens_in=7), job_id="b", attempt=1, at=at
    )
    assert reader.spent("openai", "day", at).tokens == 107
    assert SpendLedger(tmp_path).spent("openai", "day", at).tokens == 107
    assert reader.damaged_lines() == 1
    assert [e.job_id for e in reader.entries()] == ["a", "b"]


def test_a_damaged_line_in_the_middle_is_skipped_not_counted(tmp_path: Path) -> None:
    at = time.time()
    ledger = SpendLedger(tmp_path)
    for job in ("a", "b", "c"):
        ledger.record(
            profile="p", model="gpt-4o", kind="openai.chat", usage=Usage(tokens_in=1), job_id=job, attempt=1, at=at
        )
    path = next((tmp_path / "ledger").iterdir())
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"tokens_in":1', b'"tokens_in":9')  # a flipped digit
    path.write_bytes(b"".join(lines))
    fresh = SpendLedger(tmp_path)
    assert fresh.spent("p", "day", at).tokens == 2
    assert fresh.damaged_lines() == 1


def test_lines_check_themselves() -> None:
    line = encode_line({"a": 1, "b": "x"})
    assert decode_line(line) == {"a": 1, "b": "x"}
    assert decode_line(line[:-3]) is None
    assert decode_line(line.replace(b'"x"', b'"y"')) is None
    assert decode_line(b"garbage\n") is None


def test_a_ledger_of_a_newer_version_is_neither_read_nor_appended_to(tmp_path: Path) -> None:
    at = time.time()
    ledger = SpendLedger(tmp_path)
    path = ledger.path_for(datetime.fromtimestamp(at).strftime("%Y-%m"))
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_line({"format": "desktop-queue.ledger", "schema_version": 7}))
    with pytest.raises(StoreError, match="newer"):
        ledger.spent("p", "day", at)
    with pytest.raises(StoreError, match="newer"):
        ledger.record(profile="p", model="m", kind="k", usage=Usage(tokens_in=1), job_id="j", attempt=1, at=at)
    assert len(path.read_bytes().splitlines()) == 1


def test_a_replaced_ledger_file_is_read_afresh(tmp_path: Path) -> None:
    at = time.time()
    ledger = SpendLedger(tmp_path)
    ledger.record(
        profile="p", model="gpt-4o", kind="openai.chat", usage=Usage(tokens_in=3), job_id="a", attempt=1, at=at
    )
    assert ledger.spent("p", "day", at).tokens == 3
    path = next((tmp_path / "ledger").iterdir())
    path.unlink()  # deleted from under a running process: the next append makes a new file
    for job in ("b", "c"):  # the new file may even get the old one's inode number
        ledger.record(
            profile="p", model="gpt-4o", kind="openai.chat", usage=Usage(tokens_in=4), job_id=job, attempt=1, at=at
        )
    assert ledger.spent("p", "day", at).tokens == 8


_APPENDER = r"""
import sys
from desktop_queue.core.ledger import SpendLedger, Usage
data_dir, tag, n, at = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
ledger = SpendLedger(data_dir)
print("ready", flush=True)
sys.stdin.readline()
for i in range(n):
    ledger.record(profile="openai", model="gpt-4o-mini", kind="openai.chat",
                  usage=Usage(tokens_in=1 + i % 7, tokens_out=2), job_id=f"{tag}-{i}", attempt=1, at=at)
print("done", flush=True)
"""


def test_two_processes_appending_at_once_lose_no_entry(tmp_path: Path) -> None:
    at = time.time()
    n = 400
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _APPENDER, str(tmp_path), tag, str(n), repr(at)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for tag in ("a", "b")
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        observer = SpendLedger(tmp_path)
        for child in children:  # both start together; the observer reads while they append
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        seen = [observer.spent("openai", "day", at).tokens for _ in range(50)]
        for child in children:
            out, _ = child.communicate(timeout=SUBPROCESS_TIMEOUT_S)
            assert child.returncode == 0 and out.strip() == "done"
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    per_process = sum(1 + i % 7 + 2 for i in range(n))
    assert observer.spent("openai", "day", at).tokens == 2 * per_process
    assert seen == sorted(seen)  # a reader only ever sees totals grow
    jobs = [e.job_id for e in SpendLedger(tmp_path).entries()]
    assert sorted(jobs) == sorted(f"{tag}-{i}" for tag in "ab" for i in range(n))
    expected_usd = 2 * sum(((1 + i % 7) * 0.15 + 2 * 0.60) / 1e6 for i in range(n))
    assert SpendLedger(tmp_path).spent("openai", "month", at).usd == pytest.approx(expected_usd)
    assert observer.damaged_lines() == 0
