"""A tenant's model settings for the native agent: which document applies, which model a turn
uses, and the provider that model runs on.

The document is the newest version stored for the tenant, else the runtime's boot document
(KEEL_EXTERNAL_CONFIG), else none; it is cached per tenant for a few seconds. A turn uses the
model its latest presented input selects (``selection.model``), else the one the latest earlier
input selected, else ``defaultModel``. With no ``settings.models`` (or models but neither a
selection nor a default) the worker's own provider and budget apply, as without a document.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from keel_stream.errors import InvalidConfig
from keel_stream.kernel import Event, Kind
from keel_stream.plugins import active_plugins
from keel_stream.store.worker_store import TenantConfigReader
from keel_stream.tenancy.document import ModelSettings, TenantConfig
from keel_stream.worker.limits import StreamLimits
from keel_stream.worker.providers.base import Provider
from keel_stream.worker.providers.fake import FakeProvider
from keel_stream.worker.providers.openai import OpenAIProvider

__all__ = [
    "AttemptSettings",
    "ModelProviders",
    "ProviderFactory",
    "ResolvedConfig",
    "SettingsRefused",
    "TenantConfigCache",
    "TurnModel",
    "choose_model",
    "selection_for_turn",
]

BOOT: Final = "boot"
DEFAULT_OPENAI_URL: Final = "https://api.openai.com/v1"

ProviderFactory = Callable[[ModelSettings], Provider]
"""The provider a model's settings run on; SettingsRefused for a provider it does not know."""


class SettingsRefused(Exception):
    """The tenant's settings cannot serve this turn (an undeclared model, an unknown provider):
    deterministic, so the attempt fails without retries."""


@dataclass(frozen=True, slots=True)
class ResolvedConfig:
    config: TenantConfig
    version: int | str
    """The stored version, or "boot" for the runtime's boot document."""


class TenantConfigCache:
    """The document that applies to a tenant, read at most once per ``ttl_s`` per tenant."""

    def __init__(
        self,
        reader: TenantConfigReader | None,
        boot: TenantConfig | None,
        ttl_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reader = reader
        self._boot = ResolvedConfig(boot, BOOT) if boot is not None else None
        self._ttl_s = ttl_s
        self._clock = clock
        self._cached: dict[str, tuple[float, ResolvedConfig | None]] = {}

    async def resolve(self, tenant: str) -> ResolvedConfig | None:
        now = self._clock()
        cached = self._cached.get(tenant)
        if cached is not None and now < cached[0]:
            return cached[1]
        resolved = self._boot
        if self._reader is not None:
            stored = await self._reader.latest(tenant)
            if stored is not None:
                resolved = ResolvedConfig(stored.config, stored.version)
        self._cached[tenant] = (now + self._ttl_s, resolved)
        return resolved


class ModelProviders:
    """Providers for model settings: "openai" on the worker's endpoint and key, "fake"; all
    with the same stream limits (KEEL_PROVIDER_*: given by the command; else the defaults)."""

    def __init__(
        self,
        openai_base_url: str = DEFAULT_OPENAI_URL,
        openai_api_key: str | None = None,
        limits: StreamLimits | None = None,
    ) -> None:
        self._limits = limits or StreamLimits()
        self._openai = OpenAIProvider(openai_base_url, openai_api_key, "unset", limits=self._limits)
        self._made: dict[tuple[str, str], Provider] = {}

    def __call__(self, settings: ModelSettings) -> Provider:
        key = (settings.provider, settings.model)
        made = self._made.get(key)
        if made is None:
            if settings.provider == "openai":
                made = self._openai.with_model(settings.model)
            elif settings.provider == "fake":
                made = FakeProvider(settings.model, self._limits)
            else:
                made = self._plugin(settings)
            self._made[key] = made
        return made

    def _plugin(self, settings: ModelSettings) -> Provider:
        """A provider from a ``keel_stream.providers`` plugin: ``factory(model, limits)``."""
        plugins = active_plugins().providers
        factory = plugins.get(settings.provider)
        if factory is None:
            known = ", ".join(["openai", "fake", *sorted(plugins)])
            raise SettingsRefused(
                f"model provider {settings.provider!r} is not supported ({known})"
            )
        try:
            made: Provider = factory(settings.model, self._limits)
        except Exception as exc:  # noqa: BLE001 - a plugin's failure refuses the turn
            raise SettingsRefused(
                f"model provider plugin {settings.provider!r} failed: "
                f"{exc.__class__.__name__}: {exc}"
            ) from None
        missing = [a for a in ("name", "model", "stream", "summarize") if not hasattr(made, a)]
        if missing:
            raise SettingsRefused(
                f"model provider plugin {settings.provider!r} made {type(made).__name__}, "
                f"not a Provider (no {', '.join(missing)})"
            )
        return made


@dataclass(frozen=True, slots=True)
class TurnModel:
    """What one request runs on."""

    provider: Provider
    budget_chars: int
    """The compaction budget (0: never compact)."""
    settings_name: str | None = None
    config_version: int | str | None = None
    system_prompt: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None

    def settings_record(self) -> dict[str, Any] | None:
        """What the log records of the settings that produced an answer (None: the worker's)."""
        if self.settings_name is None:
            return None
        return {"model": self.settings_name, "configVersion": self.config_version}


def _selects(selection: Mapping[str, Any] | None) -> bool:
    """Whether a selection names a model (``selection.model`` set and not null)."""
    return selection is not None and selection.get("model") is not None


def selection_for_turn(
    inputs: Sequence[tuple[int, Mapping[str, Any] | None]], presented: Collection[int]
) -> Mapping[str, Any] | None:
    """The selection that applies to a request: of the latest presented input carrying one
    (``selection.model``), else of the latest input before the presented ones that did; with
    nothing presented, of the latest input that did. None: no input selects a model.

    ``inputs`` are (seq, selection) of the inputs the attempt knows, in any order."""
    ordered = sorted(inputs, key=lambda item: item[0], reverse=True)
    shown = [sel for seq, sel in ordered if seq in presented]
    bound = max(presented, default=None)
    earlier = [
        sel for seq, sel in ordered if seq not in presented and (bound is None or seq < bound)
    ]
    for selection in (*shown, *earlier):
        if _selects(selection):
            return selection
    return None


def choose_model(
    resolved: ResolvedConfig | None,
    selection: Mapping[str, Any] | None,
    fallback: TurnModel,
    providers: ProviderFactory,
) -> TurnModel:
    """The turn's model: the selected (or default) one of the document's ``settings.models``;
    ``fallback`` (the worker's provider) when the document declares no models, or declares
    some but nothing selects one and there is no default. SettingsRefused for a selection of
    an undeclared model or a provider the worker cannot run."""
    if resolved is None or not resolved.config.settings.models:
        return fallback
    settings = resolved.config.settings
    if not _selects(selection) and settings.default_model is None:
        return fallback
    try:
        name, model = settings.model_for(selection)
    except InvalidConfig as exc:
        raise SettingsRefused(
            f"{exc.message} in the tenant's settings (config version {resolved.version})"
        ) from None
    return TurnModel(
        provider=providers(model),
        budget_chars=model.context_budget_chars or fallback.budget_chars,
        settings_name=name,
        config_version=resolved.version,
        system_prompt=model.system_prompt,
        temperature=model.temperature,
        max_tokens=model.max_tokens,
    )


@dataclass
class AttemptSettings:
    """One attempt's model choice: the document resolved at its start, the inputs it knows."""

    resolved: ResolvedConfig | None
    fallback: TurnModel
    providers: ProviderFactory
    _inputs: dict[int, Mapping[str, Any] | None] = field(default_factory=dict)
    _last: TurnModel | None = None

    def observe(self, events: Iterable[Event]) -> None:
        """Note the selections of the inputs the attempt's transcript took in."""
        for event in events:
            if event.kind == Kind.USER_MESSAGE:
                selection = event.payload.get("selection")
                self._inputs[event.seq] = selection if isinstance(selection, Mapping) else None

    def model_for(self, presented: Collection[int]) -> TurnModel:
        """The model of a request presenting these inputs; a request that presents none (the
        turn after tool results) keeps the attempt's previous choice."""
        if not presented and self._last is not None:
            return self._last
        selection = selection_for_turn(list(self._inputs.items()), presented)
        self._last = choose_model(self.resolved, selection, self.fallback, self.providers)
        return self._last
