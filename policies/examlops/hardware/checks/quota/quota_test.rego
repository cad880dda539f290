package examlops.hardware.checks.quota_test

import data.examlops.hardware.checks.quota
import data.examlops.hardware.composer
import data.examlops.hardware.placement
import data.examlops.tables.accelerators
import data.examlops.tables.budgets
import data.examlops.tables.quotas

# --- fixtures -------------------------------------------------------------------------------------

# ml-a and ml-b share the cohort research, with ml-c, which has no limit of nvidia; solo has none; hours has only a device-hour quota;
# default (the unassigned project) may hold one CPU.
quotas_fixture := {"projects": {
	"ml-a": {"cohort": "research", "accelerators": {"nvidia": {"devices": 8, "borrowing_limit": 4}, "amd": {"devices": 2}}},
	"ml-b": {"cohort": "research", "accelerators": {"nvidia": {"devices": 12}, "amd": {"devices": 0}}},
	"ml-c": {"cohort": "research", "accelerators": {"nvidia": {}}},
	"solo": {"accelerators": {"nvidia": {"devices": 4, "borrowing_limit": 2}, "tpu": {}}},
	"hours": {"accelerators": {"nvidia": {"device_hours": 100, "period_days": 7}}},
	"default": {"accelerators": {"cpu": {"devices": 1}}},
}}

budgets_fixture := {"unassigned": "default", "projects": {"default": {}, "ml-a": {}, "ml-b": {}, "ml-c": {}, "solo": {}, "hours": {}, "free": {}}}

# What the projects hold: devices per project and class, and device-hours in the period.
held(devices) := {"devices": devices, "device_hours": {}}

# input: {shape, workload, grant, quota_use}
deny(project, class, devices, use) := d if {
	d := quota.deny with input as {
		"shape": {"accelerator": class},
		"workload": {"project": project},
		"grant": {"devices": devices},
		"quota_use": use,
	}
		with quotas as quotas_fixture
		with budgets as budgets_fixture
}

codes(project, class, devices, use) := [r.code | some r in deny(project, class, devices, use)]

lim(project, class, devices) := l if {
	l := quota.limits({"project": project}, {"accelerator": class}, {"devices": devices})
		with quotas as quotas_fixture
		with budgets as budgets_fixture
}

# --- the check, case by case ------------------------------------------------------------------------

cases := {
	"a project without quotas is not limited": {"p": "free", "c": "nvidia", "n": 500, "use": held({}), "codes": []},
	"within the nominal quota": {"p": "ml-a", "c": "nvidia", "n": 2, "use": held({"ml-a": {"nvidia": 6}}), "codes": []},
	"exactly the nominal quota": {"p": "ml-a", "c": "nvidia", "n": 8, "use": held({}), "codes": []},
	# 8 + 2 = 10 is above 8 but within 8 + 4; the cohort holds 8 + 5 + 2 = 15 of its 20.
	"borrowing within the limit and the cohort's unused quota": {
		"p": "ml-a", "c": "nvidia", "n": 2,
		"use": held({"ml-a": {"nvidia": 8}, "ml-b": {"nvidia": 5}}), "codes": [],
	},
	"borrowing beyond the borrowing limit": {
		"p": "ml-a", "c": "nvidia", "n": 3,
		"use": held({"ml-a": {"nvidia": 10}}), "codes": ["quota_exceeded"],
	},
	# Within its borrowing limit, but the cohort holds 8 + 11 + 2 = 21 of its 20.
	"borrowing beyond the cohort's unused quota is refused": {
		"p": "ml-a", "c": "nvidia", "n": 2,
		"use": held({"ml-a": {"nvidia": 8}, "ml-b": {"nvidia": 11}}), "codes": ["quota_exceeded"],
	},
	# ml-c has no nominal quota of nvidia: it lends none, and what it holds takes none.
	"a member without a quota of the class neither lends nor takes": {
		"p": "ml-a", "c": "nvidia", "n": 2,
		"use": held({"ml-a": {"nvidia": 8}, "ml-b": {"nvidia": 5}, "ml-c": {"nvidia": 100}}), "codes": [],
	},
	"a member without limits is not limited": {"p": "ml-c", "c": "nvidia", "n": 50, "use": held({"ml-c": {"nvidia": 100}}), "codes": []},
	# The nominal quota is the project's own, whatever its cohort holds (Kueue reclaims it).
	"the nominal quota holds while others borrow": {
		"p": "ml-a", "c": "nvidia", "n": 2,
		"use": held({"ml-a": {"nvidia": 6}, "ml-b": {"nvidia": 14}}), "codes": [],
	},
	# No borrowing limit: as much as the cohort has unused (12 + 6 = 18; the cohort 2 + 18 = 20).
	"without a borrowing limit, all of the cohort's unused quota": {
		"p": "ml-b", "c": "nvidia", "n": 6,
		"use": held({"ml-a": {"nvidia": 2}, "ml-b": {"nvidia": 12}}), "codes": [],
	},
	"without a borrowing limit, no more than the cohort's unused quota": {
		"p": "ml-b", "c": "nvidia", "n": 6,
		"use": held({"ml-a": {"nvidia": 3}, "ml-b": {"nvidia": 12}}), "codes": ["quota_exceeded"],
	},
	"a nominal quota of 0 may borrow": {"p": "ml-b", "c": "amd", "n": 2, "use": held({}), "codes": []},
	"a nominal quota of 0 borrows only what is unused": {
		"p": "ml-b", "c": "amd", "n": 2,
		"use": held({"ml-a": {"amd": 1}}), "codes": ["quota_exceeded"],
	},
	"more than the cohort could ever lend": {"p": "ml-b", "c": "amd", "n": 3, "use": held({}), "codes": ["quota_too_small"]},
	"more than the nominal quota and the borrowing limit together": {
		"p": "ml-a", "c": "nvidia", "n": 13,
		"use": held({}), "codes": ["quota_too_small"],
	},
	"the nominal quota and the borrowing limit together": {"p": "ml-a", "c": "nvidia", "n": 12, "use": held({}), "codes": []},
	# Without a cohort a borrowing limit lends nothing.
	"no cohort, no borrowing": {"p": "solo", "c": "nvidia", "n": 2, "use": held({"solo": {"nvidia": 3}}), "codes": ["quota_exceeded"]},
	"no cohort, never more than the nominal quota": {"p": "solo", "c": "nvidia", "n": 5, "use": held({}), "codes": ["quota_too_small"]},
	"a class listed without limits": {"p": "solo", "c": "tpu", "n": 64, "use": held({"solo": {"tpu": 1000}}), "codes": []},
	"a class the project has no quota for": {"p": "solo", "c": "amd", "n": 1, "use": held({}), "codes": ["quota_unknown"]},
	# A sliver of a device counts as its share: 7.9 + 2/7 is above 8, so it borrows, and may.
	"a slice counts as its share of a device": {
		"p": "ml-a", "c": "nvidia", "n": 2 / 7,
		"use": held({"ml-a": {"nvidia": 7.9}}), "codes": [],
	},
	"device-hours left": {
		"p": "hours", "c": "nvidia", "n": 50,
		"use": {"devices": {}, "device_hours": {"hours": {"nvidia": 99.5}}}, "codes": [],
	},
	"device-hours used up": {
		"p": "hours", "c": "nvidia", "n": 1,
		"use": {"devices": {}, "device_hours": {"hours": {"nvidia": 100}}}, "codes": ["quota_exceeded"],
	},
	"device-hours of another class do not count": {
		"p": "hours", "c": "nvidia", "n": 1,
		"use": {"devices": {}, "device_hours": {"hours": {"amd": 500}}}, "codes": [],
	},
	# A workload that names no project counts as the unassigned one (default: one CPU).
	"no project: the unassigned project's quota": {"p": null, "c": "cpu", "n": 1, "use": held({}), "codes": []},
	"no project: the unassigned project's quota is used": {"p": null, "c": "cpu", "n": 1, "use": held({"default": {"cpu": 1}}), "codes": ["quota_exceeded"]},
	"no project: a class the unassigned project has no quota for": {"p": null, "c": "nvidia", "n": 1, "use": held({}), "codes": ["quota_unknown"]},
	"no use given is no use": {"p": "ml-a", "c": "nvidia", "n": 8, "use": {}, "codes": []},
}

test_input_quota[name] if {
	some name, tc in cases
	codes(tc.p, tc.c, tc.n, tc.use) == tc.codes
}

# A denial for the devices held and one for the device-hours, together.
test_input_devices_and_device_hours_both_over if {
	q := {"projects": {"both": {"accelerators": {"nvidia": {"devices": 2, "device_hours": 10, "period_days": 1}}}}}
	d := quota.deny with input as {
		"shape": {"accelerator": "nvidia"},
		"workload": {"project": "both"},
		"grant": {"devices": 1},
		"quota_use": {"devices": {"both": {"nvidia": 2}}, "device_hours": {"both": {"nvidia": 10}}},
	}
		with quotas as q
		with budgets as budgets_fixture
	{r.details.quota | some r in d} == {"devices", "device_hours"}
}

# --- the figures the caller compares ---------------------------------------------------------------

# [nominal, ceiling, cohort, members, cohort_nominal, device_hours, period_days]
figure_cases := {
	"borrowing limit in a cohort": {"p": "ml-a", "c": "nvidia", "want": [8, 12, "research", ["ml-a", "ml-b"], 20, null, null]},
	"no borrowing limit in a cohort": {"p": "ml-b", "c": "nvidia", "want": [12, null, "research", ["ml-a", "ml-b"], 20, null, null]},
	"no cohort": {"p": "solo", "c": "nvidia", "want": [4, 4, null, [], null, null, null]},
	"no limits for the class": {"p": "solo", "c": "tpu", "want": [null, null, null, [], null, null, null]},
	"device-hours only": {"p": "hours", "c": "nvidia", "want": [null, null, null, [], null, 100, 7]},
	"no quotas": {"p": "free", "c": "nvidia", "want": [null, null, null, [], null, null, null]},
	"no quota for the class": {"p": "solo", "c": "amd", "want": [null, null, null, [], null, null, null]},
}

test_limits[name] if {
	some name, tc in figure_cases
	l := lim(tc.p, tc.c, 1)
	[l.nominal, l.ceiling, l.cohort, l.members, l.cohort_nominal, l.device_hours, l.period_days] == tc.want
	l.project == tc.p
	l.accelerator == tc.c
	l.devices == 1
}

# The caller sums the use of the members and compares: the same answer as the check.
test_use_of_sums_the_cohort if {
	l := lim("ml-a", "nvidia", 2)
	u := quota.use_of(l, {"devices": {"ml-a": {"nvidia": 8}, "ml-b": {"nvidia": 5, "amd": 9}, "solo": {"nvidia": 40}}})
	u == {"devices": 8, "cohort_devices": 13, "device_hours": 0}
	quota.exceeded(l, u) == []
	[r.code | some r in quota.exceeded(l, object.union(u, {"cohort_devices": 19}))] == ["quota_exceeded"]
}

# Reasons that hold whatever the use come alone (no use could add to a grant that can never fit).
test_always_comes_alone if {
	l := lim("ml-a", "nvidia", 13)
	[r.code | some r in l.always] == ["quota_too_small"]
	[r.code | some r in quota.exceeded(l, {"devices": 100, "cohort_devices": 100, "device_hours": 0})] == ["quota_too_small"]
}

# --- the words ----------------------------------------------------------------------------------------

message_cases := {
	"borrowing limit": {
		"p": "ml-a", "c": "nvidia", "n": 2, "key": "devices",
		"want": "project ml-a may hold 8 nvidia device(s) at once, and borrow up to 4 more from cohort research's unused quota: no room now for 2 more",
	},
	"no borrowing limit": {
		"p": "ml-b", "c": "nvidia", "n": 1, "key": "devices",
		"want": "project ml-b may hold 12 nvidia device(s) at once, and borrow from cohort research's unused quota: no room now for 1 more",
	},
	"no cohort": {
		"p": "solo", "c": "nvidia", "n": 2 / 7, "key": "devices",
		"want": "project solo may hold 4 nvidia device(s) at once: no room now for 0.286 more",
	},
	"device-hours": {
		"p": "hours", "c": "nvidia", "n": 1, "key": "device_hours",
		"want": "project hours has used its 100 nvidia device-hours of the last 7 days",
	},
}

test_messages[name] if {
	some name, tc in message_cases
	r := lim(tc.p, tc.c, tc.n).reasons[tc.key]
	r.message == tc.want
	r.code == "quota_exceeded"
	r.kind == "not_now"
}

test_no_reason_where_there_is_no_quota if {
	lim("hours", "nvidia", 1).reasons.devices == null
	lim("ml-a", "nvidia", 1).reasons.device_hours == null
	lim("free", "nvidia", 1).reasons == {"devices": null, "device_hours": null}
}

never_cases := {
	"beyond the borrowing limit": {
		"p": "ml-a", "c": "nvidia", "n": 13,
		"want": "project ml-a may never hold 13 nvidia device(s) at once: at most 12, and borrow up to 4 more from cohort research's unused quota",
		"most": 12,
	},
	"beyond what the cohort could lend": {
		"p": "ml-b", "c": "amd", "n": 3,
		"want": "project ml-b may never hold 3 amd device(s) at once: at most 2, and borrow from cohort research's unused quota",
		"most": 2,
	},
	"no cohort": {
		"p": "solo", "c": "nvidia", "n": 5,
		"want": "project solo may never hold 5 nvidia device(s) at once: at most 4",
		"most": 4,
	},
	"no quota for the class": {
		"p": "solo", "c": "amd", "n": 1,
		"want": "project solo has quotas, but none for amd (policies/examlops/tables/quotas.yaml)",
		"most": null,
	},
}

test_never_messages[name] if {
	some name, tc in never_cases
	[r] := lim(tc.p, tc.c, tc.n).always
	r.kind == "never"
	r.message == tc.want
	most(r) == tc.most
}

most(r) := r.details.most

most(r) := null if r.code == "quota_unknown"

# --- the metadata ---------------------------------------------------------------------------------

# Every code the check gives is declared, with its kind.
test_declared_codes_are_the_codes_given if {
	given := {[r.code, r.kind] |
		some l in [lim("ml-a", "nvidia", 2), lim("ml-a", "nvidia", 13), lim("solo", "amd", 1), lim("hours", "nvidia", 1)]
		some r in array.concat(l.always, [x | some x in l.reasons; x != null])
	}
	given == {[code, c.kind] | some code, c in quota.about.custom.codes}
	quota.about.custom.stage == "pool"
	quota.about.custom.order == 86
}

# A pool-stage check the composer runs: discovered from its metadata, published with the checks, its
# figures answered per grant.
test_the_composer_runs_quota_at_the_pool_stage if {
	"quota" in {c.name | some c in placement.about.checks}
	"quota" in placement.about.pool_stage
	placement.about.unsupported_checks == []
}

# Without "quota" in the pool-stage set, the same check would stop every placement (fail closed).
test_unrun_it_would_stop_every_placement if {
	composer.unsupported_checks == ["quota"] with composer.pool_stage_checks as {"budget", "capacity", "wait"}
}

# --- the reviewed table ---------------------------------------------------------------------------

test_quota_projects_are_budget_projects if {
	count(quotas.projects) > 0
	every p, _ in quotas.projects {
		budgets.projects[p]
	}
	budgets.projects[budgets.unassigned]
}

test_quota_classes_are_accelerators if {
	every _, q in quotas.projects {
		every c, _ in q.accelerators {
			accelerators[c]
		}
	}
}

# Devices and borrowing limits are counts of at least 0; a borrowing limit needs a cohort and a
# nominal quota; device-hours come with their period, both above 0.
valid_entry(q, e) if {
	every k, v in e {
		k in {"devices", "borrowing_limit", "device_hours", "period_days"}
		is_number(v)
		v >= 0
	}
	borrowing_ok(q, e)
	hours_ok(e)
}

borrowing_ok(_, e) if not e.borrowing_limit

borrowing_ok(q, e) if {
	is_number(e.borrowing_limit)
	is_string(q.cohort)
	is_number(e.devices)
}

hours_ok(e) if {
	not e.device_hours
	not e.period_days
}

hours_ok(e) if {
	e.device_hours > 0
	e.period_days > 0
}

test_quota_entries_are_valid if {
	every _, q in quotas.projects {
		every _, e in q.accelerators {
			valid_entry(q, e)
		}
	}
}

test_the_table_checks_catch_bad_entries if {
	not valid_entry({}, {"devices": 4, "borrowing_limit": 2})
	not valid_entry({"cohort": "c"}, {"borrowing_limit": 2})
	not valid_entry({}, {"devices": -1})
	not valid_entry({}, {"device_hours": 10})
	not valid_entry({}, {"gpus": 1})
	valid_entry({"cohort": "c"}, {"devices": 0, "borrowing_limit": 2, "device_hours": 1, "period_days": 1})
}
