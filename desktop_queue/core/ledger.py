"""What paid calls cost: usage, prices, a durable spend ledger and budgets.

- :func:`usage_of` reads one attempt's usage (tokens in and out, images, speech
  characters or seconds) from a provider's result.
- :class:`PriceTable` prices a model's usage: built-in estimates for common OpenAI
  models, overridden by the user's entries in ``<data_dir>/prices.json``. An unknown
  model costs None (unknown); a profile on a local server costs 0.
- :class:`SpendLedger` is the record of what was spent: JSON lines, one file a month
  under ``<data_dir>/ledger/``, appended under an OS lock on the file itself and
  fsynced, shared by every process on the data dir. Totals are cached and only the
  appended tail is read on each call. With a :class:`SpendStore` (a queue on
  PostgreSQL: :class:`desktop_queue.core.pg.ledger.PgSpendStore`) the entries live there
  instead, shared by every machine on that queue.
- :func:`budget_reason` decides, purely, whether a job fits a profile's
  :class:`Budget` and says why not.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import os
import secrets
import threading
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import orjson

from desktop_queue.core.clock import Clock, SystemClock
from desktop_queue.core.errors import StoreError
from desktop_queue.core.redact import strings_in
from desktop_queue.core.store import fileio
from desktop_queue.core.store.codec import stamped_doc
from desktop_queue.core.store.fileio import atomic_write, fsync_dir, make_dirs, set_aside_if_possible

Period = Literal["day", "month"]
ReportBy = Literal["day", "model", "profile"]

PRICES_FORMAT = "desktop-queue.prices"
PRICES_SCHEMA = 1
PRICES_FILE = "prices.json"
LEDGER_FORMAT = "desktop-queue.ledger"
LEDGER_SCHEMA = 1
LEDGER_DIR = "ledger"
WAITING_BUDGET = "waiting: budget"

_PRICE_NOTE = "estimate: list price when this version was made; prices change, check the provider's page"


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return 0.0
    return float(value)


# ---------------------------------------------------------------------- usage


@dataclass(frozen=True)
class Usage:
    """What one attempt used, as providers bill it.

    Attributes:
        tokens_in: prompt / input tokens.
        tokens_out: completion / output tokens (reasoning included).
        images: generated images.
        speech_chars: characters of text turned into speech.
        speech_seconds: seconds of audio transcribed or produced (priced per minute).
    """

    tokens_in: int = 0
    tokens_out: int = 0
    images: int = 0
    speech_chars: int = 0
    speech_seconds: float = 0.0

    @property
    def tokens(self) -> int:
        """Tokens in and out together (what token budgets count)."""
        return self.tokens_in + self.tokens_out

    def is_empty(self) -> bool:
        return not (self.tokens_in or self.tokens_out or self.images or self.speech_chars or self.speech_seconds)

    def to_json(self) -> dict[str, Any]:
        """The non-zero fields (what a ledger line stores)."""
        return {k: v for k, v in asdict(self).items() if v}

    @classmethod
    def from_json(cls, data: Any) -> Usage:
        if not isinstance(data, Mapping):
            return cls()
        return cls(
            tokens_in=int(_number(data.get("tokens_in"))),
            tokens_out=int(_number(data.get("tokens_out"))),
            images=int(_number(data.get("images"))),
            speech_chars=int(_number(data.get("speech_chars"))),
            speech_seconds=_number(data.get("speech_seconds")),
        )


def _first(data: Mapping[str, Any], *keys: str) -> float:
    for key in keys:
        value = _number(data.get(key))
        if value:
            return value
    return 0.0


def _kind_family(kind: str) -> str:
    tail = kind.rsplit(".", 1)[-1].lower()
    if tail in ("image", "images"):
        return "image"
    if tail in ("speech", "tts"):
        return "speech"
    if tail in ("transcription", "transcribe", "translation", "stt"):
        return "audio"
    return "text"


def usage_of(kind: str, result: Any, *, input_chars: int | None = None) -> Usage:
    """The usage one attempt reported, normalised.

    Chat results carry ``usage.prompt_tokens`` / ``completion_tokens``, Responses and
    ``gpt-image-1`` results ``usage.input_tokens`` / ``output_tokens``; a result with
    only ``total_tokens`` counts it all as input. An image result counts its images
    (``images``, else the length of ``data``, else 1). A speech result rarely says how
    much text it spoke: ``input_chars`` (the input text's length, from the caller)
    fills in.

    Args:
        kind: the job kind (``openai.chat``, ``openai.image``, ...).
        result: the provider's result (or a failed attempt's partial result; None: nothing used).
        input_chars: for speech kinds, the length of the text sent.
    """
    if not isinstance(result, Mapping):
        return Usage()
    raw = result.get("usage")
    usage: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    tokens_in = _first(usage, "prompt_tokens", "input_tokens")
    tokens_out = _first(usage, "completion_tokens", "output_tokens")
    if not tokens_in and not tokens_out:
        tokens_in = _first(usage, "total_tokens")
    family = _kind_family(kind)
    images = 0
    if family == "image":
        counted = _first(result, "images") or _first(usage, "images")
        data = result.get("data")
        if counted:
            images = int(counted)
        elif isinstance(data, list):
            images = len(data)
        else:
            images = 1
    speech_chars = 0
    if family == "speech":
        speech_chars = int(
            _first(usage, "input_characters", "characters") or _first(result, "input_chars", "characters")
        )
        if not speech_chars and input_chars:
            speech_chars = max(0, int(input_chars))
    seconds = _first(usage, "seconds", "duration") or _first(result, "seconds", "duration")
    return Usage(
        tokens_in=int(tokens_in),
        tokens_out=int(tokens_out),
        images=images,
        speech_chars=speech_chars,
        speech_seconds=seconds,
    )


def estimate_usage(kind: str, payload: Any, *, default_output_tokens: int = 256, chars_per_token: float = 4.0) -> Usage:
    """A rough usage of a job before it runs (for a budget's cost estimate).

    Text kinds: every prompt string at ``chars_per_token`` characters a token, and the
    input's ``max_tokens`` / ``max_completion_tokens`` / ``max_output_tokens`` (else
    ``default_output_tokens``) as output. Image kinds: ``n`` images (default 1).
    Speech kinds: the input text's characters.
    """
    data: Mapping[str, Any] = payload if isinstance(payload, Mapping) else {}
    family = _kind_family(kind)
    if family == "image":
        n = data.get("n", 1)
        return Usage(images=n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1)
    if family == "speech":
        text = data.get("input", data.get("text"))
        return Usage(speech_chars=len(text) if isinstance(text, str) else 0)
    chars = sum(len(s) for key in ("prompt", "input", "instructions", "messages") for s in strings_in(data.get(key)))
    output = default_output_tokens
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            output = value
            break
    return Usage(tokens_in=int(math.ceil(chars / chars_per_token)), tokens_out=output)


# ---------------------------------------------------------------------- prices


@dataclass(frozen=True)
class Price:
    """What a model costs, in US dollars. A rate left None is not charged.

    Attributes:
        input_per_1m: per million input tokens.
        output_per_1m: per million output tokens.
        per_image: per generated image.
        per_1m_chars: per million characters of speech.
        per_minute: per minute of audio.
        estimate: True for a built-in default (not the user's own figure).
        note: where the figure comes from.
    """

    input_per_1m: float | None = None
    output_per_1m: float | None = None
    per_image: float | None = None
    per_1m_chars: float | None = None
    per_minute: float | None = None
    estimate: bool = False
    note: str = ""

    def cost(self, usage: Usage) -> float | None:
        """The cost of ``usage``; None if the price charges nothing ``usage`` used.

        A part the price does not rate costs nothing (``gpt-image-1`` is rated per
        image, so the tokens its result reports are not charged twice); but when no
        part of a non-empty usage is rated, the cost is unknown, not free.
        """
        if usage.is_empty():
            return 0.0
        parts = (
            (usage.tokens_in, self.input_per_1m, 1e-6),
            (usage.tokens_out, self.output_per_1m, 1e-6),
            (usage.images, self.per_image, 1.0),
            (usage.speech_chars, self.per_1m_chars, 1e-6),
            (usage.speech_seconds, self.per_minute, 1 / 60),
        )
        total = 0.0
        rated = False
        for quantity, rate, scale in parts:
            if quantity and rate is not None:
                total += quantity * rate * scale
                rated = True
        return total if rated else None

    def to_json(self) -> dict[str, Any]:
        """The rates that are set (and ``estimate``/``note`` when they say something)."""
        return {k: v for k, v in asdict(self).items() if v is not None and v != "" and v is not False}

    @classmethod
    def from_json(cls, data: Any) -> Price:
        if not isinstance(data, Mapping):
            raise ValueError("a price is an object")
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = data.get(f.name)
            if f.name == "estimate":
                values[f.name] = bool(value)
            elif f.name == "note":
                values[f.name] = str(value) if isinstance(value, str) else ""
            elif value is not None:
                if (
                    isinstance(value, bool)
                    or not isinstance(value, (int, float))
                    or not math.isfinite(value)
                    or value < 0
                ):
                    raise ValueError(f"{f.name} must be a number of dollars, not {value!r}")
                values[f.name] = float(value)
        return cls(**values)


def _estimate(**rates: float) -> Price:
    return Price(estimate=True, note=_PRICE_NOTE, **rates)


#: Built-in prices (USD), every one an estimate: providers change prices, and a
#: compatible server may charge differently. The user's prices.json overrides them.
DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": _estimate(input_per_1m=2.50, output_per_1m=10.00),
    "gpt-4o-mini": _estimate(input_per_1m=0.15, output_per_1m=0.60),
    "gpt-4.1": _estimate(input_per_1m=2.00, output_per_1m=8.00),
    "gpt-4.1-mini": _estimate(input_per_1m=0.40, output_per_1m=1.60),
    "gpt-4.1-nano": _estimate(input_per_1m=0.10, output_per_1m=0.40),
    "gpt-4-turbo": _estimate(input_per_1m=10.00, output_per_1m=30.00),
    "gpt-3.5-turbo": _estimate(input_per_1m=0.50, output_per_1m=1.50),
    "o1": _estimate(input_per_1m=15.00, output_per_1m=60.00),
    "o1-mini": _estimate(input_per_1m=1.10, output_per_1m=4.40),
    "o3": _estimate(input_per_1m=2.00, output_per_1m=8.00),
    "o3-mini": _estimate(input_per_1m=1.10, output_per_1m=4.40),
    "o4-mini": _estimate(input_per_1m=1.10, output_per_1m=4.40),
    "dall-e-2": _estimate(per_image=0.020),
    "dall-e-3": _estimate(per_image=0.040),
    "gpt-image-1": _estimate(per_image=0.042),  # medium quality, 1024x1024
    "tts-1": _estimate(per_1m_chars=15.00),
    "tts-1-hd": _estimate(per_1m_chars=30.00),
    "gpt-4o-mini-tts": _estimate(per_1m_chars=15.00),  # billed by tokens; about this per character
    "whisper-1": _estimate(per_minute=0.006),
}


def is_local_url(base_url: str | None) -> bool:
    """True if ``base_url`` points at this machine (127.0.0.1 and the like, localhost, ::1)."""
    if not base_url:
        return False
    try:
        host = urlsplit(base_url if "//" in base_url else f"//{base_url}").hostname
    except ValueError:
        return False
    if not host:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _checksum(models: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(orjson.dumps(models, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _candidates(model: str) -> list[str]:
    names = [model.strip()]
    if "/" in names[0]:  # gateways name models "openai/gpt-4o"
        names.append(names[0].rsplit("/", 1)[-1])
    return [n for n in names if n]


class PriceTable:
    """Per-model prices: the user's entries over the built-in estimates.

    A model is found by its exact name, else by the longest known name it starts
    with followed by ``-`` (``gpt-4o-2024-08-06`` is priced as ``gpt-4o``), the
    user's entries before the defaults at each step.

    Args:
        user: the user's prices by model.
        path: the prices.json they live in (None: kept in memory only).
        defaults: the built-in estimates.
    """

    def __init__(
        self,
        user: Mapping[str, Price] | None = None,
        *,
        path: Path | None = None,
        defaults: Mapping[str, Price] = DEFAULT_PRICES,
    ) -> None:
        self.path = path
        self.defaults = dict(defaults)
        self._user = dict(user or {})
        self._seen: tuple[int, int, int] | None = None
        self._read_only = False
        self._lock = threading.Lock()
        #: what went wrong reading prices.json, in words for people (shown once)
        self.notices: list[str] = []

    @classmethod
    def load(cls, data_dir: str | os.PathLike[str]) -> PriceTable:
        """The table of ``<data_dir>/prices.json`` (defaults only if there is none yet)."""
        table = cls(path=Path(data_dir) / PRICES_FILE)
        table.refresh()
        return table

    # ------------------------------------------------------------------ reading

    def _stamp(self) -> tuple[int, int, int] | None:
        assert self.path is not None
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def refresh(self) -> None:
        """Reads prices.json again if it changed (another process may have edited it): one stat."""
        if self.path is None:
            return
        with self._lock:
            stamp = self._stamp()
            if stamp == self._seen:
                return
            self._seen = stamp
            self._user, self._read_only = self._read() if stamp is not None else ({}, False)

    def _read(self) -> tuple[dict[str, Price], bool]:
        assert self.path is not None
        try:
            doc, newer = stamped_doc(self.path.read_bytes(), PRICES_FORMAT, PRICES_SCHEMA, "a prices file")
            if newer is not None:
                self._notice(
                    f"{self.path.name} was written by a newer Desktop Queue (schema {newer}); "
                    "it is left as it is and the built-in price estimates are used"
                )
                return {}, True
            models = doc.get("models")
            if not isinstance(models, dict):
                raise ValueError("no models")
            # a file edited by hand may drop its checksum; a wrong one means damage
            if "checksum" in doc and doc["checksum"] != _checksum(models):
                raise ValueError("checksum mismatch")
            return {str(name): Price.from_json(entry) for name, entry in models.items()}, False
        except FileNotFoundError:
            return {}, False
        except OSError as exc:  # unreadable now (permissions, I/O): not damage, nothing moved
            self._seen = None
            self._notice(f"{self.path.name} could not be read ({exc.strerror or exc}); built-in estimates are used")
            return {}, False
        except (ValueError, TypeError) as exc:
            aside = set_aside_if_possible(self.path)
            self._seen = None
            self._notice(
                f"{self.path.name} could not be read ({exc}); it was kept as {aside.name} and the built-in "
                "price estimates are used until you set prices again"
            )
            return {}, False

    def _notice(self, text: str) -> None:
        if text not in self.notices:  # a file that stays unreadable is said once
            self.notices.append(text)

    # ------------------------------------------------------------------ lookup

    def _find(self, table: Mapping[str, Price], name: str) -> tuple[int, Price] | None:
        best: tuple[int, Price] | None = None
        for known, price in table.items():
            if name.startswith(known + "-") and (best is None or len(known) > best[0]):
                best = (len(known), price)
        return best

    def user_price(self, model: str) -> Price | None:
        """The user's own price of ``model`` (exact or by prefix), if any."""
        self.refresh()
        for name in _candidates(model):
            if name in self._user:
                return self._user[name]
        for name in _candidates(model):
            found = self._find(self._user, name)
            if found:
                return found[1]
        return None

    def default_price(self, model: str) -> Price | None:
        """The built-in estimate for ``model``, if any."""
        for name in _candidates(model):
            if name in self.defaults:
                return self.defaults[name]
        for name in _candidates(model):
            found = self._find(self.defaults, name)
            if found:
                return found[1]
        return None

    def price(self, model: str) -> Price | None:
        """The price that applies to ``model``: the user's, else the estimate, else None."""
        self.refresh()
        for name in _candidates(model):
            if name in self._user:
                return self._user[name]
            if name in self.defaults:
                return self.defaults[name]
        for name in _candidates(model):
            mine, builtin = self._find(self._user, name), self._find(self.defaults, name)
            if mine and (not builtin or mine[0] >= builtin[0]):
                return mine[1]
            if builtin:
                return builtin[1]
        return None

    def cost_usd(self, model: str, usage: Usage, *, local: bool = False) -> float | None:
        """What ``usage`` of ``model`` costs in USD; None if unknown.

        Args:
            model: the model the provider reported (or the job asked for).
            usage: what was used.
            local: the profile points at a server on this machine: free, unless the
                user priced the model themselves (a local proxy in front of a paid API).
        """
        if local:
            mine = self.user_price(model)
            return 0.0 if mine is None else mine.cost(usage)
        price = self.price(model)
        if price is None:
            return 0.0 if usage.is_empty() else None
        return price.cost(usage)

    def user_prices(self) -> dict[str, Price]:
        """The user's entries by model (a copy)."""
        self.refresh()
        return dict(self._user)

    # ------------------------------------------------------------------ writing

    def set_price(self, model: str, price: Price | None) -> None:
        """Sets (or with None removes) the user's price of ``model`` and writes prices.json.

        Another process's edit of another model is kept: the file is read again under a
        lock before it is rewritten.

        Raises:
            StoreError: prices.json is from a newer version (never overwritten), or
                cannot be written.
        """
        model = model.strip()
        if not model:
            raise ValueError("a price needs a model name")
        if self.path is None:
            if price is None:
                self._user.pop(model, None)
            else:
                self._user[model] = price
            return
        with fileio.locked(self.path.with_name(f".{PRICES_FILE}.lock")):
            with self._lock:
                self._seen = None
            self.refresh()
            if self._read_only:
                raise StoreError(f"{self.path.name} is from a newer Desktop Queue; it was not changed")
            user = dict(self._user)
            if price is None:
                user.pop(model, None)
            else:
                user[model] = replace(price, estimate=False)
            models = {name: user[name].to_json() for name in sorted(user)}
            doc = {
                "format": PRICES_FORMAT,
                "schema_version": PRICES_SCHEMA,
                "checksum": _checksum(models),
                "models": models,
            }
            atomic_write(self.path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
            with self._lock:
                self._user, self._seen = user, self._stamp()


# ---------------------------------------------------------------------- budgets


@dataclass(frozen=True)
class Spent:
    """What a profile spent in a period.

    Attributes:
        tokens: tokens in and out.
        usd: dollars, of the entries whose price was known.
        unknown_cost: some entry used something without a known price (``usd`` is then
            a lower bound).
    """

    tokens: int = 0
    usd: float = 0.0
    unknown_cost: bool = False


@dataclass(frozen=True)
class Budget:
    """A profile's spending limits; None is no limit.

    Attributes:
        usd_per_day: dollars a local calendar day.
        usd_per_month: dollars a local calendar month.
        tokens_per_day: tokens (in and out) a day.
        tokens_per_month: tokens a month.
    """

    usd_per_day: float | None = None
    usd_per_month: float | None = None
    tokens_per_day: int | None = None
    tokens_per_month: int | None = None

    def is_set(self) -> bool:
        return any(
            v is not None for v in (self.usd_per_day, self.usd_per_month, self.tokens_per_day, self.tokens_per_month)
        )

    def needs_usd(self) -> bool:
        """True if a money limit is set (a job's cost must then be known)."""
        return self.usd_per_day is not None or self.usd_per_month is not None


def format_usd(value: float) -> str:
    """Dollars as people read them: ``$4.98``, ``$0.0004`` for tiny amounts."""
    if value != 0 and abs(value) < 0.01:
        return f"${value:.4f}"
    return f"${value:,.2f}"


_WHEN = {"day": "today", "month": "this month"}


def budget_reason(
    profile: str, budget: Budget, day: Spent, month: Spent, estimate_tokens: int, estimate_usd: float | None
) -> str | None:
    """Why a job must wait for the profile's budget, or None if it fits.

    A job waits when what was spent plus its estimate would pass a limit (the monthly
    limits are checked first: they hold longest). A job whose cost is unknown (no
    price for its model) waits whenever a money limit is set: the limit could not be
    kept otherwise, and the reason says how to fix it. A job larger than a whole
    limit waits too, saying so (only a higher limit lets it run).

    Args:
        profile: the profile's name (for the message).
        budget: the profile's limits.
        day: what the profile spent today (local time).
        month: what the profile spent this month.
        estimate_tokens: the job's estimated tokens.
        estimate_usd: the job's estimated cost, None if unknown.

    Returns:
        e.g. ``"waiting: budget of profile openai reached, $4.98 of $5.00 today"``, or None.
    """
    head = f"{WAITING_BUDGET} of profile {profile}"
    estimate_tokens = max(0, int(estimate_tokens))
    if budget.needs_usd() and estimate_usd is None:
        return f"{head}: the job's cost is unknown (no price for its model); set a price or remove the USD budget"
    checks: list[tuple[Period, float | None, Spent, bool]] = [
        ("month", budget.usd_per_month, month, True),
        ("month", budget.tokens_per_month, month, False),
        ("day", budget.usd_per_day, day, True),
        ("day", budget.tokens_per_day, day, False),
    ]
    for period, limit, spent, money in checks:
        if limit is None:
            continue
        used = spent.usd if money else float(spent.tokens)
        need = (estimate_usd or 0.0) if money else float(estimate_tokens)
        if used + need <= limit + (1e-9 if money else 0.0):
            continue
        when = _WHEN[period]
        if money:
            shown = f"{format_usd(used)} of {format_usd(limit)} {when}"
            if spent.unknown_cost:
                shown += " (and some spend of unknown price)"
            if used == 0 and need > limit:
                return f"{head}: the job's estimate of {format_usd(need)} is more than the whole budget of {format_usd(limit)} a {period}"
        else:
            shown = f"{int(used):,} of {int(limit):,} tokens {when}"
            if used == 0 and need > limit:
                return f"{head}: the job's estimate of {int(need):,} tokens is more than the whole budget of {int(limit):,} a {period}"
        return f"{head} reached, {shown}"
    return None


# ---------------------------------------------------------------------- the ledger


@dataclass(frozen=True)
class LedgerEntry:
    """One attempt's spend, as stored.

    Attributes:
        at: when (wall-clock seconds).
        profile: the flow-control profile.
        model: the model the provider reported (or was asked for).
        kind: the job kind.
        usage: what was used.
        usd: its cost when it was recorded (None: unknown).
        job_id: the job.
        attempt: the attempt's number.
    """

    at: float
    profile: str
    model: str
    kind: str
    usage: Usage
    usd: float | None
    job_id: str
    attempt: int

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "profile": self.profile,
            "model": self.model,
            "kind": self.kind,
            "usage": self.usage.to_json(),
            "usd": self.usd,
            "job_id": self.job_id,
            "attempt": self.attempt,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LedgerEntry:
        usd = data.get("usd")
        at = data["at"]
        attempt = data.get("attempt", 0)
        if not isinstance(at, (int, float)) or isinstance(at, bool):
            raise ValueError("no time")
        return cls(
            at=float(at),
            profile=str(data["profile"]),
            model=str(data.get("model") or ""),
            kind=str(data.get("kind") or ""),
            usage=Usage.from_json(data.get("usage")),
            usd=float(usd) if isinstance(usd, (int, float)) and not isinstance(usd, bool) else None,
            job_id=str(data.get("job_id") or ""),
            attempt=int(attempt) if isinstance(attempt, int) else 0,
        )


_CRC_MARK = b',"crc":"'


def encode_line(doc: Mapping[str, Any]) -> bytes:
    """One ledger line: the JSON object with a CRC-32 of its own bytes as the last field."""
    body = orjson.dumps(doc)
    return body[:-1] + _CRC_MARK + f"{zlib.crc32(body):08x}".encode() + b'"}\n'


def decode_line(line: bytes) -> dict[str, Any] | None:
    """The object of a ledger line, or None if it is torn or damaged (its CRC does not match)."""
    line = line.rstrip(b"\r\n")
    cut = line.rfind(_CRC_MARK)
    if cut < 0 or not line.endswith(b'"}') or len(line) - cut != len(_CRC_MARK) + 10:
        return None
    body = line[:cut] + b"}"
    if f"{zlib.crc32(body):08x}".encode() != line[cut + len(_CRC_MARK) : -2]:
        return None
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


@dataclass
class _Totals:
    entries: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    images: int = 0
    speech_chars: int = 0
    speech_seconds: float = 0.0
    usd: float = 0.0
    unknown: int = 0

    def add(self, entry: LedgerEntry) -> None:
        usage = entry.usage
        self.entries += 1
        self.tokens_in += usage.tokens_in
        self.tokens_out += usage.tokens_out
        self.images += usage.images
        self.speech_chars += usage.speech_chars
        self.speech_seconds += usage.speech_seconds
        if entry.usd is not None:
            self.usd += entry.usd
        elif not usage.is_empty():
            self.unknown += 1

    def merge(self, other: _Totals) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def spent(self) -> Spent:
        return Spent(tokens=self.tokens_in + self.tokens_out, usd=self.usd, unknown_cost=self.unknown > 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "tokens": self.tokens_in + self.tokens_out,
            "images": self.images,
            "speech_chars": self.speech_chars,
            "speech_seconds": round(self.speech_seconds, 3),
            "usd": round(self.usd, 6),
            "unknown_cost": self.unknown > 0,
        }


@dataclass
class _FileState:
    """What has been read of one month's file, and its totals."""

    inode: int = -1
    file_id: str | None = None
    offset: int = 0
    size_seen: int = -1  # the size at the last read (a torn tail keeps it above ``offset``)
    lines: int = 0
    bad_lines: int = 0
    newer: int | None = None
    #: (day, profile, model) -> totals
    cells: dict[tuple[str, str, str], _Totals] | None = None
    #: (profile, day) -> totals, and profile -> totals for the month: the hot lookups
    by_day: dict[tuple[str, str], _Totals] | None = None
    by_month: dict[str, _Totals] | None = None

    def reset(self, inode: int) -> None:
        self.inode, self.file_id, self.offset, self.lines, self.bad_lines, self.newer = inode, None, 0, 0, 0, None
        self.size_seen = -1
        self.cells, self.by_day, self.by_month = {}, {}, {}


def _header_id(head: bytes) -> str | None:
    doc = decode_line(head.split(b"\n", 1)[0]) if b"\n" in head else None
    return str(doc.get("id") or "") if doc and doc.get("format") == LEDGER_FORMAT else None


def _local_day(at: float) -> str:
    return datetime.fromtimestamp(at).strftime("%Y-%m-%d")


def _local_month(at: float) -> str:
    return datetime.fromtimestamp(at).strftime("%Y-%m")


def period_bounds(period: Period, at: float) -> tuple[float, float]:
    """The instants ``[start, end)`` of the local day or month that contains ``at``.

    What :func:`_local_day` / :func:`_local_month` of an entry's time decide, as a range
    a database can sum over: an entry at ``t`` is in the period exactly when
    ``start <= t < end``.
    """
    moment = datetime.fromtimestamp(at)
    if period == "day":
        first = datetime(moment.year, moment.month, moment.day)
        after = datetime.combine(first.date() + timedelta(days=1), datetime.min.time())
    else:
        first = datetime(moment.year, moment.month, 1)
        after = datetime(moment.year + 1, 1, 1) if moment.month == 12 else datetime(moment.year, moment.month + 1, 1)
    return first.timestamp(), after.timestamp()


class SpendStore(Protocol):
    """Where a :class:`SpendLedger` keeps its entries when not in the data dir: the ledger's storage seam.

    Implemented by :class:`desktop_queue.core.pg.ledger.PgSpendStore` (table
    ``dq_spend``). Entries are never changed once stored; totals are what
    :meth:`SpendLedger.spent` reports of the JSON files for the same entries.
    """

    def append(self, entry: LedgerEntry) -> None:
        """Stores one entry durably.

        Raises:
            StoreError: it could not be stored (it may or may not have been).
        """
        ...

    def totals(self, profile: str, start: float, end: float) -> Spent:
        """What ``profile`` spent in entries with ``start <= at < end``."""
        ...

    def entries_since(self, start: float | None) -> list[LedgerEntry]:
        """Every entry with ``at >= start`` (all with None), oldest first."""
        ...


_READ_CHUNK = 1 << 20


class SpendLedger:
    """The spend of every attempt on a data dir, shared by every process on it.

    One JSON-lines file a local calendar month (``ledger/spend-YYYY-MM.jsonl``), each
    line carrying a CRC of itself. An append takes an OS lock on the file it writes
    (a lock on a separate file could be deleted from under it), checks that the path
    still names the file it locked, ends a torn last line left by a crashed writer
    with a newline (so the torn bytes become one damaged line that readers skip, and
    never block an append), writes the line in one call and fsyncs it.

    Reads cache totals per file and read only what was appended since (one ``stat``
    when nothing changed), so :meth:`spent` is cheap enough to ask before every lease.

    Args:
        data_dir: the data directory.
        clock: time for entries recorded without ``at`` (default: the system clock).
        prices: prices for entries recorded without ``usd`` (default: the data dir's
            prices.json over the built-in estimates).
        store: where the entries live instead of ``<data_dir>/ledger`` (a queue on
            PostgreSQL keeps them in its database; prices stay the data dir's).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        clock: Clock | None = None,
        *,
        prices: PriceTable | None = None,
        store: SpendStore | None = None,
    ) -> None:
        self.store = store
        self.data_dir = Path(data_dir)
        self.dir = self.data_dir / LEDGER_DIR
        self.clock: Clock = clock or SystemClock()
        self.prices = prices if prices is not None else PriceTable.load(self.data_dir)
        self._files: dict[str, _FileState] = {}
        self._checked: set[str] = set()  # files whose version allows appending
        self._lock = threading.Lock()

    def path_for(self, month: str) -> Path:
        """The file of a local month ``YYYY-MM``."""
        return self.dir / f"spend-{month}.jsonl"

    # ------------------------------------------------------------------ writing

    def record(
        self,
        *,
        profile: str,
        model: str,
        kind: str,
        usage: Usage,
        job_id: str,
        attempt: int,
        at: float | None = None,
        usd: float | None = None,
        local: bool = False,
    ) -> LedgerEntry:
        """Appends one attempt's spend (failed attempts that reported usage too).

        Args:
            profile: the flow-control profile that ran it.
            model: the model (the one the provider reported, if it did).
            kind: the job kind.
            usage: what the attempt used (:func:`usage_of`).
            job_id: the job.
            attempt: the attempt's number.
            at: when (default: now).
            usd: its cost, if the caller priced it; else priced here with :attr:`prices`.
            local: the profile's server is on this machine (free unless priced by the user).

        Returns:
            The entry as stored.

        Raises:
            StoreError: the ledger could not be written or synced (the entry may or may
                not be on disk), or it is from a newer version.
        """
        when = self.clock.now() if at is None else float(at)
        cost = usd if usd is not None else self.prices.cost_usd(model, usage, local=local)
        entry = LedgerEntry(
            at=when, profile=profile, model=model, kind=kind, usage=usage, usd=cost, job_id=job_id, attempt=attempt
        )
        if self.store is not None:
            self.store.append(entry)
            return entry
        self._append(self.path_for(_local_month(when)), encode_line(entry.to_json()))
        return entry

    def _append(self, path: Path, line: bytes) -> None:
        try:
            if not self.dir.is_dir():
                make_dirs(self.dir)
            for _ in range(8):
                # read-write: the last byte is looked at; O_APPEND puts every write at the end
                fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    fileio._lock(fd, True, True)  # on the file itself: nothing to delete from under us
                    st = os.fstat(fd)
                    try:
                        same = os.stat(path).st_ino == st.st_ino
                    except FileNotFoundError:
                        same = False
                    if not same:
                        continue  # replaced or deleted after we opened it: lock the new one
                    data = line
                    if st.st_size == 0:
                        # the id tells readers a recreated file (its inode may be reused) from the one they read
                        header = {"format": LEDGER_FORMAT, "schema_version": LEDGER_SCHEMA, "id": secrets.token_hex(8)}
                        data = encode_line(header) + line
                    else:
                        self._check_header(fd, path.name)
                        os.lseek(fd, st.st_size - 1, os.SEEK_SET)
                        if os.read(fd, 1) != b"\n":
                            data = b"\n" + line  # a crashed writer's torn line: close it off
                    fileio.write_all(fd, data)
                    os.fsync(fd)
                    if st.st_size == 0:
                        fsync_dir(path.parent)
                    return
                finally:
                    os.close(fd)  # closing releases the lock
            raise StoreError(f"could not record spend: {path.name} keeps being replaced")
        except OSError as exc:
            raise StoreError(f"could not record spend in {path.name}: {exc.strerror or exc}") from exc

    def _check_header(self, fd: int, name: str) -> None:
        """Refuses to append to a file of a newer version (its first line says so)."""
        if name in self._checked:
            return
        os.lseek(fd, 0, os.SEEK_SET)
        head = os.read(fd, 4096)
        doc = decode_line(head.split(b"\n", 1)[0]) if b"\n" in head else None
        version = doc.get("schema_version") if doc and doc.get("format") == LEDGER_FORMAT else None
        if isinstance(version, int) and version > LEDGER_SCHEMA:
            raise StoreError(f"{name} is from a newer Desktop Queue (schema {version}); nothing was added")
        self._checked.add(name)

    # ------------------------------------------------------------------ reading

    def _sync(self, name: str) -> _FileState:
        """Reads what was appended to one file since the last call (caller holds the lock)."""
        path = self.dir / name
        state = self._files.setdefault(name, _FileState())
        if state.cells is None:
            state.reset(-1)
        try:
            quick = os.stat(path)
        except FileNotFoundError:
            state.reset(-1)
            return state
        if quick.st_ino == state.inode and quick.st_size == state.size_seen:
            return state  # nothing appended: the common case costs one stat
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            state.reset(-1)
            return state
        try:
            st = os.fstat(fd)
            if st.st_ino != state.inode or st.st_size < state.offset:
                state.reset(st.st_ino)  # a different or shortened file: read it afresh
            state.size_seen = st.st_size
            if st.st_size == state.offset:
                return state
            if state.file_id is not None and _header_id(os.read(fd, 4096)) != state.file_id:
                state.reset(st.st_ino)  # recreated under the same inode number
            os.lseek(fd, state.offset, os.SEEK_SET)
            pending = b""
            left = st.st_size - state.offset
            while left > 0:
                chunk = os.read(fd, min(_READ_CHUNK, left))
                if not chunk:
                    break
                left -= len(chunk)
                pending += chunk
                end = pending.rfind(b"\n")
                if end < 0:
                    continue
                self._consume(state, pending[: end + 1])
                state.offset += end + 1
                pending = pending[end + 1 :]
            # a last line without its newline is being written, or was torn: read it later
        finally:
            os.close(fd)
        return state

    @staticmethod
    def _consume(state: _FileState, data: bytes) -> None:
        assert state.cells is not None and state.by_day is not None and state.by_month is not None
        for raw in data.splitlines():
            first = state.lines == 0
            state.lines += 1
            doc = decode_line(raw)
            if doc is None:
                state.bad_lines += 1
                continue
            if first and doc.get("format") == LEDGER_FORMAT:
                state.file_id = str(doc.get("id") or "")
                version = doc.get("schema_version")
                if isinstance(version, int) and version > LEDGER_SCHEMA:
                    state.newer = version
                continue
            try:
                entry = LedgerEntry.from_json(doc)
            except (KeyError, TypeError, ValueError):
                state.bad_lines += 1
                continue
            day = _local_day(entry.at)
            state.cells.setdefault((day, entry.profile, entry.model), _Totals()).add(entry)
            state.by_day.setdefault((entry.profile, day), _Totals()).add(entry)
            state.by_month.setdefault(entry.profile, _Totals()).add(entry)

    def _names(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.dir) if n.startswith("spend-") and n.endswith(".jsonl"))
        except FileNotFoundError:
            return []

    def _readable(self, state: _FileState, name: str) -> None:
        if state.newer is not None:
            raise StoreError(f"ledger file {name} is from a newer Desktop Queue (schema {state.newer}); not read")

    def spent(self, profile: str, period: Period, at: float | None = None) -> Spent:
        """What ``profile`` spent in the local day or month that contains ``at`` (default: now)."""
        if period not in ("day", "month"):
            raise ValueError(f"period must be 'day' or 'month', not {period!r}")
        when = self.clock.now() if at is None else at
        if self.store is not None:
            return self.store.totals(profile, *period_bounds(period, when))
        name = self.path_for(_local_month(when)).name
        with self._lock:
            state = self._sync(name)
            self._readable(state, name)
            assert state.by_day is not None and state.by_month is not None
            totals = state.by_day.get((profile, _local_day(when))) if period == "day" else state.by_month.get(profile)
            return totals.spent() if totals else Spent()

    def report(self, by: ReportBy = "day", since: str | date | float | None = None) -> list[dict[str, Any]]:
        """Totals grouped by local day, model or profile, from ``since`` (a day, inclusive) on.

        Each row: the group's key (``day``, ``model`` or ``profile``), ``entries``,
        ``tokens_in``, ``tokens_out``, ``tokens``, ``images``, ``speech_chars``,
        ``speech_seconds``, ``usd`` and ``unknown_cost``; sorted by the key.
        """
        if by not in ("day", "model", "profile"):
            raise ValueError(f"by must be 'day', 'model' or 'profile', not {by!r}")
        first = _since_day(since)
        groups: dict[str, _Totals] = {}
        if self.store is not None:
            for entry in self.entries(since):
                day = _local_day(entry.at)
                key = {"day": day, "model": entry.model, "profile": entry.profile}[by]
                groups.setdefault(key, _Totals()).add(entry)
            return [{by: key, **groups[key].to_json()} for key in sorted(groups)]
        with self._lock:
            for name in self._names():
                if first and name < f"spend-{first[:7]}":
                    continue
                state = self._sync(name)
                self._readable(state, name)
                assert state.cells is not None
                for (day, profile, model), totals in state.cells.items():
                    if first and day < first:
                        continue
                    key = {"day": day, "model": model, "profile": profile}[by]
                    groups.setdefault(key, _Totals()).merge(totals)
        return [{by: key, **groups[key].to_json()} for key in sorted(groups)]

    def damaged_lines(self) -> int:
        """Lines skipped as torn or damaged in the files read so far (a torn last line included)."""
        if self.store is not None:
            return 0  # (a database's rows are whole or absent)
        with self._lock:
            return sum(s.bad_lines for s in self._files.values())

    def entries(self, since: str | date | float | None = None) -> Iterable[LedgerEntry]:
        """Every stored entry from ``since`` on, in file order (reads the files; for reports and tests)."""
        first = _since_day(since)
        if self.store is not None:
            start = None if first is None else datetime.fromisoformat(first).timestamp()
            yield from self.store.entries_since(start)
            return
        for name in self._names():
            if first and name < f"spend-{first[:7]}":
                continue
            with (self.dir / name).open("rb") as fh:
                for raw in fh:
                    if not raw.endswith(b"\n"):
                        break
                    doc = decode_line(raw)
                    if doc is None or doc.get("format") == LEDGER_FORMAT:
                        continue
                    try:
                        entry = LedgerEntry.from_json(doc)
                    except (KeyError, TypeError, ValueError):
                        continue
                    if not first or _local_day(entry.at) >= first:
                        yield entry


def _since_day(since: str | date | float | None) -> str | None:
    if since is None:
        return None
    if isinstance(since, date):
        return since.strftime("%Y-%m-%d")
    if isinstance(since, (int, float)):
        return _local_day(float(since))
    return date.fromisoformat(since).strftime("%Y-%m-%d")


__all__ = [
    "DEFAULT_PRICES",
    "Budget",
    "LedgerEntry",
    "Price",
    "PriceTable",
    "SpendLedger",
    "SpendStore",
    "Spent",
    "Usage",
    "WAITING_BUDGET",
    "budget_reason",
    "estimate_usage",
    "format_usd",
    "is_local_url",
    "period_bounds",
    "usage_of",
]
