# METADATA
# title: Fractions
# description: >-
#   The grant: what a pool of a shape gives the workload. A fraction below 1.0 is honored only where
#   the pool enables partitioning (supports_fractions) and the device can really be cut into isolated
#   shares (data.examlops.tables.partitioning, by model where the pool names one, else by vendor):
#   the smallest share that covers the request, or, when that one has no room now, a larger share
#   that covers it (alternatives: smallest first, each flagged larger and priced as granted; the
#   caller takes the first with room that the budget allows). A pool whose scheduler exposes fixed
#   slices (fixed_profile, e.g. Slurm's gpu:1g.10gb) gives its slices as they are. A pool that shares
#   its devices (sharing: time-slice or mps, in shares_per_device shares) gives a fraction as the
#   fewest shares of ONE device that cover it, and says it is shared without isolation. Elsewhere
#   the workload gets whole devices and the grant says so (honored = false) with the reason.
#
#   The grant (and each alternative) also says what the pool must hold per node: units (devices or
#   slices) or shares on each of `nodes` nodes (a gang, all or nothing), beside cpu_milli and
#   memory_mib of each node's own, and the topology level the gang's nodes must share when it is
#   required (null otherwise). devices, what is priced and accounted, counts every node of the gang.
#   CPU or memory asked of a pool whose nodes do not all say theirs (node_limits) are not checked
#   there: the grant's note says so.
# custom:
#   reads:
#     shape: [accelerator, model, supports_fractions, fixed_profile, sharing, shares_per_device, node_limits]
#     workload: [fraction, count, nodes, cpu, memory, topology, topology_mode]
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

# grant.units of grant.profile (null: whole devices), or grant.shares of one device, on each of
# grant.nodes nodes, is what the pool's capacity must hold; grant.devices is the share of devices
# held, which is what is priced and accounted.

grant(shape, w) := per_node(per_device(shape, w), w, unchecked(shape, w), cores(shape))

# A grant of one device's worth (whole devices, slices or a share) with what it asks of each node,
# its note saying what of that was not checked on the pool's nodes. Where a device is a core (a
# cpu pool whose nodes say their CPU), its units are cores of the node: the node's CPU they take,
# which a GPU grant's CPU on the same node then finds taken, and the other way round.
per_node(d, w, unsaid, per_unit) := object.union(d, {
	"nodes": gang(w),
	"cpu_milli": max([milli(object.get(w, "cpu", null)), d.units * per_unit]),
	"memory_mib": mib(object.get(w, "memory", null)),
	"shares": object.get(d, "shares", null),
	"topology": required_topology(w),
	"devices": d.devices * gang(w),
	"note": with_unchecked(d.note, unsaid),
})

# The millicores one unit of a grant takes of its node: 1000 where a device is a core (a cpu pool
# whose nodes say their CPU), else none beyond what the workload asks.
cores(shape) := 1000 if {
	shape.accelerator == "cpu"
	"cpu" in node_limits(shape)
} else := 0

# What the workload asks of a node that the pool's nodes do not all say: "CPU", "memory", both.
unchecked(shape, w) := [what |
	some [key, what, asked] in [
		["cpu", "CPU", milli(object.get(w, "cpu", null))],
		["memory", "memory", mib(object.get(w, "memory", null))],
	]
	asked > 0
	not key in node_limits(shape)
]

# What every node of the pool says beside its devices (none when it is absent or null).
node_limits(shape) := said if {
	said := object.get(shape, "node_limits", null)
	is_array(said)
} else := []

with_unchecked(note, []) := note

with_unchecked(note, unsaid) := concat("; ", [n | some n in [note, text]; n != null]) if {
	count(unsaid) > 0
	text := sprintf(
		"%s not checked: the pool does not say its nodes' %s",
		[concat(" and ", unsaid), concat(" and ", unsaid)],
	)
}

per_device(shape, w) := fixed(shape, w) if {
	fixed_profile(shape) != null
} else := whole(w, true, null) if {
	w.fraction >= 1
} else := partial(shape, w) if {
	shape.supports_fractions == true
	scheme_name(shape)
} else := shared(shape, w) if {
	object.get(shape, "sharing", null) != null
	is_number(object.get(shape, "shares_per_device", null))
} else := whole(w, false, why_not(shape))

# A gang of this many nodes (a workload that does not say: one).
gang(w) := n if {
	n := object.get(w, "nodes", 1)
	is_number(n)
} else := 1

milli(cpu) := round(cpu * 1000) if {
	is_number(cpu)
} else := 0

mib(memory) := memory if {
	is_number(memory)
} else := 0

# The level a gang's nodes must share; null when there is none, it is only preferred, or there is
# no gang (one node is always together).
required_topology(w) := t if {
	t := object.get(w, "topology", null)
	object.get(w, "topology_mode", null) != "preferred"
	gang(w) > 1
} else := null

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

# A shared device: the fewest of its shares that cover the fraction, on ONE device, without
# isolation (time-slicing isolates neither memory nor faults; MPS can limit memory, never faults).
shared(shape, w) := {
	"requested": w.fraction,
	"honored": true,
	"share": k / n,
	"units": 1,
	"devices": k / n,
	"scheme": shape.sharing,
	"geometry": null,
	"profile": null,
	"why": null,
	"note": sprintf(
		"fraction %v shared without isolation (%s: %d of %d shares of one device)",
		[w.fraction, shape.sharing, k, n],
	),
	"shares": k,
} if {
	n := shape.shares_per_device
	k := min([n, max([1, ceil((w.fraction * n) - 0.000000001)])])
}

# The larger shares that also cover the request, smallest first: what a pool gives instead when the
# smallest covering share (the grant) has no room now. Each is a grant of its own, flagged larger,
# whose devices are what is priced and budgeted; its note says why the workload holds more than it
# asked for. Empty where the grant is not a share cut for the request (whole devices, fixed slices).
alternatives(shape, w) := [per_node(larger(sc, s, w, g), w, unchecked(shape, w), cores(shape)) |
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
