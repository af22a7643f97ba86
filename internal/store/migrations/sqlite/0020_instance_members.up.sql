-- Members an operator adds to a running instance (issue 22): workers,
-- heads or nodes of a cluster app, each its own workload on an allocation
-- of the project, possibly on another node than the instance's own. Rows
-- of the instance's own deployment keep added = 0. name is the member's
-- name within the instance (worker-1); reason_* say why it failed; task_id
-- is its last run task; key_id the workload key its container holds
-- (expired when the member is removed); gpu_uuids the GPUs it was given.
ALTER TABLE app_instance_members ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE app_instance_members ADD COLUMN added INTEGER NOT NULL DEFAULT 0;
ALTER TABLE app_instance_members ADD COLUMN reason_code TEXT NOT NULL DEFAULT '';
ALTER TABLE app_instance_members ADD COLUMN reason_message TEXT NOT NULL DEFAULT '';
ALTER TABLE app_instance_members ADD COLUMN task_id TEXT NOT NULL DEFAULT '';
ALTER TABLE app_instance_members ADD COLUMN key_id TEXT NOT NULL DEFAULT '';
ALTER TABLE app_instance_members ADD COLUMN gpu_uuids TEXT NOT NULL DEFAULT '[]';
CREATE INDEX app_instance_members_node ON app_instance_members (node_id) WHERE added = 1 AND status <> 'removed';

-- Member operations are instance operations that name their members.
-- SQLite cannot change a CHECK constraint in place: the table is rebuilt
-- (nothing references it).
CREATE TABLE app_instance_operations_new (
    id               TEXT PRIMARY KEY,
    instance_id      TEXT NOT NULL REFERENCES app_instances(id),
    org_id           TEXT NOT NULL,
    project_id       TEXT NOT NULL,
    kind             TEXT NOT NULL CHECK (kind IN ('create', 'upgrade', 'rollback', 'decommission', 'member_add', 'member_remove', 'member_recover', 'cleanup')),
    state            TEXT NOT NULL CHECK (state IN ('in_progress', 'succeeded', 'failed')),
    phase            TEXT NOT NULL,
    from_version     TEXT NOT NULL DEFAULT '',
    target_version   TEXT NOT NULL DEFAULT '',
    description      TEXT NOT NULL DEFAULT '',
    reason_code      TEXT NOT NULL DEFAULT '',
    task_id          TEXT NOT NULL DEFAULT '',
    correlation_id   TEXT NOT NULL DEFAULT '',
    actor            TEXT NOT NULL DEFAULT '',
    lease_owner      TEXT NOT NULL DEFAULT '',
    lease_expires_at TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    completed_at     TEXT,
    member_ids       TEXT NOT NULL DEFAULT ''
);
INSERT INTO app_instance_operations_new (id, instance_id, org_id, project_id, kind, state, phase, from_version, target_version,
    description, reason_code, task_id, correlation_id, actor, lease_owner, lease_expires_at, created_at, updated_at, completed_at)
SELECT id, instance_id, org_id, project_id, kind, state, phase, from_version, target_version,
    description, reason_code, task_id, correlation_id, actor, lease_owner, lease_expires_at, created_at, updated_at, completed_at
FROM app_instance_operations;
DROP TABLE app_instance_operations;
ALTER TABLE app_instance_operations_new RENAME TO app_instance_operations;
CREATE INDEX app_instance_operations_instance ON app_instance_operations (instance_id, id);
CREATE INDEX app_instance_operations_open ON app_instance_operations (state, id);
