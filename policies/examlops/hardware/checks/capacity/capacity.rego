# METADATA
# title: Capacity
# description: >-
#   The pool has room for the grant right now: as many devices with nothing on them as whole
#   devices are asked for, or a device with room for the granted slice beside the slices it holds
#   (a MIG instance whose run of memory slices overlaps none held, or a partition of the mode the
#   device already runs). The store says what is placeable per pool (empty devices, and how many of
#   each slice profile could still be placed); this check compares.
#
#   A node-tracked pool's capacity says it node by node (capacity.nodes: its up nodes' room,
#   identical rows counted once): the grant fits when as many nodes as the grant asks (a gang: all
#   of them; within one block or switch when its topology is required) each hold what it asks of
#   one node: its devices (whole devices, a slice, or its shares on one device already shared or on
#   a free one), its CPU and its memory. A pool that is one node counted as before cannot hold a gang.
#
#   A pool counted as one node (it lists no nodes and shares nothing) holds at most all its devices
#   (or fixed slices) on that node, whatever is released: its capacity says how many it has in all
#   (capacity.devices, the pool's count), and a grant that asks more of one node than that can
#   never fit there (pool_too_small, never: place --queue refuses it rather than letting it wait
#   for ever). A pool of nodes is the nodes check's to judge (every node, whatever its state).
# custom:
#   order: 90
#   stage: pool
#   reads:
#     shape: [accelerator, model, fixed_profile]
#     workload: []
#   codes:
#     capacity_exhausted: {kind: not_now, meaning: too few free devices (or fixed slices) right now}
#     slice_unavailable:
#       kind: not_now
#       meaning: no device of the pool has room for the granted slice beside the slices it holds
#     share_unavailable:
#       kind: not_now
#       meaning: "no device of the pool has the shares asked free (on a node with the CPU and memory asked)"
#     pool_too_small:
#       kind: never
#       meaning: >-
#         the pool lists no nodes (it is one node of all its devices) and has fewer devices (or fixed
#         slices) in all than the workload asks of one node: no release can make room
package examlops.hardware.checks.capacity

import data.examlops.hardware.asks
import data.examlops.hardware.reason

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

# input: {shape, workload, grant, capacity: {"whole": empty devices, "slices": {profile: n}, "devices": all
# of a pool counted as one node}}
deny contains shortfall(input.shape, input.grant) if not fits(input.grant, input.capacity)

deny contains r if {
	some r in too_small(smallness(input.shape, input.grant), input.capacity)
}

# What a pool counted as one node must have in all for the grant ("devices": what one node must
# hold of it), and the reason it gets with fewer; null where one device does (every pool has one).
smallness(shape, grant) := {
	"devices": asks.devices(grant),
	"reason": reason.make(
		"pool_too_small",
		"never",
		sprintf(
			"needs %s on one node, more than the pool has in all: it lists no nodes, so all its devices are one node",
			[asks.devices_text(grant, shape)],
		),
		{"units": grant.units, "profile": grant.profile, "devices_needed": asks.devices(grant)},
	),
} if {
	asks.devices(grant) > 1
} else := null

# The reason a pool of this capacity gets when it is counted as one node (capacity.devices: all its
# devices or fixed slices) with fewer than the grant asks of one node (s: smallness); else none.
too_small(s, capacity) := [s.reason] if {
	s != null
	devices := object.get(capacity, "devices", null)
	is_number(devices)
	devices < s.devices
} else := []

# true when the grant fits, else false (never undefined: a pool short of room keeps its verdict).
room(grant, capacity) if fits(grant, capacity)

else := false

# A pool that does not state its capacity has none: fail closed.
fits(grant, capacity) if {
	object.get(capacity, "nodes", null) == null
	asks.nodes(grant) == 1
	grant.profile == null
	object.get(capacity, "whole", 0) >= grant.units
}

fits(grant, capacity) if {
	object.get(capacity, "nodes", null) == null
	asks.nodes(grant) == 1
	grant.profile != null
	object.get(object.get(capacity, "slices", {}), grant.profile, 0) >= grant.units
}

fits(grant, capacity) if {
	rows := object.get(capacity, "nodes", null)
	is_array(rows)
	enough(grant, rows)
}

# Node rows: {whole, cpu, memory, shares, slices, block, switch, count}.
enough(grant, rows) if {
	object.get(grant, "topology", null) == null
	sum([r.count | some r in rows; holds(r, grant)]) >= asks.nodes(grant)
}

enough(grant, rows) if {
	lvl := asks.level(grant.topology)
	some group in {r[lvl] | some r in rows; r[lvl] != null}
	sum([r.count | some r in rows; r[lvl] == group; holds(r, grant)]) >= asks.nodes(grant)
}

holds(r, grant) if {
	devices_free(r, grant)
	within(r.cpu, asks.cpu_milli(grant))
	within(r.memory, asks.memory_mib(grant))
}

within(null, _)

within(free, asked) if free >= asked

devices_free(r, grant) if {
	object.get(grant, "shares", null) != null
	r.whole >= 1
}

devices_free(r, grant) if {
	object.get(grant, "shares", null) != null
	r.shares >= grant.shares
}

devices_free(r, grant) if {
	object.get(grant, "shares", null) == null
	grant.profile == null
	r.whole >= grant.units
}

devices_free(r, grant) if {
	object.get(grant, "shares", null) == null
	grant.profile != null
	object.get(r.slices, grant.profile, 0) >= grant.units
}

# The reason a pool short of capacity gets; the same for every pool of a shape.
shortfall(shape, grant) := per_node_shortfall(shape, grant) if {
	per_node(grant)
} else := per_device_shortfall(shape, grant)

# Whether the grant asks anything of a node beyond its devices.
per_node(grant) if asks.nodes(grant) > 1

per_node(grant) if asks.cpu_milli(grant) > 0

per_node(grant) if asks.memory_mib(grant) > 0

per_node(grant) if object.get(grant, "shares", null) != null

per_node_shortfall(shape, grant) := reason.make(
	code_of(grant, shape),
	"not_now",
	sprintf("needs %s free on %s, more than are free", [asks.node_text(grant, shape), where(grant)]),
	{
		"units": grant.units, "profile": grant.profile, "shares": object.get(grant, "shares", null),
		"nodes": asks.nodes(grant), "cpu_milli": asks.cpu_milli(grant), "memory_mib": asks.memory_mib(grant),
		"topology": object.get(grant, "topology", null),
	},
)

code_of(grant, shape) := "share_unavailable" if {
	object.get(grant, "shares", null) != null
} else := "capacity_exhausted" if {
	grant.profile == null
} else := "capacity_exhausted" if {
	object.get(shape, "fixed_profile", null) != null
} else := "slice_unavailable"

where(grant) := "one node" if {
	asks.nodes(grant) == 1
} else := sprintf("each of %d nodes", [asks.nodes(grant)]) if {
	object.get(grant, "topology", null) == null
} else := sprintf("each of %d nodes in one %s", [asks.nodes(grant), asks.level(grant.topology)])

per_device_shortfall(shape, grant) := reason.make(
	"capacity_exhausted",
	"not_now",
	sprintf("needs %d whole %s device(s) with nothing on them, more than are free", [grant.units, device(shape)]),
	{"units": grant.units, "profile": null},
) if {
	grant.profile == null
} else := reason.make(
	"capacity_exhausted",
	"not_now",
	sprintf("needs %d free %s slice(s), more than are free", [grant.units, grant.profile]),
	{"units": grant.units, "profile": grant.profile},
) if {
	object.get(shape, "fixed_profile", null) != null
} else := reason.make(
	"slice_unavailable",
	"not_now",
	sprintf("no %s in the pool has room for a %s beside the slices it holds", [device(shape), grant.profile]),
	{"units": grant.units, "profile": grant.profile},
)

# The reason a pool short of capacity gets when larger shares also cover the request (``larger``:
# their profiles, smallest first) and none of them the budget allows has room either. A grant that
# asks more of a node than its devices says so node by node, as without larger shares.
shortfall_of(shape, grant, larger) := shortfall(shape, grant) if {
	count(larger) == 0
} else := shortfall(shape, grant) if {
	per_node(grant)
} else := reason.make(
	"slice_unavailable",
	"not_now",
	sprintf(
		concat("", [
			"no %s in the pool has room for a %s beside the slices it holds, ",
			"nor for a larger one the budget allows (%s)",
		]),
		[device(shape), grant.profile, concat(", ", larger)],
	),
	{"units": grant.units, "profile": grant.profile, "larger": larger},
)

device(shape) := upper(shape.model) if object.get(shape, "model", null) != null

else := shape.accelerator
