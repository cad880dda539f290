# METADATA
# title: Quotas report
# description: >-
#   Use against quota, per project and accelerator class of the quotas table, as `exa hardware
#   quotas` shows it: what the project holds, its nominal quota, what it borrows and may borrow,
#   how much more a grant could hold right now (the room the quota check compares against), and
#   its device-hours in the period. The figures are the quota check's (checks/quota), worded once.
#
#   Input (quota-report-input.schema.json): quota_use {devices, device_hours}, as the quota check
#   reads it.
# schemas:
#   - input: schema["quota-report-input.schema"]
package examlops.queue.quotas

import data.examlops.hardware.checks.quota
import data.examlops.tables.quotas

# METADATA
# title: report
# description: One row per project and class of the quotas table, by project then class.
# entrypoint: true
report := rows(object.get(input, "quota_use", {}))

rows(use) := [row(p, c, use) |
	some [p, c] in sort([[p, c] | some p, q in quotas.projects; some c, _ in q.accelerators])
]

row(p, c, use) := {
	"project": p,
	"accelerator": c,
	"held": u.devices,
	"nominal": lim.nominal,
	"borrowing_limit": object.get(quota.entry(p, c), "borrowing_limit", null),
	"cohort": lim.cohort,
	"borrowed": borrowed(lim, u),
	"room": room(lim, u),
	"device_hours": u.device_hours,
	"device_hours_quota": lim.device_hours,
	"period_days": lim.period_days,
	"summary": summary(lim, u),
} if {
	lim := quota.limits_of(p, c, 0)
	u := quota.use_of(lim, use)
}

# Devices held above the nominal quota.
borrowed(lim, _) := 0 if lim.nominal == null

borrowed(lim, u) := max([0, u.devices - lim.nominal]) if lim.nominal != null

# How many more devices a grant could hold now (null: no device quota): within the nominal quota,
# or borrowing within the ceiling and the cohort's unused quota, whichever is more. A grant of
# exactly this many passes the quota check; one more does not. 0 once the project's device-hours
# in the period are used up: the check then refuses every grant, whatever its size.
room(lim, u) := 0 if {
	used_up(lim, u)
} else := null if {
	lim.nominal == null
} else := max([0, lim.nominal - u.devices]) if {
	lim.cohort == null
} else := max([0, lim.nominal - u.devices, borrow_room(lim, u)])

borrow_room(lim, u) := min([ceiling_room(lim, u), lim.cohort_nominal - u.cohort_devices])

ceiling_room(lim, u) := lim.ceiling - u.devices if lim.ceiling != null

ceiling_room(lim, u) := lim.cohort_nominal - u.cohort_devices if lim.ceiling == null

# The project's device-hours in the period reach its quota: the quota check's own comparison.
used_up(lim, u) if quota.hours_over(lim, u) != null

# --- words ----------------------------------------------------------------------------------------

summary(lim, u) := concat("; ", [x | some x in [devices_words(lim, u), hours_words(lim, u)]; x != null])

devices_words(lim, u) := sprintf("project %s, %s: holds %s; no device quota", [
	lim.project, lim.accelerator, quota.number(u.devices),
]) if {
	lim.nominal == null
} else := sprintf("project %s, %s: holds %s of its %s%s; room now for %s more", [
	lim.project, lim.accelerator, quota.number(u.devices), quota.number(lim.nominal),
	borrow_words(lim, u), quota.number(room(lim, u)),
])

borrow_words(lim, u) := "" if {
	lim.cohort == null
} else := sprintf(" (borrows %s, up to %s, from cohort %s)", [
	quota.number(borrowed(lim, u)), quota.number(lim.ceiling - lim.nominal), lim.cohort,
]) if {
	lim.ceiling != null
} else := sprintf(" (borrows %s from cohort %s)", [quota.number(borrowed(lim, u)), lim.cohort])

hours_words(lim, u) := null if {
	lim.device_hours == null
} else := sprintf("%s of %s device-hours in the last %s days%s", [
	quota.number(u.device_hours), quota.number(lim.device_hours), quota.number(lim.period_days),
	used_up_words(lim, u),
])

used_up_words(lim, u) := ": used up, nothing more starts until older use ages out" if {
	used_up(lim, u)
} else := ""
