"""Provider profiles: one file, read by the window and by ``desktop-queue work`` alike.

The profiles live in ``profiles.json`` in the user config dir
(:func:`desktop_queue.core.paths.config_dir`: ``DESKTOP_QUEUE_CONFIG_DIR``, else
platformdirs' ``user_config_dir("desktop-queue")``), written atomically, with ``format``,
``schema_version`` and a checksum. A profile holds an endpoint, its default model, a
model list, limits and budgets; **never a key**: the key of profile ``NAME`` lives in
the OS keyring (service ``desktop-queue``, user ``NAME``), one entry per profile.

Fallback rules (when nothing else is configured):

* No profile in the file (or no file): one profile named ``openai`` from the
  environment: ``OPENAI_BASE_URL`` (else OpenAI's own endpoint) and its key from the
  keyring or ``OPENAI_API_KEY``. Its :attr:`ProfileSet.source` says ``environment``
  when one of those variables is set, ``none`` otherwise (an unconfigured profile: the
  status bar stays quiet about it unless queued jobs use it).
* ``OPENAI_API_KEY`` also stands in for a missing keyring key of a profile whose
  endpoint is OpenAI's own (or unset); never for another server's profile, so that
  OpenAI's key is never sent to a local or third-party server.

A damaged file is set aside (``profiles.json.corrupt-<time>``), never lost: the
profiles then fall back as above and :attr:`ProfileSet.notices` says what happened.
A file of a newer schema is refused and never overwritten.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from desktop_queue.core.errors import InvalidInput, StoreError
from desktop_queue.core.paths import config_dir
from desktop_queue.core.store.fileio import atomic_write, set_aside
from desktop_queue.providers.openai_compat import DEFAULT_PROFILE, KEYRING_SERVICE, KeyringUnavailable
from desktop_queue.providers.setup import ProfileConfig

PROFILES_FILE = "profiles.json"
PROFILES_FORMAT = "desktop-queue.profiles"
SCHEMA_VERSION = 1
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")
#: the kinds that run on a profile (``openai.chat`` …): the part before the dot
PROFILE_KIND_PREFIX = "openai."

SOURCE_FILE = "file"
SOURCE_ENVIRONMENT = "environment"
SOURCE_NONE = "none"

#: ProfileConfig field -> (JSON types allowed, what it must be, for the error)
_NUMBERS: dict[str, tuple[tuple[type[int] | type[float], ...], str]] = {
    "rpm": ((int, float), "a positive number"),
    "tpm": ((int, float), "a positive number"),
    "concurrency": ((int,), "a positive whole number"),
    "budget_usd_per_day": ((int, float), "a positive number of dollars"),
    "budget_usd_per_month": ((int, float), "a positive number of dollars"),
    "budget_tokens_per_day": ((int,), "a positive whole number of tokens"),
    "budget_tokens_per_month": ((int,), "a positive whole number of tokens"),
}
_KNOWN = {f.name for f in fields(ProfileConfig)} - {"name"}


class ProfileFileError(StoreError):
    """``profiles.json`` cannot be used: the message names the file and the field."""


def check_name(name: str) -> str:
    """Returns ``name`` if it can name a profile (letters, digits, ``-`` and ``_``; 1-40 characters).

    Raises:
        InvalidInput: it cannot.
    """
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidInput(
            f"profile name {name!r} is not usable: use 1 to 40 letters, digits, '-' or '_', starting with a letter or digit"
        )
    return name


def check_base_url(url: str | None) -> str | None:
    """Returns a usable base URL (stripped), None for none.

    Raises:
        InvalidInput: not an http(s) URL with a host.
    """
    if url is None or not url.strip():
        return None
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(
            f"base URL {url!r} must be an http:// or https:// URL with a host, e.g. http://localhost:11434/v1"
        )
    return url


def is_openai_url(url: str | None) -> bool:  # noqa: D401
    """True for OpenAI's own endpoint (or none given: the SDK's default is OpenAI's)."""
    if not url:
        return True
    host = (urlsplit(url).hostname or "").lower()
    return host == "api.openai.com" or host.endswith(".openai.com")


@dataclass(frozen=True)
class Preset:
    """A starting point for a new profile (Preferences' "Connect a provider")."""

    label: str
    config: ProfileConfig
    hint: str


#: the servers people connect first (local servers need no key)
PRESETS: tuple[Preset, ...] = (
    Preset(
        "OpenAI",
        ProfileConfig(name="openai", base_url="https://api.openai.com/v1", model="gpt-4o-mini"),
        "OpenAI's API: needs an API key from platform.openai.com",
    ),
    Preset(
        "Ollama",
        ProfileConfig(name="ollama", base_url="http://localhost:11434/v1", model="llama3.2", require_key=False),
        "Ollama on this machine (ollama serve); no key needed",
    ),
    Preset(
        "llama.cpp server",
        ProfileConfig(name="llamacpp", base_url="http://localhost:8080/v1", model="default", require_key=False),
        "llama.cpp's llama-server on this machine; no key needed",
    ),
    Preset(
        "LM Studio",
        ProfileConfig(name="lmstudio", base_url="http://localhost:1234/v1", model="local-model", require_key=False),
        "LM Studio's local server; no key needed",
    ),
)


@dataclass(frozen=True)
class ProfileSet:
    """Every configured profile, in the user's order, and which is the default.

    Attributes:
        profiles: the profiles (names unique).
        default: the profile of jobs whose input names none (None: the first).
        source: ``file``, ``environment`` (the fallback from ``OPENAI_*``) or ``none``
            (nothing configured: the fallback ``openai`` profile).
        notices: what people should know about loading (a damaged file set aside).
        path: the file they came from (or would be saved to).
    """

    profiles: tuple[ProfileConfig, ...] = ()
    default: str | None = None
    source: str = SOURCE_FILE
    notices: tuple[str, ...] = field(default=(), compare=False)
    path: Path | None = field(default=None, compare=False)

    def __iter__(self) -> Iterator[ProfileConfig]:
        """The profiles, the default first (what :func:`~desktop_queue.providers.setup.build` takes)."""
        return iter(self.ordered())

    def names(self) -> list[str]:
        return [p.name for p in self.profiles]

    def get(self, name: str) -> ProfileConfig | None:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        return None

    def default_name(self) -> str | None:
        if self.default is not None and self.get(self.default) is not None:
            return self.default
        return self.profiles[0].name if self.profiles else None

    def default_profile(self) -> ProfileConfig | None:
        name = self.default_name()
        return self.get(name) if name is not None else None

    @property
    def configured(self) -> bool:
        """True when a person configured something (the file, or ``OPENAI_*`` variables)."""
        return self.source != SOURCE_NONE

    def ordered(self) -> list[ProfileConfig]:
        """The default profile first, then the others in order (what :func:`build` takes)."""
        first = self.default_profile()
        return [p for p in self.profiles if p is first] + [p for p in self.profiles if p is not first]

    def with_profile(self, config: ProfileConfig, *, replace_name: str | None = None) -> ProfileSet:
        """A copy with ``config`` added, or replacing the profile ``replace_name`` (default: its own name).

        Raises:
            InvalidInput: the name is unusable, or taken by another profile.
        """
        check_name(config.name)
        old = replace_name or config.name
        if config.name != old and self.get(config.name) is not None:
            raise InvalidInput(f"a profile named {config.name!r} already exists")
        items = list(self.profiles)
        for i, profile in enumerate(items):
            if profile.name == old:
                items[i] = config
                break
        else:
            if self.get(config.name) is not None:
                raise InvalidInput(f"a profile named {config.name!r} already exists")
            items.append(config)
        default = self.default
        if default == old:
            default = config.name
        return ProfileSet(tuple(items), default, SOURCE_FILE, path=self.path)

    def without(self, name: str) -> ProfileSet:
        """A copy without the profile ``name``.

        Raises:
            InvalidInput: there is no such profile.
        """
        if self.get(name) is None:
            raise InvalidInput(f"no profile named {name!r} (profiles: {', '.join(self.names()) or 'none'})")
        items = tuple(p for p in self.profiles if p.name != name)
        default = self.default if self.default != name else None
        return ProfileSet(items, default, SOURCE_FILE, path=self.path)

    def with_default(self, name: str) -> ProfileSet:
        if self.get(name) is None:
            raise InvalidInput(f"no profile named {name!r}")
        return ProfileSet(self.profiles, name, SOURCE_FILE, path=self.path)

    def profile_of(self, kind: str, payload: Any) -> str | None:
        """The profile a job runs on: the one its input names, else the default (openai.* kinds).

        Other kinds keep their own name before the dot (``demo`` has no profile here).
        """
        if not kind.startswith(PROFILE_KIND_PREFIX):
            return kind.split(".", 1)[0]
        named = payload.get("profile") if isinstance(payload, Mapping) else None
        if isinstance(named, str) and named:
            return named
        return self.default_name()

    def unique_name(self, base: str) -> str:
        """``base``, or ``base-2``, ``base-3`` … whichever is free."""
        base = re.sub(r"[^A-Za-z0-9_-]", "-", base).strip("-_")[:36] or "profile"
        if not base[0].isalnum():
            base = "p" + base
        name, n = base, 2
        while self.get(name) is not None:
            name, n = f"{base}-{n}", n + 1
        return name


# ---------------------------------------------------------------------- environment fallback


def environment_profile(env: Mapping[str, str] | None = None) -> ProfileSet:
    """The fallback: one ``openai`` profile from ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``."""
    env = os.environ if env is None else env
    configured = bool(env.get("OPENAI_BASE_URL") or env.get("OPENAI_API_KEY"))
    return ProfileSet(
        (ProfileConfig(name=DEFAULT_PROFILE),),
        DEFAULT_PROFILE,
        SOURCE_ENVIRONMENT if configured else SOURCE_NONE,
    )


# ---------------------------------------------------------------------- the file


def profiles_path(directory: Path | str | None = None) -> Path:
    return Path(directory) / PROFILES_FILE if directory is not None else config_dir() / PROFILES_FILE


def _checksum(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def profile_to_json(config: ProfileConfig) -> dict[str, Any]:
    """The file's form of one profile (defaults and empty limits left out)."""
    out: dict[str, Any] = {"base_url": config.base_url, "model": config.model}
    if config.models:
        out["models"] = list(config.models)
    if not config.require_key:
        out["require_key"] = False
    for name in _NUMBERS:
        value = getattr(config, name)
        if value:
            out[name] = value
    return out


def to_json(profiles: ProfileSet) -> dict[str, Any]:
    body = {
        "default": profiles.default_name(),
        "profiles": {p.name: profile_to_json(p) for p in profiles.profiles},
    }
    return {"format": PROFILES_FORMAT, "schema_version": SCHEMA_VERSION, **body, "checksum": _checksum(body)}


def _bad(path: Path, where: str, what: str) -> ProfileFileError:
    return ProfileFileError(f"{path}: {where} {what}")


def parse_profile(name: str, raw: Any, path: Path) -> ProfileConfig:
    """One profile from its JSON form.

    Raises:
        ProfileFileError: naming the file, the profile and the field.
    """
    where = f"profiles.{name}"
    try:
        check_name(name)
    except InvalidInput as exc:
        raise _bad(path, where, f"has an unusable name: {exc}") from None
    if not isinstance(raw, Mapping):
        raise _bad(path, where, "must be a JSON object")
    unknown = sorted(set(raw) - _KNOWN)
    if unknown:
        raise _bad(path, f"{where}.{unknown[0]}", "is not a profile field")
    values: dict[str, Any] = {"name": name}
    base_url = raw.get("base_url")
    if base_url is not None:
        if not isinstance(base_url, str):
            raise _bad(path, f"{where}.base_url", "must be a string or null")
        try:
            values["base_url"] = check_base_url(base_url)
        except InvalidInput as exc:
            raise _bad(path, f"{where}.base_url", f"is not usable: {exc}") from None
    model = raw.get("model")
    if model is not None:
        if not isinstance(model, str) or not model.strip():
            raise _bad(path, f"{where}.model", "must be a non-empty string")
        values["model"] = model.strip()
    models = raw.get("models")
    if models is not None:
        if not isinstance(models, list) or not all(isinstance(m, str) and m.strip() for m in models):
            raise _bad(path, f"{where}.models", "must be a list of model names")
        values["models"] = tuple(dict.fromkeys(m.strip() for m in models))
    require_key = raw.get("require_key", True)
    if not isinstance(require_key, bool):
        raise _bad(path, f"{where}.require_key", "must be true or false")
    values["require_key"] = require_key
    for key, (types, what) in _NUMBERS.items():
        value = raw.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, types) or not math.isfinite(value) or value <= 0:
            raise _bad(path, f"{where}.{key}", f"must be {what} (or left out for no limit)")
        values[key] = value
    return ProfileConfig(**values)


def parse(doc: Any, path: Path) -> ProfileSet:
    """The profiles of a decoded ``profiles.json``.

    Raises:
        ProfileFileError: what is wrong, naming the file and the field.
    """
    if not isinstance(doc, Mapping) or doc.get("format") != PROFILES_FORMAT:
        raise _bad(path, "format", f"must be {PROFILES_FORMAT!r}: this is not a profiles file")
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _bad(path, "schema_version", "must be a positive whole number")
    if version > SCHEMA_VERSION:
        raise NewerProfileFile(
            f"{path} was written by a newer Desktop Queue (schema {version}, this one reads {SCHEMA_VERSION}); "
            "it is left untouched"
        )
    raw = doc.get("profiles")
    if not isinstance(raw, Mapping):
        raise _bad(path, "profiles", "must be an object of name -> profile")
    body = {"default": doc.get("default"), "profiles": raw}
    if "checksum" in doc and doc.get("checksum") != _checksum(body):
        raise _bad(path, "checksum", "does not match the content (the file was damaged or edited by hand)")
    profiles = tuple(parse_profile(str(name), value, path) for name, value in raw.items())
    default = doc.get("default")
    if default is not None and (not isinstance(default, str) or default not in raw):
        raise _bad(path, "default", f"names no profile of the file ({default!r})")
    return ProfileSet(profiles, default, SOURCE_FILE, path=path)


class NewerProfileFile(ProfileFileError):
    """``profiles.json`` has a newer schema than this version reads: refused, never overwritten."""


def _set_aside(path: Path) -> Path | None:
    try:
        return set_aside(path)
    except OSError:
        return None


def load_profiles(directory: Path | str | None = None, env: Mapping[str, str] | None = None) -> ProfileSet:
    """The profiles of ``profiles.json`` (default: in the config dir), else the environment fallback.

    Never raises for a damaged file: it is set aside and the fallback is returned, with
    a notice naming the file, the field and where the damaged copy is.

    Raises:
        NewerProfileFile: the file has a newer schema (it is left as it is).
    """
    path = profiles_path(directory)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return replace(environment_profile(env), path=path)
    except OSError as exc:
        fallback = environment_profile(env)
        return replace(
            fallback, path=path, notices=(f"{path} cannot be read ({exc.strerror or exc}); using the environment",)
        )
    try:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise _bad(path, "content", f"is not valid JSON ({exc})") from None
        found = parse(doc, path)
    except NewerProfileFile:
        raise
    except ProfileFileError as exc:
        aside = _set_aside(path)
        kept = f"; the damaged file was kept as {aside}" if aside else "; the damaged file could not be moved aside"
        fallback = environment_profile(env)
        return replace(fallback, path=path, notices=(f"{exc}{kept}. Profiles fall back to the environment.",))
    if not found.profiles:
        return replace(environment_profile(env), path=path)
    return found


def save_profiles(profiles: ProfileSet, directory: Path | str | None = None) -> Path:
    """Writes ``profiles.json`` atomically (temp file, fsync, rename); returns its path.

    Raises:
        NewerProfileFile: the file on disk has a newer schema (it is not overwritten).
        ProfileFileError: it cannot be written.
    """
    path = profiles_path(directory) if directory is not None or profiles.path is None else profiles.path
    try:
        current = orjson.loads(path.read_bytes())
        version = current.get("schema_version") if isinstance(current, dict) else None
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise NewerProfileFile(f"{path} was written by a newer Desktop Queue; it is left untouched")
    except (FileNotFoundError, orjson.JSONDecodeError):
        pass
    except OSError:
        pass
    data = orjson.dumps(to_json(profiles), option=orjson.OPT_INDENT_2) + b"\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)
    except OSError as exc:
        raise ProfileFileError(f"{path} cannot be written: {exc.strerror or exc}") from exc
    return path


def migrate_legacy(values: Mapping[str, Any], name: str = DEFAULT_PROFILE) -> ProfileConfig | None:
    """The profile an older version kept in QSettings (``providers/<name>/…`` read into a dict).

    Returns None when nothing was ever set there (nothing to migrate).
    """

    def number(key: str, kind: type[int] | type[float]) -> int | float | None:
        try:
            value = kind(values.get(key) or 0)
        except (TypeError, ValueError):
            return None
        return value if value > 0 else None

    base_url = str(values.get("base_url") or "").strip() or None
    model = str(values.get("model") or "").strip() or None
    limits = {key: number(key, float if "usd" in key or key in ("rpm", "tpm") else int) for key in _NUMBERS}
    if base_url is None and model is None and not any(limits.values()):
        return None
    try:
        base_url = check_base_url(base_url)
    except InvalidInput:
        base_url = None
    return ProfileConfig(name=name, base_url=base_url, model=model or ProfileConfig.model, **limits)  # type: ignore[arg-type]


def kinds_on_profiles(kinds: Iterable[str]) -> list[str]:
    """The kinds among ``kinds`` that run on a profile."""
    return [k for k in kinds if k.startswith(PROFILE_KIND_PREFIX)]


__all__ = [
    "NewerProfileFile",
    "PRESETS",
    "PROFILES_FILE",
    "Preset",
    "ProfileFileError",
    "ProfileSet",
    "check_base_url",
    "check_name",
    "environment_profile",
    "is_openai_url",
    "load_profiles",
    "migrate_legacy",
    "parse",
    "profiles_path",
    "save_profiles",
    "to_json",
]


# ---------------------------------------------------------------------- webhook secrets

#: the keyring user of a profile's webhook secret: ``NAME:webhook-secret``, which no
#: profile name can be (``:`` is not allowed in one), so it never meets an API key
WEBHOOK_SECRET_USER = "{name}:webhook-secret"


def _webhook_user(name: str) -> str:
    return WEBHOOK_SECRET_USER.format(name=check_name(name))


def webhook_secret(name: str) -> str | None:
    """The webhook secret of profile ``name`` from the OS keyring (None: none, or no keyring)."""
    try:
        import keyring

        secret = keyring.get_password(KEYRING_SERVICE, _webhook_user(name))
    except InvalidInput:
        return None
    except Exception:  # no usable keyring: no secret, so webhooks are refused, never accepted unsigned
        return None
    return secret or None


def store_webhook_secret(name: str, secret: str) -> None:
    """Saves the webhook secret of profile ``name`` in the OS keyring.

    Raises:
        InvalidInput: ``name`` cannot name a profile, or the secret is empty.
        KeyringUnavailable: no keyring can store it (it is not saved anywhere else).
    """
    user = _webhook_user(name)
    if not secret.strip():
        raise InvalidInput("the webhook secret is empty")
    try:
        import keyring

        keyring.set_password(KEYRING_SERVICE, user, secret.strip())
    except Exception as exc:
        raise KeyringUnavailable(
            f"the webhook secret could not be saved: no usable OS keyring ({type(exc).__name__})"
        ) from None


def delete_webhook_secret(name: str) -> bool:
    """Removes the webhook secret of profile ``name``; True if there was one.

    Raises:
        KeyringUnavailable: the keyring cannot be reached.
    """
    user = _webhook_user(name)
    try:
        import keyring

        if keyring.get_password(KEYRING_SERVICE, user) is None:
            return False
        keyring.delete_password(KEYRING_SERVICE, user)
        return True
    except Exception as exc:
        raise KeyringUnavailable(
            f"the webhook secret of {name} could not be removed: no usable OS keyring ({type(exc).__name__})"
        ) from None
