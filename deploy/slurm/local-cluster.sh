#!/usr/bin/env bash
# A two-node Slurm cluster on this one machine, for synattn's tests and for trying the Slurm
# executor on a laptop: munge, slurmctld, and two slurmd processes (virtual nodes n1 and n2,
# `slurmd -N`, one port each). Root only; needs Debian's slurm-wlm and munge (22.05).
#
#   deploy/slurm/local-cluster.sh up      # install what is missing, write the config, start
#   deploy/slurm/local-cluster.sh down    # stop every daemon this script started
#   export SLURM_CONF=/tmp/synattn-slurm/slurm.conf   # then sbatch, squeue, synattn ...
#
# Nothing is written under /etc/slurm: the cluster's config lives in $SYNATTN_SLURM_DIR and
# clients find it through SLURM_CONF. Partitions: `debug` (default; training) and `parse`.
# No accounting daemon: synattn reads finished jobs from `scontrol show job` (kept
# MinJobAge seconds), and from `sacct` where a cluster has accounting.
set -uo pipefail

DIR=${SYNATTN_SLURM_DIR:-/tmp/synattn-slurm}
CONF=$DIR/slurm.conf
CPUS=${SYNATTN_SLURM_CPUS:-2}

write_conf() {
  mkdir -p "$DIR/state" "$DIR/log" "$DIR/spool-n1" "$DIR/spool-n2"
  cat >"$CONF" <<CONF
# written by synattn's deploy/slurm/local-cluster.sh: two virtual nodes on one machine
ClusterName=synattn-local
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=${SYNATTN_SLURMCTLD_PORT:-16817}
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool-%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=10
SlurmctldTimeout=10
MessageTimeout=5
InactiveLimit=0
KillWait=10
MinJobAge=600
JobRequeue=1
EnforcePartLimits=ALL
PreemptType=preempt/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=${SYNATTN_SLURMD_PORT1:-16818} CPUs=$CPUS RealMemory=4000 State=UNKNOWN
NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=${SYNATTN_SLURMD_PORT2:-16819} CPUs=$CPUS RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=60 MaxNodes=2 State=UP
PartitionName=parse Nodes=n1,n2 MaxTime=60 MaxNodes=1 State=UP
CONF
}

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

up() {
  [ "$(id -u)" = 0 ] || { echo "local-cluster.sh: run as root" >&2; return 1; }
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge \
      >"/tmp/synattn-slurm-apt.log" 2>&1 \
      || { echo "could not install slurm-wlm (see /tmp/synattn-slurm-apt.log)" >&2; return 1; }
  fi
  write_conf
  export SLURM_CONF=$CONF
  if ! pgrep -x munged >/dev/null; then
    mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null
    [ -s /etc/munge/munge.key ] || { mungekey -c 2>/dev/null || create-munge-key -f; }
    runuser -u munge -- /usr/sbin/munged || { echo "munged did not start" >&2; return 1; }
  fi
  running "$DIR/slurmctld.pid" || slurmctld -f "$CONF" || return 1
  for n in n1 n2; do
    running "$DIR/slurmd-$n.pid" || slurmd -f "$CONF" -N "$n" || return 1
  done
  for _ in $(seq 100); do
    idle=$(sinfo -h -p debug -t idle,mix,alloc -o '%D' 2>/dev/null | awk '{s+=$1} END {print s+0}')
    [ "$idle" -ge 2 ] && break
    # a node left down by an earlier run (its slurmd killed by a test) comes back
    scontrol update nodename=n1,n2 state=resume >/dev/null 2>&1
    sleep 0.2
  done
  [ "${idle:-0}" -ge 2 ] || { echo "slurm nodes are not up: $(sinfo 2>&1)" >&2; return 1; }
  echo "slurm up: SLURM_CONF=$CONF ($(sinfo -h -o '%P %D %t' | tr '\n' ' '))"
}

down() {
  for pid in "$DIR"/slurmd-n1.pid "$DIR"/slurmd-n2.pid "$DIR"/slurmctld.pid; do
    running "$pid" && kill "$(cat "$pid")"
  done
  return 0
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  conf) write_conf; echo "$CONF" ;;
  *) echo "usage: $0 up|down|conf" >&2; exit 2 ;;
esac
