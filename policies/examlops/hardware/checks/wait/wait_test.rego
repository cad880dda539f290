package examlops.hardware.checks.wait_test

import data.examlops.hardware.checks.wait
import data.examlops.hardware.composer

# 2026-12-01T12:00:00Z, the decision's time in these tests.
noon := 1796126400

# 2026-12-01T14:00:00Z
two_pm := "2026-12-01T14:00:00Z"

two_pm_s := noon + 7200

# The workload as the caller gives it: max_wait in whole seconds, the deadline as RFC 3339 UTC text.
work(overrides) := object.union({"max_wait": null, "deadline": null}, overrides)

est(at) := {"at": at, "source": "slurm", "observed_at": noon}

no_est := {"at": null, "source": "slurm", "observed_at": noon}

# input: {workload, now, pool: {estimate}}
deny(w, e, now) := d if {
	d := wait.deny with input as {"workload": w, "now": now, "pool": {"estimate": e}}
}

codes(w, e, now) := {r.code | some r in deny(w, e, now)}

# --- the limits ------------------------------------------------------------------------------------

test_no_limits if {
	lim := wait.limits(work({}))
	lim.start_within_s == null
	lim.start_by_s == null
	lim.invalid == null
	lim.reasons == {"max_wait": null, "deadline": null, "deadline_passed": null, "unknown": null}
}

test_a_workload_without_the_fields_has_no_limits if {
	lim := wait.limits({"accelerator": "nvidia"})
	[lim.start_within_s, lim.start_by_s, lim.invalid] == [null, null, null]
}

test_max_wait_is_seconds_from_the_decision if {
	lim := wait.limits(work({"max_wait": 7200}))
	lim.start_within_s == 7200
	lim.start_by_s == null
	lim.reasons.max_wait.code == "wait_exceeded"
	lim.reasons.deadline == null
}

test_the_deadline_is_epoch_seconds if {
	lim := wait.limits(work({"deadline": two_pm}))
	lim.start_by_s == two_pm_s
	lim.start_within_s == null
	lim.reasons.deadline.code == "deadline_missed"
	lim.reasons.deadline_passed.code == "deadline_passed"
}

test_a_deadline_with_an_offset_is_the_same_instant if {
	wait.limits(work({"deadline": "2026-12-01T15:00:00+01:00"})).start_by_s == two_pm_s
}

# --- pools against the limits ----------------------------------------------------------------------

exceed_cases := {
	"no limits, no estimate": {"w": work({}), "e": no_est, "codes": set()},
	"no limits, a start in a week": {"w": work({}), "e": est(noon + 604800), "codes": set()},
	"within max_wait": {"w": work({"max_wait": 7200}), "e": est(noon + 3600), "codes": set()},
	"at max_wait": {"w": work({"max_wait": 7200}), "e": est(noon + 7200), "codes": set()},
	"a second past max_wait is within it": {"w": work({"max_wait": 7200}), "e": est(noon + 7201), "codes": set()},
	"two seconds past max_wait": {"w": work({"max_wait": 7200}), "e": est(noon + 7202), "codes": {"wait_exceeded"}},
	"max_wait 0 and a start now": {"w": work({"max_wait": 0}), "e": est(noon), "codes": set()},
	"max_wait 0 and a start in a minute": {"w": work({"max_wait": 0}), "e": est(noon + 60), "codes": {"wait_exceeded"}},
	"an estimate in the past means now": {"w": work({"max_wait": 0}), "e": est(noon - 3600), "codes": set()},
	"before the deadline": {"w": work({"deadline": two_pm}), "e": est(two_pm_s - 60), "codes": set()},
	"at the deadline": {"w": work({"deadline": two_pm}), "e": est(two_pm_s), "codes": set()},
	"after the deadline": {"w": work({"deadline": two_pm}), "e": est(two_pm_s + 60), "codes": {"deadline_missed"}},
	"past both": {"w": work({"max_wait": 3600, "deadline": two_pm}), "e": est(two_pm_s + 60), "codes": {"wait_exceeded", "deadline_missed"}},
	"past max_wait, before the deadline": {"w": work({"max_wait": 3600, "deadline": two_pm}), "e": est(noon + 5400), "codes": {"wait_exceeded"}},
	"within max_wait, past the deadline": {"w": work({"max_wait": 86400, "deadline": two_pm}), "e": est(two_pm_s + 60), "codes": {"deadline_missed"}},
	"no estimate under max_wait": {"w": work({"max_wait": 7200}), "e": no_est, "codes": {"estimate_unknown"}},
	"no estimate under a deadline": {"w": work({"deadline": two_pm}), "e": no_est, "codes": {"estimate_unknown"}},
	"a pool that states no estimate at all": {"w": work({"max_wait": 7200}), "e": null, "codes": {"estimate_unknown"}},
	"an estimate that is not a number": {"w": work({"max_wait": 7200}), "e": {"at": "soon", "source": "table"}, "codes": {"estimate_unknown"}},
	"no estimate without limits is no denial": {"w": work({}), "e": null, "codes": set()},
}

test_exceeded[name] if {
	some name, tc in exceed_cases
	codes(tc.w, tc.e, noon) == tc.codes
	{r.code | some r in wait.exceeded(wait.limits(tc.w), tc.e, noon)} == tc.codes
}

# Max_wait is judged before the deadline.
test_exceeded_lists_max_wait_then_the_deadline if {
	over := wait.exceeded(wait.limits(work({"max_wait": 3600, "deadline": two_pm})), est(two_pm_s + 60), noon)
	[r.code | some r in over] == ["wait_exceeded", "deadline_missed"]
}

# Past the deadline, no pool can start in time, whatever its estimate (or none).
test_a_passed_deadline_denies_every_pool if {
	every e in [est(noon), est(two_pm_s + 3600), no_est, null] {
		codes(work({"deadline": two_pm}), e, two_pm_s + 60) == {"deadline_passed"}
	}
}

test_a_deadline_passed_by_a_second_has_not_passed if {
	codes(work({"deadline": two_pm}), est(two_pm_s + 1), two_pm_s + 1) == set()
}

# --- fail closed -------------------------------------------------------------------------------------

invalid_cases := {
	"max_wait in words": {"w": work({"max_wait": "2h"}), "field": "max_wait"},
	"negative max_wait": {"w": work({"max_wait": -1}), "field": "max_wait"},
	"fractional max_wait": {"w": work({"max_wait": 1.5}), "field": "max_wait"},
	"max_wait true": {"w": work({"max_wait": true}), "field": "max_wait"},
	"a deadline without an offset": {"w": work({"deadline": "2026-12-01T14:00:00"}), "field": "deadline"},
	"a deadline in words": {"w": work({"deadline": "tomorrow"}), "field": "deadline"},
	"a deadline as a number": {"w": work({"deadline": two_pm_s}), "field": "deadline"},
}

test_malformed_limits_deny_every_pool[name] if {
	some name, tc in invalid_cases
	denials := [[r.code, r.kind, r.details.field] | some e in [est(noon), no_est, null]; some r in deny(tc.w, e, noon)]
	denials == [["wait_invalid", "never", tc.field] | some _ in [1, 2, 3]]
}

test_no_decision_time_denies_every_pool_under_a_limit if {
	denials := [[r.code, r.details.field] |
		some w in [work({"max_wait": 60}), work({"deadline": two_pm})]
		some r in wait.deny with input as {"workload": w, "pool": {"estimate": est(noon)}}
	]
	denials == [["wait_invalid", "now"], ["wait_invalid", "now"]]
}

test_no_decision_time_and_no_limits_is_no_denial if {
	count(wait.deny) == 0 with input as {"workload": work({}), "pool": {"estimate": est(noon)}}
}

# --- the exact reasons -------------------------------------------------------------------------------

test_wait_exceeded_message_and_details if {
	[r] := wait.exceeded(wait.limits(work({"max_wait": 7500})), est(noon + 9000), noon)
	r == {
		"code": "wait_exceeded",
		"kind": "not_now",
		"message": "the pool is not expected to start the workload within max_wait 2 h 05 m",
		"details": {"limit": "max_wait", "max_wait_s": 7500},
	}
}

test_deadline_missed_message_and_details if {
	[r] := wait.exceeded(wait.limits(work({"deadline": two_pm})), est(two_pm_s + 60), noon)
	r == {
		"code": "deadline_missed",
		"kind": "not_now",
		"message": "the pool is not expected to start the workload by its deadline 2026-12-01T14:00:00Z",
		"details": {"limit": "deadline", "deadline": two_pm},
	}
}

test_deadline_passed_message if {
	[r] := wait.exceeded(wait.limits(work({"deadline": two_pm})), est(noon), two_pm_s + 60)
	r.message == "the deadline 2026-12-01T14:00:00Z has passed: no pool can start the workload by then"
	r.kind == "never"
}

test_estimate_unknown_messages if {
	[a] := wait.exceeded(wait.limits(work({"max_wait": 3600})), no_est, noon)
	a.message == "the pool has no start estimate, and the workload must start within max_wait 1 h: a pool whose start is unknown is not taken"
	a.details == {"max_wait_s": 3600, "deadline": null}
	[b] := wait.exceeded(wait.limits(work({"max_wait": 90, "deadline": two_pm})), no_est, noon)
	b.message == "the pool has no start estimate, and the workload must start within max_wait 1 m 30 s and by its deadline 2026-12-01T14:00:00Z: a pool whose start is unknown is not taken"
}

test_invalid_messages if {
	wait.limits(work({"max_wait": -5})).invalid.message == "max_wait must be a whole number of seconds of at least 0 (got -5)"
	wait.limits(work({"deadline": "noon"})).invalid.message == "deadline must be an RFC 3339 time with its offset, such as 2026-12-01T14:00:00Z (got noon)"
}

test_every_reason_is_a_declared_code_of_its_kind if {
	declared := wait.about.custom.codes
	every w in [work({"max_wait": 60, "deadline": two_pm}), work({"max_wait": -1})] {
		every now in [noon, two_pm_s + 60] {
			every e in [est(two_pm_s + 3600), no_est] {
				every r in deny(w, e, now) {
					declared[r.code].kind == r.kind
				}
			}
		}
	}
	declared.wait_invalid.kind == "never"
}

# Durations for people: the two largest units, the second one padded.
test_duration_text if {
	[wait.duration_text(s) | some s in [0, 45, 60, 90, 3599, 3600, 7500, 7530, 86399, 86400, 90000]] == [
		"0 s", "45 s", "1 m", "1 m 30 s", "59 m 59 s", "1 h", "2 h 05 m", "2 h 05 m", "23 h 59 m", "1 d", "1 d 01 h",
	]
}

# --- the check as a plugin ---------------------------------------------------------------------------

test_about if {
	a := wait.about
	a.title == "Wait"
	a.custom.stage == "pool"
	a.custom.order == 87
	a.custom.reads == {"shape": [], "workload": ["max_wait", "deadline"]}
	object.keys(a.custom.codes) == {"wait_exceeded", "deadline_missed", "deadline_passed", "estimate_unknown", "wait_invalid"}
}

# The composer runs it: a pool-stage check it names, so nothing is refused for it, and its fields
# join the workload signature (a verdict is kept per max_wait and deadline).
test_the_composer_runs_it if {
	composer.check_about.wait == wait.about
	"wait" in composer.pool_stage_checks
	composer.unsupported_checks == []
	"max_wait" in composer.signature.workload
	"deadline" in composer.signature.workload
	not "wait" in composer.shape_checks
}

# Without "wait" in the pool-stage set, the same check would stop every placement (fail closed):
# publishing `about` and naming it in the set go together.
test_unrun_it_would_stop_every_placement if {
	composer.unsupported_checks == ["wait"] with composer.pool_stage_checks as {"budget", "capacity"}
}
