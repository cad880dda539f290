# METADATA
# title: Placement
# description: >-
#   The placement policy's entry points, each one rule over the package of its concern:
#     confirm    the loaded bundle revision and the OPA version: one cheap call per decision
#     about      the revision, the signature (the shape and workload fields verdicts depend on),
#                the checks with their reason codes, the other codes, the pool-stage checks and
#                the message texts, from the packages' own metadata (composer)
#     verdicts   compact per-shape verdicts for input.keys (verdicts; its answer's schema is
#                schemas/verdicts-answer.schema.json)
#     views      what the checks, the tier and the grant see of the shapes of input.keys, and
#                their digest: the caller may store the views under
#                data.examlops_fleet.views[views.key] for verdict queries over the same keys that
#                carry the digest (verdicts, examlops.fleet)
#     decision   the complete reference decision over input.pools with their capacity and prices
#                (reference)
#
#   Its input is typed for `opa check --strict -s schemas/`: placement-input.schema.json, and the
#   workload as workload.schema.json.
# schemas:
#   - input: schema["placement-input.schema"]
#   - input.workload: schema["workload.schema"]
package examlops.hardware.placement

import data.examlops.fleet
import data.examlops.hardware.composer
import data.examlops.hardware.reference
import data.examlops.hardware.tiers
import data.examlops.hardware.verdicts as judged
import data.examlops.hardware.workload

# METADATA
# title: confirm
# description: The loaded bundle revision and the OPA version; one cheap call per decision.
# entrypoint: true
confirm := composer.confirm

# METADATA
# title: about
# description: >-
#   The revision, the signature (the shape and workload fields verdicts depend on), the checks
#   with their reason codes (from their own metadata), the other codes, the pool-stage checks and
#   the texts the caller words results with.
# entrypoint: true
about := {
	"revision": composer.revision,
	"opa_version": opa.runtime().version,
	"signature": composer.signature,
	"checks": composer.check_list,
	"other_codes": array.flatten([
		composer.codes_of(workload.about), composer.codes_of(tiers.about),
		composer.codes_of(composer.own_about), composer.codes_of(reference.own_about),
	]),
	"unsupported_checks": composer.unsupported_checks,
	"pool_stage": sort(composer.pool_stage_checks),
	"texts": composer.texts,
}

# METADATA
# title: verdicts
# description: >-
#   Compact per-shape verdicts for input.keys (shapes from input.shapes or
#   data.examlops_fleet.shapes), every field named (schemas/verdicts-answer.schema.json).
# entrypoint: true
verdicts := judged.answer

# METADATA
# title: views
# description: >-
#   What each check, the tier and the grant see of the shapes of input.keys (from
#   data.examlops_fleet.shapes), and the denials of the checks that read no workload field: a
#   function of the revision and the shapes alone ("views"), with its digest ("digest"). Stored
#   under data.examlops_fleet.views[key], it spares every verdict query for exactly these keys under
#   this revision that carries the digest (input.views) working it out again; views rewritten there
#   no longer hash to it and are not read (examlops.fleet).
# entrypoint: true
views := {"views": judged.views, "digest": fleet.digest(judged.views)}

# METADATA
# title: decision
# description: >-
#   The complete reference decision over input.pools with their capacity, prices and carbon: the
#   pool chosen and its note, the burst verdict and every pool's verdict with its reasons.
# entrypoint: true
decision := reference.decision
