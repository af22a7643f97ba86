-- Nodes, GPU allocations and the per-node task queue (issue 11).

-- Bootstrap tokens an agent redeems once to join. Only the SHA-256 of the
-- token is kept; the token itself is shown once to the admin who made it.
CREATE TABLE node_join_tokens (
    id          TEXT PRIMARY KEY,
    token_hash  TEXT NOT NULL UNIQUE,
    description TEXT NOT NULL DEFAULT '',
    created_by  TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    used_at     TEXT,
    node_id     TEXT
);

-- A node is one GPU host running the agent. The placement columns summarise
-- node_gpus and allocations so a placement reads and locks one row:
-- free_gpus counts GPUs no live allocation holds, live_allocations counts
-- pending/active/releasing/lost allocations, exclusive_allocation_id names
-- the baremetal allocation holding the whole node.
CREATE TABLE nodes (
    id                      TEXT PRIMARY KEY,
    name                    TEXT NOT NULL,
    state                   TEXT NOT NULL CHECK (state IN ('joining', 'ready', 'down', 'draining', 'removed')),
    key_id                  TEXT NOT NULL UNIQUE,
    public_key              TEXT NOT NULL,
    inventory               TEXT NOT NULL,
    inventory_digest        TEXT NOT NULL,
    workloads               TEXT NOT NULL,
    gpu_count               INTEGER NOT NULL,
    free_gpus               INTEGER NOT NULL,
    gpu_model               TEXT NOT NULL DEFAULT '',
    gpu_vendor              TEXT NOT NULL DEFAULT '',
    gpu_memory_mib          INTEGER NOT NULL DEFAULT 0,
    live_allocations        INTEGER NOT NULL DEFAULT 0,
    exclusive_allocation_id TEXT,
    tokens_valid_after      TEXT NOT NULL,
    last_heartbeat_at       TEXT NOT NULL,
    state_changed_at        TEXT NOT NULL,
    created_at              TEXT NOT NULL,
    updated_at              TEXT NOT NULL,
    CHECK (free_gpus >= 0 AND free_gpus <= gpu_count)
);
CREATE INDEX nodes_placement ON nodes (state, free_gpus, id);
CREATE INDEX nodes_liveness ON nodes (state, last_heartbeat_at);

CREATE TABLE node_gpus (
    node_id    TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    uuid       TEXT NOT NULL,
    idx        INTEGER NOT NULL,
    model      TEXT NOT NULL,
    vendor     TEXT NOT NULL,
    memory_mib INTEGER NOT NULL,
    PRIMARY KEY (node_id, uuid)
);

-- Assertion ids a node already exchanged, kept until the assertion expires.
CREATE TABLE node_assertions (
    node_id    TEXT NOT NULL,
    jti        TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    PRIMARY KEY (node_id, jti)
);
CREATE INDEX node_assertions_expiry ON node_assertions (expires_at);

CREATE TABLE allocations (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    project_id  TEXT NOT NULL REFERENCES projects(id),
    node_id     TEXT NOT NULL REFERENCES nodes(id),
    shape       TEXT NOT NULL CHECK (shape IN ('gpu_slice', 'baremetal')),
    sku         TEXT NOT NULL,
    gpu_count   INTEGER NOT NULL,
    gpu_uuids   TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('pending', 'active', 'releasing', 'released', 'lost')),
    created_by  TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    released_at TEXT
);
CREATE INDEX allocations_project ON allocations (project_id, id);
CREATE INDEX allocations_node ON allocations (node_id, state);

-- One row per GPU a live allocation holds: the primary key is what makes it
-- impossible, on either dialect, to give one GPU to two allocations. Rows
-- go when the allocation is released.
CREATE TABLE allocation_gpus (
    node_id       TEXT NOT NULL,
    gpu_uuid      TEXT NOT NULL,
    allocation_id TEXT NOT NULL REFERENCES allocations(id),
    PRIMARY KEY (node_id, gpu_uuid)
);
CREATE INDEX allocation_gpus_allocation ON allocation_gpus (allocation_id);

-- Active intervals of allocations, for GPU-hour billing: open while the
-- allocation is active, closed when it is released or lost.
CREATE TABLE allocation_intervals (
    id            TEXT PRIMARY KEY,
    allocation_id TEXT NOT NULL REFERENCES allocations(id),
    org_id        TEXT NOT NULL,
    project_id    TEXT NOT NULL,
    node_id       TEXT NOT NULL,
    sku           TEXT NOT NULL,
    gpu_count     INTEGER NOT NULL,
    started_at    TEXT NOT NULL,
    ended_at      TEXT
);
CREATE INDEX allocation_intervals_allocation ON allocation_intervals (allocation_id, started_at);
CREATE INDEX allocation_intervals_project ON allocation_intervals (project_id, started_at);

-- The durable per-node task queue. payload is sealed (it may carry pull
-- credentials and secret files). A leased task whose lease expired is
-- delivered again; a completed one never.
CREATE TABLE node_tasks (
    id               TEXT PRIMARY KEY,
    node_id          TEXT NOT NULL REFERENCES nodes(id),
    kind             TEXT NOT NULL,
    instance_id      TEXT NOT NULL DEFAULT '',
    project_id       TEXT NOT NULL DEFAULT '',
    payload          TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('queued', 'leased', 'succeeded', 'failed')),
    attempt          INTEGER NOT NULL DEFAULT 0,
    lease_expires_at TEXT,
    reason_code      TEXT NOT NULL DEFAULT '',
    message          TEXT NOT NULL DEFAULT '',
    result           TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    completed_at     TEXT
);
CREATE INDEX node_tasks_pending ON node_tasks (node_id, state, id);
CREATE INDEX node_tasks_instance ON node_tasks (instance_id, id);
