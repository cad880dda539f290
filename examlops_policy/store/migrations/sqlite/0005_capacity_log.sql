-- Commits that cost the grant: a decision records the state version it was decided at, and every
-- change of a pool's capacity is appended here (only for the pools whose capacity changed), so what
-- every pool could place at any state version reads back as its latest entry at or before it.
-- Records written before keep their capacity vector. Seeded with every pool's capacity as it is.
CREATE TABLE capacity_log (
    version   INTEGER NOT NULL,   -- the state version the capacity holds from
    pool      TEXT NOT NULL REFERENCES pools(name),
    capacity  TEXT NOT NULL,      -- what the pool can still place (JSON), see _core/state.py
    PRIMARY KEY (pool, version)
);
INSERT INTO capacity_log (version, pool, capacity) SELECT version, name, capacity FROM pools WHERE capacity IS NOT NULL;
CREATE INDEX pools_version ON pools(version);
