"""Tests that need no server: the client against httpx.MockTransport."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from gpuaas_sdk import AuthenticationError, Client, KeyFile, ServiceAccountCredentials, StaticToken


def _key() -> KeyFile:
    pem = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    return KeyFile("sa-1", "k-1", pem, project_id="p-1")


def _in_thread(fn: Any, timeout: float = 10.0) -> Any:
    """Runs fn with a deadline, so a hang fails the test instead of the run."""
    out: dict[str, Any] = {}

    def go() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            out["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the call hung"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def test_a_refused_token_exchange_raises_and_is_not_retried() -> None:
    """A 401 of the token endpoint (a revoked key behind a proxy that says
    401) is the caller's answer: before, the client invalidated the
    credentials while they held their lock for the exchange, and hung."""
    calls: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(req.url.path)
        return httpx.Response(401, json={"error": {"code": "invalid_grant", "message": "key revoked",
                                                   "correlation_id": "c-1"}})

    key = _key()
    c = Client.for_service_account("http://api.test", key, transport=httpx.MockTransport(handler))
    with pytest.raises(AuthenticationError) as e:
        _in_thread(c.me)
    assert e.value.correlation_id == "c-1"
    assert calls == ["/api/v1/auth/service-account/token"], "one exchange, not a replay of its assertion"
    assert key.private_key_pem not in str(e.value)


def test_a_refused_token_is_minted_again_once() -> None:
    tokens = iter(["t-1", "t-2", "t-3"])
    seen: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path.endswith("/service-account/token"):
            return httpx.Response(200, json={"access_token": next(tokens), "expires_in": 900})
        seen.append(req.headers["Authorization"])
        if len(seen) == 1:
            return httpx.Response(401, json={"error": {"code": "invalid_token", "message": "revoked"}})
        return httpx.Response(200, json={"id": "sa-1"})

    c = Client.for_service_account("http://api.test", _key(), transport=httpx.MockTransport(handler))
    assert _in_thread(c.me) == {"id": "sa-1"}
    assert seen == ["Bearer t-1", "Bearer t-2"]
    assert isinstance(c.credentials, ServiceAccountCredentials) and c.credentials.minted == 2


def test_a_key_file_never_shows_its_private_key() -> None:
    key = _key()
    for shown in (repr(key), str(key), repr([key]), repr({"key": key})):
        if key.private_key_pem in shown or "PRIVATE KEY" in shown:
            pytest.fail("the private key shows in the repr of a key file")  # not the repr itself: it holds the key
    assert key.key_id in repr(key)


def test_usage_report_retries_a_lost_or_failed_post_with_the_same_event(monkeypatch: pytest.MonkeyPatch) -> None:
    """A report that may have reached the platform (the connection dropped,
    a gateway said 502) is sent again with the same event id, as the
    reporter promises, instead of failing the caller."""
    import gpuaas_sdk.usage as usage
    monkeypatch.setattr(usage.time, "sleep", lambda s: None)
    bodies: list[bytes] = []

    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path.endswith("/service-account/token"):
            return httpx.Response(200, json={"access_token": "t-1", "expires_in": 900})
        bodies.append(req.read())
        if len(bodies) == 1:
            raise httpx.ReadTimeout("the answer was lost", request=req)
        if len(bodies) == 2:
            return httpx.Response(502, text="bad gateway")
        return httpx.Response(200, json={"recorded": 0, "duplicates": 1})

    c = Client.for_service_account("http://api.test", _key(), transport=httpx.MockTransport(handler))
    r = usage.UsageReporter(c, "p-1", "i-1")
    assert _in_thread(lambda: r.report("batch-7", "requests", 3)) == {"recorded": 0, "duplicates": 1}
    events = [json.loads(b) for b in bodies]
    assert len(events) == 3 and all(e == events[0] for e in events), events
    assert events[0][0]["id"] == "batch-7" and events[0][0]["data"]["quantity"] == 3


def test_lifecycle_calls_send_the_callers_idempotency_key() -> None:
    """A caller retrying an upgrade, rollback or decommission after a lost
    answer passes the same key, so the platform answers the first request's
    outcome instead of starting a second operation."""
    keys: list[tuple[str, str]] = []

    def handler(req: httpx.Request) -> httpx.Response:
        keys.append((req.url.path.rsplit("/", 1)[-1], req.headers.get("X-Idempotency-Key", "")))
        return httpx.Response(202, json={"id": "i-1", "operation_id": "op-1"})

    c = Client("http://api.test", StaticToken("t"), transport=httpx.MockTransport(handler))
    c.upgrade_instance("p-1", "i-1", "2.0.0", idempotency_key="up-1")
    c.rollback_instance("p-1", "i-1", "1.0.0", idempotency_key="rb-1")
    c.decommission_instance("p-1", "i-1", idempotency_key="dc-1")
    c.decommission_instance("p-1", "i-1")
    assert keys[:3] == [("upgrade", "up-1"), ("rollback", "rb-1"), ("decommission", "dc-1")]
    assert keys[3][1] not in ("", "dc-1"), "without one, each call gets a fresh key"
