-- External workers (issue 22): an app version whose runtime backend the
-- node agent does not run (slurm, ray, bare_metal) and that declares an
-- external_worker_contract is driven by a worker the app team runs. Its
-- operations have executor 'worker': the platform's driver leaves them to
-- the worker, which acquires each under a lease (lease_id, the existing
-- lease_owner/lease_expires_at), heartbeats and completes or fails it
-- before deadline_at. attempt counts acquisitions; worker_state is the
-- opaque state the worker left on completion, handed to the instance's next
-- operation; progress is its last heartbeat message.
ALTER TABLE app_instance_operations ADD COLUMN executor TEXT NOT NULL DEFAULT 'platform' CHECK (executor IN ('platform', 'worker'));
ALTER TABLE app_instance_operations ADD COLUMN app_slug TEXT NOT NULL DEFAULT '';
ALTER TABLE app_instance_operations ADD COLUMN lease_id TEXT NOT NULL DEFAULT '';
ALTER TABLE app_instance_operations ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;
ALTER TABLE app_instance_operations ADD COLUMN deadline_at TIMESTAMPTZ;
ALTER TABLE app_instance_operations ADD COLUMN progress TEXT NOT NULL DEFAULT '';
ALTER TABLE app_instance_operations ADD COLUMN worker_state TEXT;
CREATE INDEX app_instance_operations_worker ON app_instance_operations (app_slug, id) WHERE executor = 'worker' AND state = 'in_progress';

-- Which service accounts may work which app's operations, granted by a
-- platform admin.
CREATE TABLE app_worker_grants (
    app_slug           TEXT NOT NULL,
    service_account_id TEXT NOT NULL,
    project_id         TEXT NOT NULL,
    granted_by         TEXT NOT NULL,
    created_at         TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (app_slug, service_account_id)
);
