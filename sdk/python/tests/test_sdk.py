from __future__ import annotations

import json
import os
import subprocess
import tempfile
import uuid
from typing import Any

import pytest

from gpuaas_sdk import (AuthenticationError, Client, Event, InvalidRequest, KeyFile, NotFound, PermissionDenied,
                        PreconditionFailed, RuntimeEvent, ServiceAccountCredentials, UsageReporter)

APP = os.environ.get("GPUAAS_TEST_APP", "sdk-app")


def test_sign_in_and_typed_errors(dev: dict[str, Any], admin: Client, project: str) -> None:
    assert admin.me()["email"] == dev["admin_email"]
    with pytest.raises(AuthenticationError) as e:
        Client.login(dev["api_url"], dev["admin_email"], "not-the-password")
    assert e.value.status == 401 and e.value.code == "invalid_credentials" and e.value.correlation_id
    with pytest.raises(NotFound) as nf:
        admin.get_instance(project, str(uuid.uuid4()))
    assert nf.value.code and nf.value.correlation_id
    # A value outside the version's bounds: the error names the field.
    with pytest.raises(InvalidRequest) as inv:
        admin.preview_launch(project, APP, "1.0.0", resources={"gpu_count": 9})
    assert any(f["field"] == "/resources/gpu_count" for f in inv.value.field_errors), inv.value.field_errors


def test_storage_quota_with_if_match(admin: Client) -> None:
    """A quota change based on a read made before another change is refused
    (412, nothing changes); one based on the current read goes through.
    In a project of its own, so no other test's uploads meet the quota."""
    org = admin.list_orgs()[0]["id"]
    slug = "sdk-quota-" + uuid.uuid4().hex[:8]
    p = admin.request("POST", f"/api/v1/orgs/{org}/projects", json={"slug": slug, "name": slug})["id"]
    before = admin.get_project_storage(p)
    assert before["blobs"]["quota_source"] == "platform" and before["etag"]
    after = admin.set_project_storage_quota(p, blob_quota_bytes=10 << 30)
    assert after["blobs"]["quota_bytes"] == 10 << 30 and after["blobs"]["quota_source"] == "project"
    with pytest.raises(PreconditionFailed) as e:
        admin.set_project_storage_quota(p, blob_quota_bytes=1, if_match=before["etag"])
    assert e.value.code == "storage_quota_changed" and e.value.details["etag"] == after["etag"]
    assert admin.get_project_storage(p)["blobs"]["quota_bytes"] == 10 << 30
    cleared = admin.set_project_storage_quota(p, if_match=after["etag"])
    assert cleared["blobs"]["quota_source"] == "platform" and cleared["blobs"]["quota_bytes"] is None


def test_service_account_tokens_are_cached_and_renewed(dev: dict[str, Any], admin: Client, project: str) -> None:
    account, key = admin.create_service_account(project, "sdk test", "sdk-" + uuid.uuid4().hex[:8])
    assert key.private_key_pem.startswith("-----BEGIN")
    sa = Client.for_service_account(dev["api_url"], key)
    creds = sa.credentials
    assert isinstance(creds, ServiceAccountCredentials)
    assert sa.me()["id"] == account["id"]
    sa.me()
    assert creds.minted == 1, "a live token is reused"
    creds._renew_at = 0  # as if its renewal time had come
    sa.me()
    assert creds.minted == 2, "a token near its end is renewed before use"
    creds.invalidate()
    sa.me()
    assert creds.minted == 3
    # A key file round-trips through disk.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "key.json")
        with open(path, "w") as f:
            json.dump({"service_account_id": key.service_account_id, "key_id": key.key_id,
                       "private_key_pem": key.private_key_pem}, f)
        assert KeyFile.load(path) == KeyFile(key.service_account_id, key.key_id, key.private_key_pem)
    # Least privilege: an account made with no roles cannot make accounts.
    with pytest.raises((PermissionDenied, NotFound)) as denied:
        sa.create_service_account(project, "escalation", "esc-" + uuid.uuid4().hex[:8])
    assert denied.value.correlation_id


def _wait(admin: Client, project: str, inst: dict[str, Any]) -> dict[str, Any]:
    op = admin.wait_operation(project, inst["current_operation_id"], timeout=180)
    assert op["state"] == "succeeded", op
    return admin.get_instance(project, inst["id"])


def _container(instance_id: str) -> str:
    out = subprocess.run(["docker", "ps", "-q", "--filter", f"label=gpuaas.instance_id={instance_id}"],
                         check=True, capture_output=True, text=True).stdout.split()
    assert len(out) == 1, out
    return out[0]


def test_instance_lifecycle_usage_and_events(dev: dict[str, Any], admin: Client, project: str) -> None:
    catalog = {e["app"]["slug"]: [v["version"] for v in e["versions"]] for e in admin.project_catalog(project)}
    assert {"1.0.0", "2.0.0"} <= set(catalog[APP])
    first = admin.list_events(project, limit=1)["items"]
    start_id = str(first[-1]["sequence"]) if first else None

    inst = admin.create_instance(project, APP, "1.0.0", "python-sdk", resources={"gpu_count": 0})
    assert _wait(admin, project, inst)["status"] == "running"
    assert _wait(admin, project, admin.upgrade_instance(project, inst["id"], "2.0.0"))["version"] == "2.0.0"
    assert _wait(admin, project, admin.rollback_instance(project, inst["id"], "1.0.0"))["version"] == "1.0.0"

    # Usage from inside the instance, with the identity the platform
    # mounted into its container.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "identity.json")
        subprocess.run(["docker", "cp", f"{_container(inst['id'])}:/var/run/gpuaas/identity.json", path], check=True)
        identity = KeyFile.load(path)
    assert identity.api_base_url and identity.project_id == project
    reporter = UsageReporter(Client.for_service_account(dev["api_url"], identity), project, inst["id"])
    first_report = reporter.report("req-batch-1", "requests", 7)
    again = reporter.report("req-batch-1", "requests", 7)  # a retry: counted once
    assert first_report["recorded"] == 1 and again["duplicates"] == 1, (first_report, again)
    # Runtime events from the same identity: alive, and a member it runs.
    beat = reporter.client.heartbeat(project, inst["id"], "//python-sdk-test")
    assert beat["health"] == "healthy" and beat["applied"] == 1, beat
    member = RuntimeEvent(id="m-1", source="//python-sdk-test", type="member_added", member="worker-1", role="worker")
    assert reporter.client.report_runtime_events(project, inst["id"], [member])["recorded"] == 1
    assert reporter.client.report_runtime_events(project, inst["id"], [member])["duplicates"] == 1
    assert admin.get_instance(project, inst["id"])["health"]["state"] == "healthy"
    timeline = admin.request("GET", f"/api/v1/projects/{project}/app-instances/{inst['id']}/events", params={"limit": 200})
    assert [e["event_type"] for e in timeline["items"]].count("member_added") == 1, timeline
    with pytest.raises(PermissionDenied):  # an admin cannot speak for the workload
        admin.heartbeat(project, inst["id"], "//admin")
    # The instance's own identity reports for itself only.
    other = admin.create_instance(project, APP, "1.0.0", "python-sdk-other", resources={"gpu_count": 0})
    with pytest.raises((PermissionDenied, NotFound)):
        UsageReporter(reporter.client, project, other["id"]).report("x-1", "requests", 1)
    with pytest.raises(NotFound):
        reporter.client.heartbeat(project, other["id"], "//python-sdk-test")
    _wait(admin, project, other)

    for i in (inst, other):
        assert _wait(admin, project, admin.decommission_instance(project, i["id"]))["status"] == "decommissioned"

    # The stream from before the launch: every step of the instance, in
    # order, each event once.
    seen: list[Event] = []
    for ev in admin.stream_events(project, last_event_id=start_id, subject=f"app-instances/{inst['id']}", read_timeout=30):
        seen.append(ev)
        if ev.type == "apps.instance.decommissioned":
            break
    types = [e.type for e in seen]
    for want in ("apps.instance.requested", "apps.instance.running", "apps.instance.upgraded",
                 "apps.instance.rolled_back", "apps.instance.decommissioned"):
        assert want in types, types
    seqs = [e.sequence for e in seen]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
    # Exact resume: from the id of the third event, the stream goes on with
    # the fourth.
    resumed = next(iter(admin.stream_events(project, last_event_id=str(seen[2].sequence),
                                            subject=f"app-instances/{inst['id']}", read_timeout=30)))
    assert resumed.id == seen[3].id


def test_sse_parser_handles_line_endings_and_comments() -> None:
    from gpuaas_sdk.client import _sse
    for ending in ("", "\n", "\r\n"):
        lines = [l + ending for l in ["retry: 1000", "id: 7", ": stream after 7", "", "id: 8", "event: a.b",
                                      "data: {\"x\":", "data: 1}", "", ": keep-alive", ""]]
        assert list(_sse(iter(lines))) == [("8", "a.b", "{\"x\":\n1}")], ending
