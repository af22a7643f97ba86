"""Credentials: a person's password sign-in, and service-account keys.

A service account proves itself with a short JWT assertion signed by its
private key (Ed25519 or ECDSA P-256) and trades it for an access token at
the token endpoint. ``ServiceAccountCredentials`` caches that token and
mints a new one a minute before it expires, so long-running automation and
workloads never present an expired token.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

TOKEN_PATH = "/api/v1/auth/service-account/token"
GRANT_TYPE = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ASSERTION_TTL = 300  # seconds, as the server allows
REFRESH_MARGIN = 60  # mint a new token this long before the old one ends

# Where a workload finds its own identity (the platform mounts it).
IDENTITY_PATH = "/var/run/gpuaas/identity.json"


@dataclass(frozen=True)
class KeyFile:
    """A service account's key file, as the CLI and the platform write it."""

    service_account_id: str
    key_id: str
    private_key_pem: str = field(repr=False)  # never in a log line or a test failure
    project_id: str = ""
    token_url: str = ""
    api_base_url: str = ""  # set in a workload's identity file

    @classmethod
    def load(cls, path: str | Path) -> "KeyFile":
        data = json.loads(Path(path).read_text())
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "KeyFile":
        missing = [k for k in ("service_account_id", "key_id", "private_key_pem") if not d.get(k)]
        if missing:
            raise ValueError(f"the key file lacks {', '.join(missing)}")
        return cls(service_account_id=d["service_account_id"], key_id=d["key_id"], private_key_pem=d["private_key_pem"],
                   project_id=d.get("project_id", ""), token_url=d.get("token_url", ""),
                   api_base_url=d.get("api_base_url", ""))


def _b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def sign_assertion(key: KeyFile, audience: str, now: float | None = None) -> str:
    """Signs the JWT assertion the token endpoint trades for a token."""
    pk = serialization.load_pem_private_key(key.private_key_pem.encode(), password=None)
    if isinstance(pk, ed25519.Ed25519PrivateKey):
        alg = "EdDSA"
    elif isinstance(pk, ec.EllipticCurvePrivateKey) and isinstance(pk.curve, ec.SECP256R1):
        alg = "ES256"
    else:
        raise ValueError("only Ed25519 and ECDSA P-256 keys are supported")
    now = int(now if now is not None else time.time())
    header = {"alg": alg, "typ": "JWT", "kid": key.key_id}
    claims = {"iss": key.service_account_id, "sub": key.service_account_id, "aud": [audience],
              "iat": now, "exp": now + ASSERTION_TTL, "jti": str(uuid.uuid4())}
    signing_input = _b64(json.dumps(header, separators=(",", ":")).encode()) + "." + \
        _b64(json.dumps(claims, separators=(",", ":")).encode())
    if alg == "EdDSA":
        sig = pk.sign(signing_input.encode())
    else:
        r, s = decode_dss_signature(pk.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return signing_input + "." + _b64(sig)


class TokenProvider(Protocol):
    def token(self) -> str: ...

    def invalidate(self) -> None: ...


class StaticToken:
    """A token you already have (a person's sign-in)."""

    def __init__(self, token: str) -> None:
        self._token = token

    def token(self) -> str:
        return self._token

    def invalidate(self) -> None:
        pass


class ServiceAccountCredentials:
    """Mints, caches and refreshes a service account's access tokens.

    ``exchange`` posts an assertion and returns the token answer; the
    client supplies it (``Client.for_service_account``).
    """

    def __init__(self, key: KeyFile, audience: str, exchange: Callable[[str], dict[str, Any]],
                 clock: Callable[[], float] = time.time) -> None:
        self.key = key
        self.audience = audience
        self._exchange = exchange
        self._clock = clock
        self._lock = threading.Lock()
        self._token = ""
        self._renew_at = 0.0
        self.minted = 0  # how many tokens this provider minted (tests, metrics)

    def token(self) -> str:
        with self._lock:
            now = self._clock()
            if not self._token or now >= self._renew_at:
                answer = self._exchange(sign_assertion(self.key, self.audience, now))
                self._token = answer["access_token"]
                ttl = int(answer.get("expires_in", 0))
                self._renew_at = now + max(ttl - REFRESH_MARGIN, ttl / 2)
                self.minted += 1
            return self._token

    def invalidate(self) -> None:
        """Forgets the cached token (after the server refused it)."""
        with self._lock:
            self._token = ""
