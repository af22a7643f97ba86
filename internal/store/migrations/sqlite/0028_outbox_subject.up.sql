-- A project's event reads also carry the apps.instance.* events of the
-- shared instances attached to it (docs/events.md): they are found by
-- subject (app-instances/<id>) in position order. The subject filter of
-- every event read uses it too.
CREATE INDEX outbox_events_subject ON outbox_events (subject, position);
