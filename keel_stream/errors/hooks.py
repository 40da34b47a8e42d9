"""The hooks' errors."""

from __future__ import annotations

from keel_stream.errors.base import Conflict, InvalidRequest, NotFound

__all__ = [
    "DeliveryNotFound",
    "HookDisabled",
    "HookLimitReached",
    "HookNotFound",
    "HookUrlRefused",
    "InvalidHook",
    "ReplayTooLarge",
]


class HookNotFound(NotFound):
    """No such hook subscription (or it belongs to another tenant)."""

    code = "hook_not_found"


class DeliveryNotFound(NotFound):
    """No such delivery of this hook subscription."""

    code = "hook_delivery_not_found"


class HookUrlRefused(InvalidRequest):
    """The URL is not one hooks may send to: not http(s), or a host that resolves to a
    loopback, private, link-local, unique-local, multicast or unspecified address."""

    code = "hook_url_refused"


class InvalidHook(InvalidRequest):
    """A subscription that breaks a rule: an unknown hook name, too many events, a bad filter."""

    code = "invalid_hook"


class ReplayTooLarge(InvalidRequest):
    """A replay over more events than one request may re-derive."""

    code = "hook_replay_too_large"


class HookLimitReached(Conflict):
    """The tenant has as many hook subscriptions as it may."""

    code = "hook_limit_reached"


class HookDisabled(Conflict):
    """The subscription was disabled (its endpoint answered 410 Gone): nothing is sent to it."""

    code = "hook_disabled"
