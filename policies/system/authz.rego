# Who may use the REST API of the local OPA (evaluated by OPA for every request, run with
# --authentication=token --authorization=basic). A request is allowed only with the per-state
# bearer token, and only for what the placement layer does:
#   GET/POST   /v1/data/examlops/...          decisions (queries of the reviewed policy)
#   GET        /v1/data/system/bundles/...    which bundle revision is loaded
#   GET/PUT/PATCH/DELETE /v1/data/examlops_fleet/...   the layer's own data
#   GET        /health, /metrics              readiness, and the request counters the idle check reads
# Everything else is refused: /v1/policies, /v1/query, /v1/compile, data writes anywhere else.
# The bundle's roots (examlops, system/authz) also make OPA itself refuse writes to the policy.
#
# The token is compared as its SHA-256 digest, loaded at start as non-bundle data: the token
# itself is never in OPA's data.
package system.authz

# METADATA
# title: allow
# description: Whether OPA serves a REST request (OPA asks it for every request).
# entrypoint: true
default allow := false

allow if {
	authenticated
	permitted
}

authenticated if crypto.sha256(input.identity) == data.examlops_runtime.token_sha256

read_methods := {"GET", "POST"}

fleet_methods := {"GET", "PUT", "PATCH", "DELETE"}

under(prefix) if array.slice(input.path, 0, count(prefix)) == prefix

permitted if {
	input.method == "GET"
	input.path in {["health"], ["metrics"]}
}

permitted if {
	input.method in read_methods
	under(["v1", "data", "examlops"])
}

permitted if {
	input.method == "GET"
	under(["v1", "data", "system", "bundles"])
}

permitted if {
	input.method in fleet_methods
	under(["v1", "data", "examlops_fleet"])
}
