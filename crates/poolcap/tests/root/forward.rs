//! Forwarding tests in a three-host lab: the sender sends numbered frames to the probe's
//! `prb0`, `poolcap forward` sends them on out of `prb1`, and the sink captures them on
//! `snk0`. Every frame must arrive exactly once and in its flow's order, and the forwarder's
//! accounting must add up exactly, whatever the speed.

use std::path::{Path, PathBuf};
use std::process::Command;

use libtest_mimic::Trial;

use crate::common::{
    bin, gen, if_counters, netns_command, num, poolcap_in, stats, tcpdump_count, tempdir, trial,
    Background, Lab,
};

/// A three-host lab with `queues` queues per interface.
pub(crate) fn lab3(queues: u16) -> Lab {
    Lab::unique(queues, 3).unwrap_or_else(|e| panic!("lab up: {e}"))
}

pub(crate) fn sink(lab: &Lab) -> &poolcap_lab::Host {
    lab.sink.as_ref().expect("three hosts")
}

/// Starts `poolcap forward -i prb0 -o prb1 -q ARGS` in the probe and waits until it listens.
pub(crate) fn forward(lab: &Lab, args: &[&str]) -> Background {
    let mut cmd = netns_command(&lab.probe.netns, bin());
    cmd.args(["forward", "-i", "prb0", "-o", "prb1", "-q"])
        .args(args);
    Background::start(cmd, "listening on")
}

/// Starts `poolcap capture -i snk0 -q -w FILE --stats-json JSON` in the sink.
pub(crate) fn sink_capture(lab: &Lab, file: &Path, json: &Path) -> Background {
    let mut cmd = netns_command(&sink(lab).netns, bin());
    cmd.args(["capture", "-i", "snk0", "-q", "-w"])
        .arg(file)
        .arg("--stats-json")
        .arg(json);
    Background::start(cmd, "listening on")
}

/// One forwarding run seen from both ends: what the sender sent, the forwarder's statistics
/// and stderr, and the sink's capture file and statistics.
pub(crate) struct Through {
    pub sent: u64,
    pub stats: serde_json::Value,
    pub err: String,
    pub file: PathBuf,
    pub sink: serde_json::Value,
}

/// Runs `poolcap forward ARGS --stats-json` between a capture on the sink and the generator
/// (`gen_args`), stops both after the traffic has passed, and checks that both exited
/// cleanly. Files go to `dir`.
pub(crate) fn through_sink(lab: &Lab, dir: &Path, args: &[&str], gen_args: &[&str]) -> Through {
    let (file, sink_json, json) = (
        dir.join("sink.pcapng"),
        dir.join("sink.json"),
        dir.join("fwd.json"),
    );
    let cap = sink_capture(lab, &file, &sink_json);
    let mut all = args.to_vec();
    all.extend(["--stats-json", json.to_str().unwrap()]);
    let fwd = forward(lab, &all);
    let sent = num(&gen(lab, gen_args), "frames");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (code, err) = fwd.stop("INT");
    assert_eq!(code, Some(0), "forward failed: {err}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (code, cap_err) = cap.stop("INT");
    assert_eq!(code, Some(0), "sink capture failed: {cap_err}");
    Through {
        sent,
        stats: stats(&json),
        err,
        file,
        sink: stats(&sink_json),
    }
}

/// The seven terms of the forwarding equation.
fn terms(s: &serde_json::Value) -> u64 {
    poolcap_measure::forward_peers::TERMS
        .iter()
        .map(|k| num(s, k))
        .sum()
}

/// Checks the equation in total and per queue, and that the queues add up to the total.
pub(crate) fn assert_equation(s: &serde_json::Value, sent: u64) {
    assert_eq!(num(s, "received"), sent, "received = frames sent: {s}");
    assert_eq!(terms(s), sent, "received = sum of the seven terms: {s}");
    assert_eq!(num(s, "in_flight"), 0, "{s}");
    let queues = s["queues"].as_array().expect("queues");
    for q in queues {
        assert_eq!(terms(q), num(q, "received"), "queue: {q}");
    }
    for key in [
        "received",
        "forwarded",
        "dropped_kernel",
        "dropped_tx",
        "not_taken",
    ] {
        let sum: u64 = queues.iter().map(|q| num(q, key)).sum();
        assert_eq!(sum, num(s, key), "queues add up to the total {key}: {s}");
    }
}

/// How a forwarder is stopped while traffic goes on.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// SIGINT 1.2 s into the traffic.
    Signal,
    /// `--duration 1s`.
    Duration,
    /// `-c 150000`.
    Count,
}

/// Stops `poolcap forward --backend BACKEND --queues 2` in each way while 400k frames at
/// 200k pps over 16 flows go on: every frame its sockets received is in exactly one of the
/// seven terms, per queue and in total (the frames after the stop as `not_taken`), prb1
/// sent exactly what was forwarded, and `-c N` took exactly N frames.
pub(crate) fn stops_mid_traffic_with_every_frame_counted(backend: &str) {
    let lab = lab3(2);
    let dir = tempdir();
    for stop in [Stop::Signal, Stop::Duration, Stop::Count] {
        let json = dir.path().join(format!("{stop:?}.json"));
        let mut args = vec![
            "--backend",
            backend,
            "--queues",
            "2",
            "--stats-json",
            json.to_str().unwrap(),
        ];
        match stop {
            Stop::Signal => {}
            Stop::Duration => args.extend(["--duration", "1s"]),
            Stop::Count => args.extend(["-c", "150000"]),
        }
        let tx_before = if_counters(&lab.probe.netns, "prb1").expect("prb1 counters");
        let fwd = forward(&lab, &args);
        let (g, (code, err)) = std::thread::scope(|sc| {
            let sender = sc.spawn(|| {
                gen(
                    &lab,
                    &["--count", "400000", "--rate", "200k", "--flows", "16"],
                )
            });
            let ended = match stop {
                Stop::Signal => {
                    std::thread::sleep(std::time::Duration::from_millis(1200));
                    fwd.stop("INT")
                }
                Stop::Duration | Stop::Count => fwd.wait(),
            };
            (sender.join().expect("generator"), ended)
        });
        assert_eq!(code, Some(0), "{stop:?}: forward failed: {err}");
        let s = stats(&json);
        let received = num(&s, "received");
        assert_equation(&s, received);
        assert!(
            received > 0 && received < crate::common::on_wire(&g),
            "{stop:?}: stopped mid-traffic: {s} {g}"
        );
        assert!(
            num(&s, "not_taken") > 0,
            "{stop:?}: the frames after the stop are not taken: {s}"
        );
        let tx = if_counters(&lab.probe.netns, "prb1").expect("prb1 counters");
        assert_eq!(
            tx.tx_packets - tx_before.tx_packets,
            num(&s, "forwarded"),
            "{stop:?}: prb1 sent what was forwarded: {s}"
        );
        if let Stop::Count = stop {
            let taken = num(&s, "forwarded") + num(&s, "dropped_by_rule") + num(&s, "dropped_tx");
            assert_eq!(taken, 150_000, "-c takes exactly N: {s}");
        }
        assert!(
            err.contains(&format!("{} frames not taken", num(&s, "not_taken"))),
            "{stop:?}: the summary says so: {err}"
        );
    }
}

fn af_packet_stops_mid_traffic_with_every_frame_counted() {
    stops_mid_traffic_with_every_frame_counted("af_packet");
}

/// The generator frames of a file: (frames, unique, duplicates, reordered within a flow).
pub(crate) fn sink_frames(file: &Path) -> (u64, u64, u64, u64) {
    let f =
        poolcap_format::read_file(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
    let mut c = poolcap::seqcheck::SeqChecker::new();
    for p in &f.packets {
        c.observe(&p.data);
    }
    let r = c.reports(None);
    assert!(r.len() <= 1, "one generator at most: {r:?}");
    r.first().map_or((0, 0, 0, 0), |r| {
        (r.frames, r.unique, r.duplicates, r.reordered_in_flow)
    })
}

/// Two queues, skewed flows and a load heavy enough that buddy offloading moves chunks to
/// the other queue's worker: every forwarded frame reaches the sink once, no flow is
/// reordered, and the accounting is exact.
fn forwards_every_frame_once_in_flow_order() {
    let lab = lab3(2);
    let dir = tempdir();
    let t = through_sink(
        &lab,
        dir.path(),
        &[
            "--queues",
            "2",
            // About 100 us a packet (x-loop about 1.2 ns an iteration): one worker takes
            // about 10k pps, less than the elephant queue's share of 20k pps, however idle
            // the machine, so its backlog passes 25% and chunks go to the buddy.
            "--load",
            "80000",
            "--pool",
            "32,16",
            "--offload",
            "buddy:25",
        ],
        &[
            "--count", "20000", "--rate", "20k", "--flows", "16", "--skew", "0.8",
        ],
    );
    let s = &t.stats;
    assert_equation(s, t.sent);
    // Stopped after the traffic, no rule, OUT up: every frame not dropped on IN left.
    assert_eq!(
        (
            num(s, "dropped_by_rule"),
            num(s, "dropped_tx"),
            num(s, "not_taken"),
            num(s, "filtered")
        ),
        (0, 0, 0, 0),
        "{s}"
    );
    let forwarded = num(s, "forwarded");
    assert_eq!(
        forwarded,
        t.sent - num(s, "dropped_kernel") - num(s, "dropped_pool"),
        "{s}"
    );
    assert!(num(s, "offloaded_out") > 0, "no chunk went to a buddy: {s}");
    let sink_seen =
        num(&t.sink, "captured") + num(&t.sink, "dropped_kernel") + num(&t.sink, "dropped_pool");
    assert_eq!(
        sink_seen, forwarded,
        "the sink got what was forwarded: {}",
        t.sink
    );
    let (frames, unique, dups, reordered) = sink_frames(&t.file);
    assert_eq!(frames, num(&t.sink, "captured"));
    assert_eq!((unique, dups), (frames, 0), "every frame once");
    assert_eq!(reordered, 0, "no flow reordered");
}

fn accounts_exactly_under_overload() {
    let lab = lab3(1);
    let dir = tempdir();
    let json = dir.path().join("fwd.json");
    let fwd = forward(
        &lab,
        &[
            "--load",
            "50000",
            "--pool",
            "16,8",
            "-B",
            "256",
            "--stats-json",
            json.to_str().unwrap(),
        ],
    );
    let sent = gen(&lab, &["--count", "30000"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (code, err) = fwd.stop("INT");
    assert_eq!(code, Some(0), "forward failed: {err}");
    let s = stats(&json);
    assert_equation(&s, num(&sent, "frames"));
    assert!(
        num(&s, "dropped_kernel") + num(&s, "dropped_pool") > 0,
        "overload dropped nothing: {s}"
    );
    assert!(num(&s, "forwarded") > 0, "{s}");
    let out = if_counters(&lab.probe.netns, "prb1").expect("prb1 counters");
    assert_eq!(
        out.tx_packets,
        num(&s, "forwarded"),
        "prb1 sent what was forwarded"
    );
}

/// `--drop FILTER` removes exactly the frames tcpdump selects with FILTER in a capture of
/// what was sent, and the sink gets exactly the others.
fn drop_rule_removes_exactly_the_matching_frames() {
    let lab = lab3(1);
    let dir = tempdir();
    let sent_file = dir.path().join("sent.pcap");
    let (file, sink_json, json) = (
        dir.path().join("sink.pcapng"),
        dir.path().join("sink.json"),
        dir.path().join("fwd.json"),
    );
    // The last byte of the generator's sequence number: drops one frame in four.
    let rule = "udp[23] & 3 = 0";
    // tcpdump, not poolcap capture: it sees the sender's outgoing frames.
    let mut cmd = netns_command(&lab.sender.netns, "tcpdump");
    // It exits by itself once it has them all (`-c`), so a slow tcpdump loses none at stop.
    cmd.args([
        "-i",
        "snd0",
        "-n",
        "--immediate-mode",
        "-Z",
        "root",
        "-c",
        "8000",
    ])
    .args(["-B", "32768"])
    .arg("-w")
    .arg(&sent_file);
    let sent_cap = Background::start(cmd, "listening on");
    let cap = sink_capture(&lab, &file, &sink_json);
    let fwd = forward(
        &lab,
        &["--drop", rule, "--stats-json", json.to_str().unwrap()],
    );
    // Through the qdisc: frames that bypass it are not shown to capture sockets on snd0.
    let sent = gen(
        &lab,
        &[
            "--count",
            "8000",
            "--rate",
            "20k",
            "--flows",
            "4",
            "--qdisc-bypass",
            "off",
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    let mut sent_cap = sent_cap;
    for _ in 0..100 {
        if sent_cap.child.try_wait().is_ok_and(|s| s.is_some()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for (bg, what) in [
        (fwd, "forward"),
        (cap, "sink capture"),
        (sent_cap, "sender capture"),
    ] {
        let (code, err) = bg.stop("INT");
        assert_eq!(code, Some(0), "{what} failed: {err}");
    }
    let s = stats(&json);
    assert_equation(&s, num(&sent, "frames"));
    assert_eq!(
        tcpdump_count(&sent_file, &[]),
        num(&sent, "frames"),
        "tcpdump saw all sent"
    );
    let matching = tcpdump_count(&sent_file, &[rule]);
    assert!(matching > 0 && matching < num(&sent, "frames"));
    assert_eq!(num(&s, "dropped_by_rule"), matching, "{s}");
    assert_eq!(
        (num(&s, "dropped_kernel"), num(&s, "dropped_pool")),
        (0, 0),
        "a loss at 20k pps makes the comparison below inexact (busy machine? rerun): {s}"
    );
    let others = tcpdump_count(&sent_file, &["not", "(", rule, ")"]);
    assert_eq!(num(&s, "forwarded"), others, "{s}");
    assert_eq!(
        tcpdump_count(&file, &[rule]),
        0,
        "no dropped frame reached the sink"
    );
    assert_eq!(
        tcpdump_count(&file, &[]),
        others,
        "the sink got all the others"
    );
}

/// Sends a batch of 3,000 frames at 20k/s through the forwarder `fwd`, then another after
/// each of `changes` (`ip -n NETNS link set IFACE STATE`), 400 ms apart, and stops it (exit 0):
/// its stats, whose accounting adds up to the frames sent with no loss before OUT, and its
/// stderr.
pub(crate) fn forward_through_link_changes(
    lab: &Lab,
    fwd: Background,
    json: &Path,
    changes: &[(&str, &str, &str)],
) -> (serde_json::Value, String) {
    let batch = ["--count", "3000", "--rate", "20k"];
    let settle = || std::thread::sleep(std::time::Duration::from_millis(400));
    let mut total = num(&gen(lab, &batch), "frames");
    settle();
    for (netns, iface, state) in changes {
        let st = Command::new("ip")
            .args(["-n", netns, "link", "set", iface, state])
            .status()
            .expect("ip link set");
        assert!(st.success(), "ip -n {netns} link set {iface} {state}");
        total += num(&gen(lab, &batch), "frames");
        settle();
    }
    let (code, err) = fwd.stop("INT");
    assert_eq!(code, Some(0), "forward failed: {err}");
    let s = stats(json);
    assert_equation(&s, total);
    assert_eq!(
        (num(&s, "dropped_kernel"), num(&s, "dropped_pool")),
        (0, 0),
        "loss at 20k pps (busy machine? rerun): {s}"
    );
    (s, err)
}

/// While OUT is down (or has no carrier: the sink's end is down) its frames count as
/// `dropped_tx`, said once per outage; forwarding resumes when it comes back.
fn out_going_down_counts_dropped_tx_and_resumes() {
    let lab = lab3(1);
    let dir = tempdir();
    let json = dir.path().join("fwd.json");
    let fwd = forward(&lab, &["--stats-json", json.to_str().unwrap()]);
    let (probe, sink_ns) = (lab.probe.netns.as_str(), sink(&lab).netns.as_str());
    let changes = [
        (probe, "prb1", "down"),
        (probe, "prb1", "up"),
        (sink_ns, "snk0", "down"),
        (sink_ns, "snk0", "up"),
    ];
    let (s, err) = forward_through_link_changes(&lab, fwd, &json, &changes);
    assert_eq!(
        num(&s, "dropped_tx"),
        6000,
        "the second and fourth batches: {s}"
    );
    assert_eq!(num(&s, "forwarded"), 9000, "the others: {s}");
    let out = if_counters(&sink(&lab).netns, "snk0").expect("snk0 counters");
    assert_eq!(out.rx_packets, 9000, "the sink got what was forwarded");
    assert_eq!(err.matches("prb1 is down").count(), 1, "said once: {err}");
    assert_eq!(
        err.matches("prb1 has no carrier").count(),
        1,
        "said once: {err}"
    );
    assert_eq!(err.matches("prb1 takes frames again").count(), 2, "{err}");
}

/// Bad input gets one line and exit code 2 before anything is forwarded.
fn bad_input_fails_before_forwarding() {
    let lab = lab3(1);
    let ns = &lab.probe.netns;
    for (name, args) in [
        ("fwdown", vec!["type", "veth", "peer", "name", "fwdownp"]),
        (
            "fwsmall",
            vec!["mtu", "1000", "type", "veth", "peer", "name", "fwsmallp"],
        ),
    ] {
        let st = Command::new("ip")
            .args(["-n", ns, "link", "add", name])
            .args(args)
            .status()
            .expect("ip link add");
        assert!(st.success());
    }
    let st = Command::new("ip")
        .args(["-n", ns, "link", "set", "fwsmall", "up"])
        .status()
        .expect("ip link set");
    assert!(st.success());
    let cases: [(&[&str], &str); 5] = [
        (&["-o", "prb0"], "another interface"),
        (&["-o", "nosuch0"], "no such interface `nosuch0`"),
        (&["-o", "fwdown"], "`fwdown` is down"),
        (&["-o", "fwsmall"], "MTU 1000, smaller"),
        (
            &["-o", "prb1", "--drop", "udp prot 9"],
            "--drop: bad filter",
        ),
    ];
    for (args, want) in cases {
        let mut all = vec!["forward", "-i", "prb0"];
        all.extend_from_slice(args);
        let out = poolcap_in(ns, &all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(want), "{args:?}: `{want}` in {err}");
        assert!(!err.contains("listening"), "{args:?}: {err}");
    }
}

/// Frames stamped with their send time by the sender and captured at the sink, after the
/// forwarder: `poolcap check` reports one-way latency percentiles for every frame, ordered
/// and plausible (sender, forwarder and sink share this machine's CLOCK_REALTIME).
fn check_reports_latency_through_the_forwarder() {
    let lab = lab3(1);
    let dir = tempdir();
    let t = through_sink(
        &lab,
        dir.path(),
        &[],
        &[
            "--count", "2000", "--rate", "10k", "--size", "64", "--flows", "4",
        ],
    );
    let (file, captured) = (&t.file, num(&t.sink, "captured"));
    assert!(captured > 0, "the sink captured nothing");

    let check = |args: &[&str]| {
        let out = Command::new(bin())
            .arg("check")
            .arg(file)
            .args(args)
            .output()
            .expect("run poolcap check");
        assert!(out.status.success(), "check failed: {out:?}");
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let v: serde_json::Value = serde_json::from_str(&check(&["--json"])).expect("check json");
    let g = &v["generators"][0];
    let l = &g["latency"];
    assert_eq!(
        num(l, "frames"),
        captured,
        "every 64-byte frame is stamped: {v}"
    );
    assert_eq!(num(g, "frames"), captured, "{v}");
    let keys = ["min_ns", "p50_ns", "p99_ns", "p999_ns", "max_ns"];
    let ns: Vec<i64> = keys
        .iter()
        .map(|k| l[k].as_i64().unwrap_or_else(|| panic!("{k} in {l}")))
        .collect();
    assert!(ns[0] > 0, "latency is positive: {l}");
    assert!(ns.windows(2).all(|w| w[0] <= w[1]), "ordered: {l}");
    // The same latencies from tshark's reading of the file: capture time less the send
    // stamp in each frame's payload (nearest-rank percentiles, as check defines them).
    let mut own = tshark_latencies(file);
    own.sort_unstable();
    assert_eq!(own.len() as u64, captured, "tshark reads every frame");
    let rank = |per_mille: usize| own[(per_mille * own.len()).div_ceil(1000).max(1) - 1];
    let theirs = [own[0], rank(500), rank(990), rank(999), own[own.len() - 1]];
    assert_eq!(ns, theirs, "check's latencies vs tshark's timestamps: {l}");
    let text = check(&[]);
    assert!(text.contains("(0 within a flow)"), "{text}");
    assert!(
        text.contains(&format!(
            "latency over {captured} stamped frames (us): min "
        )),
        "{text}"
    );
    for p in ["p50 ", "p99 ", "p99.9 ", "max "] {
        assert!(text.contains(p), "{p} in {text}");
    }
}

/// One-way latency of each generator frame of `file` in ns, as tshark reads the file:
/// its capture time (ns since the epoch) less the 48-bit send stamp that follows the
/// 16-byte tag at the start of the UDP payload, modulo 2^48.
fn tshark_latencies(file: &Path) -> Vec<i64> {
    crate::common::tshark_fields(file, &["frame.time_epoch", "udp.payload"])
        .iter()
        .map(|l| {
            let (time, payload) = l.split_once('\t').unwrap_or_else(|| panic!("line {l}"));
            let (secs, frac) = time.split_once('.').unwrap_or((time, "0"));
            let frac = format!("{frac:0<9}");
            let captured: u64 = secs.parse::<u64>().expect("seconds") * 1_000_000_000
                + frac[..9].parse::<u64>().expect("nanoseconds");
            let payload = payload.replace(':', "");
            let sent = u64::from_str_radix(&payload[32..44], 16).expect("send stamp");
            poolcap::frame::latency_ns(sent, captured)
        })
        .collect()
}

/// The frames of a file as tcpdump prints them (headers and bytes, no time), sorted: two
/// files hold the same frames when these are equal, whatever order queues were merged in.
fn tcpdump_frames(file: &Path) -> Vec<String> {
    let out = Command::new("tcpdump")
        .args(["-nn", "-t", "-xx", "-r"])
        .arg(file)
        .output()
        .expect("tcpdump -r");
    assert!(
        out.status.success(),
        "tcpdump -r {}: {out:?}",
        file.display()
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let mut frames: Vec<String> = Vec::new();
    for line in text.lines() {
        match frames.last_mut() {
            Some(f) if line.starts_with(char::is_whitespace) => f.push_str(line),
            _ => frames.push(line.to_string()),
        }
    }
    frames.sort();
    frames
}

/// `-w FILE` writes what passed: with two queues, workers and a drop rule, the file read
/// back by tcpdump holds exactly the frames the sink received, and as many as were forwarded.
fn write_holds_exactly_what_was_forwarded() {
    let lab = lab3(2);
    let dir = tempdir();
    let passed = dir.path().join("passed.pcap");
    let rule = "udp[23] & 3 = 0";
    let t = through_sink(
        &lab,
        dir.path(),
        &[
            "--queues",
            "2",
            "--load",
            "100",
            "--drop",
            rule,
            "--format",
            "pcap",
            "-w",
            passed.to_str().unwrap(),
        ],
        &["--count", "6000", "--rate", "20k", "--flows", "8"],
    );
    let s = &t.stats;
    assert_equation(s, t.sent);
    let forwarded = num(s, "forwarded");
    assert!(forwarded > 0 && num(s, "dropped_by_rule") > 0, "{s}");
    assert_eq!(num(s, "written"), forwarded, "{s}");
    assert_eq!(
        tcpdump_count(&passed, &[]),
        forwarded,
        "the file holds them"
    );
    assert_eq!(tcpdump_count(&passed, &[rule]), 0, "no dropped frame in it");
    assert_eq!(
        num(&t.sink, "captured"),
        forwarded,
        "the sink captured all (busy machine? rerun): {}",
        t.sink
    );
    assert_eq!(
        tcpdump_frames(&passed),
        tcpdump_frames(&t.file),
        "the file holds exactly the frames the sink received"
    );
}

/// `--bidirectional`: generators on both ends send at once; each direction's accounting
/// adds up to what its generator sent, each end receives exactly what its direction
/// forwarded, and no frame comes back to the forwarder (it ignores what it sends itself).
fn bidirectional_forwards_both_ways_with_one_account_each() {
    let lab = lab3(2);
    let dir = tempdir();
    let json = dir.path().join("fwd.json");
    let fwd = forward(
        &lab,
        &[
            "--bidirectional",
            "--queues",
            "2",
            "--stats-json",
            json.to_str().unwrap(),
        ],
    );
    let sink_ns = sink(&lab).netns.clone();
    let back = std::thread::spawn(move || {
        let out = poolcap_in(
            &sink_ns,
            &[
                "gen", "-i", "snk0", "--json", "--count", "5000", "--rate", "20k", "--flows", "8",
            ],
        );
        assert!(out.status.success(), "gen on the sink: {out:?}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("gen json")
    });
    let there = gen(&lab, &["--count", "8000", "--rate", "20k", "--flows", "8"]);
    let back = back.join().expect("gen on the sink");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (code, err) = fwd.stop("INT");
    assert_eq!(code, Some(0), "forward failed: {err}");
    assert!(
        err.contains("prb0 -> prb1:") && err.contains("prb1 -> prb0:"),
        "{err}"
    );
    let s = stats(&json);
    let dirs = s["directions"].as_array().expect("one block per direction");
    assert_eq!(dirs.len(), 2, "{s}");
    let ends = [
        ("prb0", "prb1", &there, sink(&lab).netns.as_str(), "snk0"),
        ("prb1", "prb0", &back, lab.sender.netns.as_str(), "snd0"),
    ];
    for (d, (inp, out, sent, end_ns, end_if)) in dirs.iter().zip(ends) {
        assert_eq!(
            (d["interface_in"].as_str(), d["interface_out"].as_str()),
            (Some(inp), Some(out))
        );
        assert_equation(d, num(sent, "frames"));
        assert_eq!(num(d, "dropped_tx"), 0, "{d}");
        let end = if_counters(end_ns, end_if).expect("end counters");
        assert_eq!(
            end.rx_packets,
            num(d, "forwarded"),
            "{end_if} received what {inp} -> {out} forwarded"
        );
    }
}

/// `--metrics`: scraped with curl once the traffic has passed, the forwarding families
/// (`poolcap_packets_forwarded_total`, bytes, drops with cause `tx`, and the `--drop`
/// rule's drops in their own family, `poolcap_packets_policy_dropped_total`, not as loss)
/// equal the final accounting, queue by queue.
fn metrics_serve_the_forwarding_counters() {
    let lab = lab3(2);
    let dir = tempdir();
    let json = dir.path().join("fwd.json");
    let addr = "127.0.0.1:9464";
    let fwd = forward(
        &lab,
        &[
            "--queues",
            "2",
            "--drop",
            "udp[23] & 3 = 0",
            "--metrics",
            addr,
            "--stats-json",
            json.to_str().unwrap(),
        ],
    );
    gen(&lab, &["--count", "4000", "--rate", "20k", "--flows", "8"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let out = netns_command(&lab.probe.netns, "curl")
        .args(["-sf", &format!("http://{addr}/metrics")])
        .output()
        .expect("run curl");
    assert!(out.status.success(), "curl: {out:?}");
    let served = String::from_utf8(out.stdout).expect("utf-8");
    let (code, err) = fwd.stop("INT");
    assert_eq!(code, Some(0), "forward failed: {err}");
    let s = stats(&json);
    let value = |series: String| -> u64 {
        served
            .lines()
            .find_map(|l| {
                l.strip_prefix(series.as_str())?
                    .strip_prefix(' ')?
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no {series} in\n{served}"))
    };
    assert!(
        num(&s, "forwarded") > 0 && num(&s, "dropped_by_rule") > 0,
        "{s}"
    );
    for q in s["queues"].as_array().expect("queues") {
        let i = num(q, "queue");
        let dropped = |cause: &str| {
            value(format!(
                "poolcap_packets_dropped_total{{queue=\"{i}\",cause=\"{cause}\"}}"
            ))
        };
        assert_eq!(
            value(format!("poolcap_packets_forwarded_total{{queue=\"{i}\"}}")),
            num(q, "forwarded"),
            "queue {i}"
        );
        assert_eq!(
            value(format!("poolcap_forwarded_bytes_total{{queue=\"{i}\"}}")),
            num(q, "forwarded_bytes"),
            "queue {i}"
        );
        assert_eq!(
            value(format!(
                "poolcap_packets_policy_dropped_total{{queue=\"{i}\"}}"
            )),
            num(q, "dropped_by_rule"),
            "queue {i}"
        );
        assert!(
            !served.contains("cause=\"rule\""),
            "policy drops are not loss:\n{served}"
        );
        assert_eq!(dropped("tx"), num(q, "dropped_tx"), "queue {i}");
        assert_eq!(dropped("kernel"), num(q, "dropped_kernel"), "queue {i}");
    }
}

/// The forwarding tests.
/// `--bidirectional -w FILE`: each direction writes what it forwarded, IN to OUT into FILE
/// and OUT to IN into FILE-back beside it; each file holds exactly its direction's forwarded
/// frames (read back by tcpdump), and `-w -` is refused with both directions.
fn bidirectional_writes_each_direction_to_its_own_file() {
    let lab = lab3(1);
    let dir = tempdir();
    let (json, file) = (dir.path().join("fwd.json"), dir.path().join("fwd.pcap"));
    let refused = poolcap_in(
        &lab.probe.netns,
        &[
            "forward",
            "-i",
            "prb0",
            "-o",
            "prb1",
            "--bidirectional",
            "-w",
            "-",
        ],
    );
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("-w: with --bidirectional"), "{err}");
    let fwd = forward(
        &lab,
        &[
            "--bidirectional",
            "--format",
            "pcap",
            "-w",
            file.to_str().unwrap(),
            "--stats-json",
            json.to_str().unwrap(),
        ],
    );
    let sink_ns = sink(&lab).netns.clone();
    let back = std::thread::spawn(move || {
        let out = poolcap_in(
            &sink_ns,
            &[
                "gen", "-i", "snk0", "--json", "--count", "3000", "--rate", "20k",
            ],
        );
        assert!(out.status.success(), "gen on the sink: {out:?}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("gen json")
    });
    let there = gen(&lab, &["--count", "5000", "--rate", "20k"]);
    let back = back.join().expect("gen on the sink");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (code, err) = fwd.stop("INT");
    assert_eq!(code, Some(0), "forward failed: {err}");
    let s = stats(&json);
    let dirs = s["directions"].as_array().expect("one block per direction");
    let files = [file.clone(), dir.path().join("fwd-back.pcap")];
    for ((d, sent), f) in dirs.iter().zip([&there, &back]).zip(&files) {
        assert_equation(d, num(sent, "frames"));
        let forwarded = num(d, "forwarded");
        assert!(forwarded > 0, "{d}");
        assert_eq!(num(d, "written"), forwarded, "{d}");
        assert_eq!(
            tcpdump_count(f, &[]),
            forwarded,
            "{} holds them",
            f.display()
        );
    }
}

/// The bench's XDP redirect floor (`poolcap bench-peer xdp-redirect`, which runs
/// `poolcap-bench peer xdp-redirect`) with GRO on at the sink
/// (which a veth peer needs to receive redirected frames): every frame reaches the sink once
/// and in order, its own count is what was sent, and the program leaves `prb0` at SIGINT.
/// A missing interface is refused on one line with exit code 2.
fn xdp_redirect_delivers_every_frame_once_and_detaches() {
    let lab = lab3(2);
    let dir = tempdir();
    let ns = &lab.probe.netns;
    let out = poolcap_in(
        ns,
        &["bench-peer", "xdp-redirect", "-i", "prb0", "-o", "nosuch0"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim(), "poolcap-bench: no interface `nosuch0`");
    let gro = |state: &str| {
        let st = netns_command(&sink(&lab).netns, "ethtool")
            .args(["-K", "snk0", "gro", state])
            .status()
            .expect("ethtool");
        assert!(st.success(), "ethtool gro {state}");
    };
    gro("on");
    let (file, json) = (dir.path().join("sink.pcap"), dir.path().join("sink.json"));
    let capture = sink_capture(&lab, &file, &json);
    let mut cmd = netns_command(ns, "sh");
    cmd.arg("-c").arg(format!(
        "exec {} bench-peer xdp-redirect -i prb0 -o prb1 1>&2",
        bin()
    ));
    let redirect = Background::start(cmd, "listening on");
    let xdp_on_prb0 = || {
        let out = Command::new("ip")
            .args(["-n", ns, "link", "show", "prb0"])
            .output()
            .expect("ip link show");
        String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
    };
    assert!(xdp_on_prb0(), "the program is attached");
    let n = 5000;
    gen(
        &lab,
        &["--count", &n.to_string(), "--rate", "20k", "--flows", "8"],
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (code, text) = redirect.stop("INT");
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains(&format!("{n} frames redirected")), "{text}");
    assert!(!xdp_on_prb0(), "the link went with the process");
    let (code, text) = capture.stop("INT");
    assert_eq!(code, Some(0), "{text}");
    gro("off");
    let out = Command::new(bin())
        .arg("check")
        .arg(&file)
        .args(["--expect", &n.to_string()])
        .output()
        .expect("poolcap check");
    assert!(
        out.status.success(),
        "every frame once at the sink: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub(crate) fn trials() -> Vec<Trial> {
    vec![
        trial(
            "forward_xdp_redirect_delivers_every_frame_once_and_detaches",
            xdp_redirect_delivers_every_frame_once_and_detaches,
        ),
        trial(
            "forward_every_frame_once_in_flow_order",
            forwards_every_frame_once_in_flow_order,
        ),
        trial(
            "forward_stops_mid_traffic_with_every_frame_counted",
            af_packet_stops_mid_traffic_with_every_frame_counted,
        ),
        trial(
            "forward_accounts_exactly_under_overload",
            accounts_exactly_under_overload,
        ),
        trial(
            "forward_drop_rule_removes_exactly_the_matching_frames",
            drop_rule_removes_exactly_the_matching_frames,
        ),
        trial(
            "forward_out_down_counts_dropped_tx_and_resumes",
            out_going_down_counts_dropped_tx_and_resumes,
        ),
        trial(
            "forward_bad_input_fails_before_forwarding",
            bad_input_fails_before_forwarding,
        ),
        trial(
            "forward_write_holds_exactly_what_was_forwarded",
            write_holds_exactly_what_was_forwarded,
        ),
        trial(
            "forward_bidirectional_forwards_both_ways_with_one_account_each",
            bidirectional_forwards_both_ways_with_one_account_each,
        ),
        trial(
            "forward_bidirectional_writes_each_direction_to_its_own_file",
            bidirectional_writes_each_direction_to_its_own_file,
        ),
        trial(
            "forward_metrics_serve_the_forwarding_counters",
            metrics_serve_the_forwarding_counters,
        ),
        trial(
            "forward_check_reports_latency",
            check_reports_latency_through_the_forwarder,
        ),
    ]
}
