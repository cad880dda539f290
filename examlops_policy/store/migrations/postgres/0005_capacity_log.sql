-- Commits that cost the grant: the capacity log, as migrations/sqlite/0005_capacity_log.sql, in
-- PostgreSQL types.
CREATE TABLE capacity_log (
    version   BIGINT NOT NULL,
    pool      TEXT COLLATE "C" NOT NULL REFERENCES pools(name),
    capacity  TEXT NOT NULL,
    PRIMARY KEY (pool, version)
);
INSERT INTO capacity_log (version, pool, capacity) SELECT version, name, capacity FROM pools WHERE capacity IS NOT NULL;
CREATE INDEX pools_version ON pools(version);
