-- placeholder: filled by the issue that owns this migration
SELECT 1;
