package examlops.queue.preemption_test

import data.examlops.queue.preemption
import data.examlops.tables.budgets
import data.examlops.tables.priorities
import data.examlops.tables.quotas

# --- fixtures -------------------------------------------------------------------------------------

# top may preempt; mid and low may be preempted; pinned may not.
priorities_fixture := {"default": "mid", "classes": {
	"top": {"rank": 1, "may_preempt": true, "preemptible": false},
	"mid": {"rank": 2, "may_preempt": false, "preemptible": true},
	"low": {"rank": 3, "may_preempt": false, "preemptible": true},
	"pinned": {"rank": 4, "may_preempt": false, "preemptible": false},
}}

# ml-a and ml-b share a cohort; solo has no quota.
quotas_fixture := {"projects": {
	"ml-a": {"cohort": "research", "accelerators": {"nvidia": {"devices": 8}}},
	"ml-b": {"cohort": "research", "accelerators": {"nvidia": {"devices": 4}}},
}}

budgets_fixture := {"unassigned": "default", "projects": {"default": {}, "ml-a": {}, "ml-b": {}, "solo": {}}}

work(project, priority) := {"id": "w", "project": project, "priority": priority}

spot(name, free, devices) := {"name": name, "spot": true, "free": free, "devices": devices}

on_demand(name, free, devices) := {"name": name, "free": free, "devices": devices}

marked(name, free, devices) := {"name": name, "preemptible": true, "free": free, "devices": devices}

grant(id, project, priority, pool, devices, minute) := {
	"id": id,
	"project": project,
	"priority": priority,
	"pool": pool,
	"accelerator": "nvidia",
	"devices": devices,
	"placed_at": sprintf("2026-12-01T10:%02d:00Z", [minute]),
}

held(devices) := {"devices": devices}

victims(w, pools, grants, use) := v if {
	v := preemption.victims with input as {"workload": w, "pools": pools, "grants": grants, "quota_use": use}
		with priorities as priorities_fixture
		with quotas as quotas_fixture
		with budgets as budgets_fixture
}

spared_codes(v) := {s.grant: [r.code | some r in s.reasons] | some s in v.spared}

candidate_ids(v) := [c.grant | some c in v.candidates]

# --- one grant at a time ------------------------------------------------------------------------------

# Each case: the workload, one pool, one grant, the use; the codes the grant is spared for ([]: a
# candidate).
grant_cases := {
	"a lower class of its own project on spot capacity": {
		"w": work("ml-a", "top"), "pool": spot("s", 0, 1), "g": grant("g", "ml-a", "low", "s", 1, 0),
		"use": held({}), "codes": [],
	},
	"a pool marked preemptible": {
		"w": work("ml-a", "top"), "pool": marked("m", 0, 1), "g": grant("g", "ml-a", "low", "m", 1, 0),
		"use": held({}), "codes": [],
	},
	"an on-demand pool": {
		"w": work("ml-a", "top"), "pool": on_demand("d", 0, 1), "g": grant("g", "ml-a", "low", "d", 1, 0),
		"use": held({}), "codes": ["pool_not_preemptible"],
	},
	"a pool the workload could not use": {
		"w": work("ml-a", "top"), "pool": spot("s", 0, 1), "g": grant("g", "ml-a", "low", "elsewhere", 1, 0),
		"use": held({}), "codes": ["pool_not_eligible"],
	},
	"another project's, on a pool the workload could not use": {
		"w": work("ml-a", "top"), "pool": spot("s", 0, 1), "g": grant("g", "ml-b", "low", "elsewhere", 1, 0),
		"use": held({"ml-b": {"nvidia": 6}}), "codes": ["pool_not_eligible"],
	},
	"the same class": {
		"w": work("ml-a", "top"), "pool": spot("s", 0, 1), "g": grant("g", "ml-a", "top", "s", 1, 0),
		"use": held({}), "codes": ["victim_priority_not_lower", "victim_not_preemptible"],
	},
	"a class that may not be preempted": {
		"w": work("ml-a", "top"), "pool": spot("s", 0, 1), "g": grant("g", "ml-a", "pinned", "s", 1, 0),
		"use": held({}), "codes": ["victim_not_preemptible"],
	},
	"no class named is the default class": {
		"w": work("ml-a", "top"), "pool": spot("s", 0, 1), "g": grant("g", "ml-a", null, "s", 1, 0),
		"use": held({}), "codes": [],
	},
	# ml-b holds 6 of its 4; ml-a holds 2 + 1 of its 8.
	"another project's, borrowing, reclaimed within the workload's quota": {
		"w": work("ml-a", "top"), "pool": spot("s", 0, 1), "g": grant("g", "ml-b", "low", "s", 1, 0),
		"use": held({"ml-a": {"nvidia": 2}, "ml-b": {"nvidia": 6}}), "codes": [],
	},
	"another project's, within its quota": {
		"w": work("ml-a", "top"), "pool": spot("s", 0, 1), "g": grant("g", "ml-b", "low", "s", 1, 0),
		"use": held({"ml-a": {"nvidia": 2}, "ml-b": {"nvidia": 4}}), "codes": ["victim_within_quota"],
	},
	"another project's, beyond the workload's quota": {
		"w": work("ml-a", "top"), "pool": spot("s", 0, 2), "g": grant("g", "ml-b", "low", "s", 1, 0),
		"use": held({"ml-a": {"nvidia": 7}, "ml-b": {"nvidia": 6}}), "codes": ["preemptor_over_quota"],
	},
	"another project's, the workload's project without a quota": {
		"w": work("solo", "top"), "pool": spot("s", 0, 1), "g": grant("g", "ml-b", "low", "s", 1, 0),
		"use": held({"ml-b": {"nvidia": 6}}), "codes": ["preemptor_over_quota"],
	},
	"another project's, that project without a quota": {
		"w": work("ml-a", "top"), "pool": spot("s", 0, 1), "g": grant("g", "solo", "low", "s", 1, 0),
		"use": held({"solo": {"nvidia": 60}}), "codes": ["victim_within_quota"],
	},
	"a grant of an unknown class is never taken": {
		"w": work("ml-a", "top"), "pool": spot("s", 0, 1), "g": grant("g", "ml-a", "gone", "s", 1, 0),
		"use": held({}), "codes": ["priority_unknown"],
	},
	"a grant of an unknown project is never taken": {
		"w": work("ml-a", "top"), "pool": spot("s", 0, 1), "g": grant("g", "gone", "low", "s", 1, 0),
		"use": held({}), "codes": ["project_unknown"],
	},
	"no project named is the unassigned project's": {
		"w": work(null, "top"), "pool": spot("s", 0, 1), "g": grant("g", "default", "low", "s", 1, 0),
		"use": held({}), "codes": [],
	},
}

codes_of_g(spared) := spared.g

codes_of_g(spared) := [] if not spared.g

test_input_grant[name] if {
	some name, tc in grant_cases
	v := victims(tc.w, [tc.pool], [tc.g], tc.use)
	v.may_preempt == true
	codes_of_g(spared_codes(v)) == tc.codes
	count(v.candidates) == count([1 | tc.codes == []])
}

# --- the workload ----------------------------------------------------------------------------------

test_input_a_class_that_may_not_preempt_takes_nothing if {
	v := victims(work("ml-a", "mid"), [spot("s", 0, 1)], [grant("g", "ml-a", "low", "s", 1, 0)], held({}))
	v.may_preempt == false
	v.reason.code == "preemption_not_allowed"
	v.reason.message == "priority class mid may not preempt (policies/examlops/tables/priorities.yaml)"
	[v.candidates, v.spared, v.plan, v.errors] == [[], [], null, []]
}

test_input_an_invalid_workload_takes_nothing if {
	v := victims(work("nope", "urgent"), [spot("s", 0, 1)], [grant("g", "ml-a", "low", "s", 1, 0)], held({}))
	v.may_preempt == false
	[e.code | some e in v.errors] == ["project_unknown", "priority_unknown"]
	[v.candidates, v.spared, v.plan] == [[], [], null]
}

test_input_no_use_given_is_no_use if {
	v := preemption.victims with input as {
		"workload": work("ml-a", "top"),
		"pools": [spot("s", 0, 1)],
		"grants": [grant("g", "ml-b", "low", "s", 1, 0)],
	}
		with priorities as priorities_fixture
		with quotas as quotas_fixture
		with budgets as budgets_fixture
	spared_codes(v) == {"g": ["victim_within_quota"]}
}

# --- the order of preference --------------------------------------------------------------------------

test_input_borrowing_projects_first_then_lowest_class_then_newest_then_id if {
	v := victims(
		work("ml-a", "top"),
		[spot("s", 0, 2)],
		[
			grant("own-mid-old", "ml-a", "mid", "s", 1, 1),
			grant("own-low-old", "ml-a", "low", "s", 1, 1),
			grant("own-low-new", "ml-a", "low", "s", 1, 9),
			grant("b-mid", "ml-b", "mid", "s", 1, 0),
			grant("own-low-new-2", "ml-a", "low", "s", 1, 9),
		],
		held({"ml-a": {"nvidia": 4}, "ml-b": {"nvidia": 9}}),
	)
	candidate_ids(v) == ["b-mid", "own-low-new", "own-low-new-2", "own-low-old", "own-mid-old"]
	[c.borrowing | some c in v.candidates] == [true, false, false, false, false]
	v.plan.victims == ["b-mid", "own-low-new"]
}

test_input_spared_grants_by_id if {
	v := victims(
		work("ml-a", "top"),
		[spot("s", 0, 1)],
		[grant("z", "ml-a", "pinned", "s", 1, 0), grant("a", "ml-a", "top", "s", 1, 0)],
		held({}),
	)
	[s.grant | some s in v.spared] == ["a", "z"]
}

# --- the plan -----------------------------------------------------------------------------------------

plan_cases := {
	"the fewest grants that free enough": {
		"pools": [spot("s", 1, 3)],
		"grants": [grant("a", "ml-a", "low", "s", 1, 5), grant("b", "ml-a", "low", "s", 2, 4), grant("c", "ml-a", "low", "s", 4, 3)],
		"use": held({}),
		"want": {"pool": "s", "victims": ["a", "b"], "frees": 3},
	},
	"enough free already": {
		"pools": [spot("s", 2, 2)],
		"grants": [grant("a", "ml-a", "low", "s", 1, 5)],
		"use": held({}),
		"want": {"pool": "s", "victims": [], "frees": 0},
	},
	"not enough to take": {
		"pools": [spot("s", 0, 4)],
		"grants": [grant("a", "ml-a", "low", "s", 1, 5), grant("b", "ml-a", "pinned", "s", 8, 4)],
		"use": held({}),
		"want": null,
	},
	"the pool needing the fewest grants": {
		"pools": [spot("many", 0, 2), spot("one", 0, 2)],
		"grants": [grant("m1", "ml-a", "low", "many", 1, 5), grant("m2", "ml-a", "low", "many", 1, 5), grant("o1", "ml-a", "low", "one", 3, 1)],
		"use": held({}),
		"want": {"pool": "one", "victims": ["o1"], "frees": 3},
	},
	"then the pool freeing the fewest devices": {
		"pools": [spot("big", 0, 2), spot("snug", 0, 2)],
		"grants": [grant("b1", "ml-a", "low", "big", 4, 5), grant("s1", "ml-a", "low", "snug", 2, 5)],
		"use": held({}),
		"want": {"pool": "snug", "victims": ["s1"], "frees": 2},
	},
	"then by name": {
		"pools": [spot("y", 0, 1), spot("x", 0, 1)],
		"grants": [grant("y1", "ml-a", "low", "y", 1, 5), grant("x1", "ml-a", "low", "x", 1, 5)],
		"use": held({}),
		"want": {"pool": "x", "victims": ["x1"], "frees": 1},
	},
	# ml-b holds 6 of its 4: 2 may be reclaimed, not 3.
	"another project's grants only while it borrows": {
		"pools": [spot("s", 0, 3)],
		"grants": [grant("b1", "ml-b", "low", "s", 1, 3), grant("b2", "ml-b", "low", "s", 1, 2), grant("b3", "ml-b", "low", "s", 1, 1)],
		"use": held({"ml-a": {"nvidia": 1}, "ml-b": {"nvidia": 6}}),
		"want": null,
	},
	"another project's borrowed grants, as many as it borrows": {
		"pools": [spot("s", 0, 2)],
		"grants": [grant("b1", "ml-b", "low", "s", 1, 3), grant("b2", "ml-b", "low", "s", 1, 2), grant("b3", "ml-b", "low", "s", 1, 1)],
		"use": held({"ml-a": {"nvidia": 1}, "ml-b": {"nvidia": 6}}),
		"want": {"pool": "s", "victims": ["b1", "b2"], "frees": 2},
	},
	"its own grants after another project's borrowed ones": {
		"pools": [spot("s", 0, 2)],
		"grants": [grant("b1", "ml-b", "low", "s", 1, 3), grant("b2", "ml-b", "low", "s", 1, 2), grant("a1", "ml-a", "low", "s", 1, 1)],
		"use": held({"ml-a": {"nvidia": 1}, "ml-b": {"nvidia": 5}}),
		"want": {"pool": "s", "victims": ["b1", "a1"], "frees": 2},
	},
}

test_input_plan[name] if {
	some name, tc in plan_cases
	v := victims(work("ml-a", "top"), tc.pools, tc.grants, tc.use)
	plan_of(v.plan) == tc.want
}

plan_of(null) := null

plan_of(p) := object.remove(p, ["why"]) if p != null

# --- the words ----------------------------------------------------------------------------------------

test_input_candidates_say_why if {
	v := victims(
		work("ml-a", "top"),
		[spot("s", 0, 2)],
		[grant("b", "ml-b", "low", "s", 1, 3), grant("a", "ml-a", "mid", "s", 1, 2)],
		held({"ml-a": {"nvidia": 1}, "ml-b": {"nvidia": 6}}),
	)
	[c.why | some c in v.candidates] == [
		"priority low below top, and low may be preempted; pool s may be preempted; project ml-b holds 6 nvidia device(s), above its nominal quota of 4: project ml-a reclaims within its own",
		"priority mid below top, and mid may be preempted; pool s may be preempted; project ml-a's own grant",
	]
	v.plan.why == "preempting 2 grant(s) on pool s frees 2 device(s) beside the 0 free, for the 2 needed"
	v.candidates[0] == {
		"grant": "b", "pool": "s", "project": "ml-b", "priority": "low", "accelerator": "nvidia", "devices": 1,
		"borrowing": true, "why": v.candidates[0].why,
	}
}

test_input_nothing_to_preempt_says_so if {
	v := victims(work("ml-a", "top"), [spot("s", 2.5, 2)], [], held({}))
	v.plan.why == "pool s has 2.500 device(s) free, enough: nothing to preempt"
}

# [case, code, message]
spared_messages := [
	["a pool the workload could not use", "pool_not_eligible", "grant g is on pool elsewhere, which the workload could not use"],
	["an on-demand pool", "pool_not_preemptible", "grant g is on pool d, which is neither spot capacity nor marked preemptible"],
	["the same class", "victim_priority_not_lower", "grant g is of priority top, not below top"],
	["a class that may not be preempted", "victim_not_preemptible", "grant g is of priority pinned, which may not be preempted"],
	[
		"another project's, the workload's project without a quota", "preemptor_over_quota",
		"grant g is project ml-b's: project solo may take another project's grant only within its nominal quota of nvidia (none)",
	],
	[
		"another project's, beyond the workload's quota", "preemptor_over_quota",
		"grant g is project ml-b's: project ml-a may take another project's grant only within its nominal quota of nvidia (8 device(s))",
	],
	[
		"another project's, within its quota", "victim_within_quota",
		"grant g is project ml-b's, which holds 4 nvidia device(s), within its nominal quota (4 device(s))",
	],
]

test_input_spared_grants_say_why[name] if {
	some [name, code, message] in spared_messages
	tc := grant_cases[name]
	v := victims(tc.w, [tc.pool], [tc.g], tc.use)
	some r in v.spared[0].reasons
	r.code == code
	r.message == message
}

test_the_real_tables_let_high_take_low_on_spot if {
	v := preemption.victims with input as {
		"workload": {"id": "w", "project": "llm-pretraining", "priority": "high"},
		"pools": [spot("s", 0, 1)],
		"grants": [grant("g", "llm-pretraining", "low", "s", 1, 0), grant("n", "llm-pretraining", "normal", "s", 1, 0)],
	}
	candidate_ids(v) == ["g"]
	spared_codes(v) == {"n": ["victim_not_preemptible"]}
}

test_declared_codes if {
	declared := object.keys(preemption.about.custom.codes)
	given := {r.code |
		some tc in grant_cases
		some s in victims(tc.w, [tc.pool], [tc.g], tc.use).spared
		some r in s.reasons
	}
	given - {"priority_unknown", "project_unknown"} == declared - {"preemption_not_allowed"}
}
