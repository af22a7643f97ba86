"""Usage reporting from inside an app instance, with its own identity."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

from . import errors
from .client import Client, UsageEvent
from .credentials import IDENTITY_PATH, KeyFile


class UsageReporter:
    """Reports an instance's usage as the instance itself.

    The platform mounts the instance's service-account key into the
    workload (GPUAAS_IDENTITY_FILE) and names the instance and project in
    GPUAAS_APP_INSTANCE_ID and GPUAAS_PROJECT_ID. Event ids must be stable
    across retries (derive them from what was measured): a retried report is
    counted once, so ``report`` retries on its own when the platform is
    briefly unavailable or unreachable (503, 429, 5xx, a network error),
    each time after its own back-off (0.5 s, doubling up to 10 s) and never
    sooner than the Retry-After of a 429 or 503 (capped at the client's
    ``max_retry_after``, a minute). It waits with the client's ``sleep``.
    """

    def __init__(self, client: Client, project_id: str, instance_id: str, source: str | None = None) -> None:
        self.client = client
        self.project_id = project_id
        self.instance_id = instance_id
        self.source = source or f"//gpuaas/app-instances/{instance_id}"

    @classmethod
    def from_environment(cls, identity_file: str | Path | None = None, **kw: Any) -> "UsageReporter":
        path = identity_file or os.environ.get("GPUAAS_IDENTITY_FILE", IDENTITY_PATH)
        key = KeyFile.load(path)
        instance = os.environ.get("GPUAAS_APP_INSTANCE_ID", "")
        if not instance:
            raise ValueError("GPUAAS_APP_INSTANCE_ID is not set: this is not running as an app instance")
        base = os.environ.get("GPUAAS_API_BASE_URL") or key.api_base_url
        return cls(Client.for_service_account(base, key), key.project_id or os.environ["GPUAAS_PROJECT_ID"], instance, **kw)

    def report(self, event_id: str, usage_unit: str, quantity: int, *, start: datetime | None = None,
               end: datetime | None = None, attempts: int = 5) -> dict[str, Any]:
        """Reports one measured quantity; returns the platform's result for it."""
        ev = UsageEvent(id=event_id, source=self.source, usage_unit=usage_unit, quantity=quantity,
                        time=end or datetime.now(timezone.utc), start_time=start)
        delay = 0.5
        for attempt in range(attempts):
            try:
                return self.client.report_usage(self.project_id, self.instance_id, [ev])
            except (errors.Unavailable, errors.RateLimited, errors.ServerError,
                    httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as e:
                # Safe to send again whatever happened to the last try: the
                # event id is the same, so one that arrived is counted once.
                if attempt == attempts - 1:
                    raise
                ra = getattr(e, "retry_after", None)
                self.client.sleep(self.client.retry_wait(ra, delay) if ra is not None else delay)
                delay = min(delay * 2, 10)
        raise AssertionError("unreachable")
