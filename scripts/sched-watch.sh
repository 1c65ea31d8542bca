#!/bin/bash
# Helper of disk-20g.sh (SCHED=1): watches capture process PID until OUT/stop exists, then
# writes OUT/sched.txt: per thread, run and wait-for-CPU milliseconds and timeslices over
# the window (/proc/PID/task/TID/schedstat), its worst second of waiting; the device's
# slowest 100 ms windows (mean ms per completed write, from /sys/block/DEV/stat fields 5
# and 8); and VmHWM. Reads /proc and /sys only.
set -u
PID=$1; OUT=$2
SRC=$(df --output=source /var/tmp | tail -1)
DEV=$(lsblk -no PKNAME "$SRC" 2>/dev/null | head -1)
[ -z "$DEV" ] && DEV=$(basename "$SRC")
snap() { for t in /proc/$PID/task/*; do echo "${t##*/} $(tr ' ' _ < $t/comm) $(cat $t/schedstat)"; done; }
snap > $OUT/s0
cp $OUT/s0 $OUT/prev; : > $OUT/worst; : > $OUT/dev
n=0
while [ ! -e $OUT/stop ]; do
    read -r _ _ _ _ w0 _ _ t0 _ < /sys/block/$DEV/stat
    sleep 0.1
    read -r _ _ _ _ w1 _ _ t1 _ < /sys/block/$DEV/stat
    [ $((w1 - w0)) -gt 0 ] && echo "$(( (t1 - t0) / (w1 - w0) )) $((w1 - w0))" >> $OUT/dev
    n=$((n + 1))
    if [ $((n % 10)) -eq 0 ]; then
        snap > $OUT/cur
        join <(sort $OUT/prev) <(sort $OUT/cur) | awk '{print $2, ($8 - $4) / 1e6}' >> $OUT/worst
        cp $OUT/cur $OUT/prev
    fi
done
snap > $OUT/s1
{
    echo "thread run_ms wait_ms timeslices worst_1s_wait_ms"
    # A thread started after the first snapshot (the direct writer's I/O thread) counts
    # from zero.
    join -a 2 -e 0 -o 2.1,2.2,1.3,1.4,1.5,2.2,2.3,2.4,2.5 <(sort $OUT/s0) <(sort $OUT/s1) |
    while read -r tid c r0 w0 s0 _ r1 w1 s1; do
        worst=$(awk -v c="$c" '$1 == c && $2 > m {m = $2} END {printf "%.1f", m}' $OUT/worst)
        printf "%s(%s) %.0f %.0f %d %s\n" "$c" "$tid" $(((r1 - r0) / 1000000)) \
            $(((w1 - w0) / 1000000)) $((s1 - s0)) "$worst"
    done
    echo "device ($DEV): 100 ms windows with writes: $(wc -l < $OUT/dev); mean write > 50 ms in" \
        "$(awk '$1 > 50' $OUT/dev | wc -l); slowest mean $(sort -n $OUT/dev | tail -1 | cut -d' ' -f1) ms"
    grep VmHWM /proc/$PID/status
} > $OUT/sched.txt
