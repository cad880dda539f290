# METADATA
# title: Provenance
# description: >-
#   What the served policy proves about its own content, so that a caller does not have to trust
#   the revision a bundle's manifest names (whoever builds a bundle writes that label).
#
#   content      the revision of the bundle that owns examlops, and the SHA-256 of the tables the
#                policy evaluates: json.marshal of data.examlops.tables (compact, keys sorted,
#                numbers as their literal text), which the layer compares with the digest of the
#                reviewed table files. A bundle labelled with the reviewed revision but built from
#                edited tables is refused.
#
#   Rules cannot read their own source: a bundle with edited rules is refused by the local OPA's
#   signature check (a key made for each start), and an external OPA's rules are its operator's
#   to guard (a bundle signed by a key that OPA verifies).
package examlops.provenance

# The revision of the bundle that owns examlops; null when the policy was not loaded from one.
default revision := null

revision := r if {
	some b in data.system.bundles
	"examlops" in b.manifest.roots
	r := b.manifest.revision
}

tables_digest := concat("", ["sha256:", crypto.sha256(json.marshal(data.examlops.tables))])

# METADATA
# title: content
# description: The bundle revision and the digest of the tables this policy evaluates.
# entrypoint: true
content := {"revision": revision, "tables_digest": tables_digest}
