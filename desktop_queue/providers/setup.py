"""One place that builds the runtime's providers and flow control from profile settings.

The window and ``desktop-queue work`` both read the profiles file
(:mod:`desktop_queue.providers.profiles`) and call :func:`build`, so the two run the
same kinds under the same limits. A :class:`ProfileConfig` holds no secret: the API key
is looked up by the provider when it first needs it (OS keyring, then
``OPENAI_API_KEY`` for OpenAI's own endpoint).

With several profiles, each ``openai.*`` kind is a :class:`ProfileRouter`: a job runs on
the profile its input names (``"profile": "ollama"``), else on the default profile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from desktop_queue.core.clock import Clock
from desktop_queue.core.errors import InvalidInput
from desktop_queue.core.flow import FlowControl, ProfileLimits
from desktop_queue.core.ledger import Budget, SpendLedger, is_local_url
from desktop_queue.core.model import ErrorClass
from desktop_queue.core.outcome import LookupResult, Outcome, Provider
from desktop_queue.providers import discover
from desktop_queue.providers.openai_compat import DEFAULT_PROFILE, OpenAIProfile, make_providers

if TYPE_CHECKING:
    from desktop_queue.providers.profiles import ProfileSet


@dataclass(frozen=True)
class ProfileConfig:
    """One OpenAI-compatible endpoint as people configure it (never a key).

    Attributes:
        name: profile name: the keyring user name and the flow-control profile
            (jobs of kind ``openai.*`` use the profile ``openai`` unless their input
            names another).
        base_url: API base URL (None: ``OPENAI_BASE_URL``, else the SDK's default).
        model: default model of chat and responses jobs.
        models: the models people pick from (forms, Preferences); empty: any.
        rpm: requests per minute (None: unlimited).
        tpm: tokens per minute (None: unlimited).
        concurrency: attempts at once against this endpoint (None: only the global limit).
        require_key: False for local servers that need no key.
        budget_usd_per_day: dollars this profile may spend a local day (None: no limit).
        budget_usd_per_month: dollars a local calendar month (None: no limit).
        budget_tokens_per_day: tokens (in and out) a day (None: no limit).
        budget_tokens_per_month: tokens a month (None: no limit).
    """

    name: str = DEFAULT_PROFILE
    base_url: str | None = None
    model: str = OpenAIProfile.model
    models: tuple[str, ...] = ()
    rpm: float | None = None
    tpm: float | None = None
    concurrency: int | None = None
    require_key: bool = True
    budget_usd_per_day: float | None = None
    budget_usd_per_month: float | None = None
    budget_tokens_per_day: int | None = None
    budget_tokens_per_month: int | None = None

    def budget(self) -> Budget:
        """The spending limits of this profile (0 counts as no limit, as for the rates)."""
        return Budget(
            usd_per_day=self.budget_usd_per_day or None,
            usd_per_month=self.budget_usd_per_month or None,
            tokens_per_day=int(self.budget_tokens_per_day) if self.budget_tokens_per_day else None,
            tokens_per_month=int(self.budget_tokens_per_month) if self.budget_tokens_per_month else None,
        )

    def is_local(self) -> bool:
        """True if the endpoint is on this machine (its calls cost nothing unless a price says so)."""
        return is_local_url(self.openai_profile().resolved_base_url())

    def limits(self) -> ProfileLimits:
        """The flow-control limits of this profile."""
        budget = self.budget()
        return ProfileLimits(
            rpm=self.rpm or None,
            tpm=self.tpm or None,
            concurrency=self.concurrency or None,
            budget=budget if budget.is_set() else None,
            model=self.model or None,
            local=self.is_local(),
        )

    def openai_profile(self) -> OpenAIProfile:
        """The provider-side profile (endpoint and default model)."""
        return OpenAIProfile(
            name=self.name,
            base_url=self.base_url or None,
            model=self.model or OpenAIProfile.model,
            require_key=self.require_key,
            env_key=_is_openai(self.base_url),
        )


def _is_openai(url: str | None) -> bool:
    """OPENAI_API_KEY may stand in only for OpenAI's own endpoint (or none given)."""
    if not url:
        return True
    host = (urlsplit(url).hostname or "").lower()
    return host == "api.openai.com" or host.endswith(".openai.com")


class ProfileRouter:
    """One ``openai.*`` kind over several profiles: each job runs on the profile its input names.

    A job whose input names no profile runs on the default one; a job naming a profile
    that is not configured is refused at submit (``validate``) and dead-lettered with a
    clear message if its profile was removed while it waited. A profile with no key
    holds only its own jobs (:meth:`FlowControl.hold_profile`), not the others'.

    Args:
        kind: the job kind.
        by_profile: profile name -> that profile's provider of ``kind``.
        default: the profile of jobs that name none.
        flow: where per-profile holds go (None: none).
    """

    def __init__(self, kind: str, by_profile: dict[str, Any], default: str, flow: FlowControl | None = None) -> None:
        self.kind = kind
        self.by_profile = dict(by_profile)
        self.default = default
        self._flow = flow

    @property
    def version(self) -> str:
        return str(getattr(self.by_profile[self.default], "version", "1"))

    @property
    def profile(self) -> OpenAIProfile:
        """The default profile (what code that knows one profile reads)."""
        profile: OpenAIProfile = self.by_profile[self.default].profile
        return profile

    def __getattr__(self, name: str) -> Any:
        # lease_s, default_timeout_s, a form description …: the default profile's provider
        if name in ("by_profile", "default", "_flow"):
            raise AttributeError(name)
        return getattr(self.by_profile[self.default], name)

    def pick(self, payload: Any) -> Any | None:
        """The provider a job with ``payload`` runs on (None: it names an unknown profile)."""
        named = payload.get("profile") if isinstance(payload, dict) else None
        if named is None or named == "":
            return self.by_profile[self.default]
        return self.by_profile.get(named) if isinstance(named, str) else None

    def _unknown(self, payload: Any) -> str:
        named = payload.get("profile") if isinstance(payload, dict) else None
        return (
            f"unknown profile {named!r}: jobs of {self.kind} run on the profiles "
            f"{', '.join(sorted(self.by_profile))} (add one in Preferences → Providers or with "
            "desktop-queue profile add)"
        )

    def validate(self, payload: Any) -> None:
        provider = self.pick(payload)
        if provider is None:
            named = payload.get("profile") if isinstance(payload, dict) else None
            if named is not None and not isinstance(named, str):
                raise InvalidInput('"profile" must be a string')
            raise InvalidInput(self._unknown(payload))
        provider.validate(payload)

    def run(self, job: Any, context: Any) -> Outcome:
        provider = self.pick(getattr(job, "input", None))
        if provider is None:
            return Outcome.failure(ErrorClass.FATAL, f"{self.kind}: {self._unknown(job.input)}")
        outcome: Outcome = provider.run(job, context)
        return outcome

    def classify(self, error: BaseException) -> Outcome:
        outcome: Outcome = self.by_profile[self.default].classify(error)
        return outcome

    def lookup(self, job: Any) -> LookupResult:
        provider = self.pick(getattr(job, "input", None))
        if provider is None:
            return LookupResult(LookupResult.UNKNOWN)
        result: LookupResult = provider.lookup(job)
        return result

    def unavailable_reason(self) -> str | None:
        """None while any profile can run; each profile without a key holds its own jobs.

        Without flow control (no per-profile holds), the default profile's reason.
        """
        reasons: dict[str, str | None] = {}
        for name, provider in self.by_profile.items():
            ask = getattr(provider, "unavailable_reason", None)
            reasons[name] = ask() if callable(ask) else None
        if self._flow is None:
            return reasons.get(self.default)
        for name, reason in reasons.items():
            self._flow.hold_profile(name, reason)
        return None

    def unavailable_reasons(self) -> dict[str, str | None]:
        """Profile -> why it cannot run (no key), or None."""
        out: dict[str, str | None] = {}
        for name, provider in self.by_profile.items():
            ask = getattr(provider, "unavailable_reason", None)
            out[name] = ask() if callable(ask) else None
        return out

    def reconfigure(self, profile: OpenAIProfile) -> None:
        provider = self.by_profile.get(profile.name)
        if provider is not None:
            provider.reconfigure(profile)

    def add(self, provider: Any) -> None:
        """Runs ``provider``'s profile too (a profile added in Preferences)."""
        self.by_profile[provider.profile.name] = provider

    def close(self) -> None:
        for provider in self.by_profile.values():
            close = getattr(provider, "close", None)
            if callable(close):
                close()


def build(
    profiles: Sequence[ProfileConfig] | ProfileSet | None = None,
    clock: Clock | None = None,
    *,
    plugins: bool = True,
    data_dir: Path | str | None = None,
    backend: Any = None,
) -> tuple[dict[str, Provider], FlowControl]:
    """The runtime's providers (kind -> provider) and the flow control guarding them.

    The demo provider is always present. The ``openai.*`` kinds talk to the first
    profile (default: the ``openai`` profile from the environment), or, with several,
    to the profile each job's input names (:class:`ProfileRouter`); all report
    rate-limit headers to the flow control; every profile gets its own limits and breaker.

    Args:
        profiles: the configured endpoints, the default first (None or empty: one
            default profile); or a :class:`~desktop_queue.providers.profiles.ProfileSet`.
        clock: the flow control's time source (default: the system clock).
        data_dir: the data dir whose processes share one set of limits, budgets and
            spend ledger (``<data dir>/flow``, ``<data dir>/ledger``); None: limits of
            this process alone and no ledger (tests of one process).
        plugins: also load providers from the ``desktop_queue.providers`` entry points.
        backend: the queue's backend (``store_options()["backend"]``): a PostgreSQL one
            keeps the limits, breakers and spend ledger in its database instead, shared by
            every machine on the queue, on the server's clock (prices stay the data dir's).

    Returns:
        (providers, flow): pass both to the lease driver (``LeaseDriver(..., flow=flow)``).
    """
    configs = _configs(profiles)
    shared = Path(data_dir) if data_dir is not None else None
    in_db = _database_flow(backend)
    # on a PostgreSQL store the shared state and the ledger's entries are the database's
    state, spend, server_clock = in_db if in_db is not None else (None, None, None)
    clock = clock or server_clock
    flow = FlowControl(
        {c.name: c.limits() for c in configs},
        clock=clock,
        profile_of=profile_of_for(configs[0].name),
        shared=state,
        shared_dir=shared / "flow" if shared is not None and state is None else None,
        ledger=SpendLedger(shared, clock, store=spend) if shared is not None else None,
    )
    flow.hold_unknown_profiles("openai.")  # a job naming a profile not (yet) known here waits
    if plugins:
        found: dict[str, Provider] = dict(discover())
    else:
        from desktop_queue.providers import builtin_providers

        found = builtin_providers()
    found.update(profile_providers(configs, flow))
    return found, flow


def _database_flow(backend: Any) -> tuple[Any, Any, Clock] | None:
    """(shared state, spend store, clock) of a PostgreSQL backend; None for the data dir's files."""
    if backend is None or not type(backend).__module__.startswith("desktop_queue.core.pg."):
        return None  # (psycopg is imported only for a PostgreSQL store)
    from desktop_queue.core.pg.flowstate import flow_storage

    return flow_storage(backend)


def _configs(profiles: Sequence[ProfileConfig] | ProfileSet | None) -> list[ProfileConfig]:
    ordered = getattr(profiles, "ordered", None)
    listed: list[ProfileConfig] = list(ordered()) if callable(ordered) else list(profiles or [])
    return listed or [ProfileConfig()]


def profile_of_for(default: str) -> Callable[[str, Any], str | None]:
    """Flow control's (kind, input) -> profile: the input's ``profile``, else ``default`` (openai.* kinds)."""

    def profile_of(kind: str, payload: Any) -> str | None:
        if not kind.startswith("openai."):
            return kind.split(".", 1)[0]
        named = payload.get("profile") if isinstance(payload, dict) else None
        return named if isinstance(named, str) and named else default

    return profile_of


def profile_providers(
    profiles: Sequence[ProfileConfig] | ProfileSet | None, flow: FlowControl | None
) -> dict[str, Provider]:
    """The ``openai.*`` kinds for ``profiles`` (the default first): plain providers for one, routers for several."""
    configs = _configs(profiles)
    listener = flow.observe_rate_limit if flow is not None else None
    if len(configs) == 1:
        return dict(make_providers(configs[0].openai_profile(), rate_limit_listener=listener))  # type: ignore[arg-type]
    per_profile = {c.name: make_providers(c.openai_profile(), rate_limit_listener=listener) for c in configs}
    default = configs[0].name
    return {
        kind: ProfileRouter(kind, {n: kinds[kind] for n, kinds in per_profile.items()}, default, flow)  # type: ignore[misc]
        for kind in per_profile[default]
    }


def reconfigure(
    targets: Sequence[dict[str, Any]], flow: FlowControl | None, profiles: Sequence[ProfileConfig] | ProfileSet
) -> dict[str, Provider]:
    """Runs ``profiles`` from now on (Preferences added, removed or renamed one, or changed the default).

    The ``openai.*`` entries of every dict in ``targets`` (the queue's, the driver's …)
    are replaced by new providers; flow control learns the new limits and default
    (what every process shares about a kept profile is kept). Attempts already running
    finish on the providers they started with.
    """
    configs = _configs(profiles)
    if flow is not None:
        for config in configs:
            flow.configure(config.name, config.limits())
        flow.set_profile_of(profile_of_for(configs[0].name))
    new = profile_providers(configs, flow)
    for target in targets:
        for kind in [k for k in target if k.startswith("openai.")]:
            if kind not in new:
                del target[kind]
        target.update(new)
    return new


def apply(providers: Mapping[str, Any], flow: FlowControl | None, config: ProfileConfig) -> None:
    """Applies a changed profile to running providers and flow control (Preferences' OK).

    The ``openai.*`` providers of that profile use the new endpoint, model and key from
    their next attempt on; the profile's limits are replaced (its breaker and budget
    history start afresh).
    """
    new = config.openai_profile()
    for provider in providers.values():
        if isinstance(provider, ProfileRouter):
            provider.reconfigure(new)
            continue
        profile = getattr(provider, "profile", None)
        if isinstance(profile, OpenAIProfile) and profile.name == config.name and hasattr(provider, "reconfigure"):
            provider.reconfigure(new)
    if flow is not None:
        flow.configure(config.name, config.limits())


__all__ = ["ProfileConfig", "ProfileRouter", "apply", "build", "profile_of_for", "profile_providers", "reconfigure"]
