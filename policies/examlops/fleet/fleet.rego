# METADATA
# title: Fleet data
# description: >-
#   The shapes the placement layer keeps in OPA as data (data.examlops_fleet.shapes[key]), read
#   only when they are what their key says. The layer writes each shape under the first 32 hex
#   digits of the SHA-256 of its canonical JSON (compact, sorted keys); that data lies outside the
#   bundle's roots, so whoever holds the token may rewrite it. A shape whose content no longer
#   hashes to its key (a pool's region changed in place) is not read at all: its key counts as
#   missing, and the layer uploads the shape again before anything is judged. The same holds for
#   the fleet's views stored beside the shapes (data.examlops_fleet.views[key], what each check
#   sees of them): they are read only when their digest is the one the policy gave the caller with
#   them (the verdict query carries it), so views rewritten in place are worked out again instead.
package examlops.fleet

key_hex := 32

# The key of a shape: what the layer computes when it uploads it.
key(s) := substring(crypto.sha256(json.marshal(s)), 0, key_hex)

# The shape stored under k, only when it hashes to k; undefined otherwise.
shape(k) := s if {
	s := data.examlops_fleet.shapes[k]
	key(s) == k
}

# The digest of the fleet's views (of anything stored): what the policy gives the caller with the
# views it works out, and what stored views must still hash to.
digest(v) := crypto.sha256(json.marshal(v))

# The views stored under k, only when they hash to the digest the caller had with them;
# undefined otherwise.
views(k, want) := v if {
	v := data.examlops_fleet.views[k]
	digest(v) == want
}
