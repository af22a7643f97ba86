-- What each project holds in the embedded OCI registry, so a per-project
-- quota (--project-registry-quota-bytes) holds across restarts and
-- replicas. registry_blobs: each distinct blob digest (layer, config,
-- manifest) committed into one of the project's repositories, counted
-- once however many repositories or tags hold it. registry_holds: bytes
-- held for a write that has not committed yet: an upload session
-- (distribution's upload id) grows its hold as its chunks stream in, a
-- manifest or a mount holds its size until the registry answers.
-- registry_quota_locks: one row per project that ever pushed, locked by
-- every hold so a project's pushes are counted one at a time.
CREATE TABLE registry_blobs (
    project_id TEXT NOT NULL,
    digest     TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    repository TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (project_id, digest)
);

CREATE TABLE registry_holds (
    id         TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    repository TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX registry_holds_project ON registry_holds (project_id, updated_at);

CREATE TABLE registry_quota_locks (
    project_id TEXT PRIMARY KEY
);

-- A push names only its repository; the project is the one whose intents
-- lead there (registry credentials are only ever issued through them).
CREATE INDEX artifact_intents_repository ON artifact_intents (repository, created_at);
