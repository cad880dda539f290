# METADATA
# title: Reasons
# description: Structured reasons shared by every hardware policy.
package examlops.hardware.reason

# A stable code for machines, a message for people and details for explanations. kind "never":
# the pool can never run this workload; "not_now": it could, once capacity frees; "preference": it
# could run it, but a better tier (the requested accelerator, HPC) is available.
make(code, kind, message, details) := {
	"code": code,
	"kind": kind,
	"message": message,
	"details": details,
}
