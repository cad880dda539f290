-- Devices of a pool that its scheduler reports busy with work this layer did not place (refreshed
-- by `exa hardware discover slurm --apply`); free capacity subtracts them.
ALTER TABLE pools ADD COLUMN held_outside REAL NOT NULL DEFAULT 0 CHECK (held_outside >= 0);
