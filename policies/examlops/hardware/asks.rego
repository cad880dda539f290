# METADATA
# title: Asks
# description: >-
#   What a grant asks of one node, for the checks that compare it with nodes and for people: the
#   devices a node must have for it (whole devices, or one device for a slice or a share), and the
#   words for devices, CPU cores and memory ("4 whole H100 devices, 16 CPU cores and 64Gi memory").
package examlops.hardware.asks

# The devices one node must have for the grant: its whole devices (or fixed slices, each a device
# of such a pool), or one device for a slice or a share.
devices(g) := 1 if {
	object.get(g, "shares", null) != null
} else := g.units if {
	object.get(g, "profile", null) == null
} else := g.units if {
	object.get(g, "geometry", null) == null
} else := 1

cpu_milli(g) := object.get(g, "cpu_milli", 0)

memory_mib(g) := object.get(g, "memory_mib", 0)

nodes(g) := object.get(g, "nodes", 1)

# The device a pool has: its model in upper case, else its accelerator.
device(shape) := upper(shape.model) if object.get(shape, "model", null) != null

else := shape.accelerator

# Cores from millicores: "16", "1.5", "0.25".
cores(milli) := format_int(milli / 1000, 10) if {
	milli % 1000 == 0
} else := trim_right(trim_right(sprintf("%.3f", [milli / 1000]), "0"), ".")

cpu_text(milli) := sprintf("%s CPU cores", [cores(milli)])

# Memory from MiB: "64Gi", "1Ti", "512Mi".
memory_text(mib) := sprintf("%sTi", [format_int(mib / 1048576, 10)]) if {
	mib % 1048576 == 0
} else := sprintf("%sGi", [format_int(mib / 1024, 10)]) if {
	mib % 1024 == 0
} else := sprintf("%sMi", [format_int(mib, 10)])

memory_phrase(mib) := sprintf("%s memory", [memory_text(mib)])

# What the grant's devices are on one node, in words.
devices_text(g, shape) := sprintf("%d share(s) of one %s device", [g.shares, device(shape)]) if {
	object.get(g, "shares", null) != null
} else := sprintf("%d whole %s device(s)", [g.units, device(shape)]) if {
	object.get(g, "profile", null) == null
} else := sprintf("%d %s slice(s)", [g.units, g.profile])

# Everything the grant asks of one node: "4 whole H100 device(s), 16 CPU cores and 64Gi memory".
node_text(g, shape) := joined(array.concat([devices_text(g, shape)], extras(g)))

extras(g) := [t |
	some [v, t] in [[cpu_milli(g), cpu_text(cpu_milli(g))], [memory_mib(g), memory_phrase(memory_mib(g))]]
	v > 0
]

joined([one]) := one

joined(parts) := sprintf("%s and %s", [concat(", ", array.slice(parts, 0, last)), parts[last]]) if {
	count(parts) > 1
	last := count(parts) - 1
}

# The level a topology names: the node row field the nodes must share.
level("same-block") := "block"

level("same-switch") := "switch"
