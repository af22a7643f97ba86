-- The platform's own releases (issue 21): the CLI, agent, SDK and template
-- builds it serves. A release is a draft while its artifacts are uploaded;
-- publishing stores the exact manifest bytes and their ECDSA P-256
-- signature (signing_keys purpose release_signing) and freezes it.
CREATE TABLE platform_releases (
    version      TEXT PRIMARY KEY,
    state        TEXT NOT NULL,
    manifest     TEXT NOT NULL DEFAULT '',
    signature    TEXT NOT NULL DEFAULT '',
    signing_kid  TEXT NOT NULL DEFAULT '',
    created_by   TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    published_by TEXT NOT NULL DEFAULT '',
    published_at TIMESTAMPTZ
);
CREATE INDEX platform_releases_published ON platform_releases (published_at);

-- One file of a release. The bytes are content-addressed in the blob store
-- (location names them); digest is sha256:<hex> of the content.
CREATE TABLE platform_release_artifacts (
    version     TEXT NOT NULL REFERENCES platform_releases (version),
    name        TEXT NOT NULL,
    os          TEXT NOT NULL,
    arch        TEXT NOT NULL,
    kind        TEXT NOT NULL,
    media_type  TEXT NOT NULL,
    digest      TEXT NOT NULL,
    size_bytes  BIGINT NOT NULL,
    location    TEXT NOT NULL,
    uploaded_by TEXT NOT NULL,
    uploaded_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (version, name)
);
