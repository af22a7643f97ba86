-- An event about one attached project (apps.instance.project_attached and
-- project_detached of a platform-managed instance, which serves many
-- tenants) names that project in audience.
-- A reader that sees the instance's events through an attachment sees such
-- an event only when it is the audience (or, on an org's read, the
-- audience is one of the org's projects): one tenant never learns which
-- other tenants a platform-managed instance serves. Events with no
-- audience are every reader's, as before; the instance's own scope reads
-- all of them.
ALTER TABLE outbox_events ADD COLUMN audience TEXT NOT NULL DEFAULT '';
UPDATE outbox_events SET audience = COALESCE(json_extract(data, '$.attached_project_id'), '')
    WHERE type IN ('apps.instance.project_attached', 'apps.instance.project_detached')
    AND json_extract(data, '$.operating_mode') = 'platform_managed';
