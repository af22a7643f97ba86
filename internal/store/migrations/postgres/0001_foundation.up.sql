-- Tenancy, identity, audit, idempotency and signing keys.
CREATE TABLE orgs (
    id          TEXT PRIMARY KEY,
    slug        TEXT NOT NULL UNIQUE,
    name        TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL
);

CREATE TABLE projects (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    slug        TEXT NOT NULL,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    created_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (org_id, slug)
);

CREATE TABLE users (
    id                 TEXT PRIMARY KEY,
    email              TEXT NOT NULL UNIQUE,
    display_name       TEXT NOT NULL DEFAULT '',
    password_hash      TEXT NOT NULL,
    status             TEXT NOT NULL CHECK (status IN ('active', 'disabled')),
    tokens_valid_after TIMESTAMPTZ NOT NULL,
    created_at         TIMESTAMPTZ NOT NULL
);

CREATE TABLE role_bindings (
    id             TEXT PRIMARY KEY,
    principal_type TEXT NOT NULL CHECK (principal_type IN ('user', 'service_account')),
    principal_id   TEXT NOT NULL,
    role           TEXT NOT NULL,
    scope_type     TEXT NOT NULL CHECK (scope_type IN ('platform', 'org', 'project')),
    scope_id       TEXT NOT NULL,
    org_id         TEXT NOT NULL DEFAULT '',
    created_at     TIMESTAMPTZ NOT NULL,
    UNIQUE (principal_type, principal_id, role, scope_type, scope_id)
);
CREATE INDEX role_bindings_scope ON role_bindings (scope_type, scope_id);

CREATE TABLE audit_events (
    id             TEXT PRIMARY KEY,
    occurred_at    TIMESTAMPTZ NOT NULL,
    actor_type     TEXT NOT NULL,
    actor_id       TEXT NOT NULL,
    org_id         TEXT NOT NULL DEFAULT '',
    project_id     TEXT NOT NULL DEFAULT '',
    action         TEXT NOT NULL,
    resource_type  TEXT NOT NULL,
    resource_id    TEXT NOT NULL DEFAULT '',
    before_state   JSONB,
    after_state    JSONB,
    reason         TEXT NOT NULL DEFAULT '',
    correlation_id TEXT NOT NULL DEFAULT '',
    outcome        TEXT NOT NULL CHECK (outcome IN ('success', 'denied', 'failure'))
);
CREATE INDEX audit_events_project ON audit_events (project_id, id);
CREATE INDEX audit_events_org ON audit_events (org_id, id);
CREATE INDEX audit_events_correlation ON audit_events (correlation_id);

CREATE TABLE idempotency_keys (
    principal      TEXT NOT NULL,
    idem_key       TEXT NOT NULL,
    method         TEXT NOT NULL,
    path           TEXT NOT NULL,
    request_hash   TEXT NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('in_flight', 'complete')),
    status_code    INTEGER NOT NULL DEFAULT 0,
    response_body  BYTEA,
    content_type   TEXT NOT NULL DEFAULT '',
    created_at     TIMESTAMPTZ NOT NULL,
    expires_at     TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (principal, idem_key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

CREATE TABLE signing_keys (
    kid         TEXT PRIMARY KEY,
    purpose     TEXT NOT NULL,
    algorithm   TEXT NOT NULL,
    private_key TEXT NOT NULL,
    public_key  TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    retired_at  TIMESTAMPTZ
);
