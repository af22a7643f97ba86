-- An app instance's own identity held project_viewer: it could read the
-- project's members, other instances, events and the ledger, and mint pull
-- credentials for every image. It now holds the platform's own role
-- instance_workload (its own instance and its own usage only).
UPDATE role_bindings SET role = 'instance_workload'
WHERE principal_type = 'service_account' AND role = 'project_viewer' AND scope_type = 'project'
  AND principal_id IN (SELECT service_account_id FROM app_instances WHERE service_account_id <> '');
