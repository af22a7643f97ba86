-- Reads that scanned a table that only grows.
--
-- An org's event read (ListEvents with an org and no project) takes the
-- shared instances attached to any of the org's projects:
-- SELECT instance_id FROM app_instance_attachments WHERE org_id = ?.
-- The table's other indexes lead with instance_id and project_id.
CREATE INDEX app_instance_attachments_org ON app_instance_attachments (org_id, instance_id);

-- The admin audit list (ListAudit: GET /api/v1/audit-events, the
-- console's audit page) reads newest first, ORDER BY id DESC LIMIT n after
-- the cursor (id < ?). A tenant admin's read is narrowed to an org or a
-- project (audit_events_org, audit_events_project) and a correlation id
-- has its own index; a platform admin's filters by one of the columns
-- below without them. Each index ends in id, so an equality filter on its
-- first column is read backwards in list order and stops at the page size
-- instead of walking every newer row of the log:
--   actor_id = ?                                       what one principal did
--   action = ?                                         every node.drain, say
--   resource_id = ? (resource_type = ? rides along)    one resource's history
--   outcome = ?                                        every denied request
-- Not indexed: occurred_at. Its since/until window cannot give id order,
-- and SQLite, planning with bound parameters, would read every row of a
-- wide window and sort it on every page; ids are UUIDv7, so the primary
-- key read backwards already reaches a recent window first.
CREATE INDEX audit_events_actor ON audit_events (actor_id, id);
CREATE INDEX audit_events_action ON audit_events (action, id);
CREATE INDEX audit_events_resource ON audit_events (resource_id, id);
CREATE INDEX audit_events_outcome ON audit_events (outcome, id);
