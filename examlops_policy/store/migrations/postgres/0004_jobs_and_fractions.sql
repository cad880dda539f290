-- What a decision's job is and where it runs, and the share of a device it asked for: the
-- scheduler (slurm, kubernetes), the scheduler's own id of the job (a Kubernetes uid), the last
-- state read back (missing: deleted outside this layer), and the fraction (for the FinOps
-- report's honesty figures).
ALTER TABLE decisions ADD COLUMN fraction DOUBLE PRECISION;
ALTER TABLE decisions ADD COLUMN scheduler TEXT;
ALTER TABLE decisions ADD COLUMN job_uid TEXT;
ALTER TABLE decisions ADD COLUMN job_state TEXT;
UPDATE decisions SET scheduler = 'slurm' WHERE job_id IS NOT NULL AND scheduler IS NULL;
