#!/usr/bin/env bash
# Offline reading against tcpdump: a capture file of about 2.5 GB (imix frames from
# `poolcap gen`, captured by `poolcap capture -w` in a lab of its own), as pcap, pcapng
# (editcap) and pcap.zst (zstd -1), in /dev/shm, each read by `poolcap capture -r` (count
# only, and -w to a file on /var/tmp) and by `tcpdump -r` (-w /dev/null, and -w the file;
# the .zst through `zstd -dc |`, as tcpdump cannot decompress). Every reader is pinned to
# CPU 1; interleaved rounds; prints wall seconds and CPU seconds (user + system) of each.
# Everything made is deleted at the end. Run as root under the shared measurement lock
# (the files exceed 2 GB):
#   flock /tmp/poolcap-measure.lock scripts/offline-read.sh
# Settings (environment): POOLCAP (binary), COUNT (frames, 6700000), ROUNDS (3).
set -euo pipefail
POOLCAP=${POOLCAP:-$(dirname "$0")/../target/release/poolcap}
COUNT=${COUNT:-6700000}
ROUNDS=${ROUNDS:-3}
LAB=offline$$
SHM=$(mktemp -d /dev/shm/offline-read.XXXXXX)
OUT=$(mktemp -d /var/tmp/offline-read.XXXXXX)
cleanup() {
  "$POOLCAP" lab down --name "$LAB" >/dev/null 2>&1 || true
  rm -rf "$SHM" "$OUT"
}
trap cleanup EXIT

"$POOLCAP" lab up --name "$LAB" >/dev/null
ip netns exec "poolcap-$LAB-probe" "$POOLCAP" capture -i prb0 -q -B 65536 --buffered \
  -w "$SHM/t.pcap" 2>/dev/null &
cap=$!
sleep 1.5
ip netns exec "poolcap-$LAB-sender" "$POOLCAP" gen -i snd0 --cpu 0 --size imix \
  --count "$COUNT" >/dev/null
sleep 1
kill -INT "$cap"
wait "$cap" || true
"$POOLCAP" lab down --name "$LAB" >/dev/null
editcap -F pcapng "$SHM/t.pcap" "$SHM/t.pcapng"
zstd -q -1 -T0 "$SHM/t.pcap" -o "$SHM/t.pcap.zst"
ls -l "$SHM"
echo "packets: $(capinfos -M -c "$SHM/t.pcap" | awk '/Number of packets/ {print $NF}')"

# Times command $1 (labelled $2) pinned to CPU 1: wall s, CPU s (user + system of all its
# processes and threads, from this shell's children's times).
timed() {
  local t0 t1 c0 c1
  t0=$(date +%s.%N)
  c0=$(cut -d' ' -f14-17 /proc/$$/stat)
  taskset -c 1 bash -c "$1" >/dev/null 2>&1
  t1=$(date +%s.%N)
  # This shell's children's user and system time (fields 16, 17: cutime, cstime) in ticks.
  c1=$(cut -d' ' -f14-17 /proc/$$/stat)
  awk -v l="$2" -v w="$(echo "$t1 - $t0" | bc -l)" -v a="$c0" -v b="$c1" -v hz="$(getconf CLK_TCK)" \
    'BEGIN {split(a, x, " "); split(b, y, " ");
            printf "%-44s wall %6.2f s  cpu %6.2f s\n", l, w, (y[3] + y[4] - x[3] - x[4]) / hz}'
  rm -f "$OUT"/out.*
}

echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
  for f in t.pcap t.pcapng t.pcap.zst; do
    in=$SHM/$f
    timed "$POOLCAP capture -r $in -q" "$f poolcap -r (count)"
    timed "$POOLCAP capture -r $in -q -w $OUT/out.pcap" "$f poolcap -r -w file"
    if [ "$f" = t.pcap.zst ]; then
      timed "zstd -dc $in | tcpdump -r - -w /dev/null" "$f zstd -dc | tcpdump -r -w /dev/null"
      timed "zstd -dc $in | tcpdump -r - -w $OUT/out.pcap" "$f zstd -dc | tcpdump -r -w file"
    else
      timed "tcpdump -r $in -w /dev/null" "$f tcpdump -r -w /dev/null"
      timed "tcpdump -r $in -w $OUT/out.pcap" "$f tcpdump -r -w file"
    fi
  done
done
echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
