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
ALTER TABLE app_instance_operations DROP CONSTRAINT app_instance_operations_kind_check;
ALTER TABLE app_instance_operations ADD CONSTRAINT app_instance_operations_kind_check
    CHECK (kind IN ('create', 'upgrade', 'rollback', 'decommission', 'member_add', 'member_remove', 'member_recover', 'cleanup'));
ALTER TABLE app_instance_operations ADD COLUMN member_ids TEXT NOT NULL DEFAULT '';
