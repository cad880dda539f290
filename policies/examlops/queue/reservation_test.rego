package examlops.queue.reservation_test

import data.examlops.queue.reservation
import data.examlops.tables.budgets
import data.examlops.tables.priorities

# --- fixtures -------------------------------------------------------------------------------------

# solo turns reservations off; the rest keep the default (on).
priorities_fixture := {
	"default": "mid",
	"classes": {
		"top": {"rank": 1, "may_preempt": true, "preemptible": false},
		"mid": {"rank": 2, "may_preempt": false, "preemptible": false},
		"low": {"rank": 3, "may_preempt": false, "preemptible": true},
	},
	"reservations": {"default": true, "projects": {"solo": false}},
}

budgets_fixture := {"unassigned": "default", "projects": {"default": {}, "ml-a": {}, "solo": {}}}

big(project, starts_at) := {
	"id": "big", "name": "big", "project": project, "priority": "mid", "fits": false,
	"pool": "nv", "devices": 4, "starts_at": starts_at,
}

holder(starts_at, spare) := {"id": "big", "name": "big", "priority": "mid", "pool": "nv", "devices": 4, "starts_at": starts_at, "spare": spare}

small(priority, pool, devices, ends_at) := {
	"id": "s", "name": "small", "project": "ml-a", "priority": priority, "fits": true,
	"pool": pool, "devices": devices, "ends_at": ends_at,
}

judged(w, h) := j if {
	j := reservation.judged with input as {"workload": w, "holder": h}
		with priorities as priorities_fixture
		with budgets as budgets_fixture
}

# --- who holds a reservation ------------------------------------------------------------------------

test_the_first_that_does_not_fit_holds_a_reservation if {
	j := judged(big("ml-a", "2026-12-01T12:00:00Z"), null)
	j.holds
	not j.may_start
	j.reason == "holds a reservation of 4 devices on pool nv from 2026-12-01T12:00:00Z: the first waiting of class mid or below; work of class mid or below may take them only if it ends before"
}

test_a_reservation_whose_start_no_grant_says_is_held_all_the_same if {
	j := judged(big(null, null), null)
	j.holds
	contains(j.reason, "from when enough of its grants end (none says when)")
}

test_a_project_that_reserves_nothing_holds_nothing if {
	j := judged(big("solo", null), null)
	not j.holds
	j.reason == "project solo reserves no capacity (priorities.yaml, reservations): work behind it may take what frees"
}

test_reservations_are_on_when_the_table_says_nothing if {
	j := reservation.judged with input as {"workload": big("ml-a", null)}
		with priorities as object.remove(priorities_fixture, ["reservations"])
		with budgets as budgets_fixture
	j.holds
}

test_what_fits_with_no_reservation_held_starts if {
	j := judged(small("mid", "nv", 1, null), null)
	j == {"holds": false, "may_start": true, "reason": null}
}

test_a_second_workload_that_does_not_fit_holds_nothing_while_one_holds if {
	j := judged(object.union(big("ml-a", null), {"id": "other"}), holder(null, 0))
	j == {"holds": false, "may_start": false, "reason": null}
}

# --- who may take reserved capacity -------------------------------------------------------------------

# Each case: the small workload (class, pool, devices, end), the reservation (start, spare), whether
# it may start, and its reason.
cases := [
	["mid", "nv", 1, "2026-12-01T11:00:00Z", "2026-12-01T12:00:00Z", 0, true, "ends at 2026-12-01T11:00:00Z, before the reservation of big on pool nv starts at 2026-12-01T12:00:00Z (backfilled)"],
	["mid", "nv", 1, "2026-12-01T12:00:00Z", "2026-12-01T12:00:00Z", 0, true, "ends at 2026-12-01T12:00:00Z, before the reservation of big on pool nv starts at 2026-12-01T12:00:00Z (backfilled)"],
	["mid", "nv", 1, "2026-12-01T13:00:00Z", "2026-12-01T12:00:00Z", 0, false, "held back: 4 devices on pool nv are reserved for big from 2026-12-01T12:00:00Z, and it ends at 2026-12-01T13:00:00Z, after"],
	["low", "nv", 1, null, "2026-12-01T12:00:00Z", 0, false, "held back: 4 devices on pool nv are reserved for big from 2026-12-01T12:00:00Z, and it has no walltime or lease to end before"],
	["mid", "nv", 1, "2026-12-01T11:00:00Z", null, 0, false, "held back: 4 devices on pool nv are reserved for big from when enough of its grants end (none says when), and it ends at 2026-12-01T11:00:00Z, after"],
	["mid", "nv", 1, null, "2026-12-01T12:00:00Z", 1, true, "takes 1 device of the 1 device pool nv has spare beyond the reservation of big"],
	["mid", "nv", 2, null, "2026-12-01T12:00:00Z", 1, false, "held back: 4 devices on pool nv are reserved for big from 2026-12-01T12:00:00Z, and it has no walltime or lease to end before"],
	["mid", "od", 1, null, null, 0, true, null],
	["top", "nv", 4, null, null, 0, true, "class top ranks above the reservation's (mid)"],
]

# The cases whose answer is not the one expected ([]: none).
failed := [i |
	some i, [class, pool, devices, ends, starts, spare, may, why] in cases
	judged(small(class, pool, devices, ends), holder(starts, spare)) != {"holds": false, "may_start": may, "reason": why}
]

test_backfill_cases if {
	count(cases) == 9
	failed == []
}

test_an_unknown_class_ranks_last if {
	j := judged(small("nope", "nv", 1, null), holder(null, 0))
	not j.may_start
}
