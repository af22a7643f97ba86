-- Tenant-shared instances (issue 22): an instance launched with
-- control_plane_scope tenant belongs to its org; it lives in the project
-- whose allocation it runs on, and the org's admins attach other projects
-- of the org to it. Members of an attached project read it (and open its
-- UI) through their own project; only org-level roles change it.
CREATE TABLE app_instance_attachments (
    instance_id TEXT NOT NULL REFERENCES app_instances(id),
    project_id  TEXT NOT NULL,
    org_id      TEXT NOT NULL,
    attached_by TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (instance_id, project_id)
);
CREATE INDEX app_instance_attachments_project ON app_instance_attachments (project_id, instance_id);
