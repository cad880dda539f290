package examlops.hardware.verdicts_test

import data.examlops.fleet
import data.examlops.hardware.composer
import data.examlops.hardware.placement
import data.examlops.hardware.reference_test as fx
import data.examlops.hardware.verdicts

e8_keys := ["hpc-nvidia", "hpc-mi300", "cloud-a100"]

answer(w, keys) := v if {
	v := placement.verdicts with input as {"workload": w, "keys": keys, "shapes": fx.shapes}
}

# The budget's limits for a workload without caps.
no_limits := {"cost_per_hour": null, "carbon_per_hour": null, "reasons": {"cost_per_hour": null, "carbon_per_hour": null}}

codes_of(v, row) := [v.reasons[i].code | some i in row.denials]

test_verdicts_named_layout if {
	v := answer(fx.train({"accelerator": "tpu", "target": "hpc"}), e8_keys)
	v.judged == true
	v.rejection == null
	v.request_rejected == null
	v.burst_mode == null
	v.missing == []
	v.notes == [
		"requested tpu pools are full — fell back to amd",
		"requested tpu pools are full — fell back to nvidia",
		"requested tpu unavailable — fell back to amd",
		"requested tpu unavailable — fell back to nvidia",
	]

	# Per shape, every field named; notes, denials and grants by index into the answer's lists.
	v.shapes == {
		"hpc-mi300": {"tier": 1, "note": 2, "note_full": 0, "note_budget": null, "denials": [], "grant": 0, "blocks_burst": false},
		"hpc-nvidia": {"tier": 1, "note": 3, "note_full": 1, "note_budget": null, "denials": [], "grant": 2, "blocks_burst": false},
		"cloud-a100": {"tier": 3, "note": 3, "note_full": 1, "note_budget": null, "denials": [0], "grant": 1, "blocks_burst": false},
	}
	v.budget_fallback == null
	[r.code | some r in v.reasons] == ["burst_not_allowed"]

	# grants[i] = {grant, shortfall, limits}, projections sorted.
	[g.grant.devices | some g in v.grants] == [1, 1, 1]
	[g.limits | some g in v.grants] == [no_limits, no_limits, no_limits]
	[g.shortfall.message | some g in v.grants] == [
		"needs 1 whole amd device(s) with nothing on them, more than are free",
		"needs 1 whole nvidia device(s) with nothing on them, more than are free",
		"needs 1 whole nvidia device(s) with nothing on them, more than are free",
	]

	# Every pair of tiers, whatever shapes were judged (a caller keeps the answer for later queries).
	count(v.preferences) == 6
	{
		"tier": 3,
		"selected": 1,
		"reason": {
			"code": "burst_not_needed",
			"kind": "preference",
			"message": "an HPC pool can take this workload; bursting to cloud is not needed",
			"details": {"tier": 3, "selected_tier": 1},
		},
	} in v.preferences
	v.confirm == placement.confirm
}

test_verdicts_judge_every_key if {
	keys := ["hpc-nvidia", "hpc-mi300", "cloud-a100", "hpc-h100", "cloud-frankfurt", "cloud-mars"]
	v := answer(fx.train({}), keys)
	object.keys(v.shapes) == {k | some k in keys}
	v.missing == []
}

test_verdicts_list_missing_keys_sorted if {
	v := answer(fx.train({}), ["zz-unknown", "hpc-nvidia", "aa-unknown"])
	v.missing == ["aa-unknown", "zz-unknown"]
	object.keys(v.shapes) == {"hpc-nvidia"}
}

# The fleet's data as the layer stores it: each shape under its content key (examlops.fleet).
key_of := {name: fleet.key(s) | some name, s in fx.shapes}

stored_shapes := {fleet.key(s): s | some s in fx.shapes}

test_verdicts_read_shapes_from_fleet_data if {
	v := placement.verdicts with input as {"workload": fx.train({}), "keys": [key_of["hpc-nvidia"], key_of["cloud-a100"], "nope"]}
		with data.examlops_fleet.shapes as stored_shapes
	object.keys(v.shapes) == {key_of["hpc-nvidia"], key_of["cloud-a100"]}
	v.missing == ["nope"]
}

# A stored shape rewritten in place (a cloud pool moved into the EU) is not judged: its key is
# missing, and the caller uploads the shape again.
test_verdicts_do_not_read_a_stored_shape_that_no_longer_hashes_to_its_key if {
	k := key_of["cloud-a100"]
	moved := object.union(fx.shapes["cloud-a100"], {"region": "eu"})
	v := placement.verdicts with input as {"workload": fx.train({}), "keys": [k]} with data.examlops_fleet.shapes as {k: moved}
	v.missing == [k]
	object.keys(v.shapes) == set()
}

test_input_shapes_win_over_fleet_data if {
	v := placement.verdicts with input as {"workload": fx.train({}), "keys": ["k"], "shapes": {"k": fx.shapes["hpc-nvidia"]}}
		with data.examlops_fleet.shapes as {"k": fx.shapes["cloud-a100"]}
	v.shapes.k.tier == 0
}

test_verdicts_without_keys_judge_every_input_shape if {
	v := placement.verdicts with input as {"workload": fx.train({}), "shapes": {"a": fx.shapes["hpc-nvidia"], "b": fx.shapes["hpc-mi300"]}}
	object.keys(v.shapes) == {"a", "b"}
}

test_verdicts_of_no_keys if {
	v := answer(fx.train({}), [])
	v.shapes == {}
	v.grants == []
	v.reasons == []
	v.missing == []
}

test_invalid_workload_is_not_judged if {
	v := answer(fx.train({"fraction": 0, "residency": "eu"}), e8_keys)
	v.judged == false
	v.rejection.code == "residency_unknown"
	v.shapes == {}
	v.reasons == []
	v.grants == []
	v.notes == []
	v.preferences == []
	v.request_rejected == null
	v.missing == []
}

test_rejected_request_is_judged_and_says_so if {
	v := answer(fx.train({"accelerator": "amd", "engine": "sglang"}), e8_keys)
	v.judged == true
	v.rejection.code == "backend_unsupported"
	v.request_rejected.code == "request_rejected"
	v.request_rejected.message == "the workload as asked is rejected: engine 'sglang' cannot run on amd (needs backend rocm; supports ('cuda',))"
	object.keys(v.shapes) == {"hpc-nvidia", "hpc-mi300", "cloud-a100"}
}

test_verdicts_blocks_burst_for_residency_alone if {
	v := answer(fx.train({"target": "cloud", "residency": "eu-only"}), ["cloud-a100", "cloud-frankfurt", "hpc-nvidia", "cloud-mars"])
	v.burst_mode == "cloud"
	v.shapes["cloud-a100"].blocks_burst == true
	v.shapes["cloud-mars"].blocks_burst == true
	v.shapes["cloud-frankfurt"].denials == []
	v.shapes["cloud-frankfurt"].blocks_burst == false

	# An HPC pool is no burst: its denial never blocks one.
	v.shapes["hpc-nvidia"].blocks_burst == false
	codes_of(v, v.shapes["hpc-nvidia"]) == ["target_mismatch"]
}

test_a_cloud_pool_denied_by_more_than_residency_blocks_no_burst if {
	v := answer(fx.train({"residency": "eu-only", "capabilities": ["fp8"], "target": "cloud"}), ["cloud-a100"])
	codes_of(v, v.shapes["cloud-a100"]) == ["capability_missing", "residency_forbids"]
	v.shapes["cloud-a100"].blocks_burst == false
}

# Each check runs once per distinct projection of the shapes onto the fields it declares.
test_checks_run_once_per_distinct_projection if {
	results := verdicts.check_results with input as {
		"workload": fx.train({}),
		"keys": ["hpc-nvidia", "hpc-h100", "hpc-t4", "hpc-h100-1g", "cloud-a100", "cloud-london"],
		"shapes": fx.shapes,
	}
	count(results.portability) == 1 # all nvidia
	count(results.target) == 2 # hpc, cloud
	count(results.residency) == 3 # eu/hpc, us/cloud, eu-west-2/cloud
	count(results.capabilities) == 3 # models null, h100, t4
	count(results.partition) == 4 # [nvidia, null|h100|t4, null] and [nvidia, h100, 1g.10gb]
	v := answer(fx.train({}), ["hpc-nvidia", "hpc-h100", "hpc-t4", "hpc-h100-1g", "cloud-a100", "cloud-london"])
	count(v.grants) == 5
}

# A check sees only the fields it declares: a field no check reads changes nothing; a signature
# field left out is the same as null.
test_undeclared_shape_fields_change_nothing if {
	w := fx.train({"capabilities": ["fp8"]})
	plain := placement.verdicts with input as {"workload": w, "keys": ["k"], "shapes": {"k": fx.shapes["hpc-h100"]}}
	extra := placement.verdicts with input as {
		"workload": w, "keys": ["k"],
		"shapes": {"k": object.union(fx.shapes["hpc-h100"], {"label": "x", "zone": "b", "count": 99})},
	}
	plain == extra
	fewer := placement.verdicts with input as {
		"workload": w, "keys": ["k"],
		"shapes": {"k": object.remove(fx.shapes["hpc-h100"], ["fixed_profile"])},
	}
	plain == fewer
}

# Only the checks that deny some shape are looked up per shape; the others deny nothing anywhere.
test_only_denying_checks_are_looked_up if {
	q := {"workload": fx.train({"target": "hpc"}), "keys": ["hpc-nvidia", "cloud-a100"], "shapes": fx.shapes}
	verdicts.denying_checks == ["target"] with input as q
}

test_preferences_over_every_pair_of_tiers if {
	v := answer(fx.train({"allow_burst": true}), ["hpc-nvidia"])
	[[p.tier, p.selected, p.reason.code] | some p in v.preferences] == [
		[1, 0, "fallback_not_needed"],
		[2, 0, "burst_not_needed"],
		[2, 1, "burst_not_needed"],
		[3, 0, "burst_not_needed"],
		[3, 1, "burst_not_needed"],
		[3, 2, "fallback_not_needed"],
	]
}

note_at(_, null) := null

note_at(notes, i) := notes[i] if i != null

# The compact answer and the reference decision agree pool by pool.
test_verdicts_agree_with_decision if {
	w := fx.train({"accelerator": "tpu", "allow_burst": true, "residency": "eu-only"})
	pools := [fx.hpc_nvidia, fx.hpc_mi300, fx.cloud_a100, fx.pool("cloud-frankfurt", "cloud-frankfurt", 3, 1)]
	d := fx.decide(w, pools)
	v := answer(w, [p.shape | some p in pools])
	every p in pools {
		row := v.shapes[p.shape]
		pv := d.verdicts[p.name]
		pv.tier == row.tier
		pv.note == note_at(v.notes, row.note)
		pv.note_full == note_at(v.notes, row.note_full)
		pv.note_budget == note_at(v.notes, row.note_budget)
		pv.grant == v.grants[row.grant].grant
		pv.blocks_burst == row.blocks_burst
		[r | some i in row.denials; r := v.reasons[i]] == pv.denials
	}
}

test_the_answer_judges_only_with_a_valid_workload if {
	composer.valid with input as {"workload": fx.train({})}
	not composer.valid with input as {"workload": fx.train({"fraction": 2})}
}

# --- the budget fallback -----------------------------------------------------------------------------

# With a cap, a stand-in's row also names the note for when the requested accelerator's pools are
# over the budget.
test_verdicts_name_the_note_when_over_the_budget if {
	v := answer(fx.train({"max_cost_per_hour": 2.25}), ["hpc-nvidia", "hpc-mi300"])
	v.notes[v.shapes["hpc-mi300"].note_budget] == "requested nvidia pools are over the budget (max_cost_per_hour $2.25/h) — fell back to amd"
	v.shapes["hpc-nvidia"].note_budget == null
	v.budget_fallback == null
}

test_verdicts_say_a_forbidden_budget_fallback if {
	v := answer(fx.train({"max_cost_per_hour": 2.25, "allow_budget_fallback": false}), ["hpc-nvidia", "hpc-mi300"])
	v.budget_fallback.code == "budget_fallback_forbidden"
	v.budget_fallback.kind == "never"
	v.budget_fallback.details == {"requested": "nvidia", "allow_budget_fallback": false}
}

# Without a cap there is nothing to be over: no note for it, and nothing to forbid.
test_without_a_cap_the_verdicts_have_no_budget_note_and_forbid_nothing if {
	v := answer(fx.train({"allow_budget_fallback": false}), ["hpc-nvidia", "hpc-mi300"])
	v.budget_fallback == null
	every row in v.shapes {
		row.note_budget == null
	}
}

# --- the fleet's views, stored -------------------------------------------------------------------------

# A bundle's manifest with a revision, as OPA publishes it (stored views are read only under one).
bundles(revision) := {"b": {"manifest": {"roots": ["examlops"], "revision": revision}}}

fleet_names := ["hpc-nvidia", "hpc-mi300", "cloud-a100", "hpc-h100", "hpc-h100-1g", "cloud-frankfurt", "cloud-mars", "cloud-amd"]

# The fleet's shapes as the layer stores them: under their content keys.
fleet_keys := [key_of[name] | some name in fleet_names]

given := v if {
	v := placement.views with input as {"keys": fleet_keys}
		with data.examlops_fleet.shapes as stored_shapes
		with data.system.bundles as bundles("r1")
}

fleet_views := given.views

# The verdicts for the fleet's keys with the shapes as fleet data, `stored` as its stored views and
# `digest` as the digest the caller had with them.
stored_answer(w, stored, revision, digest) := v if {
	v := placement.verdicts with input as {"workload": w, "keys": fleet_keys, "views": digest}
		with data.examlops_fleet.shapes as stored_shapes
		with data.examlops_fleet.views as stored
		with data.system.bundles as bundles(revision)
}

# Worked out in the query: no views stored.
computed(w, revision) := stored_answer(w, {}, revision, given.digest)

stored_workloads := [
	fx.train({}),
	fx.train({"accelerator": "tpu", "allow_burst": true, "residency": "eu-only"}),
	fx.train({"target": "cloud", "capabilities": ["fp8"], "fraction": 0.5}),
	fx.train({"residency": "restricted", "data_region": "de-juelich", "allow_cpu_fallback": true}),
	fx.train({"fraction": 2}),
]

test_views_depend_on_the_revision_and_the_shapes_alone if {
	fleet_views.revision == "r1"
	fleet_views.key == verdicts.key_of(fleet_keys)
	object.keys(fleet_views.grant.of) == {k | some k in fleet_keys}

	# One view per distinct value of the fields a check reads; the checks that read no workload
	# field are judged here, once.
	count(fleet_views.checks.target.views) == 2
	object.keys(fleet_views.fixed) == {name |
		some name in composer.shape_checks
		composer.reads(composer.check_about[name], "workload") == []
	}
	"export_control" in object.keys(fleet_views.fixed)
	count(fleet_views.fixed.export_control) == count(fleet_views.checks.export_control.views)

	# With their digest: what stored views must hash to, to be read.
	given.digest == fleet.digest(fleet_views)
}

test_stored_views_give_the_same_answer if {
	every w in stored_workloads {
		stored_answer(w, {fleet_views.key: fleet_views}, "r1", given.digest) == computed(w, "r1")
	}
}

# Views altered after they were stored: what the answer then says shows they were read.
tampered := json.patch(fleet_views, [{"op": "replace", "path": "/checks/target/views", "value": [
	{"target": "hpc"},
	{"target": "cloud"},
]}])

test_stored_views_are_read if {
	w := fx.train({"target": "hpc"})

	# (As if the caller had been given these views and their digest.)
	stored_answer(w, {fleet_views.key: tampered}, "r1", fleet.digest(tampered)) != computed(w, "r1")
}

# Rewritten in place with the token (a check made to see another target, region or price): they
# no longer hash to the digest the caller had with them, and are worked out again instead.
test_views_rewritten_in_place_are_not_read if {
	w := fx.train({"target": "hpc"})
	stored_answer(w, {fleet_views.key: tampered}, "r1", given.digest) == computed(w, "r1")
	moved := json.patch(fleet_views, [{"op": "replace", "path": "/fixed", "value": {}}])
	every v in stored_workloads {
		stored_answer(v, {fleet_views.key: moved}, "r1", given.digest) == computed(v, "r1")
	}
}

test_views_without_the_digest_are_not_read if {
	w := fx.train({"target": "hpc"})
	v := placement.verdicts with input as {"workload": w, "keys": fleet_keys}
		with data.examlops_fleet.shapes as stored_shapes
		with data.examlops_fleet.views as {fleet_views.key: tampered}
		with data.system.bundles as bundles("r1")
	v == computed(w, "r1")
}

test_views_stored_under_another_revision_are_not_read if {
	w := fx.train({"target": "hpc"})
	stored_answer(w, {fleet_views.key: tampered}, "r2", fleet.digest(tampered)) == computed(w, "r2")
}

test_views_stored_for_other_keys_are_not_read if {
	w := fx.train({"target": "hpc"})
	other := verdicts.key_of(array.slice(fleet_keys, 1, 8))
	stored_answer(w, {other: tampered}, "r1", fleet.digest(tampered)) == computed(w, "r1")
}

test_views_are_not_read_for_inline_shapes if {
	w := fx.train({"target": "hpc"})
	inline := placement.verdicts with input as {"workload": w, "keys": fleet_keys, "shapes": stored_shapes, "views": fleet.digest(tampered)}
		with data.examlops_fleet.views as {fleet_views.key: tampered}
		with data.system.bundles as bundles("r1")
	inline == computed(w, "r1")
}

# Views that hash to the digest were worked out from every shape of their keys (a key is its shape's
# hash): read, they answer without any shape, even one removed since. Without them, the removed
# shape is missing and the caller uploads it.
test_stored_views_answer_without_reading_a_shape if {
	w := fx.train({"target": "hpc"})
	mars := key_of["cloud-mars"]
	without := object.remove(stored_shapes, [mars])
	read := placement.verdicts with input as {"workload": w, "keys": fleet_keys, "views": given.digest}
		with data.examlops_fleet.shapes as without
		with data.examlops_fleet.views as {fleet_views.key: fleet_views}
		with data.system.bundles as bundles("r1")
	read == computed(w, "r1")
	read.missing == []
	lacking := placement.verdicts with input as {"workload": w, "keys": fleet_keys, "views": given.digest}
		with data.examlops_fleet.shapes as without
		with data.examlops_fleet.views as {fleet_views.key: tampered}
		with data.system.bundles as bundles("r1")
	lacking.missing == [mars]
}

# Views of fewer shapes stored under the key of all of them (and given their own digest) say which
# keys they cover: never read for the keys asked.
test_views_covering_other_keys_are_not_read if {
	w := fx.train({"target": "hpc"})
	partial := placement.views with input as {"keys": fleet_keys}
		with data.examlops_fleet.shapes as object.remove(stored_shapes, [key_of["cloud-mars"]])
		with data.system.bundles as bundles("r1")
	stored_answer(w, {fleet_views.key: partial.views}, "r1", partial.digest) == computed(w, "r1")
}

# Views worked out while a shape was missing are keyed by the shapes they cover: never read for
# the keys asked.
test_views_of_fewer_shapes_are_keyed_by_what_they_cover if {
	partial := placement.views with input as {"keys": fleet_keys}
		with data.examlops_fleet.shapes as object.remove(stored_shapes, [key_of["cloud-mars"]])
		with data.system.bundles as bundles("r1")
	partial.views.key != fleet_views.key
	count(partial.views.grant.of) == count(fleet_keys) - 1
}
