-- Start estimates (wait-aware placement): when the chosen pool was expected to start the workload
-- (RFC 3339 UTC; NULL: no estimate, or a decision from before estimates) and who said so (slurm,
-- kubernetes, table, now), from the decision's record; and when its job was handed to a
-- scheduler. With the job's actual start (reconcile) they give each estimate's error, in SQL,
-- without reading records. Decisions from before have none.
ALTER TABLE decisions ADD COLUMN estimated_start TEXT COLLATE "C";
ALTER TABLE decisions ADD COLUMN estimate_source TEXT;
ALTER TABLE decisions ADD COLUMN submitted_at TEXT COLLATE "C";
CREATE INDEX decisions_estimated ON decisions(estimate_source, created_at) WHERE estimated_start IS NOT NULL;
