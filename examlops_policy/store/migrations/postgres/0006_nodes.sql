-- Grants node by node: as migrations/sqlite/0006_nodes.sql, in PostgreSQL types.
ALTER TABLE holdings ADD COLUMN node TEXT COLLATE "C";
ALTER TABLE holdings ADD COLUMN shares INTEGER CHECK (shares IS NULL OR shares >= 1);
UPDATE holdings SET node = pool;
CREATE INDEX holdings_node ON holdings(node);

CREATE TABLE node_grants (
    decision_id  TEXT COLLATE "C" NOT NULL REFERENCES allocations(decision_id),
    pool         TEXT COLLATE "C" NOT NULL REFERENCES pools(name),
    node         TEXT COLLATE "C" NOT NULL,
    position     INTEGER NOT NULL CHECK (position >= 0),
    cpu_milli    BIGINT NOT NULL CHECK (cpu_milli >= 0),
    memory_mib   BIGINT NOT NULL CHECK (memory_mib >= 0),
    PRIMARY KEY (decision_id, node)
);
CREATE INDEX node_grants_pool ON node_grants(pool);

CREATE TABLE node_usage (
    pool         TEXT COLLATE "C" NOT NULL REFERENCES pools(name),
    node         TEXT COLLATE "C" NOT NULL,
    devices      INTEGER NOT NULL CHECK (devices >= 0),
    indices      TEXT NOT NULL,
    shares       INTEGER NOT NULL CHECK (shares >= 0),
    cpu_milli    BIGINT CHECK (cpu_milli IS NULL OR cpu_milli >= 0),
    memory_mib   BIGINT CHECK (memory_mib IS NULL OR memory_mib >= 0),
    scheduler    TEXT COLLATE "C" NOT NULL,
    updated_at   TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (pool, node)
);
