-- The GPUs of its allocation an instance was given (a JSON list of UUIDs),
-- chosen when it is launched and kept across its deployments. Before, every
-- instance took the first gpu_count GPUs of its allocation, so two
-- instances on one allocation ran on the same GPUs while the others stayed
-- idle. Rows written before this column read '[]' and are taken to hold
-- those first GPUs, which is where they run.
ALTER TABLE app_instances ADD COLUMN gpu_uuids TEXT NOT NULL DEFAULT '[]';
