-- The timeline rows a workload reported (runtime events, with a dedupe key)
-- per instance, oldest first: the runtime-event retention counts an
-- instance's rows and deletes its oldest beyond the cap through this index
-- alone, never touching the platform's own lifecycle rows.
CREATE INDEX app_instance_events_reported ON app_instance_events (instance_id, id) WHERE dedupe_key <> '';
