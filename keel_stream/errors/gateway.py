"""The external gateway's errors: a provider failed, refused, or broke the protocol.

Every error carries the JSON-RPC error code it came from (``rpc_code``, None when none applies)
and the error's ``data`` member.
"""

from __future__ import annotations

from typing import Any, ClassVar

from keel_stream.errors.base import KeelError

__all__ = [
    "ActivationRefused",
    "BackendCancelRefused",
    "BackendTimeout",
    "BackendUnavailable",
    "BudgetRefused",
    "GatewayError",
    "IncompatibleVersion",
    "ProtocolError",
    "RemoteError",
    "RequestCancelled",
    "WrongProviderKind",
]


class GatewayError(KeelError):
    """An external provider failed, refused, or broke the protocol."""

    code: ClassVar[str] = "gateway_error"

    def __init__(self, message: str, *, rpc_code: int | None = None, data: Any = None) -> None:
        super().__init__(message)
        self.rpc_code = rpc_code
        self.data = data


class BackendTimeout(GatewayError):
    """No answer within the per-request timeout (JSON-RPC -32001 semantics)."""

    code = "backend_timeout"
    retriable = True


class RequestCancelled(GatewayError):
    """The provider reports the request was cancelled (-32002)."""

    code = "request_cancelled"


class BackendUnavailable(GatewayError):
    """The provider, its connection or the addressed session is gone (-32003)."""

    code = "backend_unavailable"
    retriable = True


class BackendCancelRefused(GatewayError):
    """The provider answered cancel with an error: the turn was NOT stopped."""

    code = "backend_cancel_refused"


class ActivationRefused(GatewayError):
    """The handshake showed a provider this client must not activate."""

    code = "activation_refused"


class IncompatibleVersion(ActivationRefused):
    """The provider speaks a protocol revision outside SUPPORTED_VERSIONS."""

    code = "incompatible_version"


class WrongProviderKind(ActivationRefused):
    """The provider is of another kind than the connection was declared for."""

    code = "wrong_provider_kind"


class BudgetRefused(ActivationRefused):
    """A stdio provider's budget asks for more than the runtime's own hard limit of a
    resource (it cannot be granted); the provider was not spawned. ``data["refused"]`` lists
    each limit with the value asked for and the hard limit."""

    code = "backend_budget_refused"


class ProtocolError(GatewayError):
    """A malformed message (-32700, -32600), an unknown method (-32601) or bad params (-32602)."""

    code = "protocol_error"


class RemoteError(GatewayError):
    """The provider answered an error with a code outside the reserved and standard ones."""

    code = "backend_error"
