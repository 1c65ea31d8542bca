#!/usr/bin/env bash
# CPU per packet while writing, measured independently of `poolcap bench`: a lab of its own
# (`poolcap lab up`), `poolcap gen` on CPU 0 in the sender namespace, each tool pinned to
# CPU 1 in the probe namespace, writing to SINK (/dev/null by default, or a file under
# /var/tmp, deleted after each run). After the last frame and a drain, the run time of all
# the tool's threads (/proc/PID/task/*/schedstat, field 1, summed) is divided by the frames
# sent (ns/pkt, startup included, as the first finding measured it); run/pkt is the run time
# from just before sending to the end of the drain per packet captured, the window and the
# ratio `poolcap bench` uses (cpu_s_per_mpkt). Rounds are interleaved (every tool once per
# round). Run as root, under the shared measurement lock:
#   flock /tmp/poolcap-measure.lock scripts/cpu-rig.sh
# Settings (environment): POOLCAP (binary), SIZE (64), RATE (300000; 0 = top speed),
# COUNT (1500000), ROUNDS (3), SINK (null | file), TOOLS (space-separated from: poolcap
# poolcap-B2048 poolcap-default poolcap-pcapng tcpdump tcpdump-B2048 netsniff-ng),
# PEER_KIB (36864: poolcap's 4 MiB ring plus 32 MiB pool, the equal memory of `bench disk`).
# Prints one line per run: tool, ns/pkt, run/pkt, captured, sent, the sender's rate (kpps:
# a sender slowed by other load stretches the run, and a tool's time-based wakeups then
# add to its CPU per packet), voluntary context switches (wakeups) of all its threads, load.
set -euo pipefail
POOLCAP=${POOLCAP:-$(dirname "$0")/../target/release/poolcap}
SIZE=${SIZE:-64}
RATE=${RATE:-300000}
COUNT=${COUNT:-1500000}
ROUNDS=${ROUNDS:-3}
SINK=${SINK:-null}
TOOLS=${TOOLS:-poolcap tcpdump netsniff-ng}
PEER_KIB=${PEER_KIB:-36864}
LAB=cpurig$$
SND=poolcap-$LAB-sender
PRB=poolcap-$LAB-probe
DIR=$(mktemp -d /var/tmp/cpu-rig.XXXXXX)

"$POOLCAP" lab up --name "$LAB" >/dev/null
cleanup() {
  "$POOLCAP" lab down --name "$LAB" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT

# Run time of all threads of $1, in nanoseconds.
cpu_ns() {
  local sum=0 t v
  for t in /proc/"$1"/task/*/schedstat; do
    read -r v _ <"$t" || continue
    sum=$((sum + v))
  done
  echo "$sum"
}

# The argv of tool $1 writing $2.
argv() {
  local out=$2
  case $1 in
    poolcap) echo "$POOLCAP capture -i prb0 -q -B 4096 --pool 256,64 -w $out --stats-json $DIR/stats.json" ;;
    poolcap-pcapng) echo "$POOLCAP capture -i prb0 -q -B 4096 --pool 256,64 --format pcapng -w $out --stats-json $DIR/stats.json" ;;
    poolcap-B2048) echo "$POOLCAP capture -i prb0 -q -B 2048 -w $out --stats-json $DIR/stats.json" ;;
    poolcap-default) echo "$POOLCAP capture -i prb0 -q -w $out --stats-json $DIR/stats.json" ;;
    tcpdump) echo "tcpdump -i prb0 -n -Z root -B $PEER_KIB -w $out" ;;
    tcpdump-B2048) echo "tcpdump -i prb0 -n -Z root -B 2048 -w $out" ;;
    netsniff-ng) echo "netsniff-ng -i prb0 -s -A -b 1 -S ${PEER_KIB}KiB -o $out" ;;
    *) echo "cpu-rig: unknown tool $1" >&2; exit 2 ;;
  esac
}

# Packets tool $1 captured, from its output $2.
captured() {
  case $1 in
    poolcap*) grep -o '"captured": *[0-9]*' "$DIR/stats.json" | head -1 | grep -o '[0-9]*$' || echo "?" ;;
    tcpdump*) grep -o '^[0-9]* packets captured' "$2" | grep -o '^[0-9]*' || echo "?" ;;
    netsniff-ng) tr '\r' '\n' <"$2" | grep -o '[0-9]* *packets passed filter' | grep -o '^[0-9]*' || echo "?" ;;
  esac
}

rate_args=()
[ "$RATE" != 0 ] && rate_args=(--rate "$RATE")
echo "# size=$SIZE rate=$RATE count=$COUNT sink=$SINK peer_kib=$PEER_KIB $(date -u +%FT%TZ)"
printf '%-16s %8s %8s %10s %10s %6s %8s  %s\n' tool ns/pkt run/pkt captured sent kpps switches load
for round in $(seq "$ROUNDS"); do
  for tool in $TOOLS; do
    out=/dev/null
    [ "$SINK" = file ] && out=$DIR/out.pcap
    log=$DIR/tool.log
    # shellcheck disable=SC2046
    ip netns exec "$PRB" taskset -c 1 $(argv "$tool" "$out") >"$log" 2>&1 &
    pid=$!
    sleep 1.5
    ns_before=$(cpu_ns "$pid")
    ip netns exec "$SND" "$POOLCAP" gen -i snd0 --cpu 0 --size "$SIZE" --count "$COUNT" \
      "${rate_args[@]}" --json >"$DIR/gen.json" 2>&1
    sleep 1.2
    ns=$(cpu_ns "$pid")
    sw=$(cat /proc/"$pid"/task/*/status | awk '/^voluntary_ctxt_switches/ {s += $2} END {print s}')
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    kill -INT "$pid"
    wait "$pid" || true
    sent=$(grep -o '"frames": *[0-9]*' "$DIR/gen.json" | grep -o '[0-9]*$')
    pps=$(grep -o '"pps": *[0-9.]*' "$DIR/gen.json" | grep -o '[0-9.]*$')
    got=$(captured "$tool" "$log")
    printf '%-16s %8.1f %8.1f %10s %10s %6.0f %8s  %s\n' "$tool" "$(echo "$ns / $sent" | bc -l)" \
      "$(echo "($ns - $ns_before) / $got" | bc -l)" "$got" "$sent" "$(echo "$pps / 1000" | bc -l)" \
      "$sw" "$load"
    rm -f "$DIR/out.pcap" "$DIR/stats.json"
  done
done
