#!/bin/bash
# One long capture to disk in a 2-queue lab, as BENCHMARKS.md's "20 GB at default options"
# runs were made: the sender (`poolcap gen`) on CPU 0, the capture on CPU 1, the file under
# /var/tmp (deleted afterwards). Run it as root while holding the measurement lock:
#
#   flock /tmp/poolcap-measure.lock scripts/disk-20g.sh POOLCAP COUNT SIZE [CAPTURE ARGS...]
#   e.g. scripts/disk-20g.sh target/release/poolcap 13398693 1514 --queues 1 -w F.pcap
#
# F is a file name in the scratch directory. GEN="--flows 8" adds sender options (8 flows
# for --queues 2); CHECK=1 reads the files back with `poolcap check` before deleting them.
# SCHED=1 also prints, per thread of the capture, its run time, its wait for the CPU (fields
# 1 and 2 of /proc/PID/task/TID/schedstat) and timeslices over the sending, the worst second
# of waiting per thread (sampled each second), the device's writes over 50 ms (from the
# disk's /sys/block stats, per 100 ms) and the capture's peak memory (VmHWM).
# Prints the sender's rate, the accounting and the load before and after.
set -eu
EXE=$(realpath "$1"); COUNT=$2; SIZE=$3; shift 3; HERE=$(dirname "$(realpath "$0")")
LAB=disk20g; S=poolcap-$LAB-sender; P=poolcap-$LAB-probe
DIR=/var/tmp/poolcap-disk20g; OUT=$(mktemp -d)
ip netns list | grep -q "^$P" || "$EXE" lab up --name $LAB --queues 2 > /dev/null
mkdir -p $DIR; cd $DIR; sync
L0=$(cat /proc/loadavg)
ip netns exec $P taskset -c 1 "$EXE" capture -i prb0 -q "$@" --stats-json $OUT/stats.json \
    > $OUT/cap.out 2> $OUT/cap.err &
CAP=$!
# A failure below must not leave the capture running (it holds the lock's file descriptor).
trap 'kill -INT $CAP 2>/dev/null || true' EXIT
sleep 1.5
[ -n "${SCHED:-}" ] && { "$HERE/sched-watch.sh" $CAP $OUT & WATCH=$!; }
ip netns exec $S "$EXE" gen -i snd0 --json --cpu 0 --size $SIZE --count $COUNT ${GEN:-} \
    > $OUT/gen.json
[ -n "${SCHED:-}" ] && { touch $OUT/stop; wait $WATCH; cat $OUT/sched.txt; }
sleep 1
kill -INT $CAP; wait $CAP || true
echo "load before: $L0 | after: $(cat /proc/loadavg)"
grep -o '"pps":[0-9.]*' $OUT/gen.json | head -1
grep -E "captured|dropped by kernel|dropped by pool|written" $OUT/cap.err
[ -n "${CHECK:-}" ] && "$EXE" check --expect $COUNT $(ls -v $DIR)
du -sb $DIR
rm -rf "${DIR:?}"/* $OUT
