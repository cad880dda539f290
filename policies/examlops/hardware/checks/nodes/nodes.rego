# METADATA
# title: Nodes
# description: >-
#   Whether the pool's nodes could ever hold what the grant asks of one node: its devices (whole
#   devices, or one device for a slice or a share), CPU and memory, on the same node; and for a gang
#   of N nodes, whether N of them could. A pool whose nodes are all too small is never eligible,
#   and the reason names what is lacking and what the largest node has; a pool whose nodes are only
#   busy now is judged by capacity. Every node counts, whatever its state (a drained or down node
#   may come back). A pool without node information is one node: it never holds a gang of several.
#   A pool whose scheduler allocates whole CPUs only (whole_cpus: a Slurm partition) never takes a
#   fraction of a CPU: refused here, at placement, rather than by the scheduler at submit.
# custom:
#   order: 65
#   reads:
#     shape: [node_sizes, accelerator, model, supports_fractions, fixed_profile, sharing, shares_per_device, whole_cpus]
#     workload: [fraction, count, nodes, cpu, memory, topology, topology_mode]
#   codes:
#     no_node_fits:
#       kind: never
#       meaning: "no node of the pool (or too few for the gang) could ever hold what the workload asks of one node"
#     cpu_not_whole:
#       kind: never
#       meaning: "the workload asks a fraction of a CPU, and the pool's scheduler (Slurm) allocates whole CPUs only"
package examlops.hardware.checks.nodes

import data.examlops.hardware.asks
import data.examlops.hardware.fractions
import data.examlops.hardware.reason

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

deny contains r if {
	asks_of_nodes(input.shape, input.workload)
	g := fractions.grant(input.shape, input.workload)
	some r in too_small(object.get(input.shape, "node_sizes", null), g, input.shape)
}

# Slurm's --cpus-per-task counts whole CPUs: a fraction of one is refused here, not rounded (the
# workload says how much it needs; rounding up would hold more than it asked for, unasked).
deny contains reason.make(
	"cpu_not_whole",
	"never",
	sprintf(
		"the pool's scheduler (Slurm) allocates whole CPUs, and the workload asks %s per node: ask for whole cores (e.g. %s)",
		[asks.cpu_text(cpu), asks.cores(ceil(cpu / 1000) * 1000)],
	),
	{"cpu_milli": cpu},
) if {
	input.shape.whole_cpus == true
	cpu := fractions.milli(object.get(input.workload, "cpu", null))
	cpu % 1000 != 0
}

# Only a pool of nodes, or a gang, can be too small here (a pool without node information is one
# node that holds what it holds): anything else is passed without working out its grant.
asks_of_nodes(shape, _) if object.get(shape, "node_sizes", null) != null

asks_of_nodes(_, w) if fractions.gang(w) > 1

# node_sizes rows: [devices, cpu_milli, memory_mib, block, switch, count]; cpu or memory null: not
# tracked (never a limit).
holds(row, g) if {
	row[0] >= asks.devices(g)
	within(row[1], asks.cpu_milli(g))
	within(row[2], asks.memory_mib(g))
}

within(null, _)

within(free, asked) if free >= asked

# How many nodes could ever hold the grant's ask of one node.
able(rows, g) := sum([row[5] | some row in rows; holds(row, g)])

# A pool without node information is one node of its devices: only a gang is too much for it.
too_small(rows, g, shape) := [one_node(g)] if {
	rows == null
	asks.nodes(g) > 1
} else := [none_fits(rows, g, shape)] if {
	rows != null
	able(rows, g) == 0
} else := [too_few(rows, g, shape)] if {
	rows != null
	able(rows, g) < asks.nodes(g)
} else := []

one_node(g) := reason.make(
	"no_node_fits",
	"never",
	sprintf("the pool has no node information: it is one node, and the gang needs %d nodes", [asks.nodes(g)]),
	{"nodes_able": 1, "nodes_needed": asks.nodes(g)},
)

largest(rows) := {
	"devices": max([row[0] | some row in rows]),
	"cpu_milli": most([row[1] | some row in rows; row[1] != null]),
	"memory_mib": most([row[2] | some row in rows; row[2] != null]),
}

most([]) := null

most(xs) := max(xs) if count(xs) > 0

asked(g) := {"devices": asks.devices(g), "cpu_milli": asks.cpu_milli(g), "memory_mib": asks.memory_mib(g)}

details(rows, g) := {
	"nodes_able": able(rows, g),
	"nodes_needed": asks.nodes(g),
	"largest": largest(rows),
	"asked": asked(g),
}

# No node could hold it: what is lacking, on the largest node of that kind.
none_fits(rows, g, shape) := reason.make("no_node_fits", "never", message, details(rows, g)) if {
	message := lacking(largest(rows), g, shape)
}

lacking(big, g, shape) := sprintf("no node of the pool has %s; the largest has %d", [devices, big.devices]) if {
	big.devices < asks.devices(g)
	devices := sprintf("%d %s device(s)", [asks.devices(g), asks.device(shape)])
} else := sprintf("no node of the pool has %s; the largest has %s", [cpu, asks.cores(big.cpu_milli)]) if {
	big.cpu_milli != null
	big.cpu_milli < asks.cpu_milli(g)
	cpu := asks.cpu_text(asks.cpu_milli(g))
} else := sprintf("no node of the pool has %s; the largest has %s", [memory, asks.memory_text(big.memory_mib)]) if {
	memory := asks.memory_phrase(asks.memory_mib(g))
	big.memory_mib != null
	big.memory_mib < asks.memory_mib(g)
} else := sprintf("no node of the pool has %s together", [asks.node_text(g, shape)])

# Some nodes could, fewer than the gang needs.
too_few(rows, g, shape) := reason.make(
	"no_node_fits",
	"never",
	sprintf(
		"only %d node(s) of the pool could ever hold %s; the gang needs %d",
		[able(rows, g), asks.node_text(g, shape), asks.nodes(g)],
	),
	details(rows, g),
)
