# METADATA
# title: Wait
# description: >-
#   When the workload must start: within its max_wait (whole seconds from the decision) and by its
#   deadline (an RFC 3339 time). The limits depend on the workload alone; each pool's estimated
#   start (from the scheduler that owns the pool, the reviewed provisioning table, or now: see
#   examlops_policy/estimates) is compared with them at the decision's time, so the check judges
#   pools, not shapes. A pool that starts later is not taken now (it may be, once it can start
#   sooner); a pool with no estimate is not taken when the workload has a limit (fail closed: its
#   start cannot be shown to be in time); past the deadline no pool can start it in time. A
#   workload without max_wait or deadline is judged by nothing here.
# custom:
#   order: 87
#   stage: pool
#   reads:
#     shape: []
#     workload: [max_wait, deadline]
#   codes:
#     wait_exceeded: {kind: not_now, meaning: "the pool's estimated start is later than the workload's max_wait allows"}
#     deadline_missed: {kind: not_now, meaning: "the pool's estimated start is after the workload's deadline"}
#     deadline_passed: {kind: never, meaning: "the workload's deadline has passed: no pool can start it in time"}
#     estimate_unknown:
#       kind: not_now
#       meaning: "the pool has no start estimate, and the workload has a max_wait or a deadline"
#     wait_invalid:
#       kind: never
#       meaning: >-
#         max_wait is not whole seconds of at least 0, the deadline not an RFC 3339 time, or the
#         decision's time is missing
package examlops.hardware.checks.wait

import data.examlops.hardware.reason

# The annotations above, for the composer (its pool-stage set names "wait": the caller compares each
# pool's start estimate with `limits` at the decision's time, as the reference decision does).
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

# input: {workload, now: the decision's time in whole epoch seconds, pool: {estimate: {at, source, observed_at}}}
# (at and observed_at in whole epoch seconds; at null when the pool has no estimate).
deny contains r if {
	some r in exceeded(limits(input.workload), object.get(input.pool, "estimate", null), object.get(input, "now", null))
}

# Estimates are whole seconds (Slurm prints seconds): a start within a second of a limit is within it.
slack := 1

# --- the limits: the workload's alone, compared by the caller ---------------------------------------

# {"start_within_s": max_wait or null, "start_by_s": the deadline in epoch seconds or null,
#  "invalid": the reason every pool gets when the limits are malformed (else null),
#  "reasons": what a pool gets when its estimate is past a limit, or it has none}.
limits(w) := {
	"start_within_s": null,
	"start_by_s": null,
	"invalid": bad,
	"reasons": {},
} if {
	some bad in invalid(w)
} else := {
	"start_within_s": object.get(w, "max_wait", null),
	"start_by_s": deadline_s(object.get(w, "deadline", null)),
	"invalid": null,
	"reasons": reasons(object.get(w, "max_wait", null), object.get(w, "deadline", null)),
}

# The first malformed limit, as a one-element list (empty when both are well formed).
invalid(w) := [r |
	some r in [
		max_wait_error(object.get(w, "max_wait", null)),
		deadline_error(object.get(w, "deadline", null)),
	]
	r != null
]

max_wait_error(null) := null

max_wait_error(s) := null if {
	is_number(s)
	s >= 0
	s == floor(s)
} else := reason.make(
	"wait_invalid",
	"never",
	sprintf("max_wait must be a whole number of seconds of at least 0 (got %v)", [s]),
	{"field": "max_wait", "value": s},
) if {
	s != null
}

deadline_error(null) := null

deadline_error(d) := null if {
	is_string(d)
	is_number(time.parse_rfc3339_ns(d))
} else := reason.make(
	"wait_invalid",
	"never",
	sprintf("deadline must be an RFC 3339 time with its offset, such as 2026-12-01T14:00:00Z (got %v)", [d]),
	{"field": "deadline", "value": d},
) if {
	d != null
}

deadline_s(null) := null

deadline_s(d) := time.parse_rfc3339_ns(d) / 1000000000 if d != null

reasons(max_wait, deadline) := {
	"max_wait": over_max_wait(max_wait),
	"deadline": deadline_missed(deadline),
	"deadline_passed": deadline_passed(deadline),
	"unknown": no_estimate(max_wait, deadline),
}

over_max_wait(null) := null

over_max_wait(s) := reason.make(
	"wait_exceeded",
	"not_now",
	sprintf("the pool is not expected to start the workload within max_wait %s", [duration_text(s)]),
	{"limit": "max_wait", "max_wait_s": s},
) if {
	s != null
}

deadline_missed(null) := null

deadline_missed(d) := reason.make(
	"deadline_missed",
	"not_now",
	sprintf("the pool is not expected to start the workload by its deadline %s", [d]),
	{"limit": "deadline", "deadline": d},
) if {
	d != null
}

deadline_passed(null) := null

deadline_passed(d) := reason.make(
	"deadline_passed",
	"never",
	sprintf("the deadline %s has passed: no pool can start the workload by then", [d]),
	{"limit": "deadline", "deadline": d},
) if {
	d != null
}

no_estimate(null, null) := null

no_estimate(max_wait, deadline) := reason.make(
	"estimate_unknown",
	"not_now",
	sprintf(
		"the pool has no start estimate, and the workload must start %s: a pool whose start is unknown is not taken",
		[concat(" and ", [t | some t in [within_text(max_wait), by_text(deadline)]; t != ""])],
	),
	{"max_wait_s": max_wait, "deadline": deadline},
) if {
	[max_wait, deadline] != [null, null]
}

within_text(null) := ""

within_text(s) := sprintf("within max_wait %s", [duration_text(s)]) if s != null

by_text(null) := ""

by_text(d) := sprintf("by its deadline %s", [d]) if d != null

# --- the comparison the caller makes, here for the reference decision and the tests ----------------

# The reasons a pool with estimate `est` ({at, ...}, or null) gets at the decision's time `now`
# (epoch seconds). An estimate in the past means now.
exceeded(lim, est, now) := [lim.invalid] if {
	lim.invalid != null
} else := [] if {
	lim.start_within_s == null
	lim.start_by_s == null
} else := [missing_time] if {
	not is_number(now)
} else := [lim.reasons.deadline_passed] if {
	lim.start_by_s != null
	now > lim.start_by_s + slack
} else := [lim.reasons.unknown] if {
	not known(est)
} else := array.concat(late_for_wait(lim, est, now), late_for_deadline(lim, est, now))

late_for_wait(lim, est, now) := [lim.reasons.max_wait] if {
	lim.start_within_s != null
	start(est, now) > (now + lim.start_within_s) + slack
} else := []

late_for_deadline(lim, est, now) := [lim.reasons.deadline] if {
	lim.start_by_s != null
	start(est, now) > lim.start_by_s + slack
} else := []

known(est) if {
	is_object(est)
	is_number(est.at)
}

start(est, now) := max([est.at, now])

missing_time := reason.make(
	"wait_invalid",
	"never",
	"the decision's time was not given: max_wait and the deadline cannot be judged",
	{"field": "now", "value": null},
)

# Whole seconds for people, the two largest units: "45 s", "1 m 30 s", "2 h", "2 h 05 m", "1 d 01 h"
# (what is below the second unit is dropped).
duration_text(s) := sprintf("%s s", [format_int(s, 10)]) if {
	s < 60
} else := two_units(s, 60, "m", "s") if {
	s < 3600
} else := two_units(s, 3600, "h", "m") if {
	s < 86400
} else := two_units(s, 86400, "d", "h")

two_units(s, size, big, small) := text if {
	whole := floor(s / size)
	part := floor((s - (whole * size)) / (size / next_size[size]))
	text := unit_text(whole, big, part, small)
}

next_size := {60: 60, 3600: 60, 86400: 24}

unit_text(whole, big, 0, _) := sprintf("%s %s", [format_int(whole, 10), big])

unit_text(whole, big, part, small) := text if {
	part != 0
	text := sprintf("%s %s %s %s", [format_int(whole, 10), big, two_digits(part), small])
}

two_digits(n) := substring(format_int(100 + n, 10), 1, 2)
