"""Typed errors: every refusal of the API carries its code and correlation id."""

from __future__ import annotations

from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any


class GpuaasError(Exception):
    """An error answer of the gpuaas API.

    ``code`` is stable for programs, ``message`` is for people, and
    ``correlation_id`` is what to quote to an operator (it is in the
    server's logs and audit rows).
    """

    def __init__(self, status: int, code: str, message: str, correlation_id: str = "",
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{message} (HTTP {status}, code {code}, correlation_id {correlation_id})")
        self.status = status
        self.code = code
        self.message = message
        self.correlation_id = correlation_id
        self.details = details or {}

    @property
    def field_errors(self) -> list[dict[str, str]]:
        """Per-field problems of a validation error (JSON pointers)."""
        return list(self.details.get("fields") or [])


class InvalidRequest(GpuaasError):
    """400 or 422: the request is wrong; ``field_errors`` says where."""


class AuthenticationError(GpuaasError):
    """401: no token, a bad or expired token, or wrong credentials."""


class PermissionDenied(GpuaasError):
    """403: authenticated, but not allowed."""


class NotFound(GpuaasError):
    """404: missing, or not visible to the caller (the API answers both alike)."""


class Conflict(GpuaasError):
    """409: the resource is busy or in the wrong state."""


class PreconditionFailed(GpuaasError):
    """412: the change was based on a read (its ``If-Match``) that is no
    longer current; nothing changed. Read again and decide afresh;
    ``details["etag"]`` is the version now."""


class RateLimited(GpuaasError):
    """429: slow down; ``retry_after`` seconds, when the server said."""

    retry_after: float | None = None


class Unavailable(GpuaasError):
    """503: the server cannot answer now; retry after ``retry_after`` seconds."""

    retry_after: float | None = None


class ServerError(GpuaasError):
    """5xx: the server failed; quote the correlation id."""


_BY_STATUS: dict[int, type[GpuaasError]] = {
    400: InvalidRequest, 422: InvalidRequest, 401: AuthenticationError, 403: PermissionDenied,
    404: NotFound, 409: Conflict, 412: PreconditionFailed, 429: RateLimited, 503: Unavailable,
}


def from_response(status: int, body: Any, headers: Any = None) -> GpuaasError:
    """Builds the typed error of an error answer."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        err = {"code": "http_error", "message": str(body)[:500]}
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else GpuaasError)
    e = cls(status, str(err.get("code", "")), str(err.get("message", "")), str(err.get("correlation_id", "")),
            err.get("details") if isinstance(err.get("details"), dict) else None)
    if headers is not None and isinstance(e, (RateLimited, Unavailable)):
        e.retry_after = parse_retry_after(headers.get("Retry-After"))
    return e


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds a Retry-After header asks to wait: delay seconds (ASCII
    digits only) or an HTTP date (RFC 9110); None when absent or unreadable.

    float() would take "nan", "inf", "1e3" and "-3" as well: a nan wait
    makes time.sleep raise, and none of them is what a server means."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        try:
            return float(int(value))
        except (ValueError, OverflowError):  # past int's digit limit, or float's range
            return None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max((when - (now or datetime.now(timezone.utc))).total_seconds(), 0.0)
