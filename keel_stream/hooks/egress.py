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
`KEEL_HOOKS_ALLOWED_HOSTS` (comma-separated host names, addresses or CIDRs) lets named hosts or
networks through.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final
from urllib.parse import SplitResult, urlsplit, urlunsplit

import netaddr

from keel_stream.hooks.errors import HookUrlRefused

__all__ = ["EgressPolicy", "Resolver", "Target", "address_refusal", "system_resolver"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[str]]]
"""host, port -> the addresses it resolves to."""

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


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    allowed_hosts: frozenset[str] = frozenset()
    allowed_networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> EgressPolicy:
        """From KEEL_HOOKS_ALLOWED_HOSTS: host names, addresses and CIDRs, comma-separated."""
        hosts: set[str] = set()
        networks: list[Network] = []
        for item in (part.strip() for part in (text or "").split(",")):
            if not item:
                continue
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                hosts.add(item.lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def _address_allowed(self, address: IPAddress) -> bool:
        return any(address in network for network in self.allowed_networks)

    async def target(self, url: str, resolver: Resolver = system_resolver) -> Target:
        """The checked target of an attempt to url; HookUrlRefused when it may not be sent to."""
        parts, host, port = _split(url)
        addresses = await _resolve(host, port, resolver)
        by_name = host in self.allowed_hosts
        for address in addresses:
            reason = address_refusal(address)
            if reason is not None and not by_name and not self._address_allowed(address):
                raise HookUrlRefused(f"{host} resolves to a {reason}; hooks do not send there")
        chosen = addresses[0]
        literal = f"[{chosen}]" if chosen.version == 6 else str(chosen)
        netloc = f"{literal}:{port}"
        connect_url = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
        server_name = host if parts.scheme == "https" else None
        return Target(connect_url, parts.netloc, server_name, str(chosen))


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
