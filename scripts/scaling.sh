#!/usr/bin/env bash
# Scaling curves of the direct path on the emulated NIC (issue 11, part 4):
# 8-byte put message rate against lanes (own queues and one lockstep wave),
# waves sharing one queue, ranks and queue depth, and cost against message size. Prints markdown
# tables (docs/performance.md records them). Emulated figures: host threads
# on this machine's cores, not hardware. Usage: scripts/scaling.sh [min-time-ms]
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-100}
cargo build --release --locked --bin gin-perf >&2
gp=./target/release/gin-perf
run() { "$gp" -p direct -R 3 -t "$t" --no-datapath -f csv "$@" 2>/dev/null | grep -v '^#' | tail -n +2; }
col() { awk -F, -v c="$1" '{print $c}'; }  # 14: Mops median, 8: rtt median, 20: req ns, 23: nic ns
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1 /proc/loadavg)"
echo
echo "| lanes | M puts/s, own queues | M puts/s, one wave | doorbells/op, wave |"
echo "|---|---|---|---|"
for l in 1 2 4 8 16 32 64; do
  q=$(run -s 8 -o put -l "$l" --lane-mode queues | col 14)
  w=$(run -s 8 -o put -l "$l" --lane-mode wave)
  echo "| $l | $q | $(echo "$w" | col 14) | $(echo "$w" | col 5) |"
done
echo
echo "| waves of 64 lanes, one queue | M puts/s | doorbells/op |"
echo "|---|---|---|"
for w in 1 2 4 8; do
  x=$(run -s 8 -o put -l 64 --lane-mode wave --waves "$w" --log-depth 12)
  echo "| $w | $(echo "$x" | col 14) | $(echo "$x" | col 5) |"
done
echo
echo "| ranks | M puts/s (8 lanes) | round trip µs |"
echo "|---|---|---|"
for r in 2 4 8 16 32 64; do
  x=$(run -s 8 -o put -l 8 -r "$r")
  echo "| $r | $(echo "$x" | col 14) | $(echo "$x" | col 8) |"
done
echo
echo "| queue depth (WQEBBs) | M puts/s (8 lanes) |"
echo "|---|---|"
for d in 6 8 10 12 15; do
  echo "| $((1 << d)) | $(run -s 8 -o put -l 8 --log-depth "$d" | col 14) |"
done
echo
echo "| bytes | round trip µs | GB/s | requester ns/op | NIC ns/op |"
echo "|---|---|---|---|---|"
run -s 8:1M -o put | while IFS=, read -r path op bytes rest; do
  line="$path,$op,$bytes,$rest"
  echo "| $bytes | $(echo "$line" | col 8) | $(echo "$line" | col 17) | $(echo "$line" | col 20) | $(echo "$line" | col 23) |"
done
