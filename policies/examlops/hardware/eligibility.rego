# Eligibility of one pool for one workload, apart from portability, residency and fractions:
# the target (HPC, cloud, opt-in burst), the capability tags and the free capacity.
package examlops.hardware.eligibility

import data.examlops.hardware.reason
import data.examlops.tables.models

# A pool advertises its own capability tags plus those the hardware table gives its model.
capabilities(pool) := {t | some t in pool.capabilities} | model_capabilities(pool)

model_capabilities(pool) := {t | some t in models[pool.model].capabilities} if pool.model != null

else := set()

# Cloud pools are reached only by bursting: a cloud target, or an HPC/any target with allow_burst.
target(pool, w) := reason.make(
	"burst_not_allowed",
	"never",
	sprintf("cloud pool needs an explicit burst (allow_burst or target cloud); workload target is %s", [w.target]),
	{"pool_target": pool.target, "target": w.target, "allow_burst": w.allow_burst},
) if {
	pool.target == "cloud"
	w.target != "cloud"
	not w.allow_burst
} else := reason.make(
	"target_mismatch",
	"never",
	sprintf("workload asks for target %s; pool is %s", [w.target, pool.target]),
	{"pool_target": pool.target, "target": w.target},
) if {
	w.target in {"hpc", "cloud"}
	pool.target != w.target
	not hpc_burst(pool, w)
} else := null

# An HPC workload with allow_burst may spill to a cloud pool.
hpc_burst(pool, w) if {
	w.target == "hpc"
	pool.target == "cloud"
	w.allow_burst
}

capability(pool, w) := reason.make(
	"capability_missing",
	"never",
	sprintf("pool lacks capabilities %v", [sort(missing)]),
	{"missing": sort(missing), "advertised": sort(capabilities(pool))},
) if {
	missing := {t | some t in w.capabilities} - capabilities(pool)
	count(missing) > 0
} else := null

# needed: devices this workload takes from the pool (a granted fraction, or whole devices).
# A pool whose free capacity is not stated has none: fail closed.
capacity(pool, needed) := object.union(shortfall(needed), {"details": {"needed": needed, "free": free(pool), "count": pool.count}}) if {
	# Tolerance: granted MIG shares are sevenths, which do not add up exactly in binary floats.
	free(pool) < needed - 0.000001
} else := null

# The reason a pool short of capacity gets, before its own free and count are added to the details.
shortfall(needed) := reason.make(
	"capacity_exhausted",
	"not_now",
	sprintf("needs %v device(s), more than are free", [needed]),
	{"needed": needed},
)

free(pool) := object.get(pool, "free", 0)
