# METADATA
# title: Fractions
# description: >-
#   The grant: what a pool of a shape gives the workload. A fraction below 1.0 is honored only where
#   the pool enables partitioning (supports_fractions) and the device can really be cut into isolated
#   shares (data.examlops.tables.partitioning, by model where the pool names one, else by vendor):
#   the smallest share that covers the request, or, when that one has no room now, a larger share
#   that covers it (alternatives: smallest first, each flagged larger and priced as granted; the
#   caller takes the first with room that the budget allows). A pool whose scheduler exposes fixed slices
#   (fixed_profile, e.g. Slurm's gpu:1g.10gb) gives its slices as they are. Elsewhere the workload
#   gets whole devices and the grant says so (honored = false) with the reason.
# custom:
#   reads:
#     shape: [accelerator, model, supports_fractions, fixed_profile]
#     workload: [fraction, count]
package examlops.hardware.fractions

import data.examlops.tables.partitioning

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

# A pool that names no model has the key absent or null.
model(shape) := object.get(shape, "model", null)

fixed_profile(shape) := object.get(shape, "fixed_profile", null)

scheme_name(shape) := partitioning.by_model[model(shape)] if model(shape) != null

scheme_name(shape) := partitioning.by_vendor[shape.accelerator] if model(shape) == null

scheme(shape) := partitioning.schemes[scheme_name(shape)]

# grant.units of grant.profile (null: whole devices) is what the pool's capacity must hold;
# grant.devices is the share of devices held, which is what is priced and accounted.
grant(shape, w) := fixed(shape, w) if {
	fixed_profile(shape) != null
} else := whole(w, true, null) if {
	w.fraction >= 1
} else := partial(shape, w) if {
	shape.supports_fractions == true
	scheme_name(shape)
} else := whole(w, false, why_not(shape))

whole(w, honored, why) := {
	"requested": w.fraction,
	"honored": honored,
	"share": 1,
	"units": w.count,
	"devices": w.count,
	"scheme": null,
	"geometry": null,
	"profile": null,
	"why": why,
	"note": unhonored_note(w, why),
}

# What a placement says when it gives a whole device for a fraction.
unhonored_note(_, null) := null

unhonored_note(w, why) := sprintf(
	"fraction %v not honored (%s) — whole device allocated",
	[w.fraction, why],
) if {
	why != null
}

partial(shape, w) := {
	"requested": w.fraction,
	"honored": true,
	"share": s.units / sc.of,
	"units": 1,
	"devices": s.units / sc.of,
	"scheme": sc.kind,
	"geometry": sc.geometry,
	"profile": s.profile,
	"why": null,
	"note": null,
} if {
	sc := scheme(shape)
	covering := [s | some s in sc.slices; s.units / sc.of >= w.fraction]
	s := covering[0]
}

# The larger shares that also cover the request, smallest first: what a pool gives instead when the
# smallest covering share (the grant) has no room now. Each is a grant of its own, flagged larger,
# whose devices are what is priced and budgeted; its note says why the workload holds more than it
# asked for. Empty where the grant is not a share cut for the request (whole devices, fixed slices).
alternatives(shape, w) := [larger(sc, s, w, g) |
	fixed_profile(shape) == null
	w.fraction < 1
	shape.supports_fractions == true
	sc := scheme(shape)
	g := partial(shape, w)
	some s in sc.slices
	s.units / sc.of > g.share
]

larger(sc, s, w, g) := {
	"requested": w.fraction,
	"honored": true,
	"share": s.units / sc.of,
	"units": 1,
	"devices": s.units / sc.of,
	"scheme": sc.kind,
	"geometry": sc.geometry,
	"profile": s.profile,
	"why": null,
	"note": sprintf(
		"no %s had room: fraction %v honored with a larger partition, %s, priced as granted",
		[g.profile, w.fraction, s.profile],
	),
	"larger": true,
}

# Fixed slices: each unit is one slice of the pool's profile. Undefined (and the partition check
# denies the pool) when the profile is not in the pool's scheme.
fixed(shape, w) := {
	"requested": w.fraction,
	"honored": true,
	"share": s.units / sc.of,
	"units": w.count,
	"devices": (s.units / sc.of) * w.count,
	"scheme": sc.kind,
	"geometry": null,
	"profile": s.profile,
	"why": null,
	"note": null,
} if {
	sc := scheme(shape)
	some s in sc.slices
	s.profile == fixed_profile(shape)
}

why_not(shape) := sprintf("%s model '%s' has no isolated partitioning", [shape.accelerator, model(shape)]) if {
	model(shape) != null
	not partitioning.by_model[model(shape)]
} else := sprintf("%s has no isolated partitioning", [shape.accelerator]) if {
	model(shape) == null
	not partitioning.by_vendor[shape.accelerator]
} else := "the pool does not enable partitioning (supports_fractions is off)"
