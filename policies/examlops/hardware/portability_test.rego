package examlops.hardware.portability_test

import data.examlops.hardware.portability

# The E8 specification's portability table: accelerator -> engines that run on it.
spec_engines := {
	"nvidia": {"vllm", "sglang", "generic"},
	"amd": {"vllm", "generic"},
	"intel-gaudi": {"ipex", "generic"},
	"tpu": {"generic"},
	"cpu": {"ipex", "cpu", "generic"},
}

all_engines := {"vllm", "sglang", "ipex", "cpu", "generic"}

test_backend_of_each_accelerator_follows_spec if {
	portability.backend("nvidia") == "cuda"
	portability.backend("amd") == "rocm"
	portability.backend("intel-gaudi") == "ipex"
	portability.backend("tpu") == "xla"
	portability.backend("cpu") == "cpu"
}

test_every_spec_pair_is_portable if {
	every accelerator, engines in spec_engines {
		every engine in engines {
			portability.check(engine, accelerator) == null
		}
	}
}

test_every_pair_outside_spec_is_rejected if {
	every accelerator, engines in spec_engines {
		every engine in all_engines - engines {
			portability.check(engine, accelerator).code == "backend_unsupported"
		}
	}
}

test_vllm_runs_on_cuda_and_rocm if {
	portability.compatible("vllm") == {"nvidia", "amd"}
}

test_sglang_runs_on_cuda_only if {
	portability.compatible("sglang") == {"nvidia"}
}

test_ipex_runs_on_ipex_and_cpu if {
	portability.compatible("ipex") == {"intel-gaudi", "cpu"}
}

test_cpu_engine_runs_on_cpu_only if {
	portability.compatible("cpu") == {"cpu"}
}

test_generic_runs_everywhere if {
	portability.compatible("generic") == {"nvidia", "amd", "intel-gaudi", "tpu", "cpu"}
}

test_sglang_on_amd_message_is_the_spec_message if {
	r := portability.check("sglang", "amd")
	r.message == "engine 'sglang' cannot run on amd (needs backend rocm; supports ('cuda',))"
	r.code == "backend_unsupported"
	r.kind == "never"
	r.details == {"engine": "sglang", "accelerator": "amd", "needs": "rocm", "supports": ["cuda"]}
}

test_multi_backend_engine_lists_backends_in_engine_order if {
	portability.check("vllm", "tpu").message == "engine 'vllm' cannot run on tpu (needs backend xla; supports ('cuda', 'rocm'))"
	portability.check("ipex", "amd").message == "engine 'ipex' cannot run on amd (needs backend rocm; supports ('ipex', 'cpu'))"
}

test_single_backend_engine_has_trailing_comma if {
	portability.supports_text("cpu") == "('cpu',)"
	portability.check("cpu", "nvidia").message == "engine 'cpu' cannot run on nvidia (needs backend cuda; supports ('cpu',))"
}

test_supports_text_for_five_backends if {
	portability.supports_text("generic") == "('cuda', 'rocm', 'ipex', 'xla', 'cpu')"
}

test_portable_is_undefined_for_unsupported_pair if {
	portability.portable("vllm", "amd")
	not portability.portable("sglang", "amd")
}

# Overridden tables: the policy follows the reviewed tables, not a hard-coded list.
test_engine_table_override_makes_sglang_portable_to_amd if {
	portability.check("sglang", "amd") == null with data.examlops.tables.engines as {"sglang": {"backends": ["cuda", "rocm"]}}
}

test_accelerator_table_override_adds_a_device_for_its_backend if {
	accelerators := {
		"nvidia": {"backend": "cuda"},
		"gaudi-next": {"backend": "ipex"},
	}
	portability.compatible("ipex") == {"gaudi-next"} with data.examlops.tables.accelerators as accelerators
	portability.compatible("generic") == {"nvidia", "gaudi-next"} with data.examlops.tables.accelerators as accelerators
}
