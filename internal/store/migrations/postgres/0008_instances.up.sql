-- App instances: the async lifecycle of an app version launched onto a
-- project's allocation (issue 12).

-- One row per instance. version/digest are what runs now (digest pinned at
-- each step); status is the seeds' lifecycle state; reason_code explains a
-- failure or an automatic revert. effective holds the server-decided launch
-- (resources, config, placement intent, parameters); access the endpoint
-- instructions; log_tail the workload's last log lines; history the
-- versions the instance ran (rollback targets).
CREATE TABLE app_instances (
    id                    TEXT PRIMARY KEY,
    org_id                TEXT NOT NULL REFERENCES orgs(id),
    project_id            TEXT NOT NULL REFERENCES projects(id),
    app_slug              TEXT NOT NULL,
    display_name          TEXT NOT NULL,
    version               TEXT NOT NULL,
    digest                TEXT NOT NULL DEFAULT '',
    status                TEXT NOT NULL CHECK (status IN ('requested', 'deploying', 'running', 'upgrading', 'rolling_back',
                              'decommissioning', 'decommissioned', 'failed')),
    reason_code           TEXT NOT NULL DEFAULT '',
    reason_message        TEXT NOT NULL DEFAULT '',
    operating_mode        TEXT NOT NULL,
    control_plane_scope   TEXT NOT NULL,
    runtime_backend       TEXT NOT NULL,
    tenant_boundary_mode  TEXT NOT NULL,
    effective             JSONB NOT NULL,
    target_allocation_id  TEXT NOT NULL DEFAULT '',
    node_id               TEXT NOT NULL DEFAULT '',
    service_account_id    TEXT NOT NULL DEFAULT '',
    host_port             INTEGER NOT NULL DEFAULT 0,
    deploy_seq            INTEGER NOT NULL DEFAULT 0,
    access                JSONB,
    log_tail              JSONB,
    history               JSONB NOT NULL,
    current_operation_id  TEXT NOT NULL DEFAULT '',
    created_by            TEXT NOT NULL,
    created_at            TIMESTAMPTZ NOT NULL,
    updated_at            TIMESTAMPTZ NOT NULL,
    decommissioned_at     TIMESTAMPTZ
);
CREATE INDEX app_instances_project ON app_instances (project_id, id);
CREATE INDEX app_instances_version ON app_instances (app_slug, version, status);
CREATE INDEX app_instances_allocation ON app_instances (target_allocation_id, status);
CREATE INDEX app_instances_node ON app_instances (node_id, status);

-- One row per lifecycle request (create, upgrade, rollback, decommission),
-- polled by id. phase and task_id are the worker's durable cursor: a
-- restarted server resumes from them. lease_owner/lease_expires_at make sure
-- one replica drives an operation at a time.
CREATE TABLE app_instance_operations (
    id               TEXT PRIMARY KEY,
    instance_id      TEXT NOT NULL REFERENCES app_instances(id),
    org_id           TEXT NOT NULL,
    project_id       TEXT NOT NULL,
    kind             TEXT NOT NULL CHECK (kind IN ('create', 'upgrade', 'rollback', 'decommission')),
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
    lease_expires_at TIMESTAMPTZ,
    created_at       TIMESTAMPTZ NOT NULL,
    updated_at       TIMESTAMPTZ NOT NULL,
    completed_at     TIMESTAMPTZ
);
CREATE INDEX app_instance_operations_instance ON app_instance_operations (instance_id, id);
CREATE INDEX app_instance_operations_open ON app_instance_operations (state, id);

-- The instance's own timeline: every lifecycle event, as emitted.
CREATE TABLE app_instance_events (
    id             TEXT PRIMARY KEY,
    instance_id    TEXT NOT NULL REFERENCES app_instances(id),
    project_id     TEXT NOT NULL,
    event_type     TEXT NOT NULL,
    status         TEXT NOT NULL,
    operation_id   TEXT NOT NULL DEFAULT '',
    correlation_id TEXT NOT NULL DEFAULT '',
    payload        JSONB NOT NULL,
    occurred_at    TIMESTAMPTZ NOT NULL
);
CREATE INDEX app_instance_events_instance ON app_instance_events (instance_id, id);

-- What the instance expands into on the node: one member per deployed
-- workload (container or Compose project) bound to an allocation.
CREATE TABLE app_instance_members (
    id             TEXT PRIMARY KEY,
    instance_id    TEXT NOT NULL REFERENCES app_instances(id),
    allocation_id  TEXT NOT NULL,
    node_id        TEXT NOT NULL,
    role           TEXT NOT NULL,
    status         TEXT NOT NULL,
    version        TEXT NOT NULL,
    digest         TEXT NOT NULL,
    workload_name  TEXT NOT NULL,
    container_ids  JSONB NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL
);
CREATE INDEX app_instance_members_instance ON app_instance_members (instance_id, id);
