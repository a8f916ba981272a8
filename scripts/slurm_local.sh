#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine, for the `slurm` tests (pytest -m slurm).
#
#   sudo bash scripts/slurm_local.sh up       # install (once), configure, start, wait until idle
#   sudo bash scripts/slurm_local.sh install  # the packages only (CI runs it beside pip)
#   bash scripts/slurm_local.sh status        # sinfo and squeue
#   sudo bash scripts/slurm_local.sh down     # stop the daemons (the packages stay)
#
# Debian's slurm-wlm and munge, run as plain daemons (no systemd, no cgroups: containers and CI
# machines rarely have either): one node named after `hostname -s` with every CPU `nproc`
# reports, a default `debug` partition, no accounting. Jobs run as root, so the node sees the
# same paths (virtualenvs, tmp dirs) as the process that submits them.
# Environment: SLURM_LOCAL_CPUS (default: nproc), SLURM_LOCAL_STATE (default /var/spool/slurm-local).
# Every wait is bounded; a failure prints one line naming the log to read and exits non-zero.
set -euo pipefail

conf=/etc/slurm/slurm.conf
state=${SLURM_LOCAL_STATE:-/var/spool/slurm-local}
logs=/var/log/slurm-local
node=$(hostname -s)
cpus=${SLURM_LOCAL_CPUS:-$(( $(nproc) > 2 ? $(nproc) : 2 ))}  # srun --ntasks=2 needs two

die() { echo "slurm_local: $*" >&2; exit 1; }

need_root() { [[ $(id -u) == 0 ]] || die "'$1' needs root (it installs packages and starts daemons)."; }

install() {  # the packages, once; noninteractive
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
     && command -v sbatch >/dev/null; then return; fi
  echo "slurm_local: installing slurm-wlm and munge (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  timeout 600 apt-get update -q >/dev/null || die "apt-get update failed or took over 10 minutes."
  timeout 900 apt-get install -y -q --no-install-recommends slurm-wlm munge >/dev/null \
    || die "apt-get install slurm-wlm munge failed or took over 15 minutes."
}

write_conf() {  # slurm.conf for one node: this machine
  local mem_mb
  mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)  # leave the OS some
  mkdir -p "$(dirname "$conf")" "$state/ctld" "$state/d" "$logs"
  cat > "$conf" <<EOF
# Written by scripts/slurm_local.sh: a single-node cluster on $node.
ClusterName=local
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/d
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$logs/slurmctld.log
SlurmdLogFile=$logs/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No systemd or cgroups here: processes tracked through /proc, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$logs/jobcomp.txt
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# A requeued or preempted job gets SIGTERM, then SIGKILL this many seconds later: time to save.
KillWait=30
# Finished jobs stay visible to scontrol / squeue this long (there is no sacct without a DB).
MinJobAge=600
ReturnToService=2
SlurmdTimeout=60
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

running() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi
  [[ -s /etc/munge/munge.key ]] || { mungekey --create --force 2>/dev/null || \
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  runuser -u munge -- munged --force || die "munged did not start (see /var/log/munge/munged.log)."
  for _ in $(seq 50); do
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi
    sleep 0.2
  done
  die "munge does not answer 10s after starting munged (see /var/log/munge/munged.log)."
}

start_slurm() {
  running "$state/slurmctld.pid" || slurmctld -f "$conf" \
    || die "slurmctld did not start (see $logs/slurmctld.log)."
  running "$state/slurmd.pid" || slurmd -f "$conf" || die "slurmd did not start (see $logs/slurmd.log)."
}

wait_idle() {  # until sinfo shows the node idle (or mixed/allocated: it serves jobs); at most 90s
  local deadline=$((SECONDS + 90)) st=""
  while ((SECONDS < deadline)); do
    st=$(timeout 10 sinfo -h -n "$node" -o '%T' 2>/dev/null || true)
    case $st in
      idle|mixed|allocated|completing) echo "slurm_local: up: node $node ($cpus CPUs) is $st"; return ;;
      drain*|down*|fail*|inval*)  # e.g. left down by an earlier run: resume it once
        timeout 10 scontrol update nodename="$node" state=resume 2>/dev/null || true ;;
    esac
    sleep 1
  done
  die "node $node is not idle after 90s (sinfo says '${st:-nothing}'); see $logs/slurmctld.log and $logs/slurmd.log."
}

stop() {  # stop_daemon PIDFILE NAME: TERM, then KILL after 15s
  local pid
  [[ -f $1 ]] || return 0
  pid=$(cat "$1")
  kill "$pid" 2>/dev/null || { rm -f "$1"; return 0; }
  for _ in $(seq 75); do kill -0 "$pid" 2>/dev/null || { rm -f "$1"; return 0; }; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$1"
  echo "slurm_local: $2 did not stop within 15s; killed it." >&2
}

case ${1:-} in
  up)
    need_root up
    install
    write_conf
    start_munge
    start_slurm
    wait_idle ;;
  install)
    need_root install
    install ;;
  down)
    need_root down
    stop "$state/slurmd.pid" slurmd
    stop "$state/slurmctld.pid" slurmctld
    munged_pid=/run/munge/munged.pid
    stop "$munged_pid" munged
    echo "slurm_local: down" ;;
  status)
    command -v sinfo >/dev/null || die "not installed: run 'bash scripts/slurm_local.sh up' as root."
    timeout 10 sinfo || die "slurmctld does not answer: run 'bash scripts/slurm_local.sh up'."
    timeout 10 squeue ;;
  *)
    echo "usage: bash scripts/slurm_local.sh up|install|down|status" >&2
    exit 2 ;;
esac
