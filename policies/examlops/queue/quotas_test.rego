package examlops.queue.quotas_test

import data.examlops.hardware.checks.quota
import data.examlops.queue.quotas
import data.examlops.tables.budgets

# ml-a and ml-b share a cohort (nvidia 8 + 12); solo has no cohort; hours a device-hour quota.
quotas_fixture := {"projects": {
	"ml-a": {"cohort": "research", "accelerators": {"nvidia": {"devices": 8, "borrowing_limit": 4}}},
	"ml-b": {"cohort": "research", "accelerators": {"nvidia": {"devices": 12}, "amd": {"devices": 0}}},
	"solo": {"accelerators": {"nvidia": {"devices": 4}, "tpu": {}}},
	"hours": {"accelerators": {"nvidia": {"device_hours": 100, "period_days": 7}}},
	"both": {"accelerators": {"nvidia": {"devices": 4, "device_hours": 100, "period_days": 7}}},
}}

report(use) := r if {
	r := quotas.report with input as {"quota_use": use}
		with data.examlops.tables.quotas as quotas_fixture
		with budgets as {"unassigned": "default", "projects": {}}
}

row(use, p, c) := r if {
	some r in report(use)
	[r.project, r.accelerator] == [p, c]
}

use_cases := {
	"nothing held": {"devices": {}, "device_hours": {}},
	"ml-a within its quota": {"devices": {"ml-a": {"nvidia": 5}, "ml-b": {"nvidia": 4}}},
	"ml-a borrowing": {"devices": {"ml-a": {"nvidia": 10}, "ml-b": {"nvidia": 4}}},
	"ml-b borrowing much": {"devices": {"ml-a": {"nvidia": 2}, "ml-b": {"nvidia": 17}}},
	"the cohort full": {"devices": {"ml-a": {"nvidia": 6}, "ml-b": {"nvidia": 14}}},
	"solo full": {"devices": {"solo": {"nvidia": 4}}},
	"amd borrowed": {"devices": {"ml-b": {"amd": 0}}},
	"device-hours left": {"devices": {"both": {"nvidia": 2}}, "device_hours": {"both": {"nvidia": 99}}},
	"device-hours used up": {"devices": {"both": {"nvidia": 2}}, "device_hours": {"both": {"nvidia": 100}}},
}

# The room is what the quota check admits: a grant of exactly that passes, a little more does not.
test_room_is_what_the_check_admits[name] if {
	some name, use in use_cases
	rows := [r | some r in report(use); r.room != null]
	count(rows) == 5
	every r in rows {
		room_admitted(r, use)
	}
}

room_admitted(r, use) if {
	r.room > 0
	admits(r, use, r.room)
	not admits(r, use, r.room + 0.5)
}

# No room: not even half a device passes (device-hours used up refuse every grant).
room_admitted(r, use) if {
	r.room == 0
	not admits(r, use, 0.5)
}

test_no_room_once_the_device_hours_are_used_up if {
	left := row({"devices": {"both": {"nvidia": 2}}, "device_hours": {"both": {"nvidia": 99}}}, "both", "nvidia")
	left.room == 2
	used := row({"devices": {"both": {"nvidia": 2}}, "device_hours": {"both": {"nvidia": 100}}}, "both", "nvidia")
	used.room == 0
	endswith(used.summary, "room now for 0 more; 100 of 100 device-hours in the last 7 days: used up, nothing more starts until older use ages out")
	row({"device_hours": {"hours": {"nvidia": 100}}}, "hours", "nvidia").room == 0
	row({"device_hours": {"hours": {"nvidia": 99}}}, "hours", "nvidia").room == null
}

admits(r, use, devices) if {
	lim := quota.limits_of(r.project, r.accelerator, devices) with data.examlops.tables.quotas as quotas_fixture
	quota.exceeded(lim, quota.use_of(lim, use)) == []
}

test_one_row_per_project_and_class_in_order if {
	[[r.project, r.accelerator] | some r in report({})] == [
		["both", "nvidia"], ["hours", "nvidia"], ["ml-a", "nvidia"], ["ml-b", "amd"], ["ml-b", "nvidia"], ["solo", "nvidia"], ["solo", "tpu"],
	]
}

test_figures if {
	r := row({"devices": {"ml-a": {"nvidia": 10}, "ml-b": {"nvidia": 4}}}, "ml-a", "nvidia")
	[r.held, r.nominal, r.borrowing_limit, r.cohort, r.borrowed, r.room] == [10, 8, 4, "research", 2, 2]
	[r.device_hours, r.device_hours_quota, r.period_days] == [0, null, null]
}

summary_cases := {
	"borrowing with a limit": [
		{"devices": {"ml-a": {"nvidia": 10}, "ml-b": {"nvidia": 4}}}, "ml-a", "nvidia",
		"project ml-a, nvidia: holds 10 of its 8 (borrows 2, up to 4, from cohort research); room now for 2 more",
	],
	"borrowing without a limit": [
		{"devices": {"ml-a": {"nvidia": 2}, "ml-b": {"nvidia": 15}}}, "ml-b", "nvidia",
		"project ml-b, nvidia: holds 15 of its 12 (borrows 3 from cohort research); room now for 3 more",
	],
	"no cohort": [{"devices": {"solo": {"nvidia": 1.5}}}, "solo", "nvidia", "project solo, nvidia: holds 1.500 of its 4; room now for 2.500 more"],
	"no device quota": [{"devices": {"solo": {"tpu": 3}}}, "solo", "tpu", "project solo, tpu: holds 3; no device quota"],
	"device-hours": [
		{"device_hours": {"hours": {"nvidia": 40}}}, "hours", "nvidia",
		"project hours, nvidia: holds 0; no device quota; 40 of 100 device-hours in the last 7 days",
	],
	"device-hours used up": [
		{"device_hours": {"hours": {"nvidia": 100}}}, "hours", "nvidia",
		"project hours, nvidia: holds 0; no device quota; 100 of 100 device-hours in the last 7 days: used up, nothing more starts until older use ages out",
	],
}

test_summary[name] if {
	some name, [use, p, c, words] in summary_cases
	row(use, p, c).summary == words
}

test_the_real_table_reports if {
	r := quotas.report with input as {"quota_use": {}}
	count(r) > 0
	every x in r {
		x.held == 0
	}
}
