package examlops.fleet_test

import data.examlops.fleet

shape := {"accelerator": "nvidia", "capabilities": ["fp8"], "model": null, "region": "us-east-1", "target": "cloud"}

# The key the layer computes: SHA-256 of the compact JSON with sorted keys, 32 hex digits.
canonical := `{"accelerator":"nvidia","capabilities":["fp8"],"model":null,"region":"us-east-1","target":"cloud"}`

k := substring(crypto.sha256(canonical), 0, 32)

test_the_key_is_the_layers_content_key if {
	fleet.key(shape) == k
}

test_a_shape_that_hashes_to_its_key_is_read if {
	fleet.shape(k) == shape with data.examlops_fleet.shapes as {k: shape}
}

test_a_shape_changed_in_place_is_not_read if {
	moved := object.union(shape, {"region": "eu-west-3"})
	not fleet.shape(k) with data.examlops_fleet.shapes as {k: moved}
}

test_a_key_with_no_shape_is_not_read if {
	not fleet.shape(k) with data.examlops_fleet.shapes as {}
}

views := {"revision": "r1", "key": "abc", "checks": {"residency": {"views": [{"region": "us-east-1"}]}}}

test_views_that_hash_to_the_digest_given_with_them_are_read if {
	fleet.views("abc", fleet.digest(views)) == views with data.examlops_fleet.views as {"abc": views}
}

test_views_changed_in_place_are_not_read if {
	moved := json.patch(views, [{"op": "replace", "path": "/checks/residency/views/0/region", "value": "eu-west-3"}])
	not fleet.views("abc", fleet.digest(views)) with data.examlops_fleet.views as {"abc": moved}
}

test_views_without_a_digest_are_not_read if {
	not fleet.views("abc", "") with data.examlops_fleet.views as {"abc": views}
	not fleet.views("abc", fleet.digest(views)) with data.examlops_fleet.views as {}
}
