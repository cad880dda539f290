# METADATA
# title: Export control
# description: >-
#   No device of a model an export-control rule lists in a country it lists
#   (data.examlops.tables.export_control, each rule naming its source). The country is the
#   region's, from the regions table; a region missing there is denied by residency
#   (region_unknown), so this check judges only known regions. A pool that names no model, in a
#   listed country, of an accelerator family the rule lists models of, cannot be shown not to be
#   one of them: denied too. Governance, like residency: a cloud pool stopped by it alone blocks
#   a burst (the burst is refused, recorded and audited, not silently skipped).
# custom:
#   order: 45
#   blocks_burst: true
#   reads:
#     shape: [accelerator, model, region]
#     workload: []
#   codes:
#     export_controlled:
#       kind: never
#       meaning: "an export-control rule forbids the pool's device model in the pool's country"
#     export_model_unknown:
#       kind: never
#       meaning: "the pool names no model, in a country where a rule lists models of its accelerator family"
package examlops.hardware.checks.export_control

import data.examlops.hardware.reason
import data.examlops.tables.export_control
import data.examlops.tables.models
import data.examlops.tables.regions

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

deny contains reason.make(
	"export_controlled",
	"never",
	sprintf(
		"export control forbids %s devices in %s (region '%s'): rule %s, %s",
		[upper(input.shape.model), country(input.shape.region), input.shape.region, name, rule.source],
	),
	{
		"rule": name,
		"source": rule.source,
		"model": input.shape.model,
		"country": country(input.shape.region),
		"region": input.shape.region,
	},
) if {
	some name, rule in export_control.rules
	country(input.shape.region) in rule.countries
	input.shape.model in rule.models
}

deny contains reason.make(
	"export_model_unknown",
	"never",
	sprintf(
		"pool names no device model, and export control forbids some %s models in %s (region '%s'): rule %s, %s",
		[input.shape.accelerator, country(input.shape.region), input.shape.region, name, rule.source],
	),
	{
		"rule": name,
		"source": rule.source,
		"accelerator": input.shape.accelerator,
		"country": country(input.shape.region),
		"region": input.shape.region,
	},
) if {
	object.get(input.shape, "model", null) == null
	some name, rule in export_control.rules
	country(input.shape.region) in rule.countries
	input.shape.accelerator in families(rule)
}

# The country of a region of the table (coarse regions such as "eu" name an area, not a country).
country(region) := regions[region].country

# The accelerator families of a rule's models.
families(rule) := {models[m].accelerator | some m in rule.models}
