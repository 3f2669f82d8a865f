"""One place that builds the runtime's providers and flow control from profile settings.

The window (profile from QSettings ``providers/<name>/…``) and ``desktop-queue work``
(profile from ``OPENAI_BASE_URL`` and command-line flags) both call :func:`build`, so
the two run the same kinds under the same limits. A :class:`ProfileConfig` holds no
secret: the API key is looked up by the provider when it first needs it (OS keyring,
then ``OPENAI_API_KEY``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from desktop_queue.core.clock import Clock
from desktop_queue.core.flow import FlowControl, ProfileLimits
from desktop_queue.core.ledger import Budget, SpendLedger, is_local_url
from desktop_queue.core.outcome import Provider
from desktop_queue.providers import discover
from desktop_queue.providers.openai_compat import DEFAULT_PROFILE, OpenAIProfile, make_providers


@dataclass(frozen=True)
class ProfileConfig:
    """One OpenAI-compatible endpoint as people configure it (never a key).

    Attributes:
        name: profile name: the keyring user name and the flow-control profile
            (jobs of kind ``openai.*`` use the profile ``openai`` unless their input
            names another).
        base_url: API base URL (None: ``OPENAI_BASE_URL``, else the SDK's default).
        model: default model of chat and responses jobs.
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
        )


def build(
    profiles: Sequence[ProfileConfig] | None = None,
    clock: Clock | None = None,
    *,
    plugins: bool = True,
    data_dir: Path | str | None = None,
) -> tuple[dict[str, Provider], FlowControl]:
    """The runtime's providers (kind -> provider) and the flow control guarding them.

    The demo provider is always present. The ``openai.*`` kinds talk to the first
    profile (default: the ``openai`` profile from the environment) and report rate-limit
    headers to the flow control; every profile gets its own limits and breaker.

    Args:
        profiles: the configured endpoints (None or empty: one default profile).
        clock: the flow control's time source (default: the system clock).
        data_dir: the data dir whose processes share one set of limits, budgets and
            spend ledger (``<data dir>/flow``, ``<data dir>/ledger``); None: limits of
            this process alone and no ledger (tests of one process).
        plugins: also load providers from the ``desktop_queue.providers`` entry points.

    Returns:
        (providers, flow): pass both to the lease driver (``LeaseDriver(..., flow=flow)``).
    """
    configs = list(profiles) if profiles else [ProfileConfig()]
    shared = Path(data_dir) if data_dir is not None else None
    flow = FlowControl(
        {c.name: c.limits() for c in configs},
        clock=clock,
        shared_dir=shared / "flow" if shared is not None else None,
        ledger=SpendLedger(shared, clock) if shared is not None else None,
    )
    if plugins:
        found: dict[str, Provider] = dict(discover())
    else:
        from desktop_queue.providers import builtin_providers

        found = builtin_providers()
    openai_kinds = make_providers(configs[0].openai_profile(), rate_limit_listener=flow.observe_rate_limit)
    found.update(openai_kinds)  # type: ignore[arg-type]
    return found, flow


def apply(providers: Mapping[str, Any], flow: FlowControl | None, config: ProfileConfig) -> None:
    """Applies a changed profile to running providers and flow control (Preferences' OK).

    The ``openai.*`` providers of that profile use the new endpoint, model and key from
    their next attempt on; the profile's limits are replaced (its breaker and budget
    history start afresh).
    """
    new = config.openai_profile()
    for provider in providers.values():
        profile = getattr(provider, "profile", None)
        if isinstance(profile, OpenAIProfile) and profile.name == config.name and hasattr(provider, "reconfigure"):
            provider.reconfigure(new)
    if flow is not None:
        flow.configure(config.name, config.limits())


__all__ = ["ProfileConfig", "apply", "build"]
