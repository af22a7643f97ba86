-- The bytes of every blob upload that are not (yet) a registered artifact,
-- so a project's blob quota counts them and they can be swept: an upload in
-- progress ('uploading': bytes is what it has reserved against the quota,
-- at least what it has received), and content committed but never
-- registered ('committed': bytes is its size). Registering the content
-- deletes the row (the artifact's size_bytes counts it from then on);
-- 'sweeping' is committed content the sweeper took unregistered and has
-- not yet managed to remove (every pass retries), 'swept' the tombstone
-- once removed; both refuse a late registration instead of recording an
-- artifact whose bytes are gone (tombstones go once no intent alive at the
-- sweep can still try). digest is the expected digest from the
-- moment a commit starts: the sweeper keeps the blob of a digest any
-- upload or artifact still names.
CREATE TABLE blob_uploads (
    upload_id   TEXT PRIMARY KEY,
    project_id  TEXT NOT NULL REFERENCES projects(id),
    intent_id   TEXT NOT NULL,
    source_uri  TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('uploading', 'committed', 'sweeping', 'swept')),
    bytes       INTEGER NOT NULL DEFAULT 0,
    digest      TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE INDEX blob_uploads_project ON blob_uploads (project_id, state);
CREATE INDEX blob_uploads_state ON blob_uploads (state, updated_at);
CREATE INDEX blob_uploads_source ON blob_uploads (source_uri);
CREATE INDEX blob_uploads_digest ON blob_uploads (digest);
CREATE INDEX app_artifacts_source_uri ON app_artifacts (source_uri);
