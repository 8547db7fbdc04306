#!/bin/bash
# A Slurm cluster of one node for a test: munged, slurmctld and slurmd (from
# Debian's munge and slurm-wlm) started as root in a fresh folder with a
# generated key and config on free ports, then `"$@"` run against it
# (SLURM_CONF set), then everything stopped and removed — also when the
# command fails or this script is told to stop. Exits with the command's
# code; 77 when the packages are missing.
#
#   tests/local_slurm.sh <cpus> <command...>
#
# The daemons' folder is a fresh one under /tmp, not under the test's own
# folder: munge's socket path must fit in a UNIX socket address (108 bytes),
# and Bazel's test folders are longer.
set -uo pipefail
cpus="$1"; shift

for tool in munged mungekey slurmctld slurmd srun sbatch; do
  if ! command -v "$tool" >/dev/null && [[ ! -x "/usr/sbin/$tool" ]]; then
    echo "local_slurm: $tool not found: install munge and slurm-wlm" \
         "(tools/install_deps.sh)" >&2
    exit 77
  fi
done
export PATH="$PATH:/usr/sbin"
dir="$(mktemp -d /tmp/gs-slurm.XXXXXX)" || exit 1

mkdir -p "$dir"/{munge,state,spool,log}
chmod 711 "$dir/munge"
pids=()
status=1
# Daemons stop in the reverse order of their start (munged last: the others
# talk to it on their way out), and their folder goes; its logs are shown
# first when the command failed.
cleanup() {
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[i]}" 2>/dev/null
    wait "${pids[i]}" 2>/dev/null
  done
  if [[ "$status" != 0 ]]; then tail -n 30 "$dir"/log/*.log >&2; fi
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# A port nobody listens on now, above 20000 (the kernel's ephemeral range
# is higher on Debian).
free_port() {
  local port
  for _ in $(seq 1 200); do
    port=$((20000 + RANDOM % 12000))
    if ! ss -Htln "sport = :$port" | grep -q .; then echo "$port"; return; fi
  done
  echo "local_slurm: no free port" >&2
  return 1
}

mungekey --create --keyfile="$dir/munge/munge.key" --force || exit 1
chmod 400 "$dir/munge/munge.key"
munged --foreground --force --socket="$dir/munge/munge.socket" \
  --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.pid" \
  --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" \
  >"$dir/log/munged.out" 2>&1 &
pids+=($!)

host="$(hostname -s)"
ctld_port="$(free_port)" || exit 1
slurmd_port="$(free_port)" || exit 1
export SLURM_CONF="$dir/slurm.conf"
cat > "$SLURM_CONF" <<CONF
ClusterName=gradsynctest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF

# In the foreground (-D) as this script's children: they stay in its
# process group, so whatever stops the script's group stops them too.
slurmctld -D -i -f "$SLURM_CONF" >"$dir/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$host" >"$dir/log/slurmd.out" 2>&1 &
pids+=($!)

# Bounded wait (about 20 s) for the node to be up.
node_up() {
  timeout 2 sinfo -h -N -o '%T' 2>/dev/null | grep -qE '^(idle|mixed)'
}
for _ in $(seq 1 40); do
  if node_up; then break; fi
  sleep 0.5
done
if ! node_up; then
  echo "local_slurm: the node did not come up" >&2
  exit 1
fi
"$@"
status=$?
exit "$status"
