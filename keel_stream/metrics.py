"""Which Prometheus metrics a process exports: those of the components it runs, no others.

Every module defines its collectors in prometheus_client's default registry when it is imported,
and importing is not running: the API process imports relay modules (for their types), so the
default registry would export relay gauges that nothing there ever updates. Each process instead
serves a registry that filters the default one by the components it runs (by the family name's
prefix, `keel_<component>_`), plus the process, platform and GC collectors (families outside
`keel_`).

Each command declares what it runs (`declare`) before it serves metrics; `exported` is the
registry to serve.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from enum import StrEnum
from typing import Final

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server
from prometheus_client.metrics_core import Metric

__all__ = [
    "METRICS_PORT_HINT",
    "Component",
    "ComponentCollector",
    "declare",
    "exported",
    "registry_for",
    "serve_metrics",
]

_OURS: Final = "keel_"
METRICS_PORT_HINT: Final = "choose another with KEEL_METRICS_PORT or --metrics-port"


class Component(StrEnum):
    """A part of the platform that exports metrics, named by its families' prefix."""

    API = "api"
    GATEWAY = "gateway"
    HOOKS = "hooks"
    TRIGGERS = "triggers"
    PROJECTOR = "projector"
    RELAY = "relay"
    WORKER = "worker"

    @property
    def prefix(self) -> str:
        return f"{_OURS}{self.value}_"


class ComponentCollector:
    """The families of `source` that belong to the given components, or are not keel's."""

    def __init__(
        self, components: Iterable[Component], source: CollectorRegistry = REGISTRY
    ) -> None:
        self._prefixes = tuple(sorted(c.prefix for c in components))
        self._source = source

    def exports(self, name: str) -> bool:
        return not name.startswith(_OURS) or name.startswith(self._prefixes)

    def collect(self) -> Iterator[Metric]:
        for family in self._source.collect():
            if self.exports(family.name):
                yield family


def registry_for(
    components: Iterable[Component], source: CollectorRegistry = REGISTRY
) -> CollectorRegistry:
    """A registry exporting the components' families of `source` (and every non-keel one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ComponentCollector(components, source))
    return registry


_declared: set[Component] = set()
_registries: dict[frozenset[Component], CollectorRegistry] = {}


def declare(*components: Component) -> None:
    """Say which components run in this process (each command, as it starts them)."""
    _declared.update(components)


def exported(default: Iterable[Component] = ()) -> CollectorRegistry:
    """The registry this process serves: the declared components (`default` when none was
    declared, as for an app embedded in a test)."""
    components = frozenset(_declared or default)
    registry = _registries.get(components)
    if registry is None:
        registry = _registries[components] = registry_for(components)
    return registry


def serve_metrics(host: str, port: int) -> None:
    """Serve the declared components' metrics on host:port (from a daemon thread)."""
    start_http_server(port, addr=host, registry=exported())
