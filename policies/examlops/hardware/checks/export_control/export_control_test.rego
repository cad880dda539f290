package examlops.hardware.checks.export_control_test

import data.examlops.hardware.checks.export_control
import data.examlops.hardware.composer
import data.examlops.hardware.placement

# Regions in listed countries, added to the reviewed regions table for these tests only (the table
# lists no such region today).
more_regions := object.union(data.examlops.tables.regions, {
	"cn-north-1": {"country": "CN", "label": "Beijing (test)"},
	"ru-central1": {"country": "RU", "label": "Moscow (test)"},
})

shape(accelerator, model, region) := {"accelerator": accelerator, "model": model, "region": region}

deny(s) := d if {
	d := export_control.deny with input as {"shape": s, "workload": {}}
		with data.examlops.tables.regions as more_regions
}

codes(s) := {r.code | some r in deny(s)}

rule := "us-ear-3a090-example"

source := data.examlops.tables.export_control.rules[rule].source

cases := {
	"listed model in a listed country": {"shape": shape("nvidia", "h100", "cn-north-1"), "codes": {"export_controlled"}},
	"listed amd model in a listed country": {"shape": shape("amd", "mi300x", "ru-central1"), "codes": {"export_controlled"}},
	"listed model in the EU": {"shape": shape("nvidia", "h100", "de-juelich"), "codes": set()},
	"listed model in the US": {"shape": shape("nvidia", "b200", "us-east-1"), "codes": set()},
	"listed model in a coarse area": {"shape": shape("nvidia", "h100", "eu"), "codes": set()},
	"unlisted model in a listed country": {"shape": shape("nvidia", "t4", "cn-north-1"), "codes": set()},
	"v100 is below the threshold": {"shape": shape("nvidia", "v100", "cn-north-1"), "codes": set()},
	"no model, a listed family, a listed country": {"shape": shape("nvidia", null, "cn-north-1"), "codes": {"export_model_unknown"}},
	"model key absent, a listed family": {"shape": {"accelerator": "amd", "region": "cn-north-1"}, "codes": {"export_model_unknown"}},
	"no model, an unlisted family": {"shape": shape("intel-gaudi", null, "cn-north-1"), "codes": set()},
	"no model, cpu": {"shape": shape("cpu", null, "cn-north-1"), "codes": set()},
	"no model, elsewhere": {"shape": shape("nvidia", null, "fi-kajaani"), "codes": set()},
	# A region missing from the table is residency's to deny (region_unknown), for every workload.
	"unknown region": {"shape": shape("nvidia", "h100", "mars-1"), "codes": set()},
}

test_export_control[name] if {
	some name, tc in cases
	codes(tc.shape) == tc.codes
}

test_export_controlled_message_and_details if {
	deny(shape("nvidia", "h100", "cn-north-1")) == {{
		"code": "export_controlled",
		"kind": "never",
		"message": sprintf("export control forbids H100 devices in CN (region 'cn-north-1'): rule %s, %s", [rule, source]),
		"details": {"rule": rule, "source": source, "model": "h100", "country": "CN", "region": "cn-north-1"},
	}}
}

test_export_model_unknown_message_and_details if {
	deny(shape("amd", null, "ru-central1")) == {{
		"code": "export_model_unknown",
		"kind": "never",
		"message": sprintf(
			"pool names no device model, and export control forbids some amd models in RU (region 'ru-central1'): rule %s, %s",
			[rule, source],
		),
		"details": {"rule": rule, "source": source, "accelerator": "amd", "country": "RU", "region": "ru-central1"},
	}}
}

test_every_rule_names_its_source if {
	every _, r in data.examlops.tables.export_control.rules {
		is_string(r.source)
		count(r.source) > 0
		count(r.models) > 0
		count(r.countries) > 0
	}
}

# Every listed model is one of the models table: a typo would control nothing.
test_every_listed_model_is_known if {
	every _, r in data.examlops.tables.export_control.rules {
		every m in r.models {
			data.examlops.tables.models[m]
		}
	}
}

test_every_listed_country_is_a_two_letter_code if {
	every _, r in data.examlops.tables.export_control.rules {
		every c in r.countries {
			regex.match(`^[A-Z]{2}$`, c)
		}
	}
}

# Each matching rule gives its own reason.
test_two_rules_two_reasons if {
	rules := {
		"a": {"source": "A", "models": ["h100"], "countries": ["CN"]},
		"b": {"source": "B", "models": ["h100", "h200"], "countries": ["CN", "RU"]},
	}
	d := deny(shape("nvidia", "h100", "cn-north-1")) with data.examlops.tables.export_control.rules as rules
	{[r.code, r.details.rule] | some r in d} == {["export_controlled", "a"], ["export_controlled", "b"]}
	d2 := deny(shape("nvidia", "h200", "cn-north-1")) with data.examlops.tables.export_control.rules as rules
	{r.details.rule | some r in d2} == {"b"}
}

test_no_rules_no_denials if {
	deny(shape("nvidia", "h100", "cn-north-1")) == set() with data.examlops.tables.export_control.rules as {}
}

test_every_declared_code_is_produced if {
	produced := codes(shape("nvidia", "h100", "cn-north-1")) | codes(shape("nvidia", null, "cn-north-1"))
	produced == object.keys(export_control.about.custom.codes)
	every _, c in export_control.about.custom.codes {
		c.kind == "never"
	}
}

test_metadata if {
	export_control.about.title == "Export control"
	export_control.about.custom.blocks_burst == true
	export_control.about.custom.reads == {"shape": ["accelerator", "model", "region"], "workload": []}
	object.get(export_control.about.custom, "stage", "shape") == "shape"
}

# --- through the composer: discovered from its metadata, no other edit -------------------------------

train := {"name": "train", "accelerator": "nvidia", "engine": "generic"}

shapes := {
	"hpc-cn": {
		"target": "hpc", "accelerator": "nvidia", "model": "h100", "region": "cn-north-1",
		"capabilities": [], "supports_fractions": false, "fixed_profile": null,
	},
	"cloud-cn": {
		"target": "cloud", "accelerator": "nvidia", "model": "h100", "region": "cn-north-1",
		"capabilities": [], "supports_fractions": false, "fixed_profile": null,
	},
	"hpc-eu": {
		"target": "hpc", "accelerator": "nvidia", "model": "h100", "region": "de-juelich",
		"capabilities": [], "supports_fractions": false, "fixed_profile": null,
	},
}

pool(name, cost) := {"name": name, "shape": name, "cost_per_hour": cost, "carbon_per_hour": 250, "capacity": {"whole": 4, "slices": {}}}

decide(w, pools) := d if {
	d := placement.decision with input as {"workload": w, "shapes": shapes, "pools": pools}
		with data.examlops.tables.regions as more_regions
}

test_the_composer_runs_it if {
	"export_control" in composer.shape_checks
	d := decide(train, [pool("hpc-cn", 1), pool("hpc-eu", 3)])
	d.pool == "hpc-eu"
	[r.code | some r in d.verdicts["hpc-cn"].reasons] == ["export_controlled"]
}

# Governance: a cloud pool stopped by export control alone blocks a burst, and names it.
test_it_blocks_a_burst if {
	d := decide(object.union(train, {"target": "cloud"}), [pool("cloud-cn", 1)])
	d.outcome == "blocked"
	d.burst.verdict == "blocked"
	d.burst.pool == "cloud-cn"
	d.burst.reason.code == "export_controlled"
	d.verdicts["cloud-cn"].blocks_burst == true
}
