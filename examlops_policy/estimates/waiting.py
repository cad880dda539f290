"""The wait policy's answer and the comparison of a start estimate with it: the decision core's
(``examlops_policy._core.waiting``), named here beside the estimates they judge."""

from examlops_policy._core.waiting import SLACK_S, Starts, WaitLimits, WaitReasons, epoch_s, exceeded, reasons_json

__all__ = ["SLACK_S", "Starts", "WaitLimits", "WaitReasons", "epoch_s", "exceeded", "reasons_json"]
