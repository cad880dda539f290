package examlops.provenance_test

import data.examlops.provenance

tables := {"regions": {"us": {"area": "US", "note": "a<b&c"}}, "eu_member_states": ["DE", "FR"]}

bundles := {"b": {"manifest": {"revision": "sha256:abc", "roots": ["examlops", "system/authz"]}}}

test_the_digest_is_of_the_tables_compact_with_sorted_keys if {
	d := provenance.tables_digest with data.examlops.tables as tables

	# The bytes the layer hashes: sorted keys, no spaces, <, > and & escaped as json.marshal does.
	expected := `{"eu_member_states":["DE","FR"],"regions":{"us":{"area":"US","note":"a\u003cb\u0026c"}}}`
	d == concat("", ["sha256:", crypto.sha256(expected)])
}

test_an_edited_table_changes_the_digest if {
	original := provenance.tables_digest with data.examlops.tables as tables
	edited := provenance.tables_digest with data.examlops.tables as object.union(tables, {"eu_member_states": ["DE", "FR", "US"]})
	original != edited
}

test_content_names_the_revision_of_the_bundle_that_owns_examlops if {
	c := provenance.content with data.examlops.tables as tables with data.system.bundles as bundles
	c.revision == "sha256:abc"
	startswith(c.tables_digest, "sha256:")
}

test_another_bundle_revision_is_not_taken if {
	others := {"x": {"manifest": {"revision": "other", "roots": ["examlops_fleet"]}}}
	c := provenance.content with data.examlops.tables as tables with data.system.bundles as others
	c.revision == null
}
