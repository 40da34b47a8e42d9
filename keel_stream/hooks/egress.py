"""Where hooks may send: http(s) URLs whose host resolves to public addresses only.

A URL's host is resolved when a subscription is created and again before every attempt; every
address it resolves to must be allowed, and the attempt connects to the address that was
checked (the URL's host goes in the Host header and, for https, in SNI and the certificate
check), so a DNS answer that changes between the check and the connection (rebinding) is not
followed. Refused by default: loopback, private (RFC 1918, 100.64/10), link-local (169.254/16,
the cloud metadata address among them), unique-local, multicast, unspecified and reserved
addresses, IPv4-mapped and NAT64 (64:ff9b::/96) forms of those, any address that either the
standard library or netaddr (which follows IANA's special-purpose registries, where Python
before 3.11.10 missed 192.0.0.0/24) does not call global, and any scheme but http and https.
`KEEL_HOOKS_ALLOWED_HOSTS` (comma-separated host names, addresses or CIDRs) is the most the
operator lets through; a tenant reaches one of those hosts only when its own document lists it
too (`hooks.allowedHosts`, EgressPolicy.narrowed), so one tenant's internal receiver is never
every tenant's. A Target says whether its address is public: what a non-public receiver answers
is not shown to the tenant (keel_stream.hooks.sender).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Final
from urllib.parse import SplitResult, urlsplit, urlunsplit

import netaddr

from keel_stream.errors import HookUrlRefused

__all__ = [
    "EgressPolicy",
    "Resolver",
    "Target",
    "TenantHosts",
    "address_refusal",
    "no_tenant_hosts",
    "system_resolver",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[str]]]
"""host, port -> the addresses it resolves to."""
TenantHosts = Callable[[str], Awaitable[Sequence[str]]]
"""tenant -> the non-public hosts its document lists (hooks.allowedHosts)."""

_SCHEMES: Final = {"http": 80, "https": 443}
_RESOLVE_TIMEOUT_S: Final = 5.0
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")


def _registry_global(address: IPAddress) -> bool:
    """IANA's special-purpose registries (through netaddr) call it globally reachable."""
    return bool(netaddr.IPAddress(int(address), address.version).is_global())


def address_refusal(address: IPAddress) -> str | None:
    """Why hooks must not connect to this address by default; None when it is public."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address_refusal(address.ipv4_mapped)
    if isinstance(address, ipaddress.IPv6Address) and address in _NAT64:
        return address_refusal(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("not global", not (address.is_global and _registry_global(address))),
    )
    for reason, applies in checks:
        if applies:
            return f"{reason} address {address}"
    return None


async def no_tenant_hosts(tenant: str) -> Sequence[str]:
    """No tenant lists a non-public host: public receivers only."""
    return ()


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


@dataclass(frozen=True, slots=True)
class Target:
    """Where an attempt connects: the checked address in the URL, the original host aside."""

    connect_url: str
    host_header: str
    server_name: str | None
    """The TLS server name (https only)."""
    address: str
    public: bool
    """Whether the address is a public one (else the operator and the tenant allowed it)."""


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """The operator's allowlist, narrowed by one tenant's (``tenant``) before any use: without
    a tenant's list no non-public address is allowed."""

    allowed_hosts: frozenset[str] = frozenset()
    allowed_networks: tuple[Network, ...] = ()
    tenant: EgressPolicy | None = None

    @classmethod
    def parse(cls, text: str | None) -> EgressPolicy:
        """From KEEL_HOOKS_ALLOWED_HOSTS: host names, addresses and CIDRs, comma-separated."""
        return cls.of((text or "").split(","))

    @classmethod
    def of(cls, items: Iterable[str]) -> EgressPolicy:
        """From host names, addresses and CIDRs."""
        hosts: set[str] = set()
        networks: list[Network] = []
        for item in (part.strip() for part in items):
            if not item:
                continue
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                hosts.add(item.lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def narrowed(self, tenant_items: Iterable[str]) -> EgressPolicy:
        """This allowlist as one tenant may use it: a non-public address must be allowed here
        and by ``tenant_items`` (the tenant's hooks.allowedHosts) too; never more than here."""
        return replace(self, tenant=EgressPolicy.of(tenant_items))

    def _lets_through(self, host: str, address: IPAddress) -> bool:
        return host in self.allowed_hosts or any(address in n for n in self.allowed_networks)

    def _allows(self, host: str, address: IPAddress) -> bool:
        tenant = self.tenant
        return tenant is not None and (
            self._lets_through(host, address) and tenant._lets_through(host, address)
        )

    async def target(self, url: str, resolver: Resolver = system_resolver) -> Target:
        """The checked target of an attempt to url; HookUrlRefused when it may not be sent to."""
        parts, host, port = _split(url)
        addresses = await _resolve(host, port, resolver)
        for address in addresses:
            reason = address_refusal(address)
            if reason is not None and not self._allows(host, address):
                raise HookUrlRefused(
                    f"{host} resolves to a {reason}; hooks send there only when the operator "
                    "allows it (KEEL_HOOKS_ALLOWED_HOSTS) and the tenant's document lists it "
                    "(hooks.allowedHosts)"
                )
        chosen = addresses[0]
        literal = f"[{chosen}]" if chosen.version == 6 else str(chosen)
        netloc = f"{literal}:{port}"
        connect_url = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
        server_name = host if parts.scheme == "https" else None
        public = address_refusal(chosen) is None
        return Target(connect_url, parts.netloc, server_name, str(chosen), public)


def _split(url: str) -> tuple[SplitResult, str, int]:
    if any(ord(c) <= 32 or ord(c) == 127 for c in url):
        raise HookUrlRefused("the URL holds whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise HookUrlRefused(f"not a URL: {exc}") from exc
    if parts.scheme not in _SCHEMES:
        raise HookUrlRefused(f"scheme {parts.scheme!r}: hooks send over http or https only")
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        raise HookUrlRefused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise HookUrlRefused("credentials in the URL are not allowed")
    return parts, host, port if port is not None else _SCHEMES[parts.scheme]


async def _resolve(host: str, port: int, resolver: Resolver) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        async with asyncio.timeout(_RESOLVE_TIMEOUT_S):
            found = await resolver(host, port)
    except (OSError, ValueError, TimeoutError) as exc:  # UnicodeError: a name IDNA refuses
        raise HookUrlRefused(f"{host} does not resolve: {type(exc).__name__} {exc}") from exc
    addresses = [ipaddress.ip_address(a.partition("%")[0]) for a in found]
    if not addresses:
        raise HookUrlRefused(f"{host} does not resolve")
    return addresses
