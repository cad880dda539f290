-- Leases that end on time, fractions given a larger share, pools that leave the fleet: as
-- migrations/sqlite/0007_leases_and_pool_lifecycle.sql, in PostgreSQL types.
ALTER TABLE decisions ADD COLUMN lease_expires_ts DOUBLE PRECISION;
UPDATE decisions SET lease_expires_ts = EXTRACT(EPOCH FROM lease_expires_at::timestamptz) WHERE lease_expires_at IS NOT NULL;
ALTER TABLE decisions ADD COLUMN larger_partition INTEGER;
ALTER TABLE pools ADD COLUMN removed_at TEXT;
ALTER TABLE pools ADD COLUMN removing_since TEXT;
