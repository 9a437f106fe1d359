#!/usr/bin/env bash
# cluster.sh start|stop STATE_DIR [PORT]
#
# A real SLURM cluster on this one machine, for the `slurm` tests: munged, slurmctld and two
# slurmd daemons that play the nodes node1 and node2 (Debian's slurmd is built with
# --enable-multiple-slurmd). Everything it writes -- config, munge key, job state, logs, pid
# files -- lives in STATE_DIR; `start` wipes it first, so every test session begins clean.
# Needs root and the packages slurmctld slurmd slurm-client munge (scripts/install-deps.sh).
#
#   start: writes STATE_DIR/etc/slurm.conf and STATE_DIR/env.sh (export SLURM_CONF=...), starts
#          the daemons, waits until both nodes are idle; exits non-zero with the daemons' log
#          tail when SLURM cannot start (the tests then fail; they never skip).
#   stop:  cancels the jobs, then stops only the processes this cluster started: the daemons
#          (tagged by an environment variable they pass on to their slurmstepd children),
#          everything below those, and whatever is left in a node's own UTS namespace.
#
# How the two nodes differ on one host: each slurmd runs in its own UTS and mount namespace
# (hostname nodeI, an /etc/hosts bind-mounted over the real one that resolves node1/node2 to
# 127.0.10.I). Job processes inherit both, so MPI sees two hosts and MPI_Comm_split_type(SHARED)
# gives two node communicators. Network, pid and ipc namespaces stay shared (loopback only).
# No cgroups or systemd: proctrack/linuxproc, task/none, and an Epilog that kills what
# linuxproc loses (processes re-parented to init).
#
# Settings that make tests quick (Slurm defaults in parentheses): cred_expire=10 (120) -- a
# requeued job may start again after ~10 s; batch_sched_delay=0, sched_interval=5 -- jobs
# start within a second. Ports: slurmctld PORT (default 16917), slurmd i PORT+10+i, so another
# lab cluster on the usual 16817 can run beside this one.
set -uo pipefail

action=${1:-}
STATE=${2:-}
PORT=${3:-16917}
NODES=2
[ -n "$action" ] && [ -n "$STATE" ] || { echo "usage: cluster.sh start|stop STATE_DIR [PORT]" >&2; exit 2; }
STATE=$(realpath -m "$STATE")
CONF=$STATE/etc/slurm.conf
SOCKET=$STATE/munge/munge.socket
TAG="TRIDENT_SLURM_CLUSTER=$STATE"  # in the environment of every daemon (and its slurmstepds)

say() { echo "cluster.sh: $*"; }
die() {
  echo "cluster.sh: ERROR: $*" >&2
  for f in "$STATE"/log/*.log "$STATE"/munge/munged.log; do
    [ -s "$f" ] && { echo "--- tail of $f" >&2; tail -n 15 "$f" >&2; }
  done
  exit 1
}

# ---- process helpers (no procps needed) ----------------------------------------------------
pids_all() { local d; for d in /proc/[0-9]*; do echo "${d#/proc/}"; done; }
has_env() { tr '\0' '\n' 2>/dev/null <"/proc/$1/environ" | grep -qxF -- "$2"; }
alive() { [ -d "/proc/$1" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" != Z ]; }
children_of() {  # pids... -> every descendant
  local p pp queue=("$@") cur
  declare -A kids=()
  for p in $(pids_all); do
    pp=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f2) || continue
    [ -n "$pp" ] && kids[$pp]+=" $p"
  done
  while [ ${#queue[@]} -gt 0 ]; do
    cur=${queue[0]}; queue=("${queue[@]:1}")
    for p in ${kids[$cur]:-}; do echo "$p"; queue+=("$p"); done
  done
}
tagged() { local p; for p in $(pids_all); do [ "$p" != $$ ] && has_env "$p" "$TAG" && echo "$p"; done; }
in_node_namespaces() {  # processes in the UTS namespace of a tagged slurmd (not ours)
  local mine p ns; mine=$(readlink /proc/self/ns/uts)
  declare -A spaces=()
  for p in "$@"; do
    ns=$(readlink "/proc/$p/ns/uts" 2>/dev/null) || continue
    [ "$ns" != "$mine" ] && spaces[$ns]=1
  done
  [ ${#spaces[@]} -gt 0 ] || return 0
  for p in $(pids_all); do
    ns=$(readlink "/proc/$p/ns/uts" 2>/dev/null) || continue
    [ -n "${spaces[$ns]:-}" ] && echo "$p"
  done
}
terminate() {  # pids...: TERM, up to 5 s, then KILL
  local p left=() targets=()
  for p in "$@"; do [ "$p" != $$ ] && alive "$p" && targets+=("$p"); done
  [ ${#targets[@]} -gt 0 ] || return 0
  kill -TERM "${targets[@]}" 2>/dev/null
  for _ in $(seq 25); do
    left=(); for p in "${targets[@]}"; do alive "$p" && left+=("$p"); done
    [ ${#left[@]} -eq 0 ] && return 0
    sleep 0.2
  done
  say "KILL ${left[*]}"
  kill -KILL "${left[@]}" 2>/dev/null
  sleep 0.2
}

stop_cluster() {
  [ -d "$STATE" ] || return 0
  if [ -s "$CONF" ] && command -v squeue >/dev/null; then
    export SLURM_CONF=$CONF
    local jobs; jobs=$(timeout 5 squeue -h -o %A 2>/dev/null | xargs)
    if [ -n "$jobs" ]; then
      say "scancel $jobs"
      # shellcheck disable=SC2086
      timeout 5 scancel $jobs 2>/dev/null
      for _ in $(seq 25); do [ -z "$(timeout 5 squeue -h -t R,CG 2>/dev/null)" ] && break; sleep 0.2; done
    fi
  fi
  local daemons
  mapfile -t daemons < <(tagged)
  [ ${#daemons[@]} -gt 0 ] || { say "nothing running for $STATE"; return 0; }
  # Job processes first (descendants of the slurmstepds, leftovers in the node namespaces),
  # then the daemons themselves.
  local jobs_procs
  mapfile -t jobs_procs < <({ children_of "${daemons[@]}"; in_node_namespaces "${daemons[@]}"; } \
                              | grep -vxF -f <(printf '%s\n' "${daemons[@]}") | sort -un)
  terminate "${jobs_procs[@]}"
  terminate "${daemons[@]}"
  mapfile -t daemons < <(tagged)
  [ ${#daemons[@]} -eq 0 ] || die "processes still running after stop: ${daemons[*]}"
  say "stopped (logs kept in $STATE/log)"
}

start_cluster() {
  [ "$(id -u)" = 0 ] || die "must run as root (SlurmUser=root, munged, unshare)"
  local c
  for c in munged slurmctld slurmd sbatch squeue scontrol sinfo unshare; do
    command -v "$c" >/dev/null || die "'$c' not found: install slurmctld slurmd slurm-client munge (scripts/install-deps.sh)"
  done
  [ ${#SOCKET} -lt 100 ] || die "state dir path too long for a unix socket: $SOCKET"
  [ -d /sys/fs/cgroup ] || die "slurmd 22.05 needs /sys/fs/cgroup mounted"
  stop_cluster >/dev/null
  rm -rf "$STATE"
  mkdir -p "$STATE"/{etc,run,log,ctld,munge}
  local n
  for n in $(seq "$NODES"); do mkdir -p "$STATE/spool/node$n/tmp"; chmod 1777 "$STATE/spool/node$n/tmp"; done
  # munged refuses a socket dir that is not world-searchable or a key dir others can read.
  chmod 755 "$STATE" "$STATE/munge"

  # Per-node hostnames need unshare (root, not inside an unprivileged container).
  unshare --uts --mount --propagation private -- /bin/sh -c 'hostname probe && mount --bind /etc/hosts /etc/hosts' \
    >/dev/null 2>&1 || die "unshare --uts --mount does not work here: cannot give the nodes their own hostnames"
  { cat /etc/hosts; for n in $(seq "$NODES"); do echo "127.0.10.$n node$n"; done; } >"$STATE/etc/hosts"

  local cpus=2 mem
  mem=$(awk -v n="$NODES" '/^MemTotal:/ {print int($2 / 1024 / n)}' /proc/meminfo)
  cat >"$STATE/etc/epilog.sh" <<'EOF'
#!/bin/sh
# Kill what proctrack/linuxproc lost of this job (children re-parented to init): processes whose
# environment has this job's id, this cluster's SLURM_CONF and this node's name, except
# prologs/epilogs. The node's name matters because every node of this cluster is one machine:
# after an scancel each node runs its epilog as soon as its own tasks have ended, and node2's
# epilog would SIGKILL node1's batch shell (and a rank still committing) mid-stop.
[ -n "$SLURM_JOB_ID" ] && [ -n "$SLURM_CONF" ] && [ -n "$SLURMD_NODENAME" ] || exit 0
for d in /proc/[0-9]*; do
  [ "${d#/proc/}" = "$$" ] && continue
  env=$(tr '\0' '\n' 2>/dev/null <"$d/environ") || continue
  printf '%s\n' "$env" | grep -qxF "SLURM_JOB_ID=$SLURM_JOB_ID" || continue
  printf '%s\n' "$env" | grep -qxF "SLURM_CONF=$SLURM_CONF" || continue
  printf '%s\n' "$env" | grep -qxF "SLURMD_NODENAME=$SLURMD_NODENAME" || continue
  printf '%s\n' "$env" | grep -q '^SLURM_SCRIPT_CONTEXT=' && continue
  kill -KILL "${d#/proc/}" 2>/dev/null
done
exit 0
EOF
  chmod 755 "$STATE/etc/epilog.sh"
  : >"$STATE/etc/plugstack.conf"
  cat >"$CONF" <<EOF
# written by trident tests/slurm/cluster.sh: a 2-node lab cluster on one machine
ClusterName=trident
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCKET,cred_expire=10
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
TmpFS=$STATE/spool/%n/tmp
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
PlugStackConfig=$STATE/etc/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/log/jobcomp.txt
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=5,bf_interval=5
ReturnToService=2
MinJobAge=300
# As many sites: a job larger than its partition is refused at submission, not left pending.
EnforcePartLimits=ALL
SlurmdParameters=config_overrides
Epilog=$STATE/etc/epilog.sh
EOF
  for n in $(seq "$NODES"); do
    echo "NodeName=node$n NodeHostname=node$n NodeAddr=127.0.10.$n Port=$((PORT + 10 + n)) CPUs=$cpus RealMemory=$mem State=UNKNOWN" >>"$CONF"
  done
  # Preemption by partition, as at many sites (tests/slurm/preempt_sigterm.sh): a job of `high`
  # preempts the default partition's jobs (cancelled: PreemptMode=CANCEL) and `requeue`'s (which
  # Slurm requeues itself); `grace` and `grace_requeue` are the same two with a grace time, in
  # which Slurm signals the job's tasks and waits. Jobs of one partition never preempt each other.
  cat >>"$CONF" <<EOF
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=requeue Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE
PartitionName=grace Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=15
PartitionName=grace_requeue Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=15
PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
EOF
  echo "export SLURM_CONF=$CONF" >"$STATE/env.sh"
  export SLURM_CONF=$CONF

  # munge: a fresh key, every file in the state dir.
  dd if=/dev/urandom of="$STATE/munge/munge.key" bs=128 count=1 status=none
  chmod 600 "$STATE/munge/munge.key"
  mkdir -p "$STATE/munge/private"; chmod 700 "$STATE/munge/private"
  env "$TAG" munged --socket="$SOCKET" --key-file="$STATE/munge/munge.key" \
    --pid-file="$STATE/munge/private/munged.pid" --log-file="$STATE/munge/private/munged.log" \
    --seed-file="$STATE/munge/private/munged.seed" </dev/null >>"$STATE/log/daemons.out" 2>&1 \
    || die "munged did not start (see $STATE/munge/private/munged.log)"
  for _ in $(seq 50); do [ -S "$SOCKET" ] && break; sleep 0.1; done
  munge -S "$SOCKET" -n </dev/null | unmunge -S "$SOCKET" >/dev/null || die "munge round trip failed"

  env "$TAG" slurmctld -f "$CONF" -c </dev/null >>"$STATE/log/daemons.out" 2>&1 || die "slurmctld did not start"
  local slurmd; slurmd=$(command -v slurmd)
  for n in $(seq "$NODES"); do
    env "$TAG" unshare --uts --mount --propagation private -- /bin/sh -c \
      'hostname "$1" && mount --bind "$2" /etc/hosts && exec "$3" -f "$4" -N "$1"' \
      sh "node$n" "$STATE/etc/hosts" "$slurmd" "$CONF" </dev/null >>"$STATE/log/daemons.out" 2>&1 \
      || die "slurmd node$n did not start"
  done

  local deadline=$((SECONDS + 30)) ready
  until timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP'; do
    [ $SECONDS -lt $deadline ] || die "slurmctld does not answer"
    sleep 0.2
  done
  while :; do
    ready=$(timeout 5 sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 ~ /^(idle|mix|alloc)$/' | sort -u | wc -l)
    [ "$ready" -ge "$NODES" ] && break
    [ $SECONDS -lt $deadline ] || die "only $ready of $NODES nodes became idle"
    sleep 0.2
  done
  say "READY: $NODES nodes x $cpus CPUs on port $PORT; export SLURM_CONF=$CONF"
}

case $action in
  start) start_cluster ;;
  stop) stop_cluster ;;
  *) echo "usage: cluster.sh start|stop STATE_DIR [PORT]" >&2; exit 2 ;;
esac
