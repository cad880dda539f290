package examlops.hardware.placement_test

import data.examlops.hardware.composer
import data.examlops.hardware.placement
import data.examlops.hardware.reference
import data.examlops.hardware.reference_test as fx
import data.examlops.hardware.tiers
import data.examlops.hardware.workload

test_about if {
	a := placement.about
	a.revision == null
	a.opa_version == opa.runtime().version
	a.signature == composer.signature
	a.checks == composer.check_list
	{c.code | some c in a.other_codes} == ((object.keys(workload.about.custom.codes) | object.keys(tiers.about.custom.codes)) | object.keys(composer.own_about.custom.codes)) | object.keys(reference.own_about.custom.codes)
}

# --- provenance -------------------------------------------------------------------------------------

bundle(roots, revision) := {"manifest": {"revision": revision, "roots": roots}}

revision_cases := {
	"bundle owning examlops": {"bundles": {"main": bundle(["examlops", "system/authz"], "sha256:abc")}, "revision": "sha256:abc"},
	"another bundle beside it": {
		"bundles": {"main": bundle(["examlops"], "r1"), "other": bundle(["other"], "r2")},
		"revision": "r1",
	},
	"bundle of other roots only": {"bundles": {"other": bundle(["other"], "r2")}, "revision": null},
	"a root under examlops is not examlops": {"bundles": {"main": bundle(["examlops/hardware"], "r1")}, "revision": null},
	"no bundles": {"bundles": {}, "revision": null},
	"manifest without roots": {"bundles": {"main": {"manifest": {"revision": "r1"}}}, "revision": null},
}

test_revision[name] if {
	some name, tc in revision_cases
	composer.revision == tc.revision with data.system.bundles as tc.bundles
	placement.confirm == {"revision": tc.revision, "opa_version": opa.runtime().version} with data.system.bundles as tc.bundles
}

test_revision_null_without_bundles if {
	composer.revision == null
}

test_decision_and_verdicts_carry_the_revision if {
	bundles := {"main": bundle(["examlops"], "sha256:abc")}
	d := fx.decide(fx.train({}), fx.spec_pools) with data.system.bundles as bundles
	d.confirm.revision == "sha256:abc"
	v := placement.verdicts with input as {"workload": fx.train({}), "keys": ["hpc-nvidia"], "shapes": fx.shapes}
		with data.system.bundles as bundles
	v.confirm.revision == "sha256:abc"
}

test_about_publishes_the_pool_stage_and_the_texts if {
	placement.about.pool_stage == ["budget", "capacity", "wait"]
	placement.about.texts == composer.texts
}
