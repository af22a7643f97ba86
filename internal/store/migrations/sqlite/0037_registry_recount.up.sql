-- Deleting a manifest gives the project's registry quota back: a recount
-- drops the blobs no remaining manifest of the project references.
-- registry_blobs.used_at: when a push last committed or referenced the
-- blob; one used recently is kept, since a push may be about to
-- reference it. registry_recounts: the projects whose accounting is to be
-- recounted, and from when (a manifest was deleted, or a blob kept for
-- being recent ages past that).
ALTER TABLE registry_blobs ADD COLUMN used_at TEXT;
UPDATE registry_blobs SET used_at = created_at;

CREATE TABLE registry_recounts (
    project_id TEXT PRIMARY KEY,
    due_at     TEXT NOT NULL
);
