"""The SDK's tests run against a real gpuaas dev: internal/doctest's
TestPythonSDK starts one, ships the example app as `sdk-app` 1.0.0 and
2.0.0 (metering `requests`) and runs pytest with GPUAAS_DEV_CREDENTIALS
naming its credentials file."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from gpuaas_sdk import Client


@pytest.fixture(scope="session")
def dev() -> dict[str, Any]:
    path = os.environ.get("GPUAAS_DEV_CREDENTIALS")
    if not path:
        pytest.skip("GPUAAS_DEV_CREDENTIALS is not set: run through `go test ./internal/doctest -run TestPythonSDK`")
    with open(path) as f:
        return json.load(f)


@pytest.fixture(scope="session")
def admin(dev: dict[str, Any]) -> Client:
    return Client.login(dev["api_url"], dev["admin_email"], dev["admin_password"])


@pytest.fixture(scope="session")
def project(dev: dict[str, Any]) -> str:
    return dev["project_id"]
