"""The gpuaas REST client."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx

from . import errors
from .credentials import (IDENTITY_PATH, TOKEN_PATH, GRANT_TYPE, KeyFile, ServiceAccountCredentials, StaticToken,
                          TokenProvider)

USER_AGENT = "gpuaas-sdk-python/0.1.0"

# The longest wait a Retry-After can impose, so a wrong header cannot stall
# a caller for long (the node agent and the scaffolded apps cap it alike).
MAX_RETRY_AFTER = 60.0

# The wait before trying again when a 429 or 503 names none.
DEFAULT_RETRY_AFTER = 1.0

# stream_events(reconnect=True) reopens without limit: its waits start at
# RECONNECT_MIN_WAIT and double with each refusal in a row up to
# RECONNECT_MAX_WAIT, whatever the Retry-After (a 0, or a date gone by,
# would otherwise make it spin against a refusing server).
RECONNECT_MIN_WAIT = 1.0
RECONNECT_MAX_WAIT = 30.0


@dataclass
class Event:
    """One event of a stream or list (a CloudEvent)."""

    id: str
    type: str
    subject: str
    time: str
    data: dict[str, Any]
    sequence: int = 0
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_envelope(cls, env: dict[str, Any]) -> "Event":
        return cls(id=env.get("id", ""), type=env.get("type", ""), subject=env.get("subject", ""),
                   time=env.get("time", ""), data=env.get("data") or {}, sequence=int(env.get("sequence", 0)), raw=env)


@dataclass
class UsageEvent:
    """One measured quantity. ``id`` must be stable across retries: the
    platform counts each (source, id) once."""

    id: str
    source: str
    usage_unit: str
    quantity: int
    time: datetime | None = None  # end of the measured interval
    start_time: datetime | None = None

    def envelope(self, instance_id: str) -> dict[str, Any]:
        data: dict[str, Any] = {"usage_unit": self.usage_unit, "quantity": self.quantity}
        if self.start_time is not None:
            data["start_time"] = _rfc3339(self.start_time)
        ev: dict[str, Any] = {"specversion": "1.0", "id": self.id, "source": self.source, "type": "gpuaas.usage.v1",
                              "subject": instance_id, "datacontenttype": "application/json", "data": data}
        if self.time is not None:
            ev["time"] = _rfc3339(self.time)
        return ev


@dataclass
class RuntimeEvent:
    """One runtime event a workload reports about its own instance:
    ``heartbeat``, ``start_completed``, ``healthy``, ``unhealthy``,
    ``member_added``, ``member_removed`` or ``member_failed``. ``id`` must be
    stable across retries: the platform applies each (source, id) once
    (every heartbeat is applied: a repeat only says again "alive now")."""

    id: str
    source: str
    type: str
    time: datetime | None = None
    health: str | None = None  # heartbeat only: healthy or unhealthy
    reason: str | None = None  # a lower-case code, e.g. gpu_xid_error
    message: str | None = None
    member: str | None = None  # member_* only (required there)
    role: str | None = None  # member_* only: controller, worker, head or node

    def envelope(self, instance_id: str) -> dict[str, Any]:
        ev: dict[str, Any] = {"specversion": "1.0", "id": self.id, "source": self.source, "type": self.type,
                              "subject": instance_id, "datacontenttype": "application/json"}
        data = _clean({"health": self.health, "reason": self.reason, "message": self.message, "member": self.member,
                       "role": self.role})
        if data:
            ev["data"] = data
        if self.time is not None:
            ev["time"] = _rfc3339(self.time)
        return ev


def _rfc3339(t: datetime) -> str:
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


class Client:
    """A client of one gpuaas API, acting as one principal.

    Build it with ``Client.login`` (a person), ``Client.for_service_account``
    (automation, with a key file) or ``Client.from_identity`` (a workload,
    with the identity the platform mounted into it).

    ``retry_rate_limited=N`` (default 0: raise at once) sends a request the
    server refused with 429 again, up to N times, each after the
    Retry-After it named (1 s when it named none; a refusal asking for
    more than ``max_retry_after`` seconds is raised at once); a 503 likewise, but only for a request that is safe to
    repeat (a GET, or a change with its idempotency key). ``sleep`` is how
    it waits (tests pass their own).
    """

    def __init__(self, base_url: str, credentials: TokenProvider | None = None, *, timeout: float = 60.0,
                 transport: httpx.BaseTransport | None = None, retry_rate_limited: int = 0,
                 max_retry_after: float = MAX_RETRY_AFTER, sleep: Callable[[float], None] = time.sleep) -> None:
        if retry_rate_limited < 0 or max_retry_after < 0:
            raise ValueError("retry_rate_limited and max_retry_after must not be negative")
        self.base_url = base_url.rstrip("/")
        self.credentials = credentials
        self.retry_rate_limited = retry_rate_limited
        self.max_retry_after = max_retry_after
        self.sleep = sleep
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport,
                                  headers={"User-Agent": USER_AGENT, "Accept": "application/json"})

    # ---- construction -------------------------------------------------

    @classmethod
    def login(cls, base_url: str, email: str, password: str, **kw: Any) -> "Client":
        """Signs a person in with email and password."""
        c = cls(base_url, None, **kw)
        answer = c.request("POST", "/api/v1/auth/login", json={"email": email, "password": password}, idempotent=False)
        c.credentials = StaticToken(answer["access_token"])
        return c

    @classmethod
    def for_service_account(cls, base_url: str, key: KeyFile | str | Path, **kw: Any) -> "Client":
        """Acts as a service account: tokens are minted from the key and
        renewed before they expire."""
        if not isinstance(key, KeyFile):
            key = KeyFile.load(key)
        c = cls(base_url, None, **kw)
        audience = key.token_url or c.base_url + TOKEN_PATH
        c.credentials = ServiceAccountCredentials(key, audience, c._exchange)
        return c

    @classmethod
    def from_identity(cls, path: str | Path = IDENTITY_PATH, base_url: str | None = None, **kw: Any) -> "Client":
        """Acts as the app instance this code runs in, with the identity
        the platform mounted (GPUAAS_IDENTITY_FILE)."""
        key = KeyFile.load(path)
        return cls.for_service_account(base_url or key.api_base_url, key, **kw)

    def _exchange(self, assertion: str) -> dict[str, Any]:
        return self.request("POST", TOKEN_PATH, json={"grant_type": GRANT_TYPE, "assertion": assertion},
                            authenticated=False, idempotent=False)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- the one request path -----------------------------------------

    def request(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
                content: bytes | None = None, headers: dict[str, str] | None = None, authenticated: bool = True,
                idempotent: bool = True, idempotency_key: str | None = None) -> Any:
        """Sends one request and returns its decoded JSON answer, or raises
        the typed error of a refusal. Changes carry an idempotency key, so a
        retried request never acts twice; with ``retry_rate_limited`` a 429
        (or 503) is waited out and sent again with the same key."""
        r = self._answer(method, path, json=json, params=params, content=content, headers=headers,
                         authenticated=authenticated, idempotent=idempotent, idempotency_key=idempotency_key)
        if not r.content:
            return None
        return r.json()

    def _answer(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
                content: bytes | None = None, headers: dict[str, str] | None = None, authenticated: bool = True,
                idempotent: bool = True, idempotency_key: str | None = None) -> httpx.Response:
        """request, returning the whole answer (for its headers: an ETag)."""
        h = dict(headers or {})
        h["X-Request-ID"] = str(uuid.uuid4())
        if method in ("POST", "PUT") and idempotent:
            h["X-Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
        repeatable = method in ("GET", "HEAD") or "X-Idempotency-Key" in h
        refused = 0
        while True:
            r = self._send(method, path, h, json=json, params=params, content=content, authenticated=authenticated)
            wait = self._wait_before_retry(r, refused, repeatable, self.retry_rate_limited)
            if wait is None:
                break
            refused += 1
            self.sleep(wait)
        if r.status_code >= 400:
            try:
                body = r.json()
            except ValueError:
                body = r.text
            raise errors.from_response(r.status_code, body, r.headers)
        return r

    def _send(self, method: str, path: str, h: dict[str, str], *, json: Any, params: dict[str, Any] | None,
              content: bytes | None, authenticated: bool) -> httpx.Response:
        """Sends the request once, and once more with a new token if the
        first was refused (401)."""
        for attempt in (1, 2):
            if authenticated and self.credentials is not None:
                h["Authorization"] = "Bearer " + self.credentials.token()
            r = self._http.request(method, path, json=json, params=_clean(params), content=content, headers=h)
            # Revoked or expired early: mint a new token, once. Only for a
            # call that sent one: a 401 of the token exchange itself comes
            # while the credentials hold their lock (invalidating would wait
            # on it forever), and resending its one-time assertion cannot help.
            if (r.status_code == 401 and attempt == 1 and authenticated
                    and isinstance(self.credentials, ServiceAccountCredentials)):
                self.credentials.invalidate()
                continue
            break
        return r

    def _wait_before_retry(self, r: httpx.Response, refused: int, repeatable: bool, limit: float,
                           at_least: float = 0.0) -> float | None:
        """Seconds to wait before sending again a request answered r, after
        refused refusals already, or None to give r to the caller. A 429 is
        always safe to send again (the server did nothing); a 503 only when
        the request is repeatable, since the server may have acted before it
        failed. at_least is the caller's own back-off."""
        if refused >= limit:
            return None
        if r.status_code == 429 or (r.status_code == 503 and repeatable):
            ra = errors.parse_retry_after(r.headers.get("Retry-After"))
            if ra is not None and ra > self.max_retry_after and limit != float("inf"):
                # Sent again sooner than asked, it would only be refused
                # again (a sign-in locked out for minutes): the caller gets
                # the refusal and its retry_after now, as the Go client does.
                # A stream that reconnects for as long as it takes waits
                # max_retry_after and asks again instead.
                return None
            return self.retry_wait(ra, at_least)
        return None

    def retry_wait(self, retry_after: float | None, at_least: float = 0.0) -> float:
        """The wait before a retry: the server's Retry-After (DEFAULT_RETRY_AFTER
        when it named none), capped at max_retry_after, and never less than
        at_least (the caller's own back-off)."""
        ra = DEFAULT_RETRY_AFTER if retry_after is None else retry_after
        return max(min(ra, self.max_retry_after), at_least)

    # ---- who, where ---------------------------------------------------

    def me(self) -> dict[str, Any]:
        return self.request("GET", "/api/v1/me")

    def list_orgs(self) -> list[dict[str, Any]]:
        return self.request("GET", "/api/v1/orgs")["items"]

    def list_projects(self, org_id: str) -> list[dict[str, Any]]:
        return self.request("GET", f"/api/v1/orgs/{org_id}/projects")["items"]

    # ---- service accounts ---------------------------------------------

    def create_service_account(self, project_id: str, name: str, slug: str, roles: list[str] | None = None) -> tuple[dict[str, Any], KeyFile]:
        """Creates a service account and returns it with its key (shown once)."""
        a = self.request("POST", f"/api/v1/projects/{project_id}/service-accounts",
                         json={"name": name, "slug": slug, "roles": roles or []})
        return a, KeyFile(service_account_id=a["id"], key_id=a["key_id"], private_key_pem=a["private_key_pem"],
                          project_id=a.get("project_id", project_id), token_url=a.get("token_url", ""))

    # ---- storage quotas -----------------------------------------------

    def get_project_storage(self, project_id: str) -> dict[str, Any]:
        """The project's blob and registry quotas in force (``quota_bytes``
        None: none; ``quota_source`` "project" or "platform"), what it uses
        and ``over_quota``, with ``etag`` added: the version of the
        project's quota overrides, for ``set_project_storage_quota(if_match=…)``."""
        r = self._answer("GET", f"/api/v1/projects/{project_id}/storage")
        return {**r.json(), "etag": r.headers.get("ETag", "")}

    def set_project_storage_quota(self, project_id: str, *, blob_quota_bytes: int | None = None,
                                  registry_quota_bytes: int | None = None, if_match: str | None = None,
                                  idempotency_key: str | None = None) -> dict[str, Any]:
        """Sets or clears the project's quota overrides (platform admins only).
        Both are replaced: None puts that quota back to the platform's
        default, 0 means nothing more may be stored. To change one and keep
        the other, read them with ``get_project_storage`` and pass its
        ``etag`` as ``if_match``: if another admin changed them since, this
        raises ``PreconditionFailed`` and changes nothing. Without
        ``if_match`` the last writer wins. The answer is the project's
        storage as after the change, with its new ``etag``."""
        headers = {"If-Match": if_match} if if_match else None
        r = self._answer("PUT", f"/api/v1/projects/{project_id}/storage/quota",
                         json={"blob_quota_bytes": blob_quota_bytes, "registry_quota_bytes": registry_quota_bytes},
                         headers=headers, idempotency_key=idempotency_key)
        return {**r.json(), "etag": r.headers.get("ETag", "")}

    # ---- catalog ------------------------------------------------------

    def project_catalog(self, project_id: str) -> list[dict[str, Any]]:
        """The apps and versions this project may launch."""
        return list(self._pages(f"/api/v1/projects/{project_id}/apps/catalog"))

    def preview_launch(self, project_id: str, app_slug: str, version: str, **launch: Any) -> dict[str, Any]:
        """What a launch would get: effective values, fitting allocations, and
        ``launch_refusal`` when create would refuse it now."""
        return self.request("POST", f"/api/v1/projects/{project_id}/apps/catalog/{app_slug}/versions/{version}/launch-preview",
                            json=_clean(launch), idempotent=False)

    # ---- app instances ------------------------------------------------

    def create_instance(self, project_id: str, app_slug: str, version: str, display_name: str, *,
                        idempotency_key: str | None = None, **launch: Any) -> dict[str, Any]:
        """Launches an instance; the answer names the operation that drives it
        (``wait_operation``)."""
        body = {"app_slug": app_slug, "version": version, "display_name": display_name, **launch}
        return self.request("POST", f"/api/v1/projects/{project_id}/app-instances", json=_clean(body),
                            idempotency_key=idempotency_key)

    def get_instance(self, project_id: str, instance_id: str) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/projects/{project_id}/app-instances/{instance_id}")

    def list_instances(self, project_id: str, status: str | None = None) -> list[dict[str, Any]]:
        return list(self._pages(f"/api/v1/projects/{project_id}/app-instances", {"status": status}))

    # The lifecycle calls take an idempotency_key as create_instance does: a
    # caller that retries one after a lost answer passes the same key and
    # gets the first answer back, not a second operation.

    def upgrade_instance(self, project_id: str, instance_id: str, version: str, *,
                         idempotency_key: str | None = None) -> dict[str, Any]:
        return self.request("POST", f"/api/v1/projects/{project_id}/app-instances/{instance_id}/upgrade",
                            json={"target_version": version}, idempotency_key=idempotency_key)

    def rollback_instance(self, project_id: str, instance_id: str, version: str, *,
                          idempotency_key: str | None = None) -> dict[str, Any]:
        return self.request("POST", f"/api/v1/projects/{project_id}/app-instances/{instance_id}/rollback",
                            json={"target_version": version}, idempotency_key=idempotency_key)

    def decommission_instance(self, project_id: str, instance_id: str, *,
                              idempotency_key: str | None = None) -> dict[str, Any]:
        return self.request("POST", f"/api/v1/projects/{project_id}/app-instances/{instance_id}/decommission", json={},
                            idempotency_key=idempotency_key)

    def get_operation(self, project_id: str, operation_id: str) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/projects/{project_id}/operations/{operation_id}")

    def wait_operation(self, project_id: str, operation_id: str, timeout: float = 600.0) -> dict[str, Any]:
        """Waits until an operation ends and returns it. It follows the
        project's event stream (so it returns as soon as the operation's last
        event arrives), with a read of the operation every few seconds as a
        safety net; it raises TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        op = self.get_operation(project_id, operation_id)
        last_read = time.monotonic()
        while op.get("state") == "in_progress":
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"operation {operation_id} still in progress after {timeout:.0f}s")
            try:
                for ev in self.stream_events(project_id, last_event_id="now", read_timeout=min(left, 5.0)):
                    if ev.data.get("operation_id") == operation_id or time.monotonic() - last_read > 5:
                        break
            except httpx.TimeoutException:
                pass
            op = self.get_operation(project_id, operation_id)
            last_read = time.monotonic()
        return op

    # ---- events -------------------------------------------------------

    def list_events(self, project_id: str, *, type: str | None = None, subject: str | None = None,
                    limit: int = 100, cursor: str | None = None) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/projects/{project_id}/events",
                            params={"type": type, "subject": subject, "limit": limit, "cursor": cursor})

    def stream_events(self, project_id: str, *, last_event_id: str | None = None, type: str | None = None,
                      subject: str | None = None, reconnect: bool = False,
                      read_timeout: float | None = None) -> Iterator[Event]:
        """Yields the project's events as they commit (server-sent events).

        ``last_event_id`` resumes exactly after that event (``"now"``: only
        new ones). With ``reconnect`` a dropped stream is reopened from the
        last event seen, so nothing is missed and nothing repeats; a reopen
        the server refuses with 429 (too many streams) or 503 is tried again
        after its Retry-After (capped), for as long as it takes, but never
        sooner than a back-off of 1 s doubling to 30 s over refusals in a
        row. The first open raises, unless ``retry_rate_limited`` allows a
        retry.
        """
        last = last_event_id
        opened, refused = False, 0
        while True:
            h = {"Accept": "text/event-stream"}
            if last:
                h["Last-Event-ID"] = last
            if self.credentials is not None:
                h["Authorization"] = "Bearer " + self.credentials.token()
            timeout = httpx.Timeout(10.0, read=read_timeout)
            with self._http.stream("GET", f"/api/v1/projects/{project_id}/events/stream",
                                   params=_clean({"type": type, "subject": subject}), headers=h, timeout=timeout) as r:
                if r.status_code >= 400:
                    r.read()
                    endless = reconnect and opened
                    limit = float("inf") if endless else self.retry_rate_limited
                    backoff = min(RECONNECT_MIN_WAIT * 2 ** min(refused, 8), RECONNECT_MAX_WAIT) if endless else 0.0
                    wait = self._wait_before_retry(r, refused, True, limit, backoff)
                    if wait is not None:
                        refused += 1
                        self.sleep(wait)
                        continue
                    try:
                        body = r.json()
                    except ValueError:
                        body = r.text
                    raise errors.from_response(r.status_code, body, r.headers)
                opened, refused = True, 0
                for ev_id, name, data in _sse(r.iter_lines()):
                    if name == "error":
                        break  # the server ended the stream (access changed); reconnect decides
                    if not data:
                        continue
                    if ev_id:
                        last = ev_id
                    yield Event.from_envelope(json.loads(data))
            if not reconnect:
                return

    # ---- usage --------------------------------------------------------

    def report_usage(self, project_id: str, instance_id: str, events: list[UsageEvent]) -> dict[str, Any]:
        """Reports usage of an app instance as one CloudEvents batch. A
        retry with the same event ids is counted once."""
        body = json.dumps([e.envelope(instance_id) for e in events]).encode()
        return self.request("POST", f"/api/v1/projects/{project_id}/app-instances/{instance_id}/usage",
                            content=body, headers={"Content-Type": "application/cloudevents-batch+json"})

    # ---- runtime events -----------------------------------------------

    def report_runtime_events(self, project_id: str, instance_id: str, events: list[RuntimeEvent]) -> dict[str, Any]:
        """Reports runtime events of the caller's own instance (its mounted
        identity only) as one CloudEvents batch; a retry with the same ids
        is applied once. The answer carries the instance's health. Past
        the server's per-instance rate (every event counts, heartbeats too)
        it raises RateLimited and records nothing: retry the same events
        after its ``retry_after`` seconds."""
        body = json.dumps([e.envelope(instance_id) for e in events]).encode()
        return self.request("POST", f"/api/v1/projects/{project_id}/app-instances/{instance_id}/runtime-events",
                            content=body, headers={"Content-Type": "application/cloudevents-batch+json"})

    def heartbeat(self, project_id: str, instance_id: str, source: str, health: str | None = None, *,
                  event_id: str | None = None) -> dict[str, Any]:
        """Tells the platform the instance is alive (and, optionally, healthy
        or unhealthy). Call it more often than the version's
        heartbeat_timeout_seconds.

        Each call is a new heartbeat with a new id, unless ``event_id`` names
        one: a caller that sends a beat again after a timeout or a refusal
        may pass the first try's id, so both tries are the same event, as
        the CloudEvents contract wants of a resend (and as ``UsageReporter``
        does with usage ids). Either way sending a beat twice is harmless:
        the platform applies every heartbeat it takes (it keeps no record of
        their ids), and a second one only says again that the instance is
        alive now. It is not usage and is never billed."""
        ev = RuntimeEvent(id=event_id or str(uuid.uuid4()), source=source, type="heartbeat", health=health)
        return self.report_runtime_events(project_id, instance_id, [ev])

    # ---- paging -------------------------------------------------------

    def _pages(self, path: str, params: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        cursor = None
        while True:
            page = self.request("GET", path, params={**(params or {}), "limit": 100, "cursor": cursor})
            yield from page.get("items", [])
            cursor = page.get("next_cursor")
            if not cursor:
                return


def _clean(d: dict[str, Any] | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return {k: v for k, v in d.items() if v is not None}


def _sse(lines: Iterator[str]) -> Iterator[tuple[str, str, str]]:
    """Parses server-sent events: yields (id, event name, data)."""
    ev_id, name, data = "", "", []
    for line in lines:
        line = line.rstrip("\r\n")  # some httpx versions keep the line ending
        if line == "":
            if data or name:
                yield ev_id, name or "message", "\n".join(data)
            ev_id, name, data = "", "", []
            continue
        if line.startswith(":"):
            continue  # keep-alive comment
        key, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if key == "id":
            ev_id = value
        elif key == "event":
            name = value
        elif key == "data":
            data.append(value)
