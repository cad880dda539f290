# Structured reasons shared by every hardware policy: a stable code for machines, a message for
# people and details for explanations.
package examlops.hardware.reason

# kind "never": the pool can never run this workload; "not_now": it could, once capacity frees;
# "preference": the pool could run it, but a better tier (requested accelerator, HPC) is available.
make(code, kind, message, details) := {
	"code": code,
	"kind": kind,
	"message": message,
	"details": details,
}
