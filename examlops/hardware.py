"""``from examlops.hardware import Workload, place, device_accounting``: the E8 import path.

A thin alias of ``examlops_policy``; there is no second implementation.
"""

from examlops_policy import *  # noqa: F403
from examlops_policy import __all__ as __all__
