# METADATA
# title: Admission order
# description: >-
#   The order in which the queue is offered capacity: priority classes first (rank 1 first,
#   data.examlops.tables.priorities), then fair share between projects, then age (older first),
#   then id. A project's fair share is its weight (budgets.yaml, fair_share_weight) over the
#   weights of all projects; its use is its device-hours, each weighed by 0.5^(age / half-life)
#   and counted only within the window (fair_share.yaml), over the use of all projects. The
#   project furthest below its fair share (use / share lowest) goes first: Slurm's fair-share
#   factor and Kueue's Admission Fair Sharing order alike. Every position carries its reason in
#   words; a queued workload this policy cannot judge (unknown project or class, a malformed
#   field) is set apart with its reasons, never ordered.
#
#   Input (queue-order-input.schema.json): now (RFC 3339), queue [{id, project, priority,
#   queued_at, accelerator, devices}], usage {project: [[age_hours, device_hours], ...]}.
# schemas:
#   - input: schema["queue-order-input.schema"]
# custom:
#   codes:
#     priority_unknown: {kind: never, meaning: "the workload's priority class is not in the priorities table"}
package examlops.queue.order

import data.examlops.hardware.reason
import data.examlops.hardware.workload
import data.examlops.tables.budgets
import data.examlops.tables.fair_share
import data.examlops.tables.priorities

# The annotations above.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

# METADATA
# title: ranked
# description: >-
#   The queue in the order it is offered capacity, each position with its reason; the workloads
#   set apart (invalid) with theirs; each project's weight, decayed use and fair-share ratio; and
#   the half-life and window the use was weighed with. Errors in now or usage order nothing.
# entrypoint: true
ranked := rank(input.now, input.queue, input.usage)

rank(now, queue, usage) := {
	"errors": errs,
	"order": positions(now_ns(now), [q | some [q, e] in checked; count(e) == 0], table),
	"invalid": [{"id": field(q, "id"), "reasons": e} | some [q, e] in checked; count(e) > 0],
	"projects": table,
	"fair_share": weighing,
} if {
	errs := input_errors(now, queue, usage)
	count(errs) == 0
	checked := [[q, item_errors(q)] | some q in queue]
	table := project_table(usage)
} else := {
	"errors": input_errors(now, queue, usage),
	"order": [],
	"invalid": [],
	"projects": {},
	"fair_share": weighing,
}

# How use was weighed: what the caller needs to send the usage rows that count.
weighing := {
	"half_life_hours": fair_share.half_life_hours,
	"window_hours": fair_share.window_hours,
	"bucket_hours": fair_share.bucket_hours,
	# What an hour of one device weighs (devices, price, throughput): the caller weighs the use it sends.
	"usage_weight": object.get(fair_share, "usage_weight", "devices"),
}

# --- validation ---------------------------------------------------------------------------------------

now_ns(now) := time.parse_rfc3339_ns(now)

input_errors(now, queue, usage) := array.flatten([
	[invalid_unless("now", now, false, "an RFC 3339 time") | not now_ns(now)],
	[invalid_unless(sprintf("usage of %s", [p]), rows, false, "a list of [age_hours, device_hours], both 0 or more") |
		some p, rows in usage
		not usage_rows(rows)
	],
	repeated_ids([q.id | some q in queue]),
])

# Ids named more than once (counted only when there are some: the count is quadratic).
repeated_ids(ids) := [] if {
	count({id | some id in ids}) == count(ids)
} else := [repeated(id) | some id in {id | some id in ids}; count([1 | some x in ids; x == id]) > 1]

usage_rows(rows) if {
	is_array(rows)
	every row in rows {
		is_array(row)
		count(row) == 2
		every x in row {
			is_number(x)
			x >= 0
		}
	}
}

field(q, name) := object.get(q, name, null)

# A field that is not what it must be (the workload's field_invalid).
invalid_unless(_, _, true, _) := null

invalid_unless(field, value, false, expected) := reason.make(
	"field_invalid",
	"never",
	sprintf("%s is %s, not %s", [field, json.marshal(value), expected]),
	{"field": field, "value": value},
)

repeated(id) := reason.make(
	"field_invalid",
	"never",
	sprintf("queue id '%v' appears more than once", [id]),
	{"field": "id", "value": id},
)

item_errors(q) := [e |
	some e in [
		invalid_unless("id", field(q, "id"), is_id(field(q, "id")), "a name"),
		workload.project_error(field(q, "project")),
		priority_error(field(q, "priority")),
		invalid_unless("queued_at", field(q, "queued_at"), is_time(field(q, "queued_at")), "an RFC 3339 time"),
		workload.unknown("accelerator", field(q, "accelerator"), workload.known.accelerator),
		invalid_unless("devices", field(q, "devices"), is_devices(field(q, "devices")), "a number above 0"),
	]
	e != null
]

is_id(v) if {
	is_string(v)
	v != ""
} else := false

is_time(v) if {
	is_string(v)
	_ := time.parse_rfc3339_ns(v)
} else := false

is_devices(v) if {
	is_number(v)
	v > 0
} else := false

priority_error(null) := null

priority_error(c) := null if {
	is_string(c)
	priorities.classes[c]
} else := reason.make(
	"priority_unknown",
	"never",
	sprintf(
		"priority class '%v' is not in the priorities table (policies/examlops/tables/priorities.yaml: %s)",
		[c, concat(", ", sort(object.keys(priorities.classes)))],
	),
	{"field": "priority", "value": c},
) if {
	c != null
}

# --- the order ----------------------------------------------------------------------------------------

project_of(q) := p if {
	p := object.get(q, "project", null)
	p != null
} else := budgets.unassigned

class_of(q) := c if {
	c := object.get(q, "priority", null)
	c != null
} else := priorities.default

positions(now, queue, table) := [entry(i + 1, row, now) |
	rows := sort([[
		priorities.classes[class_of(q)].rank,
		table[project_of(q)].fair_share,
		time.parse_rfc3339_ns(q.queued_at),
		q.id,
		q,
	] |
		some q in queue
	])
	some i, row in rows
]

entry(position, [rank, share, queued_ns, id, q], now) := {
	"position": position,
	"id": id,
	"project": project_of(q),
	"priority": class_of(q),
	"rank": rank,
	"fair_share": share,
	"waited_s": waited_s(now, queued_ns),
	"accelerator": q.accelerator,
	"devices": q.devices,
	"reason": sprintf("priority %s; project %s at %s of its fair share; %s", [
		class_of(q), project_of(q), two_places(share), waited_words(waited_s(now, queued_ns)),
	]),
}

# A clock a little behind the queue's (another host's) counts as no wait.
waited_s(now, queued_ns) := max([0, floor((now - queued_ns) / 1000000000)])

# --- fair share -----------------------------------------------------------------------------------

weight(p) := object.get(budgets.projects, [p, "fair_share_weight"], 1)

total_weight := sum([weight(p) | some p, _ in budgets.projects])

# A project's fair share: its weight over all projects' weights.
share(p) := weight(p) / total_weight

# Device-hours weighed by their age; those older than the window do not count. Each distinct age is
# weighed once: arithmetic is dear in Rego, and the projects' rows share their ages (one row per
# project and bucket_hours, aged at the middle of its bucket).
used_by_project(usage) := weigh(usage, {age: decay(age) |
	some rows in usage
	some [age, _] in rows
	age < fair_share.window_hours
})

weigh(usage, factors) := {p: sum([weighed |
	some [age, hours] in rows
	age < fair_share.window_hours
	weighed := hours * factors[age]
]) |
	some p, rows in usage
}

# Every project of the budgets table: its weight, its decayed use, and that use over all projects'
# use over its fair share (1: exactly its share; below 1, less). The use of a project no longer in
# the table still counts in the whole: it held devices.
project_table(usage) := table_of(used_by_project(usage))

table_of(used) := {p: {"weight": weight(p), "used_device_hours": mine, "fair_share": ratio(mine, total, p)} |
	total := sum([u | some u in used])
	some p, _ in budgets.projects
	mine := object.get(used, p, 0)
}

ratio(_, 0, _) := 0

ratio(mine, total, p) := (mine / total) / share(p) if total != 0

# 0.5^(age / half-life), with the exponent in 1024ths of a half-life (a relative error below 3.4e-4,
# far under what daily buckets make): whole half-lives halve, and each set bit of the remainder
# multiplies by its root of 1/2. Only multiplications of short decimals: Rego has no power
# function, and its division makes long decimals that every later operation pays for.
decay(age) := halvings(bits.rsh(q, 10)) * product([r |
	some i, r in roots
	bits.and(q, bits.lsh(1, 9 - i)) != 0
]) if {
	q := round((age * 1024) / fair_share.half_life_hours)
}

# 2^(-1/2), 2^(-1/4), ... 2^(-1/1024): each the square root of the one before (a test holds them).
roots := [
	0.7071067811865476, 0.8408964152537145, 0.9170040432046712, 0.9576032806985737, 0.9785720620877001,
	0.9892280131939755, 0.9945994234836332, 0.9972960560854701, 0.9986471128909702, 0.9993233275026507,
]

halvings(0) := 1

halvings(k) := product([0.5 | some _ in numbers.range(1, k)]) if k > 0

# --- words ----------------------------------------------------------------------------------------

two_places(x) := sprintf("%s.%s", [format_int(c / 100, 10), substring(format_int(100 + (c % 100), 10), 1, 2)]) if {
	c := round(x * 100)
}

waited_words(s) := "just queued" if {
	s < 1
} else := sprintf("queued %s s ago", [format_int(s, 10)]) if {
	s < 60
} else := sprintf("queued %s min ago", [format_int(s / 60, 10)]) if {
	s < 3600
} else := sprintf("queued %s ago", [pair(floor(s / 3600), "h", floor((s % 3600) / 60), "min")]) if {
	s < 86400
} else := sprintf("queued %s ago", [pair(floor(s / 86400), "d", floor((s % 86400) / 3600), "h")])

pair(big, big_unit, 0, _) := sprintf("%s %s", [format_int(big, 10), big_unit])

pair(big, big_unit, small, small_unit) := concat(" ", [
	format_int(big, 10), big_unit,
	format_int(small, 10), small_unit,
]) if {
	small > 0
}
