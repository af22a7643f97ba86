-- A platform admin's per-project override of the storage quotas that
-- --project-blob-quota-bytes and --project-registry-quota-bytes set for
-- every project. NULL: the flag's value applies; N >= 0: the project may
-- hold N bytes (0: nothing more may be stored). A project without a row
-- has no override. The quota checks read the row in the transaction that
-- takes the project's usage lock, so a change holds from the next chunk on.
CREATE TABLE project_storage_quotas (
    project_id           TEXT PRIMARY KEY REFERENCES projects(id),
    blob_quota_bytes     BIGINT CHECK (blob_quota_bytes >= 0),
    registry_quota_bytes BIGINT CHECK (registry_quota_bytes >= 0),
    updated_by           TEXT NOT NULL,
    updated_at           TIMESTAMPTZ NOT NULL
);
