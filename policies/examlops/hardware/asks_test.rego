package examlops.hardware.asks_test

import data.examlops.hardware.asks

whole(n) := {"units": n, "profile": null, "geometry": null, "shares": null, "nodes": 1, "cpu_milli": 0, "memory_mib": 0}

h100 := {"accelerator": "nvidia", "model": "h100"}

test_a_node_must_have_the_whole_devices_or_one_device_for_a_part if {
	asks.devices(whole(4)) == 4
	asks.devices(object.union(whole(1), {"shares": 2})) == 1
	asks.devices({"units": 1, "profile": "3g.40gb", "geometry": "mig-7c8m"}) == 1
	asks.devices({"units": 3, "profile": "1g.10gb", "geometry": null}) == 3
}

test_quantities_read_as_people_write_them[name] if {
	some name, [got, want] in {
		"whole cores": [asks.cores(16000), "16"],
		"half a core": [asks.cores(500), "0.5"],
		"one and a half": [asks.cores(1500), "1.5"],
		"gibibytes": [asks.memory_text(65536), "64Gi"],
		"tebibytes": [asks.memory_text(1048576), "1Ti"],
		"mebibytes": [asks.memory_text(1000), "1000Mi"],
	}
	got == want
}

test_a_node_ask_in_words[name] if {
	some name, [g, want] in {
		"devices only": [whole(4), "4 whole H100 device(s)"],
		"with cpu": [object.union(whole(4), {"cpu_milli": 16000}), "4 whole H100 device(s) and 16 CPU cores"],
		"with everything": [
			object.union(whole(2), {"cpu_milli": 1500, "memory_mib": 65536}),
			"2 whole H100 device(s), 1.5 CPU cores and 64Gi memory",
		],
		"a share": [object.union(whole(1), {"shares": 2}), "2 share(s) of one H100 device"],
		"a slice": [{"units": 1, "profile": "3g.40gb", "geometry": "mig-7c8m"}, "1 3g.40gb slice(s)"],
	}
	asks.node_text(g, h100) == want
}

test_a_device_is_its_model_else_its_vendor if {
	asks.device(h100) == "H100"
	asks.device({"accelerator": "amd", "model": null}) == "amd"
}

test_levels if {
	asks.level("same-block") == "block"
	asks.level("same-switch") == "switch"
}
