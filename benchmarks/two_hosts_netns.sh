#!/usr/bin/env bash
# Two "machines" on one: two network namespaces joined by a veth pair, each with its own address
# (10.99.0.1, 10.99.0.2) and host name, so that MPICH talks TCP between them instead of shared
# memory. hydra's ssh launcher is given a stand-in for ssh that runs the proxy command in the
# namespace of the address. Trains a tiny reversal model in float64 on one process and on the two
# hosts and checks that the per-update losses are the same, then kills the rank on the second
# host and times how fast the run ends. Needs root (ip netns) and the mpi extra. Usage, from the
# repository root:  sudo benchmarks/two_hosts_netns.sh
set -euo pipefail
export PYTHONPATH="$PWD" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d)
cleanup() { jobs -p | xargs -r kill 2>/dev/null || true; ip netns del nta 2>/dev/null || true; ip netns del ntb 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
ip netns add nta && ip netns add ntb
ip link add vetha type veth peer name vethb
ip link set vetha netns nta && ip link set vethb netns ntb
ip netns exec nta ip addr add 10.99.0.1/24 dev vetha && ip netns exec ntb ip addr add 10.99.0.2/24 dev vethb
for ns in nta ntb; do ip netns exec $ns ip link set lo up; done
ip netns exec nta ip link set vetha up && ip netns exec ntb ip link set vethb up

cat > "$work/netns-ssh" <<'SH'
#!/bin/sh
# hydra calls "ssh [options] HOST COMMAND": run COMMAND in HOST's namespace, under its own host name.
while [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
case $host in 10.99.0.1) ns=nta;; 10.99.0.2) ns=ntb;; *) echo "unknown host $host" >&2; exit 255;; esac
exec ip netns exec $ns unshare --uts sh -c "hostname host-$ns; $*"
SH
chmod +x "$work/netns-ssh"
printf "10.99.0.1:1\n10.99.0.2:1\n" > "$work/hosts"   # the host file: one rank on each machine
mpirun=(ip netns exec nta "$(command -v mpiexec)" -f "$work/hosts" -launcher ssh -launcher-exec "$work/netns-ssh"
        -iface vetha -genvall -n 2)
flags=(--n-train 203 --n-val 20 --n-test 20 --batch-size 32 --d-model 16 --heads 2 --layers 1 --d-ff 32
       --max-len 8 --log-every 3)

"${mpirun[@]}" python -c "import socket, os; from mpi4py import MPI; print('rank', MPI.COMM_WORLD.rank, 'on',
  socket.gethostname(), 'interfaces', sorted(os.listdir('/sys/class/net')))"
python -m numpytransformer train reverse "${flags[@]}" --dtype float64 --dropout 0 --epochs 2 --out "$work/one" > /dev/null
"${mpirun[@]}" python -m numpytransformer train reverse "${flags[@]}" --dtype float64 --dropout 0 --epochs 2 \
    --out "$work/two" | grep -E "update|on 2 ranks"
python - "$work" <<'PY'
import json, sys
one, two = (json.load(open(f"{sys.argv[1]}/{d}/history.json")) for d in ("one", "two"))
same = [s["loss"] for s in one["steps"]] == [s["loss"] for s in two["steps"]]
print(f"two hosts, {len(two['steps'])} updates: losses {'equal' if same else 'DIFFERENT'} to one process's; "
      f"train_loss {one['epochs'][-1]['train_loss']!r} vs {two['epochs'][-1]['train_loss']!r}")
assert same
PY

# Kill the rank on the second host once the first epoch is saved: mpiexec must end the run.
"${mpirun[@]}" python -m numpytransformer train reverse "${flags[@]}" --epochs 1000 --out "$work/killed" \
    > /dev/null 2>&1 &
while [ ! -f "$work/killed/last/checkpoint.json" ]; do sleep 0.1; done
victim=$(grep -l "PMI_RANK=1" /proc/[0-9]*/environ 2>/dev/null | while read -r f; do d=${f%/environ};
         tr '\0' ' ' < "$d/cmdline" | grep -q "$work/killed" && echo "${d#/proc/}"; done | head -1 || true)
start=$(date +%s.%N); kill -9 "$victim"; wait || true
echo "killed rank 1 (pid $victim) on host-ntb: the run ended after $(echo "$(date +%s.%N) - $start" | bc) s"
python -m numpytransformer eval --checkpoint "$work/killed/last" --n 20 | head -1
