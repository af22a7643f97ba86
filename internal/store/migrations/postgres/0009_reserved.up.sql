-- Placeholder keeping this branch's numbering contiguous: version 0009 belongs to
-- another branch. The integrator deletes this file when that branch merges.
SELECT 1;
