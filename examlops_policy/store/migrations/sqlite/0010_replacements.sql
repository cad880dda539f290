-- A preempted victim placed again (issue 32): the decision that places it again at once, or queues
-- it again, names the victim's grant it replaces. The database itself refuses a second one for
-- one victim, so a preempted workload is never placed twice.
ALTER TABLE decisions ADD COLUMN replaces TEXT REFERENCES decisions(id);
CREATE UNIQUE INDEX decisions_replaces ON decisions(replaces) WHERE replaces IS NOT NULL;
