# METADATA
# title: Reservation
# description: >-
#   Large work is not starved by small work behind it (Slurm's backfill, Kueue's StrictFIFO). In
#   an admission pass the first workload in the order (so of the highest class waiting) that does
#   not fit holds a reservation on the capacity it needs: the devices of the pool where it could
#   start soonest, from when the grants there end. Later work of the same or a lower class may
#   take those devices only if it ends (its walltime, or its lease) before the reservation could
#   start, or takes only devices the reservation leaves spare then; a higher class is not held
#   back, nor work on another pool. Between passes the first waiting workload holds its
#   reservation against work placed with --queue (one that fits now: the devices it would be
#   placed on, from now). Whether a project's workloads reserve is policy data (priorities.yaml,
#   reservations: a default and per project; on when unsaid).
#
#   Input (reservation-input.schema.json): workload {id, name, project, priority, fits, pool,
#   devices, ends_at} (fits: whether selection places it now; pool and devices: where it would
#   be placed, or the pool it would reserve and the devices it needs there; ends_at: RFC 3339 or
#   null), and when a reservation is held, holder {id, name, priority, pool, devices, starts_at,
#   spare} (starts_at: when enough of the pool frees, RFC 3339, or null when no grant there says
#   when it ends; spare: devices free then beyond what it needs).
# schemas:
#   - input: schema["reservation-input.schema"]
package examlops.queue.reservation

import data.examlops.tables.budgets
import data.examlops.tables.priorities

# The annotations above.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

# METADATA
# title: judged
# description: >-
#   For a workload that does not fit while no reservation is held: whether it holds one (holds)
#   and why. For one that fits while a reservation is held: whether it may start now (may_start)
#   and why. Otherwise it may start when it fits, and holds nothing.
# entrypoint: true
judged := judge(input.workload, object.get(input, "holder", null))

judge(w, null) := {"holds": reserves(project_of(w)), "may_start": false, "reason": holds_words(w)} if {
	not w.fits
} else := {"holds": false, "may_start": true, "reason": null}

judge(w, h) := {"holds": false, "may_start": allowed, "reason": why} if {
	h != null
	w.fits
	[allowed, why] := backfill(w, h)
} else := {"holds": false, "may_start": false, "reason": null} if {
	h != null
}

# --- who reserves -------------------------------------------------------------------------------------

project_of(x) := p if {
	p := object.get(x, "project", null)
	p != null
} else := budgets.unassigned

class_of(x) := c if {
	c := object.get(x, "priority", null)
	c != null
} else := priorities.default

# Rank of a class; an unknown class (the order sets it apart) ranks last.
rank(x) := r if {
	r := priorities.classes[class_of(x)].rank
} else := 1000000

table := object.get(priorities, "reservations", {})

reserves(project) := v if {
	v := table.projects[project]
} else := object.get(table, "default", true)

holds_words(w) := sprintf(
	"holds a reservation of %s on pool %s %s: the first waiting of class %s or below; %s",
	[devices_words(w.devices), w.pool, from_words(object.get(w, "starts_at", null)), class_of(w), rule_words(w)],
) if {
	reserves(project_of(w))
} else := sprintf(
	"project %s reserves no capacity (priorities.yaml, reservations): work behind it may take what frees",
	[project_of(w)],
)

rule_words(w) := sprintf("work of class %s or below may take them only if it ends before", [class_of(w)])

from_words(null) := "from when enough of its grants end (none says when)"

from_words(at) := sprintf("from %s", [at]) if at != null

devices_words(1) := "1 device"

devices_words(n) := sprintf("%v devices", [n]) if n != 1

# --- who may take reserved capacity -------------------------------------------------------------------

backfill(w, h) := [true, sprintf("class %s ranks above the reservation's (%s)", [class_of(w), class_of(h)])] if {
	rank(w) < rank(h)
} else := [true, null] if {
	w.pool != h.pool
} else := [true, sprintf("ends at %s, before the reservation of %s on pool %s starts at %s (backfilled)", [
	w.ends_at, h.name, h.pool, h.starts_at,
])] if {
	ends_before(object.get(w, "ends_at", null), object.get(h, "starts_at", null))
} else := [true, sprintf("takes %s of the %s pool %s has spare beyond the reservation of %s", [
	devices_words(w.devices), devices_words(h.spare), h.pool, h.name,
])] if {
	w.devices <= h.spare
} else := [false, sprintf("held back: %s on pool %s are reserved for %s %s, and %s", [
	devices_words(h.devices), h.pool, h.name,
	from_words(object.get(h, "starts_at", null)), ends_words(object.get(w, "ends_at", null)),
])]

ends_before(ends, starts) if {
	ends != null
	starts != null
	time.parse_rfc3339_ns(ends) <= time.parse_rfc3339_ns(starts)
}

ends_words(null) := "it has no walltime or lease to end before"

ends_words(at) := sprintf("it ends at %s, after", [at]) if at != null
