package examlops.hardware.checks.fallback_test

import data.examlops.hardware.checks.fallback

# The check sees only the fields it declares.
deny(pool, requested, allow_cpu) := d if {
	d := fallback.deny with input as {
		"shape": {"accelerator": pool},
		"workload": {"accelerator": requested, "allow_cpu_fallback": allow_cpu},
	}
}

# true or false, never undefined.
allowed(pool, requested, allow_cpu) if count(deny(pool, requested, allow_cpu)) == 0

else := false

accelerators := ["nvidia", "amd", "intel-gaudi", "tpu", "cpu"]

# The reviewed stand-in table, written out: requested accelerator -> the accelerators that may
# stand in for it (allow_cpu_fallback off).
stand_ins := {
	"nvidia": {"amd", "intel-gaudi", "tpu"},
	"amd": {"nvidia", "intel-gaudi", "tpu"},
	"intel-gaudi": {"nvidia", "amd", "tpu"},
	"tpu": {"nvidia", "amd", "intel-gaudi"},
	"cpu": {"nvidia", "amd", "intel-gaudi", "tpu"},
}

test_stand_in_table[name] if {
	some requested in accelerators
	some pool in accelerators
	name := sprintf("%s for %s", [pool, requested])
	allowed(pool, requested, false) == expected(pool, requested)
}

# The pool's own accelerator, or one the table lists for the requested one.
expected(accelerator, requested) if accelerator == requested

expected(accelerator, requested) := accelerator in stand_ins[requested] if accelerator != requested

test_the_requested_accelerator_is_never_a_fallback[a] if {
	some a in accelerators
	deny(a, a, false) == set()
}

# A CPU never stands in for an accelerator unless the workload allows it.
test_cpu_never_stands_in_by_default[requested] if {
	some requested in ["nvidia", "amd", "intel-gaudi", "tpu"]
	[r.code | some r in deny("cpu", requested, false)] == ["fallback_not_allowed"]
}

test_cpu_stands_in_with_allow_cpu_fallback[requested] if {
	some requested in ["nvidia", "amd", "intel-gaudi", "tpu"]
	deny("cpu", requested, true) == set()
}

# allow_cpu_fallback lets a CPU in, nothing else.
test_allow_cpu_fallback_admits_no_other_accelerator if {
	[r.code | some r in deny("tpu", "nvidia", true)] == []
	[r.code | some r in deny("npu", "nvidia", true)] == ["fallback_not_allowed"]
}

# A CPU request may run on any accelerator of the table (its engine decides, in portability).
test_cpu_request_on_accelerators[pool] if {
	some pool in ["nvidia", "amd", "intel-gaudi", "tpu"]
	deny(pool, "cpu", false) == set()
}

test_cpu_reason if {
	deny("cpu", "nvidia", false) == {{
		"code": "fallback_not_allowed",
		"kind": "never",
		"message": "cpu may not stand in for nvidia (not in the fallback table, and allow_cpu_fallback is off)",
		"details": {
			"requested": "nvidia",
			"accelerator": "cpu",
			"stand_ins": ["amd", "intel-gaudi", "tpu"],
			"allow_cpu_fallback": false,
		},
	}}
}

test_other_accelerator_message if {
	[r.message | some r in deny("npu", "tpu", false)] == ["npu may not stand in for tpu (not in the fallback table)"]
}

test_table_override_removes_a_stand_in if {
	[r.message | some r in deny("tpu", "nvidia", false)] == ["tpu may not stand in for nvidia (not in the fallback table)"] with data.examlops.tables.fallback.stand_ins.nvidia as ["amd"]
	[r.details.stand_ins | some r in deny("tpu", "nvidia", false)] == [["amd"]] with data.examlops.tables.fallback.stand_ins.nvidia as ["amd"]
}

# A requested accelerator with no row in the table has no stand-in.
test_no_row_no_stand_in if {
	[r.details.stand_ins | some r in deny("amd", "nvidia", false)] == [[]] with data.examlops.tables.fallback.stand_ins as {}
}

test_table_lists_only_known_accelerators[requested] if {
	some requested, list in data.examlops.tables.fallback.stand_ins
	data.examlops.tables.accelerators[requested]
	every a in list {
		data.examlops.tables.accelerators[a]
		a != requested
	}
}

# The E8 rule: never a CPU in the table for an accelerator.
test_table_never_lists_cpu if {
	every _, list in data.examlops.tables.fallback.stand_ins {
		not "cpu" in list
	}
}

test_about if {
	a := fallback.about
	a.title == "Fallback"
	a.custom.order == 50
	a.custom.reads == {"shape": ["accelerator"], "workload": ["accelerator", "allow_cpu_fallback"]}
	object.keys(a.custom.codes) == {"fallback_not_allowed"}
}
