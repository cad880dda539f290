#!/bin/sh
# An example batch script for `exa hardware submit ID --script examples/job.sh`: Slurm runs it on
# the devices the decision holds (exa passes the partition, GRES and constraint to sbatch).
echo "running on $(hostname): ${SLURM_JOB_GPUS:-no GPUs listed}"
