package system.authz_test

import data.system.authz

token := "0123456789abcdef"

runtime := {"token_sha256": crypto.sha256(token)}

request(method, path) := {"method": method, "path": split(trim_prefix(path, "/"), "/"), "identity": token}

allowed(req) if authz.allow with input as req with data.examlops_runtime as runtime

allowed_requests := {
	"query a decision": request("POST", "/v1/data/examlops/hardware/placement/decision_by_shape"),
	"read a table": request("GET", "/v1/data/examlops/tables/regions"),
	"read the loaded revision": request("GET", "/v1/data/system/bundles"),
	"read one bundle": request("GET", "/v1/data/system/bundles/bundle.tar.gz"),
	"write own data": request("PUT", "/v1/data/examlops_fleet/pools/a"),
	"patch own data": request("PATCH", "/v1/data/examlops_fleet"),
	"delete own data": request("DELETE", "/v1/data/examlops_fleet/pools/a"),
	"read own data": request("GET", "/v1/data/examlops_fleet/pools"),
	"readiness": request("GET", "/health"),
	"request counters": request("GET", "/metrics"),
}

refused_requests := {
	"rewrite a region": request("PUT", "/v1/data/examlops/tables/regions/us"),
	"patch the tables": request("PATCH", "/v1/data/examlops/tables"),
	"delete the policy data": request("DELETE", "/v1/data/examlops"),
	"upload a policy": request("PUT", "/v1/policies/x"),
	"delete a policy": request("DELETE", "/v1/policies/examlops/hardware/placement.rego"),
	"list policies": request("GET", "/v1/policies"),
	"ad-hoc query": request("POST", "/v1/query"),
	"compile": request("POST", "/v1/compile"),
	"read the token digest": request("GET", "/v1/data/examlops_runtime"),
	"write the token digest": request("PUT", "/v1/data/examlops_runtime/token_sha256"),
	"read all data": request("GET", "/v1/data"),
	"write the root": request("PUT", "/v1/data"),
	"read the authz policy": request("GET", "/v1/data/system/authz"),
	"write the bundle status": request("PUT", "/v1/data/system/bundles/x"),
	"a name that only starts like examlops": request("GET", "/v1/data/examlops_runtime/token_sha256"),
	"query the fleet data by POST": request("POST", "/v1/data/examlops_fleet"),
	"config": request("GET", "/v1/config"),
	"status": request("GET", "/v1/status"),
}

test_allowed_with_the_token[name] if {
	some name, req in allowed_requests
	allowed(req)
}

test_refused_even_with_the_token[name] if {
	some name, req in refused_requests
	not allowed(req)
}

test_every_request_needs_the_token[name] if {
	some name, req in allowed_requests
	not allowed(object.union(req, {"identity": "wrong"}))
	not allowed(object.remove(req, ["identity"]))
}

test_nothing_is_allowed_without_a_token_digest if {
	req := allowed_requests.readiness
	not authz.allow with input as req
}
