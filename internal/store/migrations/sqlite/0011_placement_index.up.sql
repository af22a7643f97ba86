-- PostgreSQL's placement index became partial in 0011. SQLite keeps
-- (state, free_gpus, id): without statistics its planner prefers an index
-- whose first column the claim compares for equality, and given the
-- partial index it scanned every ready node through nodes_liveness and
-- sorted them (1,300 → 950 placements/s). This migration only keeps the
-- two dialects' version numbers in step.
SELECT 1;
