"""Tests that need no server: the client against httpx.MockTransport."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from gpuaas_sdk import (AuthenticationError, Client, KeyFile, PreconditionFailed, ServiceAccountCredentials,
                        StaticToken)


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


def test_usage_report_retries_a_lost_or_failed_post_with_the_same_event() -> None:
    """A report that may have reached the platform (the connection dropped,
    a gateway said 502) is sent again with the same event id, as the
    reporter promises, instead of failing the caller."""
    import gpuaas_sdk.usage as usage
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

    c = Client.for_service_account("http://api.test", _key(), transport=httpx.MockTransport(handler), sleep=lambda s: None)
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


def _limited(answers: list[httpx.Response]) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """A transport answering each request with the next of answers (the
    last one for the rest), keeping the requests."""
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        req.read()
        seen.append(req)
        return answers[min(len(seen), len(answers)) - 1]

    return httpx.MockTransport(handler), seen


def _refusal(status: int, retry_after: str | None) -> httpx.Response:
    code = "usage_rate_limited" if status == 429 else "unavailable"
    return httpx.Response(status, headers={"Retry-After": retry_after} if retry_after else {},
                          json={"error": {"code": code, "message": "slow down", "correlation_id": "c-9"}})


def test_usage_report_waits_the_retry_after_it_is_told() -> None:
    """A report refused with 429 goes again, with the same event id, after
    the Retry-After the server named (never less than the reporter's own
    back-off, never more than the cap). Before, it slept the Retry-After
    even when shorter than the back-off, and an hour when told an hour."""
    from gpuaas_sdk import UsageReporter
    ok = httpx.Response(200, json={"recorded": 1})
    transport, seen = _limited([_refusal(429, "7"), _refusal(429, "0"), _refusal(503, "3600"), ok])
    slept: list[float] = []
    c = Client("http://api.test", StaticToken("t"), transport=transport, sleep=slept.append)
    r = UsageReporter(c, "p-1", "i-1")
    assert r.report("batch-1", "tokens", 5) == {"recorded": 1}
    assert slept == [7.0, 1.0, 60.0], "Retry-After 7, then the back-off over a 0, then the cap"
    ids = [json.loads(q.content)[0]["id"] for q in seen]
    assert ids == ["batch-1"] * 4
    assert len({q.headers["X-Idempotency-Key"] for q in seen}) == 4, "each report call is its own request"


def test_a_rate_limited_call_raises_at_once_unless_retries_are_asked_for() -> None:
    from gpuaas_sdk import RateLimited
    transport, seen = _limited([_refusal(429, "2")])
    slept: list[float] = []
    c = Client("http://api.test", StaticToken("t"), transport=transport, sleep=slept.append)
    with pytest.raises(RateLimited) as e:
        c.me()
    assert e.value.retry_after == 2.0 and len(seen) == 1 and slept == []

    transport, seen = _limited([_refusal(429, "2"), _refusal(429, None), httpx.Response(200, json={"id": "u-1"})])
    c = Client("http://api.test", StaticToken("t"), transport=transport, sleep=slept.append, retry_rate_limited=2)
    assert c.me() == {"id": "u-1"}
    assert slept == [2.0, 1.0], "the Retry-After, then 1 s where none was named"

    slept.clear()
    transport, seen = _limited([_refusal(429, "3"), _refusal(429, "3"), httpx.Response(202, json={"id": "op-1"})])
    c = Client("http://api.test", StaticToken("t"), transport=transport, sleep=slept.append, retry_rate_limited=2)
    assert c.decommission_instance("p-1", "i-1") == {"id": "op-1"}
    assert len(seen) == 3 and slept == [3.0, 3.0]
    assert len({q.headers["X-Idempotency-Key"] for q in seen}) == 1, "a retried change keeps its key"

    # Asked to wait longer than max_retry_after (60 s), it does not send the
    # request early to be refused again: the refusal comes back at once.
    slept.clear()
    transport, seen = _limited([_refusal(429, "120")])
    c = Client("http://api.test", StaticToken("t"), transport=transport, sleep=slept.append, retry_rate_limited=2)
    with pytest.raises(RateLimited) as e:
        c.decommission_instance("p-1", "i-1")
    assert e.value.retry_after == 120.0 and len(seen) == 1 and slept == []


def test_a_503_is_retried_only_where_repeating_is_safe() -> None:
    """A 503 may come after the server acted: a keyed change or a read is
    sent again, a request without a key (the token exchange, a preview) is
    not."""
    from gpuaas_sdk import Unavailable
    slept: list[float] = []
    transport, seen = _limited([_refusal(503, "1")])
    c = Client("http://api.test", StaticToken("t"), transport=transport, sleep=slept.append, retry_rate_limited=3)
    with pytest.raises(Unavailable):
        c.preview_launch("p-1", "app", "1.0.0")
    assert len(seen) == 1 and slept == []
    transport, seen = _limited([_refusal(503, "1"), httpx.Response(200, json={"id": "i-1"})])
    c = Client("http://api.test", StaticToken("t"), transport=transport, sleep=slept.append, retry_rate_limited=3)
    assert c.get_instance("p-1", "i-1") == {"id": "i-1"} and slept == [1.0]


def test_a_reconnecting_stream_waits_out_a_refused_reopen() -> None:
    """A stream that dropped is reopened; a reopen refused with 429 (too
    many streams) is tried again after its Retry-After, from the last event
    seen, instead of ending the caller's loop with an error."""
    def sse(n: int) -> httpx.Response:
        env = {"id": f"e-{n}", "type": "t", "subject": "s", "time": "", "data": {}, "sequence": n}
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"},
                              content=f"id: {n}\ndata: {json.dumps(env)}\n\n".encode())

    def first_two(retry_after: str) -> tuple[list[int], list[float], list[httpx.Request]]:
        """The first two events of a stream whose reopen is refused once
        with retry_after, the waits slept and the requests sent."""
        transport, seen = _limited([sse(1), _refusal(429, retry_after), sse(2)])
        slept: list[float] = []
        c = Client("http://api.test", StaticToken("t"), transport=transport, sleep=slept.append)
        got = []
        for ev in c.stream_events("p-1", reconnect=True):
            got.append(ev.sequence)
            if len(got) == 2:
                break
        return got, slept, seen

    got, slept, seen = first_two("5")
    assert got == [1, 2] and slept == [5.0]
    assert [q.headers.get("Last-Event-ID") for q in seen] == [None, "1", "1"]

    # A reopen told to wait longer than max_retry_after waits that long and
    # asks again: the stream never gives up.
    got, slept, _ = first_two("120")
    assert got == [1, 2] and slept == [60.0]


def test_retry_after_reads_seconds_and_http_dates() -> None:
    from datetime import datetime, timezone
    from gpuaas_sdk.errors import parse_retry_after
    now = datetime(2026, 12, 7, 12, 0, 0, tzinfo=timezone.utc)
    assert parse_retry_after("3", now) == 3.0
    assert parse_retry_after("Mon, 07 Dec 2026 12:00:30 GMT", now) == 30.0
    assert parse_retry_after("Mon, 07 Dec 2026 11:00:00 GMT", now) == 0.0
    assert parse_retry_after("soon", now) is None and parse_retry_after(None, now) is None


def test_retry_after_takes_only_digits_or_a_date() -> None:
    """RFC 9110's delay-seconds is digits. Before, float() read "nan" (a
    wait that makes time.sleep raise), "inf", "1e3" and "-3" as waits."""
    from gpuaas_sdk.errors import parse_retry_after
    for odd in ["nan", "NaN", "inf", "-inf", "1e3", "-3", "+3", "1.5", "0x10", "1_000", "\u0663", "9" * 5000]:
        assert parse_retry_after(odd) is None, odd
    assert parse_retry_after(" 42 ") == 42.0
    assert parse_retry_after("0") == 0.0


def test_a_reconnecting_stream_backs_off_however_short_the_retry_after() -> None:
    """A stream that reconnects without limit waits at least 1 s before a
    reopen, doubling over refusals in a row (to 30 s), whatever the server's
    Retry-After: before, a 0 or a date gone by reopened at once, spinning
    against a server that kept refusing; an odd value is no Retry-After."""
    def sse(n: int) -> httpx.Response:
        env = {"id": f"e-{n}", "type": "t", "subject": "s", "time": "", "data": {}, "sequence": n}
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"},
                              content=f"id: {n}\ndata: {json.dumps(env)}\n\n".encode())

    refusals = [_refusal(429, "0"), _refusal(503, "Mon, 07 Dec 2020 11:00:00 GMT"), _refusal(429, "nan")]
    refusals += [_refusal(429, "0")] * 4
    transport, seen = _limited([sse(1), *refusals, sse(2), _refusal(429, "0"), sse(3)])
    slept: list[float] = []
    c = Client("http://api.test", StaticToken("t"), transport=transport, sleep=slept.append)
    got = []
    for ev in c.stream_events("p-1", reconnect=True):
        got.append(ev.sequence)
        if len(got) == 3:
            break
    assert got == [1, 2, 3]
    assert slept == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 1.0], "doubling to the cap; an opened stream starts over"


def test_storage_quota_change_sends_if_match_and_a_stale_one_raises() -> None:
    """get_project_storage hands back the ETag; set_project_storage_quota
    sends it as If-Match and both overrides (a None one as null, the
    platform's default); a 412 is PreconditionFailed with the version now."""
    puts: list[httpx.Request] = []
    view = {"project_id": "p-1",
            "blobs": {"quota_bytes": 1024, "quota_source": "project", "used_bytes": 0, "over_quota": False},
            "registry": {"quota_bytes": None, "quota_source": "platform", "used_bytes": 0, "over_quota": False}}

    def handler(req: httpx.Request) -> httpx.Response:
        assert req.url.path in ("/api/v1/projects/p-1/storage", "/api/v1/projects/p-1/storage/quota")
        if req.method == "GET":
            return httpx.Response(200, json=view, headers={"ETag": '"sq-1"'})
        puts.append(req)
        if req.headers.get("If-Match", '"sq-1"') != '"sq-1"':
            return httpx.Response(412, json={"error": {"code": "storage_quota_changed", "message": "changed since it was read",
                                                       "correlation_id": "c-2", "details": {"etag": '"sq-2"'}}})
        return httpx.Response(200, json=view, headers={"ETag": '"sq-2"'})

    c = Client("http://api.test", StaticToken("t"), transport=httpx.MockTransport(handler))
    s = c.get_project_storage("p-1")
    assert s["etag"] == '"sq-1"' and s["blobs"]["quota_bytes"] == 1024
    out = c.set_project_storage_quota("p-1", blob_quota_bytes=s["blobs"]["quota_bytes"], registry_quota_bytes=None,
                                      if_match=s["etag"])
    assert out["etag"] == '"sq-2"'
    assert json.loads(puts[0].content) == {"blob_quota_bytes": 1024, "registry_quota_bytes": None}
    with pytest.raises(PreconditionFailed) as e:
        c.set_project_storage_quota("p-1", blob_quota_bytes=5, if_match='"sq-0"')
    assert e.value.status == 412 and e.value.code == "storage_quota_changed" and e.value.details["etag"] == '"sq-2"'
    c.set_project_storage_quota("p-1", registry_quota_bytes=7)
    assert "If-Match" not in puts[-1].headers, "without if_match no precondition is sent"


def test_a_heartbeat_sent_again_can_keep_its_id() -> None:
    """A caller resending a beat after a timeout passes the first try's id,
    so both tries are one event; without one, each call is a new beat."""
    ids: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        ids.extend(e["id"] for e in json.loads(req.read()))
        return httpx.Response(200, json={"applied": 1, "health": "healthy"})

    c = Client("http://api.test", StaticToken("t-1"), transport=httpx.MockTransport(handler))
    for _ in range(2):
        c.heartbeat("p-1", "i-1", "//my-app", event_id="beat-7")
    c.heartbeat("p-1", "i-1", "//my-app")
    c.heartbeat("p-1", "i-1", "//my-app")
    assert ids[:2] == ["beat-7", "beat-7"]
    assert len(set(ids[2:])) == 2 and "beat-7" not in ids[2:], ids
