#!/bin/bash
# One gradsync job as the tasks of one `mpirun`: tasks 0..WORKERS-1 train,
# the last SERVERS tasks serve (`gradsync run` takes each task's role from
# OMPI_COMM_WORLD_RANK; core/cluster/cluster_env.h has the rule). Worker 0,
# task 0, hosts the coordinator: MASTER_ADDR must be task 0's host (the
# first host of the host file).
#
#   WORKERS=4 SERVERS=2 MASTER_ADDR=node1 tools/cluster/mpirun_job.sh \
#       --sync=ps --epochs=3
#
# Environment: WORKERS (required), SERVERS (0), MASTER_ADDR (127.0.0.1),
# MASTER_PORT (29500), GRADSYNC (the gradsync binary; default: on PATH),
# GRADSYNC_JOB_ID (default: mpi-<port>), GRADSYNC_JOB_TOKEN (passed on when
# set; or give --job_token_file=<file on a shared file system>), MPIRUN_ARGS
# (more mpirun options: --hostfile, --map-by, --allow-run-as-root).
# The remaining arguments are training flags.
set -euo pipefail
: "${WORKERS:?set WORKERS, the number of workers}"
export GRADSYNC_NUM_SERVERS="${SERVERS:-0}"
export MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
export MASTER_PORT="${MASTER_PORT:-29500}"
export GRADSYNC_JOB_ID="${GRADSYNC_JOB_ID:-mpi-${MASTER_PORT}}"
GRADSYNC="${GRADSYNC:-gradsync}"

pass=(-x GRADSYNC_NUM_SERVERS -x MASTER_ADDR -x MASTER_PORT -x GRADSYNC_JOB_ID)
if [[ -n "${GRADSYNC_JOB_TOKEN:-}" ]]; then pass+=(-x GRADSYNC_JOB_TOKEN); fi
# shellcheck disable=SC2086  # MPIRUN_ARGS is a list of options
exec mpirun ${MPIRUN_ARGS:-} -np $((WORKERS + GRADSYNC_NUM_SERVERS)) \
  "${pass[@]}" "$GRADSYNC" run "$@"
