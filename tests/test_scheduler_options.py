"""The schedulers' options, read into each adapter's typed options: what a caller gives
(``Hardware.submit(..., **options)``, the CLI's flags) is taken as it is meant or refused, naming
the option, before anything is asked of a scheduler; never cast."""

from __future__ import annotations

from pathlib import Path

import pytest

from examlops_policy.app.schedulers.kubernetes import KubernetesOptions
from examlops_policy.app.schedulers.slurm import SlurmOptions
from examlops_policy.errors import SpecError


def test_options_are_read_as_their_types() -> None:
    given = KubernetesOptions.read({"image": "busybox", "command": ["sh", "-c", "true"], "kubeconfig": Path("/k/config"), "namespace": ""})
    assert (given.image, given.command, given.kubeconfig, given.namespace) == ("busybox", ("sh", "-c", "true"), "/k/config", None)
    assert given.amd_memory_partition == "nps1"  # its default where none is given
    assert SlurmOptions.read({"script": Path("job.sh"), "image": "ignored"}) == SlurmOptions("job.sh")


@pytest.mark.parametrize(
    ("read", "given", "field"),
    [
        (KubernetesOptions.read, {"image": 3}, "image"),
        (KubernetesOptions.read, {"command": "sh -c true"}, "command"),
        (KubernetesOptions.read, {"context": ["a"]}, "context"),
        (SlurmOptions.read, {"script": True}, "script"),
    ],
)
def test_an_option_of_the_wrong_type_is_refused_by_name(read: object, given: dict[str, object], field: str) -> None:
    assert callable(read)
    with pytest.raises(SpecError) as caught:
        read(given)
    assert caught.value.field == field
