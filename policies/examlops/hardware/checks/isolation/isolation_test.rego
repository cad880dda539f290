package examlops.hardware.checks.isolation_test

import data.examlops.hardware.checks.isolation

shape(overrides) := object.union(
	{
		"accelerator": "nvidia", "model": "t4", "supports_fractions": false, "fixed_profile": null,
		"sharing": "time-slice", "shares_per_device": 4,
	},
	overrides,
)

deny(s, fraction, iso) := d if {
	d := isolation.deny with input as {"shape": s, "workload": {"fraction": fraction, "count": 1, "isolation": iso}}
}

test_a_shared_device_never_honors_a_fraction_that_must_be_isolated if {
	[r] := [r | some r in deny(shape({}), 0.25, "required")]
	r.code == "isolation_unavailable"
	r.kind == "never"
	r.message == "the pool shares devices without isolation (time-slice), and the workload requires its fraction 0.25 isolated (isolation: required)"
}

test_what_is_isolated_or_not_required_passes[name] if {
	some name, [s, fraction, iso] in {
		"shared, isolation any": [shape({}), 0.25, "any"],
		"a whole device": [shape({}), 1, "required"],
		"a MIG slice": [shape({"model": "h100", "supports_fractions": true}), 0.25, "required"],
		"not shared": [shape({"sharing": null, "shares_per_device": null}), 0.25, "required"],
	}
	deny(s, fraction, iso) == set()
}
