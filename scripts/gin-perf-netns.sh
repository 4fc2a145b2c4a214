#!/usr/bin/env bash
# gin-perf across network namespaces over the TCP fabric (emulated NIC):
# makes N namespaces (default 2) on this machine, each with a veth pair into
# a bridge in a namespace of its own, addresses 10.77.0.<i+1>/24, runs
# gin-perf with one rank per namespace (--fabric tcp --hosts), and deletes
# the namespaces again, whatever happens. Needs root (ip netns).
# Usage: scripts/gin-perf-netns.sh [-n N] [gin-perf arguments...]
# GIN_PERF_WRAP="perf record -g -o /tmp/perf.data --" runs gin-perf under a profiler.
# The figures in docs/performance.md, "Across network namespaces", came from
#   scripts/gin-perf-netns.sh -o put -s 8:1M -R 3
#   scripts/gin-perf-netns.sh -o put-signal -s 8 -R 5
set -euo pipefail
cd "$(dirname "$0")/.."
n=2
if [[ "${1:-}" == "-n" ]]; then n=$2; shift 2; fi
base="rginperf$$"
cleanup() {
  for ((i = 0; i < n; i++)); do ip netns del "$base-h$i" 2>/dev/null || true; done
  ip netns del "$base-sw" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$base-sw"
ip -n "$base-sw" link add br0 type bridge
ip -n "$base-sw" link set br0 up
hosts=()
for ((i = 0; i < n; i++)); do
  ns="$base-h$i"
  ip netns add "$ns"
  ip link add eth0 netns "$ns" type veth peer name "p$i" netns "$base-sw"
  ip -n "$base-sw" link set "p$i" master br0
  ip -n "$base-sw" link set "p$i" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  hosts+=("10.77.0.$((i + 1))@$ns")
done
[[ -x target/release/gin-perf ]] || cargo build --locked --release --bin gin-perf
IFS=,; list="${hosts[*]}"; unset IFS
echo "gin-perf-netns: $n namespaces: $list" >&2
${GIN_PERF_WRAP:-} env RCCL_RUST_GIN_PROVIDER=emu ./target/release/gin-perf --fabric tcp --hosts "$list" "$@"
