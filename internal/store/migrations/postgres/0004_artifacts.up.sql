-- Artifacts: project signing keys, publish/pull intents, registry
-- credentials and their single-use wraps, registered artifacts.
CREATE TABLE artifact_signing_keys (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL,
    project_id  TEXT NOT NULL REFERENCES projects(id),
    name        TEXT NOT NULL,
    algorithm   TEXT NOT NULL,
    public_key  TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    created_by  TEXT NOT NULL DEFAULT '',
    created_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (project_id, fingerprint),
    UNIQUE (project_id, name)
);

CREATE TABLE artifact_intents (
    id                  TEXT PRIMARY KEY,
    kind                TEXT NOT NULL CHECK (kind IN ('publish', 'pull')),
    org_id              TEXT NOT NULL,
    project_id          TEXT NOT NULL REFERENCES projects(id),
    artifact_kind       TEXT NOT NULL CHECK (artifact_kind IN ('oci', 'blob')),
    source_type         TEXT NOT NULL,
    app_slug            TEXT NOT NULL,
    app_version         TEXT NOT NULL,
    artifact_name       TEXT NOT NULL,
    channel             TEXT NOT NULL DEFAULT '',
    repository          TEXT NOT NULL DEFAULT '',
    tag_hint            TEXT NOT NULL DEFAULT '',
    source_uri          TEXT NOT NULL DEFAULT '',
    upload_id           TEXT NOT NULL DEFAULT '',
    artifact_id         TEXT NOT NULL DEFAULT '',
    signature_required  BOOLEAN NOT NULL DEFAULT FALSE,
    signature_scheme    TEXT NOT NULL DEFAULT '',
    signing_key_id      TEXT NOT NULL DEFAULT '',
    provenance_required BOOLEAN NOT NULL DEFAULT FALSE,
    created_by          TEXT NOT NULL DEFAULT '',
    created_at          TIMESTAMPTZ NOT NULL,
    expires_at          TIMESTAMPTZ NOT NULL
);
CREATE INDEX artifact_intents_project ON artifact_intents (project_id, id);
CREATE INDEX artifact_intents_upload ON artifact_intents (upload_id);

CREATE TABLE registry_credentials (
    id          TEXT PRIMARY KEY,
    intent_id   TEXT NOT NULL REFERENCES artifact_intents(id),
    project_id  TEXT NOT NULL,
    artifact_id TEXT NOT NULL DEFAULT '',
    repository  TEXT NOT NULL,
    actions     TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);

CREATE TABLE credential_wraps (
    token_hash TEXT PRIMARY KEY,
    sealed     TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    used_at    TIMESTAMPTZ
);

CREATE TABLE app_artifacts (
    id                  TEXT PRIMARY KEY,
    org_id              TEXT NOT NULL,
    project_id          TEXT NOT NULL REFERENCES projects(id),
    app_slug            TEXT NOT NULL,
    app_version         TEXT NOT NULL,
    artifact_name       TEXT NOT NULL,
    artifact_kind       TEXT NOT NULL CHECK (artifact_kind IN ('oci', 'blob')),
    source_type         TEXT NOT NULL,
    repository          TEXT NOT NULL DEFAULT '',
    digest              TEXT NOT NULL,
    tag                 TEXT NOT NULL DEFAULT '',
    media_type          TEXT NOT NULL DEFAULT '',
    size_bytes          BIGINT NOT NULL DEFAULT 0,
    source_uri          TEXT NOT NULL DEFAULT '',
    source_metadata     JSONB,
    publish_intent_id   TEXT NOT NULL DEFAULT '',
    lifecycle_state     TEXT NOT NULL CHECK (lifecycle_state IN ('draft', 'staged', 'canary', 'active', 'deprecated', 'retired')),
    trust_state         TEXT NOT NULL CHECK (trust_state IN ('unverified', 'verified', 'failed')),
    trust_reason        TEXT NOT NULL DEFAULT '',
    trust_detail        TEXT NOT NULL DEFAULT '',
    verified_key_id     TEXT NOT NULL DEFAULT '',
    verified_at         TIMESTAMPTZ,
    signature_required  BOOLEAN NOT NULL DEFAULT FALSE,
    signature_scheme    TEXT NOT NULL DEFAULT '',
    signing_key_id      TEXT NOT NULL DEFAULT '',
    provenance_required BOOLEAN NOT NULL DEFAULT FALSE,
    revoked_at          TIMESTAMPTZ,
    revoke_reason       TEXT NOT NULL DEFAULT '',
    created_by          TEXT NOT NULL DEFAULT '',
    created_at          TIMESTAMPTZ NOT NULL,
    updated_at          TIMESTAMPTZ NOT NULL
);
CREATE INDEX app_artifacts_project ON app_artifacts (project_id, id);
CREATE INDEX app_artifacts_app ON app_artifacts (app_slug, app_version, artifact_name);
CREATE INDEX app_artifacts_digest ON app_artifacts (digest);
-- One live (unrevoked) artifact per name of an app version in a project.
CREATE UNIQUE INDEX app_artifacts_live_name ON app_artifacts (project_id, app_slug, app_version, artifact_name) WHERE revoked_at IS NULL;
