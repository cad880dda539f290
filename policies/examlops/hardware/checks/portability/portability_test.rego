package examlops.hardware.checks.portability_test

import data.examlops.hardware.checks.portability

# The check sees only the fields it declares: the shape's accelerator, the workload's engine.
deny(accelerator, engine) := d if {
	d := portability.deny with input as {"shape": {"accelerator": accelerator}, "workload": {"engine": engine}}
}

# The rejection of the workload as asked: the E8 specification's line, byte for byte.
test_e8_sglang_on_amd_rejection_exactly if {
	portability.rejection("sglang", "amd") == {
		"code": "backend_unsupported",
		"kind": "never",
		"message": "engine 'sglang' cannot run on amd (needs backend rocm; supports ('cuda',))",
		"details": {"engine": "sglang", "accelerator": "amd", "needs": "rocm", "supports": ["cuda"]},
	}
}

# A pool's denial names the backends in words, never as a Python tuple.
test_a_pools_denial_names_the_backends_in_words if {
	deny("amd", "sglang") == {{
		"code": "backend_unsupported",
		"kind": "never",
		"message": "engine 'sglang' cannot run on amd (needs backend rocm; supports cuda)",
		"details": {"engine": "sglang", "accelerator": "amd", "needs": "rocm", "supports": ["cuda"]},
	}}
}

# Every (engine, accelerator) pair of the tables: denied exactly when the accelerator's backend is
# not among the engine's.
portable_cases := {
	"vllm on nvidia": {"engine": "vllm", "accelerator": "nvidia", "portable": true},
	"vllm on amd": {"engine": "vllm", "accelerator": "amd", "portable": true},
	"vllm on intel-gaudi": {"engine": "vllm", "accelerator": "intel-gaudi", "portable": false},
	"vllm on tpu": {"engine": "vllm", "accelerator": "tpu", "portable": false},
	"vllm on cpu": {"engine": "vllm", "accelerator": "cpu", "portable": false},
	"sglang on nvidia": {"engine": "sglang", "accelerator": "nvidia", "portable": true},
	"sglang on amd": {"engine": "sglang", "accelerator": "amd", "portable": false},
	"sglang on tpu": {"engine": "sglang", "accelerator": "tpu", "portable": false},
	"ipex on intel-gaudi": {"engine": "ipex", "accelerator": "intel-gaudi", "portable": true},
	"ipex on cpu": {"engine": "ipex", "accelerator": "cpu", "portable": true},
	"ipex on nvidia": {"engine": "ipex", "accelerator": "nvidia", "portable": false},
	"cpu engine on cpu": {"engine": "cpu", "accelerator": "cpu", "portable": true},
	"cpu engine on nvidia": {"engine": "cpu", "accelerator": "nvidia", "portable": false},
	"generic on tpu": {"engine": "generic", "accelerator": "tpu", "portable": true},
	"generic on cpu": {"engine": "generic", "accelerator": "cpu", "portable": true},
	"generic on amd": {"engine": "generic", "accelerator": "amd", "portable": true},
}

# true when the check lets the engine run on the accelerator.
passes(accelerator, engine) if count(deny(accelerator, engine)) == 0

else := false

test_portability[name] if {
	some name, tc in portable_cases
	passes(tc.accelerator, tc.engine) == tc.portable
	ok := portability.check(tc.engine, tc.accelerator) == null
	ok == tc.portable
}

test_portability_agrees_with_the_tables[name] if {
	some e, engine in data.examlops.tables.engines
	some a, acc in data.examlops.tables.accelerators
	name := sprintf("%s on %s", [e, a])
	supported := acc.backend in engine.backends
	passes(a, e) == supported
}

# A pool's denial: the engine's backends in words, in the table's order.
message_cases := {
	"one backend": {"engine": "sglang", "accelerator": "tpu", "message": "engine 'sglang' cannot run on tpu (needs backend xla; supports cuda)"},
	"two backends": {"engine": "vllm", "accelerator": "tpu", "message": "engine 'vllm' cannot run on tpu (needs backend xla; supports cuda and rocm)"},
	"two backends, table order": {"engine": "ipex", "accelerator": "amd", "message": "engine 'ipex' cannot run on amd (needs backend rocm; supports ipex and cpu)"},
	"cpu engine": {"engine": "cpu", "accelerator": "intel-gaudi", "message": "engine 'cpu' cannot run on intel-gaudi (needs backend ipex; supports cpu)"},
}

test_message[name] if {
	some name, tc in message_cases
	[r.message | some r in deny(tc.accelerator, tc.engine)] == [tc.message]
}

# The rejection of the workload as asked: the specification's tuple notation, in the table's order.
rejection_cases := {
	"one backend": {"engine": "sglang", "accelerator": "tpu", "message": "engine 'sglang' cannot run on tpu (needs backend xla; supports ('cuda',))"},
	"two backends": {"engine": "vllm", "accelerator": "tpu", "message": "engine 'vllm' cannot run on tpu (needs backend xla; supports ('cuda', 'rocm'))"},
}

test_rejection_message[name] if {
	some name, tc in rejection_cases
	portability.rejection(tc.engine, tc.accelerator).message == tc.message
}

test_supports_words if {
	portability.supports_words("generic") == "cuda, rocm, ipex, xla and cpu"
	portability.supports_words("sglang") == "cuda"
}

supports_cases := {
	"sglang": "('cuda',)",
	"vllm": "('cuda', 'rocm')",
	"ipex": "('ipex', 'cpu')",
	"cpu": "('cpu',)",
	"generic": "('cuda', 'rocm', 'ipex', 'xla', 'cpu')",
}

test_supports_text[engine] if {
	some engine, text in supports_cases
	portability.supports_text(engine) == text
}

test_check_is_null_when_portable if {
	portability.check("vllm", "amd") == null
	portability.check("sglang", "amd").code == "backend_unsupported"
}

test_engine_table_override if {
	deny("amd", "sglang") == set() with data.examlops.tables.engines.sglang as {"backends": ["cuda", "rocm"]}
}

test_accelerator_table_override if {
	[r.details.needs | some r in deny("amd", "sglang")] == ["hip"] with data.examlops.tables.accelerators.amd as {"backend": "hip"}
}

# Regression (portability.rego, check): an accelerator the accelerators table does not know has no
# backend, so the denial's message is undefined and the check denies nothing: the check passes
# a pool it cannot judge (fail open). The fallback check happens to deny such a pool in the
# composed placement, but the check itself should fail closed.
test_portability_unknown_accelerator_is_denied if {
	[r.code | some r in deny("npu", "vllm")] == ["backend_unsupported"]
}

test_about if {
	a := portability.about
	a.title == "Portability"
	a.custom.order == 10
	a.custom.reads == {"shape": ["accelerator"], "workload": ["engine"]}
	object.keys(a.custom.codes) == {"backend_unsupported"}
}
