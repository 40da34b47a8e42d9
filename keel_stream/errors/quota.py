"""What a tenant's configuration or limits refuse."""

from __future__ import annotations

from keel_stream.errors.base import QuotaRefused

__all__ = ["ExternalQuotaExceeded", "RateLimited", "TenantBusy", "UnmeteredRefused"]


class UnmeteredRefused(QuotaRefused):
    """The backend reports no usage and the tenant's quota.unmetered is deny (or unset)."""

    code = "unmetered_refused"


class ExternalQuotaExceeded(QuotaRefused):
    """A backend's maxSessions or the tenant's maxSessionsPerBackend is reached."""

    code = "external_quota_exceeded"


class RateLimited(QuotaRefused):
    """Over one of the tenant's rates (requests, sessions or inputs): retry after a while."""

    code = "rate_limited"
    retriable = True

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TenantBusy(RateLimited):
    """The tenant, or its API key, holds as many streams or requests in flight as it may."""

    code = "tenant_busy"
