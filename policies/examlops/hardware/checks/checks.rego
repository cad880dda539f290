# METADATA
# title: Checks
# description: >-
#   One package per check below this one (checks/<name>/<name>.rego, its _test.rego beside it),
#   each with `deny contains reason if ...`, an `about` rule and METADATA naming its order, its
#   reason codes and the shape and workload fields it reads; the placement package discovers them.
#   This annotation types every check's input (and its tests') for `opa check --strict -s
#   schemas/`: the shape as a pool (shape.schema.json: a check can read only pool fields and what
#   is derived from its nodes, which is what a signature may name), the workload as a workload
#   (workload.schema.json), and the rest of what a pool-stage check sees (check-input.schema.json).
# scope: subpackages
# schemas:
#   - input: schema["check-input.schema"]
#   - input.shape: schema["shape.schema"]
#   - input.workload: schema["workload.schema"]
package examlops.hardware.checks
