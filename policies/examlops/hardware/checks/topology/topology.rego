# METADATA
# title: Topology
# description: >-
#   A gang that requires its nodes together (topology same-block or same-switch, topology_mode
#   required) can only run where the pool's nodes carry labels of that level, and where one block
#   (or switch) has enough nodes that could ever hold what it asks of each. A preferred topology is
#   never a denial: the packer keeps the gang together where it can. A gang too large for the pool
#   as a whole is the nodes check's to say.
# custom:
#   order: 66
#   reads:
#     shape: [node_sizes, accelerator, model, supports_fractions, fixed_profile, sharing, shares_per_device]
#     workload: [fraction, count, nodes, cpu, memory, topology, topology_mode]
#   codes:
#     topology_unlabeled:
#       kind: never
#       meaning: >-
#         the gang requires its nodes in one block (or under one switch), and the pool's nodes carry
#         no such labels
#     topology_unsatisfiable:
#       kind: never
#       meaning: "no block (or switch) of the pool has enough nodes that could hold the gang"
package examlops.hardware.checks.topology

import data.examlops.hardware.asks
import data.examlops.hardware.checks.nodes
import data.examlops.hardware.fractions
import data.examlops.hardware.reason

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

deny contains r if {
	# A required topology of a gang on a pool of nodes; anything else is passed before its grant.
	object.get(input.workload, "topology", null) != null
	rows := object.get(input.shape, "node_sizes", null)
	rows != null
	g := fractions.grant(input.shape, input.workload)
	g.topology != null
	nodes.able(rows, g) >= asks.nodes(g)
	some r in apart(rows, g, input.shape)
}

# node_sizes rows: [devices, cpu_milli, memory_mib, block, switch, count].
column := {"block": 3, "switch": 4}

groups(rows, lvl) := {row[column[lvl]] | some row in rows; row[column[lvl]] != null}

# The most nodes of one group that could hold the ask.
most_together(rows, g, lvl) := max([n |
	some group in groups(rows, lvl)
	n := sum([row[5] | some row in rows; row[column[lvl]] == group; nodes.holds(row, g)])
])

apart(rows, g, shape) := [reason.make(
	"topology_unlabeled",
	"never",
	sprintf(
		"the gang requires its %d nodes %s, and the pool's nodes carry no %s labels",
		[asks.nodes(g), g.topology, asks.level(g.topology)],
	),
	{"topology": g.topology, "nodes_needed": asks.nodes(g)},
)] if {
	count(groups(rows, asks.level(g.topology))) == 0
} else := [reason.make(
	"topology_unsatisfiable",
	"never",
	sprintf(
		"no %s of the pool has %d nodes that could hold %s; the most in one %s is %d",
		[lvl, asks.nodes(g), asks.node_text(g, shape), lvl, most],
	),
	{"topology": g.topology, "nodes_needed": asks.nodes(g), "most_together": most},
)] if {
	lvl := asks.level(g.topology)
	most := most_together(rows, g, lvl)
	most < asks.nodes(g)
} else := []
