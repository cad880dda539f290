# Fractions of a device. A fraction below 1.0 is honored only where the pool enables partitioning
# (supports_fractions) and the device can really be cut into isolated shares
# (data.examlops.tables.partitioning, by model where the pool names one, else by vendor). The share
# granted is the smallest slice that covers the request. Elsewhere the workload gets whole devices
# and the grant says so (honored = false) with the reason.
package examlops.hardware.fractions

import data.examlops.tables.partitioning

# A pool that names no model has the key absent or null.
model(pool) := object.get(pool, "model", null)

scheme_name(pool) := partitioning.by_model[model(pool)] if model(pool) != null

scheme_name(pool) := partitioning.by_vendor[pool.accelerator] if model(pool) == null

grant(pool, w) := whole(w, true, null) if {
	w.fraction >= 1
} else := partial(pool, w) if {
	pool.supports_fractions == true
	scheme_name(pool)
} else := whole(w, false, why_not(pool))

whole(w, honored, why) := {
	"requested": w.fraction,
	"honored": honored,
	"granted": 1,
	"devices": w.count,
	"scheme": null,
	"profile": null,
	"why": why,
}

partial(pool, w) := {
	"requested": w.fraction,
	"honored": true,
	"granted": s.units / scheme.of,
	"devices": (s.units / scheme.of) * w.count,
	"scheme": scheme.kind,
	"profile": s.profile,
	"why": null,
} if {
	scheme := partitioning.schemes[scheme_name(pool)]
	covering := [slice |
		some slice in scheme.slices
		slice.units / scheme.of >= w.fraction
	]
	s := covering[0]
}

why_not(pool) := sprintf("%s model '%s' has no isolated partitioning", [pool.accelerator, model(pool)]) if {
	model(pool) != null
	not partitioning.by_model[model(pool)]
} else := sprintf("%s has no isolated partitioning", [pool.accelerator]) if {
	model(pool) == null
	not partitioning.by_vendor[pool.accelerator]
} else := "the pool does not enable partitioning (supports_fractions is off)"
