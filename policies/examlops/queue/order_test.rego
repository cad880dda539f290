package examlops.queue.order_test

import data.examlops.queue.order
import data.examlops.tables.accelerators
import data.examlops.tables.budgets
import data.examlops.tables.fair_share
import data.examlops.tables.priorities

# --- fixtures -------------------------------------------------------------------------------------

# ml-b weighs three times ml-a: shares 1/6, 3/6 and the unassigned default's 2/6.
budgets_fixture := {"unassigned": "default", "projects": {
	"default": {"fair_share_weight": 2},
	"ml-a": {},
	"ml-b": {"fair_share_weight": 3},
}}

# A half-life of 10 hours, a window of 40, hourly rows.
fair_share_fixture := {"half_life_hours": 10, "window_hours": 40, "bucket_hours": 1}

now := "2026-12-01T12:00:00Z"

# A queued workload, queued `ago` seconds before now.
queued(id, project, priority, ago) := {
	"id": id,
	"project": project,
	"priority": priority,
	"queued_at": time.format([time.parse_rfc3339_ns(now) - (ago * 1000000000), "UTC", "2006-01-02T15:04:05Z07:00"]),
	"accelerator": "nvidia",
	"devices": 1,
}

ranked(queue, usage) := r if {
	r := order.ranked with input as {"now": now, "queue": queue, "usage": usage}
		with budgets as budgets_fixture
		with fair_share as fair_share_fixture
}

ids(queue, usage) := [e.id | some e in ranked(queue, usage).order]

# --- the order --------------------------------------------------------------------------------------

order_cases := {
	"priority class first, whatever the share and the age": {
		"queue": [queued("old-normal", "ml-a", "normal", 9000), queued("new-high", "ml-b", "high", 1), queued("low", "ml-a", "low", 99999)],
		"usage": {"ml-b": [[0, 1000]]},
		"want": ["new-high", "old-normal", "low"],
	},
	"then the project furthest below its fair share": {
		"queue": [queued("a", "ml-a", "normal", 9000), queued("b", "ml-b", "normal", 60)],
		"usage": {"ml-a": [[0, 10]], "ml-b": [[0, 10]]},
		"want": ["b", "a"],
	},
	"a heavier weight carries more use": {
		# ml-a used 10 with weight 1; ml-b 25 with weight 3: ml-b is further below its share.
		"queue": [queued("a", "ml-a", "normal", 60), queued("b", "ml-b", "normal", 60)],
		"usage": {"ml-a": [[0, 10]], "ml-b": [[0, 25]]},
		"want": ["b", "a"],
	},
	"old use weighs less": {
		# ml-a's 40 device-hours are two half-lives old (10); ml-b's 12 are new.
		"queue": [queued("b", "ml-b", "normal", 60), queued("a", "ml-a", "normal", 60)],
		"usage": {"ml-a": [[20, 40]], "ml-b": [[0, 36]]},
		"want": ["a", "b"],
	},
	"use older than the window does not count": {
		"queue": [queued("b", "ml-b", "normal", 60), queued("a", "ml-a", "normal", 60)],
		"usage": {"ml-a": [[40, 1000000]], "ml-b": [[39, 1]]},
		"want": ["a", "b"],
	},
	"then older first": {
		"queue": [queued("young", "ml-a", "normal", 60), queued("old", "ml-a", "normal", 600)],
		"usage": {},
		"want": ["old", "young"],
	},
	"then by id": {
		"queue": [queued("q2", "ml-a", "normal", 60), queued("q1", "ml-b", "normal", 60)],
		"usage": {},
		"want": ["q1", "q2"],
	},
	"no class named is the default class": {
		"queue": [queued("low", "ml-a", "low", 600), queued("none", "ml-a", null, 60), queued("high", "ml-a", "high", 1)],
		"usage": {},
		"want": ["high", "none", "low"],
	},
	"no project named counts as the unassigned project": {
		# default used 30 of 40 with a share of 2/6: 2.25; ml-a 10 of 40 with 1/6: 1.5.
		"queue": [queued("none", null, "normal", 600), queued("a", "ml-a", "normal", 60)],
		"usage": {"default": [[0, 30]], "ml-a": [[0, 10]]},
		"want": ["a", "none"],
	},
	"an invalid workload is set apart, the others ordered": {
		"queue": [queued("a", "ml-a", "normal", 60), queued("bad", "nope", "normal", 600)],
		"usage": {},
		"want": ["a"],
	},
	"an empty queue": {"queue": [], "usage": {"ml-a": [[0, 1]]}, "want": []},
}

test_input_order[name] if {
	some name, tc in order_cases
	ids(tc.queue, tc.usage) == tc.want
}

test_input_positions_count_from_one if {
	r := ranked([queued("b", "ml-a", "normal", 60), queued("a", "ml-a", "normal", 60)], {})
	[[e.position, e.id] | some e in r.order] == [[1, "a"], [2, "b"]]
}

# --- the reason of each position --------------------------------------------------------------------

# ml-a used 21 of 126 with a share of 1/6: at 1.00; ml-b 84 with 3/6: at 1.33.
test_input_each_position_says_why if {
	r := ranked(
		[queued("a", "ml-a", "high", 840), queued("b", "ml-b", "normal", 7500), queued("c", null, "low", 0)],
		{"ml-a": [[0, 21]], "ml-b": [[0, 84]], "default": [[0, 21]]},
	)
	[e.reason | some e in r.order] == [
		"priority high; project ml-a at 1.00 of its fair share; queued 14 min ago",
		"priority normal; project ml-b at 1.33 of its fair share; queued 2 h 5 min ago",
		"priority low; project default at 0.50 of its fair share; just queued",
	]
	e := r.order[0]
	[e.project, e.priority, e.rank, e.waited_s, e.accelerator, e.devices] == ["ml-a", "high", 1, 840, "nvidia", 1]
}

test_input_a_share_below_its_fair_share if {
	# ml-a used 7 of 200 with a share of 1/6: (7 / 200) x 6 = 0.21.
	r := ranked([queued("a", "ml-a", "normal", 60)], {"ml-a": [[0, 7]], "ml-b": [[0, 193]]})
	r.order[0].reason == "priority normal; project ml-a at 0.21 of its fair share; queued 1 min ago"
}

waited_cases := {
	"under a second": [0, "just queued"],
	"seconds": [40, "queued 40 s ago"],
	"minutes": [840, "queued 14 min ago"],
	"whole hours": [7200, "queued 2 h ago"],
	"hours and minutes": [7500, "queued 2 h 5 min ago"],
	"a whole day": [86400, "queued 1 d ago"],
	"days and hours": [270000, "queued 3 d 3 h ago"],
}

test_waited_words[name] if {
	some name, [s, words] in waited_cases
	order.waited_words(s) == words
}

# A clock behind the queue's: no wait, never a negative one.
test_input_queued_after_now_has_waited_nothing if {
	r := ranked([queued("a", "ml-a", "normal", -30)], {})
	r.order[0].waited_s == 0
	endswith(r.order[0].reason, "; just queued")
}

# --- fair share -------------------------------------------------------------------------------------

close(a, b) if abs(a - b) < 0.000000000001

# Exact where the age is a whole number of 1024ths of the half-life (10 hours here), and within
# 3.4e-4 of 0.5^(age / 10) elsewhere.
decay_cases := {
	"now": [0, 1, 0],
	"one half-life": [10, 0.5, 0],
	"two half-lives": [20, 0.25, 0],
	"half a half-life": [5, 0.7071067811865476, 0],
	"two and a half half-lives": [25, 0.17677669529663687, 0],
	"three quarters of a half-life": [7.5, 0.5946035575013605, 0.000000000000001],
	"a tenth of a half-life": [1, 0.9330329915368074, 0.00034 * 0.9330329915368074],
	"just under a half-life": [9.999, 0.5000346585601882, 0.00034 * 0.5000346585601882],
	"within the window": [39.99, 0.06254333671641128, 0.00034 * 0.06254333671641128],
}

test_decay[name] if {
	some name, [age, want, tolerance] in decay_cases
	abs(order.decay(age) - want) <= tolerance + 0.000000000000001 with fair_share as fair_share_fixture
}

# Each root is the square root of the one before, the first of 1/2.
test_the_roots_of_one_half if {
	close(order.roots[0] * order.roots[0], 0.5)
	every i in numbers.range(1, 9) {
		close(order.roots[i] * order.roots[i], order.roots[i - 1])
	}
	count(order.roots) == 10
}

test_input_projects_show_weight_use_and_share if {
	r := ranked([], {"ml-a": [[0, 10], [10, 20]], "ml-b": [[40, 5], [30, 8]], "gone": [[0, 20]]})

	# ml-a: 10 + 20 x 0.5 = 20; ml-b: 8 x 0.125 = 1; gone (no longer a project) still counts: 41.
	close(r.projects["ml-a"].used_device_hours, 20)
	close(r.projects["ml-b"].used_device_hours, 1)
	close(r.projects["ml-a"].fair_share, (20 / 41) * 6)
	close(r.projects["ml-b"].fair_share, (1 / 41) * 2)
	r.projects["ml-b"].weight == 3
	r.projects["default"] == {"weight": 2, "used_device_hours": 0, "fair_share": 0}
	not r.projects.gone
	r.fair_share == object.union(fair_share_fixture, {"usage_weight": "devices"})
}

# The order says how the use it was sent was weighed (fair_share.yaml, usage_weight).
test_the_order_says_how_use_was_weighed if {
	r := order.ranked with input as {"now": now, "queue": [], "usage": {}}
		with fair_share as object.union(fair_share_fixture, {"usage_weight": "price"})
	r.fair_share.usage_weight == "price"
}

test_input_no_use_at_all_is_no_share if {
	r := ranked([queued("a", "ml-a", "normal", 60)], {"ml-a": [], "ml-b": [[50, 3]]})
	r.projects["ml-a"].fair_share == 0
	r.order[0].fair_share == 0
}

# --- what it cannot judge ----------------------------------------------------------------------------

test_input_an_invalid_workload_is_set_apart_with_its_reasons if {
	bad := object.union(queued("bad", "nope", "urgent", 60), {"queued_at": "yesterday", "accelerator": "gpu", "devices": 0})
	r := ranked([bad, object.union(queued("anon", "ml-a", "normal", 60), {"id": ""})], {})
	r.order == []
	[[e.id, [x.code | some x in e.reasons]] | some e in r.invalid] == [
		["bad", ["project_unknown", "priority_unknown", "field_invalid", "accelerator_unknown", "field_invalid"]],
		["", ["field_invalid"]],
	]
	[x.message | some x in r.invalid[0].reasons] == [
		"project 'nope' is not in the budgets table (policies/examlops/tables/budgets.yaml)",
		"priority class 'urgent' is not in the priorities table (policies/examlops/tables/priorities.yaml: high, low, normal)",
		"queued_at is \"yesterday\", not an RFC 3339 time",
		"unknown accelerator 'gpu' (expected one of [\"amd\", \"cpu\", \"intel-gaudi\", \"nvidia\", \"tpu\"])",
		"devices is 0, not a number above 0",
	]
}

error_cases := {
	"now is not a time": {"now": "noon", "queue": [queued("a", "ml-a", "normal", 60)], "usage": {}, "fields": ["now"]},
	"a usage row is short": {"now": now, "queue": [queued("a", "ml-a", "normal", 60)], "usage": {"ml-a": [[1]]}, "fields": ["usage of ml-a"]},
	"a usage row is negative": {"now": now, "queue": [], "usage": {"ml-a": [[1, -2]]}, "fields": ["usage of ml-a"]},
	"an id twice": {"now": now, "queue": [queued("a", "ml-a", "normal", 60), queued("a", "ml-b", "normal", 6)], "usage": {}, "fields": ["id"]},
}

test_input_errors_order_nothing[name] if {
	some name, tc in error_cases
	r := order.ranked with input as {"now": tc.now, "queue": tc.queue, "usage": tc.usage}
		with budgets as budgets_fixture
	[e.details.field | some e in r.errors] == tc.fields
	r.order == []
	r.invalid == []
	r.projects == {}
}

test_input_a_repeated_id_says_so if {
	r := ranked([queued("a", "ml-a", "normal", 60), queued("a", "ml-b", "normal", 6)], {})
	[e.message | some e in r.errors] == ["queue id 'a' appears more than once"]
}

test_input_usage_errors_are_worded if {
	r := ranked([], {"ml-a": [[1]]})
	[e.message | some e in r.errors] == ["usage of ml-a is [[1]], not a list of [age_hours, device_hours], both 0 or more"]
}

test_declared_codes if {
	order.about.custom.codes.priority_unknown.kind == "never"
}

# --- the reviewed tables ------------------------------------------------------------------------------

test_priority_classes_are_well_formed if {
	count(priorities.classes) > 0
	priorities.classes[priorities.default]
	every _, c in priorities.classes {
		is_number(c.rank)
		c.rank == floor(c.rank)
		c.rank >= 1
		is_boolean(c.may_preempt)
		is_boolean(c.preemptible)
	}

	# Two classes never share a rank.
	count({c.rank | some c in priorities.classes}) == count(priorities.classes)
}

# A class that may preempt never is preempted: two such classes could take each other's grants.
test_no_class_both_preempts_and_is_preemptible if {
	every _, c in priorities.classes {
		not all_true([c.may_preempt, c.preemptible])
	}
}

all_true(xs) if every x in xs {
	x == true
}

test_all_true if {
	all_true([true, true])
	not all_true([true, false])
}

test_fair_share_table_is_well_formed if {
	fair_share.half_life_hours > 0
	fair_share.window_hours >= fair_share.half_life_hours
}

test_fair_share_weights_are_positive if {
	budgets.projects[budgets.unassigned]
	every _, p in budgets.projects {
		object.get(p, "fair_share_weight", 1) > 0
	}
}

test_the_real_tables_rank_a_queue if {
	r := order.ranked with input as {
		"now": now,
		"queue": [queued("a", "llm-pretraining", null, 60), queued("b", "green-research", "high", 30)],
		"usage": {"llm-pretraining": [[1, 4]]},
	}
	[e.id | some e in r.order] == ["b", "a"]
	accelerators[r.order[0].accelerator]
}
