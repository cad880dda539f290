package examlops.hardware.composer_test

import data.examlops.hardware.checks
import data.examlops.hardware.composer
import data.examlops.hardware.fractions
import data.examlops.hardware.reference_test as fx
import data.examlops.hardware.tiers
import data.examlops.hardware.workload

# --- the checks, from their own metadata ------------------------------------------------------------

# The checks the scenarios of this file are written for, in their declared order. A plugin added
# under checks changes none of the composition tests below: they run on exactly these packages
# (with checks as core_checks), and on the real tree they only require the
# core to be there, in this order.
core_names := ["portability", "target", "capabilities", "residency", "fallback", "partition", "budget", "wait", "capacity"]

core_checks := {name: {"about": checks[name].about} | some name in core_names}

# Every package under checks that declares itself a check (has an about).
# (A lookup of each package's about, not object.keys or iterating the values: that would evaluate
# every rule under checks, the checks' test packages included.)
# regal ignore:use-object-keys
check_packages := {name | some name; checks[name].about}

listed := [c.name | some c in composer.check_list]

test_check_list_order if {
	names := listed with checks as core_checks
	names == core_names
}

test_check_list_is_every_check_package_in_declared_order if {
	{n | some n in listed} == check_packages
	count(listed) == count(check_packages)
	ordered := [name | some [_, name] in sort([[checks[n].about.custom.order, n] | some n in check_packages])]
	listed == ordered
}

test_core_checks_are_listed_in_their_order if {
	[n | some n in listed; n in core_names] == core_names
}

test_check_list_orders_increase if {
	orders := [c.order | some c in composer.check_list]
	orders == sort(orders)
	count(orders) == count({o | some o in orders})
}

# A check's stage: "shape" unless it declares another.
declared_stage(a) := a.custom.stage

declared_stage(a) := "shape" if not a.custom.stage

test_check_list_entries[name] if {
	some c in composer.check_list
	name := c.name
	a := checks[name].about
	c.title == a.title
	c.order == a.custom.order
	c.stage == declared_stage(a)
	{x.code | some x in c.codes} == object.keys(a.custom.codes)
	every x in c.codes {
		x.kind == a.custom.codes[x.code].kind
		x.meaning == a.custom.codes[x.code].meaning
	}
}

test_budget_wait_and_capacity_are_the_pool_stage_checks if {
	pool_stage := [c.name | some c in composer.check_list; c.stage == "pool"] with checks as core_checks
	pool_stage == ["budget", "wait", "capacity"]
	shape_checks := composer.shape_checks with checks as core_checks
	shape_checks == ["portability", "target", "capabilities", "residency", "fallback", "partition"]
}

# Every shape-stage check on the real tree runs per shape; pool-stage checks do not.
test_shape_checks_are_the_listed_shape_stage_checks if {
	composer.shape_checks == [c.name | some c in composer.check_list; c.stage == "shape"]
	every c in composer.check_list {
		c.stage in {"shape", "pool"}
	}
}

test_code_metadata_is_well_formed[code] if {
	some c in composer.check_list
	some x in c.codes
	code := x.code
	x.kind in {"never", "not_now"}
	is_string(x.meaning)
	count(object.keys(checks[c.name].about.custom.codes[code])) == 2
}

test_codes_are_unique_across_checks if {
	all_codes := [x.code | some c in composer.check_list; some x in c.codes]
	count(all_codes) == count({x | some x in all_codes})
}

blocks_burst_checks := {name | some name, a in composer.check_about; a.custom.blocks_burst == true}

# Of the core, only residency stops a burst by itself (a blocked burst names it).
test_blocks_burst_declared_by_residency_only if {
	names := blocks_burst_checks with checks as core_checks
	names == {"residency"}
}

# A burst is blocked by what a fx.shape is denied for: a pool-stage check cannot declare it.
test_blocks_burst_only_on_shape_checks if {
	every name in blocks_burst_checks {
		name in composer.shape_checks
	}
}

# signature: exactly the union of the fields the checks, the grant, the tiers and the workload read.
declared(kind) := {f |
	some a in array.concat(
		# A lookup of each package's about (iterating the packages' values would evaluate every rule
		# under checks, the checks' test packages included).
		[a | some name; a := checks[name].about],
		[fractions.about, tiers.about, workload.about],
	)
	some f in object.get(a, ["custom", "reads", kind], [])
}

test_signature_is_the_union_of_declared_reads if {
	composer.signature.shape == sort(declared("shape"))
	composer.signature.workload == sort(declared("workload"))
}

test_signature_fields if {
	sig := composer.signature with checks as core_checks
	sig == {
		"shape": [
			"accelerator", "capabilities", "fixed_profile", "model", "node_limits", "region", "shares_per_device", "sharing",
			"spot", "supports_fractions", "target",
		],
		"workload": [
			"accelerator", "allow_budget_fallback", "allow_burst", "allow_cpu_fallback", "capabilities", "carbon_weight",
			"count", "cpu", "data_region", "deadline", "engine", "fraction", "isolation", "max_carbon_per_hour",
			"max_cost_per_hour", "max_wait", "memory", "models", "nodes", "optimize", "project", "residency", "spot",
			"target", "topology", "topology_mode", "work", "work_class",
		],
	}
}

# The core's fields are in the signature whatever plugins add to it.
test_signature_holds_the_core_fields if {
	core := composer.signature with checks as core_checks
	every kind, fields in core {
		every f in fields {
			f in composer.signature[kind]
		}
	}
}

# A check is a plugin: a new package under checks is discovered from its metadata.
zone_check := {
	"about": {
		"title": "Zone",
		"custom": {
			"order": 45,
			"reads": {"shape": ["zone"], "workload": ["priority"]},
			"codes": {"zone_closed": {"kind": "never", "meaning": "the zone is closed"}},
		},
	},
	"deny": [{"code": "zone_closed", "kind": "never", "message": "zone closed", "details": {}}],
}

test_a_new_check_is_discovered if {
	names := listed with checks as object.union(core_checks, {"zone": zone_check})
	names == ["portability", "target", "capabilities", "residency", "zone", "fallback", "partition", "budget", "wait", "capacity"]
	sig := composer.signature with checks.zone as zone_check
	"zone" in sig.shape
	"priority" in sig.workload
	"zone" in composer.shape_checks with checks.zone as zone_check
}

test_a_new_check_denies_in_its_place if {
	d := fx.decide(fx.train({}), [fx.hpc_nvidia]) with checks.zone as zone_check
	fx.codes(d.verdicts["hpc-nvidia"]) == ["zone_closed"]
	d.outcome == "rejected"
	d.reason.code == "no_eligible_pool"
}

# --- the workload -----------------------------------------------------------------------------------

burst_mode_cases := {
	"target cloud": {"w": fx.train({"target": "cloud"}), "mode": "cloud"},
	"target cloud with allow_burst": {"w": fx.train({"target": "cloud", "allow_burst": true}), "mode": "cloud"},
	"allow_burst": {"w": fx.train({"allow_burst": true}), "mode": "spill"},
	"hpc with allow_burst": {"w": fx.train({"target": "hpc", "allow_burst": true}), "mode": "spill"},
	"neither": {"w": fx.train({}), "mode": null},
	"hpc": {"w": fx.train({"target": "hpc"}), "mode": null},
}

test_burst_mode[name] if {
	some name, tc in burst_mode_cases
	composer.burst_mode == tc.mode with input as {"workload": tc.w}
}

rejection_cases := {
	"portable": {"w": fx.train({}), "code": null},
	"sglang on amd": {"w": fx.train({"accelerator": "amd", "engine": "sglang"}), "code": "backend_unsupported"},
	"vllm on tpu": {"w": fx.train({"accelerator": "tpu", "engine": "vllm"}), "code": "backend_unsupported"},
	"first error wins": {"w": fx.train({"accelerator": "gpu", "residency": "eu"}), "code": "accelerator_unknown"},
	"invalid before unportable": {"w": fx.train({"accelerator": "amd", "engine": "sglang", "fraction": 0}), "code": "fraction_invalid"},
}

code_of(null) := null

code_of(r) := r.code if r != null

test_rejection[name] if {
	some name, tc in rejection_cases
	r := composer.rejection with input as {"workload": tc.w}
	code_of(r) == tc.code
}

test_first_error_is_the_rejection if {
	errs := composer.errors with input as {"workload": fx.train({"accelerator": "gpu", "residency": "eu"})}
	[e.code | some e in errs] == ["accelerator_unknown", "residency_unknown"]
}

test_texts_name_every_placeholder_the_caller_fills if {
	composer.texts.no_pools == "no pools are registered"
	contains(composer.texts.no_eligible_pool, "{workload}")
	contains(composer.texts.no_capacity, "{checked}")
	contains(composer.texts.no_capacity, "{reasons}")
	contains(composer.texts.reason_on_many, "{count}")
	not contains(composer.texts.reason_on_one, "{count}")
}

test_the_pool_stage_is_budget_capacity_quota_and_wait if {
	composer.pool_stage_checks == {"budget", "capacity", "quota", "wait"}
}

# --- the headline of a no_capacity summary ----------------------------------------------------------

test_a_pools_cause_is_quota_then_wait_then_capacity_and_other_beside_them if {
	composer.cause({"capacity_exhausted"}) == "capacity"
	composer.cause({"capacity_exhausted", "estimate_unknown"}) == "wait"
	composer.cause({"quota_exceeded", "wait_exceeded", "slice_unavailable"}) == "quota"
	composer.cause({"pool_drained", "capacity_exhausted"}) == "other"
	composer.cause({"a_code_no_check_declares"}) == "other"
}

test_the_headline_is_the_one_cause_s_else_the_general_one if {
	composer.headline({"capacity"}) == "no_capacity"
	composer.headline({"wait"}) == "no_capacity_wait"
	composer.headline({"quota"}) == "no_capacity_quota"
	composer.headline({"other"}) == "no_capacity_other"
	composer.headline({"capacity", "wait"}) == "no_capacity_other"
	every _, name in composer.headline_causes {
		composer.texts[name]
	}
	composer.texts.no_capacity_other
}
