//! Hardening: a capture survives its link going down and coming back without
//! burning CPU, ends cleanly when its interface is deleted, loses nothing uncounted when
//! several queues stop while traffic goes on, and stops taking packets at a count limit.
//!
//! Each test reproduces one defect found in the field; correctness never depends on speed
//! (frames the kernel holds while the capture is stopped with SIGSTOP stay exact).

use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use libtest_mimic::Trial;
use serde_json::Value;

use crate::common::{
    capture, gen, lab, num, stats, tcpdump, tempdir, trial, tshark_count, Background, Lab,
};

pub(crate) fn trials() -> Vec<Trial> {
    let t = |name: &'static str, f: fn()| trial(&format!("hardening::{name}"), f);
    vec![
        t(
            "link_down_is_reported_and_waited_out",
            link_down_is_reported_and_waited_out,
        ),
        t(
            "deleted_interface_ends_the_capture_cleanly",
            deleted_interface_ends_the_capture_cleanly,
        ),
        t(
            "multi_queue_stop_leaves_no_uncounted_hole",
            multi_queue_stop_leaves_no_uncounted_hole,
        ),
        t(
            "a_writer_behind_never_gets_a_ring_block_twice",
            a_writer_behind_never_gets_a_ring_block_twice,
        ),
        t(
            "count_limit_stops_taking_packets",
            count_limit_stops_taking_packets,
        ),
        t(
            "vlan_filters_select_what_live_tcpdump_selects",
            vlan_filters_select_what_live_tcpdump_selects,
        ),
    ]
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn on_wire(g: &Value) -> u64 {
    num(g, "frames") - num(g, "link_dropped")
}

/// `ip -n NETNS ARGS`; panics if it fails.
fn ip(netns: &str, args: &[&str]) {
    let out = Command::new("ip")
        .args(["-n", netns])
        .args(args)
        .output()
        .expect("ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Sets the probe's interface down or up; once up, waits until the link carries frames:
/// both ends report `state UP`. The kernel's link watcher turns a veth end's carrier on (and
/// gives it back its queueing discipline) asynchronously; until it has done so on the
/// sender's end, the generator's frames are dropped there (`link_dropped`).
fn set_probe_link(lab: &Lab, up: bool) {
    let state = if up { "up" } else { "down" };
    ip(&lab.probe.netns, &["link", "set", &lab.probe.iface, state]);
    if !up {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for host in [&lab.probe, &lab.sender] {
        loop {
            let out = Command::new("ip")
                .args(["-n", &host.netns, "-o", "link", "show", &host.iface])
                .output()
                .expect("ip link show");
            if String::from_utf8_lossy(&out.stdout).contains("state UP") {
                break;
            }
            assert!(Instant::now() < deadline, "{} never came up", host.iface);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// User plus system CPU ticks of a process (/proc/PID/stat fields 14 and 15).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // The command name may hold spaces: fields start after its closing parenthesis.
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state): fields 14 and 15 are at 11 and 12.
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

/// Per generator id: (frames, unique, missing below the highest, highest sequence number),
/// of a capture file plain or compressed.
fn generators(file: &Path) -> Vec<(u32, u64, u64, u64, Option<u64>)> {
    let mut bytes = Vec::new();
    std::fs::File::open(file)
        .and_then(poolcap_format::decompressed)
        .and_then(|mut r| r.read_to_end(&mut bytes))
        .unwrap_or_else(|e| panic!("read {}: {e}", p(file)));
    let f = poolcap_format::read_bytes(&bytes).unwrap_or_else(|e| panic!("read {}: {e}", p(file)));
    let mut c = poolcap::seqcheck::SeqChecker::new();
    for pk in &f.packets {
        c.observe(&pk.data);
    }
    c.reports(None)
        .iter()
        .map(|r| (r.gen_id, r.frames, r.unique, r.missing, r.max_seq))
        .collect()
}

fn signal(bg: &Background, sig: &str) {
    let st = Command::new("kill")
        .args([&format!("-{sig}"), &bg.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(st.success(), "kill -{sig}");
}

/// Waits up to `timeout` for a process that should exit on its own.
fn wait_exit(mut bg: Background, timeout: Duration, what: &str) -> (Option<i32>, String) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = bg.child.try_wait() {
            return bg.wait();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, stderr) = bg.stop("KILL");
    panic!("{what} did not exit within {timeout:?} ({code:?}); stderr:\n{stderr}");
}

/// The link is down at start (a warning), comes up, goes down during the capture (reported
/// once, with at most a few wakeups a second instead of a spin on POLLERR) and comes back:
/// frames sent before and after are captured, exactly.
fn link_down_is_reported_and_waited_out() {
    for (backend, queues) in [("af_packet", "2"), ("af_xdp", "2")] {
        let what = format!("{backend}, {queues} queues");
        let lab = lab(2);
        let dir = tempdir();
        let (file, sj) = (dir.path().join("l.pcapng"), dir.path().join("l.json"));
        set_probe_link(&lab, false);
        let mut bg = capture(
            &lab,
            &[
                "--backend",
                backend,
                "--queues",
                queues,
                "-w",
                p(&file),
                "--stats-json",
                p(&sj),
            ],
        );
        assert!(
            bg.wait_for("is down", Duration::from_secs(5)),
            "{what}: no warning for a link down at start: {:?}",
            bg.stderr
        );
        set_probe_link(&lab, true);
        assert!(
            bg.wait_for("is up again", Duration::from_secs(5)),
            "{what}: {:?}",
            bg.stderr
        );
        let g1 = gen(&lab, &["--count", "500", "--flows", "8", "--gen-id", "21"]);
        std::thread::sleep(Duration::from_millis(300));
        set_probe_link(&lab, false);
        assert!(
            bg.wait_for("went down", Duration::from_secs(5)),
            "{what}: link down not reported: {:?}",
            bg.stderr
        );
        let pid = bg.child.id();
        let before = cpu_ticks(pid);
        std::thread::sleep(Duration::from_secs(1));
        let spent = cpu_ticks(pid) - before;
        // A spin on POLLERR burns 100 ticks a second per capture thread.
        assert!(
            spent <= 10,
            "{what}: {spent} CPU ticks in 1 s with the link down"
        );
        set_probe_link(&lab, true);
        assert!(
            bg.wait_for("is up again", Duration::from_secs(5)),
            "{what}: {:?}",
            bg.stderr
        );
        let g2 = gen(&lab, &["--count", "1000", "--flows", "8", "--gen-id", "22"]);
        std::thread::sleep(Duration::from_millis(300));
        let (code, stderr) = bg.stop("INT");
        assert_eq!(code, Some(0), "{what}: {stderr}");
        assert_eq!(
            stderr.matches("went down").count(),
            1,
            "{what}: reported once: {stderr}"
        );
        let s = stats(&sj);
        let sent = on_wire(&g1) + on_wire(&g2);
        assert_eq!(sent, 1500, "{what}: {g1} {g2}");
        assert_eq!(num(&s, "captured"), 1500, "{what}: {s}");
        assert_eq!(num(&s, "written"), 1500, "{what}: {s}");
        let gens = generators(&file);
        assert_eq!(
            gens,
            [(21, 500, 500, 0, Some(499)), (22, 1000, 1000, 0, Some(999))],
            "{what}: (id, frames, unique, missing, max seq)"
        );
    }
}

/// Deleting the interface ends the capture: a clear message, the file complete, the
/// accounting printed and in the JSON, a non-zero exit.
fn deleted_interface_ends_the_capture_cleanly() {
    for backend in ["af_packet", "af_xdp"] {
        let lab = lab(1);
        let dir = tempdir();
        let (file, sj) = (dir.path().join("d.pcapng"), dir.path().join("d.json"));
        let bg = capture(
            &lab,
            &["--backend", backend, "-w", p(&file), "--stats-json", p(&sj)],
        );
        let g = gen(&lab, &["--count", "1000", "--gen-id", "23"]);
        assert_eq!(on_wire(&g), 1000, "{backend}: {g}");
        std::thread::sleep(Duration::from_millis(300));
        ip(&lab.probe.netns, &["link", "del", &lab.probe.iface]);
        let (code, stderr) = wait_exit(bg, Duration::from_secs(10), backend);
        assert!(
            code.is_some_and(|c| c != 0),
            "{backend}: exit {code:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{backend}: {stderr}");
        assert!(
            stderr.contains("disappeared"),
            "{backend}: no clear message: {stderr}"
        );
        assert!(
            stderr.contains("1000 packets captured"),
            "{backend}: no accounting printed: {stderr}"
        );
        let s = stats(&sj);
        assert!(
            s["capture_error"]
                .as_str()
                .is_some_and(|e| e.contains("disappeared")),
            "{backend}: {s}"
        );
        assert_eq!(num(&s, "captured"), 1000, "{backend}: {s}");
        assert_eq!(num(&s, "written"), 1000, "{backend}: {s}");
        assert_eq!(tshark_count(&file), 1000, "{backend}: file read back");
    }
}

/// Two queues writing one file, stopped while 100k pps over 8 flows go on: every frame up to
/// the highest one written is in the file or counted as dropped, and the frames after the
/// stop are counted as not taken.
fn multi_queue_stop_leaves_no_uncounted_hole() {
    let lab = lab(2);
    let dir = tempdir();
    for run in 0..2 {
        let (file, sj) = (
            dir.path().join(format!("s{run}.pcapng")),
            dir.path().join(format!("s{run}.json")),
        );
        let bg = capture(
            &lab,
            &["--queues", "2", "-w", p(&file), "--stats-json", p(&sj)],
        );
        let (g, (code, stderr)) = std::thread::scope(|sc| {
            let sender = sc.spawn(|| {
                gen(
                    &lab,
                    &[
                        "--count", "300k", "--rate", "100k", "--flows", "8", "--gen-id", "24",
                    ],
                )
            });
            std::thread::sleep(Duration::from_millis(1500));
            let stopped = bg.stop("INT");
            (sender.join().expect("generator"), stopped)
        });
        assert_eq!(code, Some(0), "run {run}: {stderr}");
        let s = stats(&sj);
        let gens = generators(&file);
        assert_eq!(gens.len(), 1, "run {run}: {gens:?}");
        let (_, frames, unique, missing, max_seq) = gens[0];
        let highest = max_seq.expect("frames written");
        assert_eq!(frames, unique, "run {run}: duplicates");
        let dropped = num(&s, "dropped_kernel") + num(&s, "dropped_pool");
        assert!(
            missing <= dropped,
            "run {run}: {missing} frames below {highest} missing, {dropped} dropped: {s}"
        );
        assert_eq!(num(&s, "written"), num(&s, "captured"), "run {run}: {s}");
        assert_eq!(num(&s, "captured"), frames, "run {run}: {s}");
        assert!(
            num(&s, "not_taken") > 0,
            "run {run}: traffic after the stop: {s}"
        );
        let accounted = num(&s, "captured") + dropped + num(&s, "not_taken");
        assert!(
            accounted > highest && accounted <= on_wire(&g),
            "run {run}: accounted {accounted}, highest {highest}, sent {g}: {s}"
        );
    }
}

/// A writer far behind the traffic (zstd at level 19) with more chunks in flight than the
/// ring has blocks (a 2 MiB ring per queue: 32 blocks, against the pool's 64 chunks): the
/// capture holds every block and waits, it never comes round to a block the writer still
/// holds and takes it again (before the fix, half the file was such duplicates, counted as
/// captured). Every frame in the file is distinct, and the file has what was captured.
fn a_writer_behind_never_gets_a_ring_block_twice() {
    let lab = lab(2);
    let dir = tempdir();
    let (file, sj) = (dir.path().join("b.pcap.zst"), dir.path().join("b.json"));
    let bg = capture(
        &lab,
        &[
            "--queues",
            "2",
            "-B",
            "2048",
            "--compress",
            "zstd:19",
            "-w",
            p(&file),
            "--stats-json",
            p(&sj),
        ],
    );
    let g = gen(
        &lab,
        &[
            "--count", "60k", "--size", "1514", "--flows", "8", "--gen-id", "26",
        ],
    );
    std::thread::sleep(Duration::from_millis(500));
    let (code, stderr) = bg.stop("INT");
    assert_eq!(code, Some(0), "{stderr}");
    let s = stats(&sj);
    let gens = generators(&file);
    assert_eq!(gens.len(), 1, "{gens:?}");
    let (_, frames, unique, _, _) = gens[0];
    assert_eq!(frames, unique, "duplicates: {s}");
    assert_eq!(num(&s, "captured"), frames, "{s}");
    let dropped = num(&s, "dropped_kernel") + num(&s, "dropped_pool");
    assert!(dropped > 0, "the writer was not behind: {s}");
    assert!(frames + dropped <= on_wire(&g), "{g}: {s}");
}

/// `-c 5` takes exactly five packets and leaves the rest in the kernel, counted as not
/// taken: with the capture stopped (SIGSTOP) while 2000 frames land in its rings, the
/// equation holds exactly, on one queue and on two.
fn count_limit_stops_taking_packets() {
    for queues in ["1", "2"] {
        let lab = lab(2);
        let dir = tempdir();
        let (file, sj) = (dir.path().join("c.pcapng"), dir.path().join("c.json"));
        let bg = capture(
            &lab,
            &[
                "--queues",
                queues,
                "-c",
                "5",
                "-w",
                p(&file),
                "--stats-json",
                p(&sj),
            ],
        );
        signal(&bg, "STOP");
        let g = gen(&lab, &["--count", "2000", "--flows", "8", "--gen-id", "25"]);
        std::thread::sleep(Duration::from_millis(200));
        signal(&bg, "CONT");
        let (code, stderr) = wait_exit(bg, Duration::from_secs(10), "capture -c 5");
        assert_eq!(code, Some(0), "{queues} queues: {stderr}");
        let s = stats(&sj);
        assert_eq!(on_wire(&g), 2000, "{g}");
        assert_eq!(
            (
                num(&s, "captured"),
                num(&s, "written"),
                num(&s, "not_written")
            ),
            (5, 5, 0),
            "{queues} queues: {s}"
        );
        assert_eq!(
            num(&s, "dropped_kernel") + num(&s, "dropped_pool"),
            0,
            "{s}"
        );
        assert_eq!(num(&s, "not_taken"), 1995, "{queues} queues: {s}");
        assert!(
            stderr.contains("1995 packets not taken"),
            "{queues} queues: summary: {stderr}"
        );
        assert_eq!(tshark_count(&file), 5, "{queues} queues");
    }
}

/// VLAN-tagged traffic (replayed with its tags in the data; the kernel strips them on
/// receive): a filter selects on AF_PACKET and on AF_XDP what a live tcpdump selects, which
/// differs from `tcpdump -r` (live `tcp` also takes tagged TCP frames).
fn vlan_filters_select_what_live_tcpdump_selects() {
    let lab = lab(1);
    let dir = tempdir();
    let mix = dir.path().join("mix.pcap");
    crate::mix::write_pcap(&mix);
    let replay = ["--replay", p(&mix), "--topspeed"];
    for filter in ["tcp", "vlan and tcp", "not tcp"] {
        let file = dir.path().join("live.pcap");
        // A short snaplen: in immediate mode libpcap sizes ring frames by it, and 256 KiB
        // frames leave room for a handful of packets only.
        let live = tcpdump(&lab, &["-s", "256", "-B", "8192", "-w", p(&file), filter]);
        gen(&lab, &replay);
        std::thread::sleep(Duration::from_millis(300));
        let (code, stderr) = live.stop("INT");
        assert_eq!(code, Some(0), "tcpdump `{filter}`: {stderr}");
        assert!(
            stderr.contains("\n0 packets dropped by kernel"),
            "tcpdump `{filter}` lost frames: {stderr}"
        );
        let want = poolcap_format::read_file(&file)
            .unwrap_or_else(|e| panic!("read {}: {e}", p(&file)))
            .packets
            .len() as u64;
        assert!(want > 0, "`{filter}` selected nothing live");
        for backend in ["af_packet", "af_xdp"] {
            let sj = dir.path().join("v.json");
            let bg = capture(
                &lab,
                &["--backend", backend, "--stats-json", p(&sj), filter],
            );
            gen(&lab, &replay);
            std::thread::sleep(Duration::from_millis(300));
            let (code, stderr) = bg.stop("INT");
            assert_eq!(code, Some(0), "{backend} `{filter}`: {stderr}");
            let s = stats(&sj);
            assert_eq!(
                num(&s, "captured"),
                want,
                "{backend} `{filter}` vs live tcpdump: {s}"
            );
            assert_eq!(
                num(&s, "captured") + num(&s, "filtered"),
                u64::from(crate::mix::FRAMES),
                "{backend} `{filter}`: {s}"
            );
        }
    }
}
