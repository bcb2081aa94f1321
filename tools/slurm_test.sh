#!/usr/bin/env bash
# Runs examples/slurm/eval_array.sbatch on a real one-node Slurm and checks that the merged report
# equals a one-process `kernelllm eval` of the same problems. As root on Debian 12, without
# systemd: installs slurmctld, slurmd and munge with apt where missing, starts private daemons
# (own munge key and socket, own slurm.conf via $SLURM_CONF, ports 16817/16818, state in a
# temporary directory; /etc is not touched), submits 2 shards over 3 tiny CPU problems, then
# stops the daemons, removes the packages it installed and the temporary directory.
#
#   sudo bash tools/slurm_test.sh        # KERNELLLM=path/to/kernelllm (default build/release/kernelllm)
#
# Other variables: TIMEOUT_S (jobs' wait limit, 1800), KEEP=1 (keep the work directory and the
# packages). Exit 0 when the reports are byte-equal; otherwise non-zero with the reason and logs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

KERNELLLM=${KERNELLLM:-$ROOT/build/release/kernelllm}
TIMEOUT_S=${TIMEOUT_S:-1800}
KEEP=${KEEP:-0}
PARTITION=kernelllm-test
PACKAGES=(slurmctld slurmd slurm-client munge)
# Samples per problem (tests/cases/<problem>/<case>.py → i.py). No strict-profile wrong_output
# case: its message quotes tolerances from the verifier's secret random inputs, which differ
# between two independent runs (docs/eval.md), so the reports could not be byte-equal.
declare -A MIX=(
  [add]="correct_basic correct_fixed_grid"
  [relu]="correct_basic wrong_shape_flat"
  [scale_shift_kwargs]="correct_kwargs compile_positional_only"
)
PASS_AT=1,2

t_start=$SECONDS
log() { echo "[slurm-test $((SECONDS - t_start))s] $*"; }
fail() { echo "[slurm-test] FAILED: $*" >&2; exit 1; }
# step NAME COMMAND...: runs it and says how long it took.
step() {
  local name=$1 t0=$SECONDS
  shift
  log "==> $name"
  "$@"
  log "    $name: done in $((SECONDS - t0))s"
}

[[ $(id -u) == 0 ]] || fail "expected to run as root (it installs packages and starts slurmd); found uid $(id -u)"
[[ -x "$KERNELLLM" ]] || fail "expected the kernelllm binary at $KERNELLLM (build it or set KERNELLLM)"
KERNELLLM=$(realpath "$KERNELLLM")
export KERNELLLM_PACKAGE_DIR=${KERNELLLM_PACKAGE_DIR:-$ROOT/python}

# World-traversable: munged refuses a socket under a directory others cannot enter.
WORK=$(mktemp -d /tmp/kernelllm-slurm.XXXXXX)
chmod 755 "$WORK"
export SLURM_CONF=$WORK/slurm.conf
installed=()

cleanup() {
  local rc=$?
  set +e
  log "==> cleanup"
  # Stop what we started, by the pids the daemons wrote, newest first.
  for pidfile in "$WORK/slurmd.pid" "$WORK/slurmctld.pid" "$WORK/munge/munged.pid"; do
    [[ -s $pidfile ]] || continue
    local pid
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && { log "    $pidfile: pid $pid still alive after 10s, sending SIGKILL"; kill -9 "$pid"; }
  done
  if ((rc != 0)); then
    for f in "$WORK"/munge/munged.log "$WORK"/log/*.log "$WORK"/runs/logs/*.log; do
      [[ -f $f ]] && { echo "---- last lines of $f"; tail -n 30 "$f"; }
    done
  fi
  if [[ $KEEP == 1 ]]; then
    log "    kept $WORK and the packages (KEEP=1)"
  else
    if ((${#installed[@]})); then
      log "    removing the packages this script installed: ${installed[*]}"
      DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "${installed[@]}" >/dev/null
    fi
    rm -rf "$WORK"
  fi
  log "total: $((SECONDS - t_start))s, exit $rc"
}
trap cleanup EXIT

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then log "    already installed: ${PACKAGES[*]}"; return; fi
  # Packages that were on the machine before stay; only what this install adds is purged at the end.
  local before after
  before=$(dpkg-query -W -f='${Package}\n' | sort)
  # The packages' scripts must not start the system daemons (no systemd here; ours are private).
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [[ ! -e $policy ]]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"; own_policy=1; fi
  log "    apt-get install ${missing[*]}"
  apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  ((own_policy)) && rm -f "$policy"
  after=$(dpkg-query -W -f='${Package}\n' | sort)
  mapfile -t installed < <(comm -13 <(echo "$before") <(echo "$after"))
}

start_daemons() {
  mkdir -p "$WORK/munge" "$WORK/ctld" "$WORK/slurmd" "$WORK/log"
  chmod 755 "$WORK/munge"
  head -c 1024 /dev/urandom >"$WORK/munge/munge.key"
  chmod 600 "$WORK/munge/munge.key"
  munged --key-file="$WORK/munge/munge.key" --socket="$WORK/munge/munge.socket.2" \
    --pid-file="$WORK/munge/munged.pid" --log-file="$WORK/munge/munged.log" --seed-file="$WORK/munge/munged.seed" ||
    fail "munged did not start: $(tail -n 3 "$WORK/munge/munged.log")"

  local host node
  host=$(hostname -s)
  # slurmd -C prints this machine's CPUs, sockets, cores and memory as a NodeName line.
  node=$(slurmd -C | head -n 1)
  [[ $node == "NodeName=$host "* ]] || fail "expected 'slurmd -C' to print 'NodeName=$host ...'; found '$node'"
  # No cgroups (a container or VM may not delegate them): linuxproc tracks processes by parent pid,
  # task/none binds nothing. CR_Core: cores are the consumable (memory is not, so two shards fit).
  # The addresses are 127.0.0.1 so that nothing depends on the hostname resolving.
  cat >"$SLURM_CONF" <<EOF
ClusterName=kernelllm-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$WORK/munge/munge.socket.2
CredType=cred/munge
StateSaveLocation=$WORK/ctld
SlurmdSpoolDir=$WORK/slurmd
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/log/slurmctld.log
SlurmdLogFile=$WORK/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
MinJobAge=3600
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  # -i: ignore any saved state (there is none in a fresh StateSaveLocation).
  slurmctld -i || fail "slurmctld did not start; see $WORK/log/slurmctld.log"
  slurmd || fail "slurmd did not start; see $WORK/log/slurmd.log"
  local state=""
  for _ in $(seq 60); do
    state=$(sinfo -h -p "$PARTITION" -o %T 2>/dev/null || true)
    [[ $state == idle ]] && { log "    node $host: idle ($node)"; return; }
    sleep 1
  done
  fail "expected node $host to be idle within 60s; sinfo says '${state:-nothing}'"
}

make_problem_set() {
  local name i case
  mkdir -p "$WORK/problems"
  for name in "${!MIX[@]}"; do
    cp "tests/cases/problems/$name.py" "$WORK/problems/"
    mkdir -p "$WORK/candidates/$name"
    i=0
    for case in ${MIX[$name]}; do
      cp "tests/cases/$name/$case.py" "$WORK/candidates/$name/$i.py"
      i=$((i + 1))
    done
  done
  log "    $(find "$WORK/problems" -name '*.py' | wc -l) problems, $(find "$WORK/candidates" -name '*.py' | wc -l) candidates under $WORK"
}

# job_state ID: the job's state while slurmctld remembers it (MinJobAge above keeps finished ones).
job_state() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | sort -u | cut -d= -f2 | paste -sd, -; }

run_array() {
  local out
  # --jobs 1: the two shards share this machine's cores.
  out=$(PROBLEMS=$WORK/problems LEVELS='' CANDIDATES=$WORK/candidates SHARDS=2 OUT=$WORK/runs DEVICE=cpu \
    KERNELLLM=$KERNELLLM EXTRA_ARGS="--jobs 1" PASS_AT=$PASS_AT PARTITION=$PARTITION GPUS_PER_TASK=0 TIME=01:00:00 \
    bash examples/slurm/eval_array.sbatch)
  echo "    $out"
  [[ $out =~ submitted\ array\ ([0-9]+)\ .*\ merge\ ([0-9]+) ]] ||
    fail "expected 'submitted array ID ... merge ID' from eval_array.sbatch; found '$out'"
  array_id=${BASH_REMATCH[1]}
  merge_id=${BASH_REMATCH[2]}
  local deadline=$((SECONDS + TIMEOUT_S)) last=""
  while squeue -h -j "$array_id,$merge_id" 2>/dev/null | grep -q .; do
    ((SECONDS < deadline)) || { scancel "$array_id" "$merge_id"; fail "jobs still queued or running after ${TIMEOUT_S}s"; }
    local now
    now="array: $(job_state "$array_id"), merge: $(job_state "$merge_id")"
    [[ $now != "$last" ]] && log "    $now"
    last=$now
    sleep 2
  done
  local a m
  a=$(job_state "$array_id")
  m=$(job_state "$merge_id")
  log "    array: $a, merge: $m"
  [[ $a == COMPLETED && $m == COMPLETED ]] || fail "expected every shard and the merge COMPLETED; found array $a, merge $m"
  [[ -f $WORK/runs/run/report.json ]] || fail "expected the merged report at $WORK/runs/run/report.json; it is missing"
}

run_one_process() {
  "$KERNELLLM" eval --problems "$WORK/problems" --candidates "$WORK/candidates" --verify-device cpu --out "$WORK/single" \
    --pass-at "$PASS_AT" --quiet >"$WORK/single.log" 2>&1 || { tail -n 30 "$WORK/single.log"; fail "the one-process eval failed"; }
}

compare_reports() {
  local f
  for f in report.json report.html; do
    cmp -s "$WORK/runs/run/$f" "$WORK/single/$f" || {
      diff <(python3 -m json.tool "$WORK/runs/run/report.json") <(python3 -m json.tool "$WORK/single/report.json") | head -n 40
      fail "expected the merged $f to equal the one-process $f byte for byte; they differ"
    }
    log "    $f: byte-equal ($(wc -c <"$WORK/single/$f") bytes)"
  done
  # The shards ran inside Slurm tasks as root: their verifier must still have used its sandbox.
  python3 - "$WORK/single/report.json" <<'EOF' || fail "the report's run facts say the verifier ran without its sandbox"
import json, sys
r = json.load(open(sys.argv[1]))
sandbox = r.get("run", {}).get("verifier", {}).get("sandbox")
print("    problems:", ", ".join(p["id"] for p in r["problems"]), "| verifier sandbox:", sandbox)
sys.exit(0 if sandbox is True else 1)
EOF
}

step "install slurm and munge" install_packages
step "start munged, slurmctld, slurmd" start_daemons
step "problem set" make_problem_set
step "eval_array.sbatch: 2 shards + merge" run_array
step "one-process eval" run_one_process
step "compare reports" compare_reports
log "PASSED: the merged Slurm report equals the one-process report"
