-- A preempted victim placed again: the same column and index as migrations/sqlite/0010_replacements.sql.
ALTER TABLE decisions ADD COLUMN replaces TEXT COLLATE "C" REFERENCES decisions(id);
CREATE UNIQUE INDEX decisions_replaces ON decisions(replaces) WHERE replaces IS NOT NULL;
