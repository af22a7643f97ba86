-- The metering worker runs every minute on every replica and reads what
-- its lookback may still have to record: the allocation intervals still
-- open or ended since, and the timelines of the instances serving now or
-- whose timeline changed since. Without these indexes both reads scanned
-- tables that only grow (every allocation's interval, every instance's
-- timeline, kept for good).
CREATE INDEX allocation_intervals_ended ON allocation_intervals (ended_at);
CREATE INDEX app_instance_events_occurred ON app_instance_events (occurred_at);
