-- App catalog: apps, their versions (manifest bodies), project entitlements.
CREATE TABLE apps (
    id              TEXT PRIMARY KEY,
    slug            TEXT NOT NULL UNIQUE,
    display_name    TEXT NOT NULL,
    description     TEXT NOT NULL DEFAULT '',
    category        TEXT NOT NULL DEFAULT '',
    runtime_backend TEXT NOT NULL,
    metadata        TEXT NOT NULL,
    metadata_digest TEXT NOT NULL,
    submitted_by    TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);

CREATE TABLE app_versions (
    id              TEXT PRIMARY KEY,
    app_id          TEXT NOT NULL REFERENCES apps(id),
    app_slug        TEXT NOT NULL,
    version         TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('draft', 'published', 'deprecated', 'retired')),
    runtime_backend TEXT NOT NULL,
    manifest        TEXT NOT NULL,
    digest          TEXT NOT NULL,
    submitted_by    TEXT NOT NULL,
    status_reason   TEXT NOT NULL DEFAULT '',
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    published_at    TEXT,
    deprecated_at   TEXT,
    retired_at      TEXT,
    UNIQUE (app_slug, version)
);
CREATE INDEX app_versions_app ON app_versions (app_id, id);

CREATE TABLE app_entitlements (
    id               TEXT PRIMARY KEY,
    project_id       TEXT NOT NULL REFERENCES projects(id),
    org_id           TEXT NOT NULL,
    app_id           TEXT NOT NULL REFERENCES apps(id),
    app_slug         TEXT NOT NULL,
    enabled          INTEGER NOT NULL,
    policy_overrides TEXT NOT NULL,
    updated_by       TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    UNIQUE (project_id, app_slug)
);
