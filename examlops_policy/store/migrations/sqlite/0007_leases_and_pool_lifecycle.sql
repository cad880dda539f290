-- Leases that end on time, fractions given a larger share, pools that leave the fleet.
-- A lease ends at lease_expires_at: the write that releases it stamps that time, and reads and the
-- FinOps sums end it there before any write (the epoch seconds, for aggregates in SQL).
ALTER TABLE decisions ADD COLUMN lease_expires_ts REAL;
UPDATE decisions SET lease_expires_ts = (julianday(lease_expires_at) - 2440587.5) * 86400.0 WHERE lease_expires_at IS NOT NULL;
-- 1: a fraction honored with a larger share than the smallest that covers it (that one had no room).
ALTER TABLE decisions ADD COLUMN larger_partition INTEGER;
-- A removed pool leaves the fleet; its row stays for the records and capacity log entries that name
-- it, and a pool registered again under its name takes the row back.
ALTER TABLE pools ADD COLUMN removed_at TEXT;
-- Removal asked of a drained pool while live grants held it: it goes when the last of them ends.
ALTER TABLE pools ADD COLUMN removing_since TEXT;
