//! Forwarding from the UMEM: `poolcap forward --backend af_xdp` captures prb0 with AF_XDP
//! and sends each frame out of prb1 from the UMEM it arrived in, through an AF_XDP socket on
//! prb1 sharing that UMEM. The sink needs nothing special: on veth the socket runs in copy
//! mode, whose transmit path hands the peer an ordinary skb (an XDP program or GRO on the
//! peer is only needed for frames redirected by XDP into a veth, which this is not).
//! Every frame must arrive once and in its flow's order, and the accounting must be exact.

use std::path::Path;
use std::process::Command;

use libtest_mimic::Trial;

use crate::common::{bin, if_counters, num, poolcap_in, tcpdump_count, tempdir, trial};
use crate::forward::{
    assert_equation, forward, forward_through_link_changes, lab3, sink, sink_frames,
    stops_mid_traffic_with_every_frame_counted, through_sink,
};

/// What every AF_XDP forward on veth must report as its transmit path.
const COPY_PATH: &str = "af_xdp shared umem (copy)";

/// `poolcap check FILE --expect N --json`: fails unless frames 0..N each arrived once.
fn check_exactly(file: &Path, n: u64) -> serde_json::Value {
    let out = Command::new(bin())
        .arg("check")
        .arg(file)
        .args(["--expect", &n.to_string(), "--json"])
        .output()
        .expect("run poolcap check");
    assert!(
        out.status.success(),
        "check --expect {n}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("check json")
}

/// Two queues, each IN queue's UMEM shared with its own socket on OUT: every frame reaches
/// the sink exactly once, no flow is reordered, prb1 sent exactly what was forwarded.
fn every_frame_once_in_flow_order_on_two_queues() {
    let lab = lab3(2);
    let dir = tempdir();
    let t = through_sink(
        &lab,
        dir.path(),
        &["--backend", "af_xdp", "--queues", "2"],
        &["--count", "20000", "--rate", "20k", "--flows", "16"],
    );
    let (s, sent) = (&t.stats, t.sent);
    assert!(
        t.err.contains(&format!("transmit: {COPY_PATH}")),
        "{}",
        t.err
    );
    assert_eq!(s["tx_path"], COPY_PATH, "{s}");
    assert_equation(s, sent);
    assert_eq!(
        num(s, "forwarded"),
        sent,
        "no loss at 20k pps (busy machine? rerun): {s}"
    );
    for q in s["queues"].as_array().expect("queues") {
        assert!(num(q, "forwarded") > 0, "both queues forwarded: {s}");
    }
    let out = if_counters(&lab.probe.netns, "prb1").expect("prb1 counters");
    assert_eq!(out.tx_packets, sent, "prb1 sent what was forwarded");
    assert_eq!(
        num(&t.sink, "captured"),
        sent,
        "the sink lost nothing (busy machine? rerun): {}",
        t.sink
    );
    let v = check_exactly(&t.file, sent);
    let g = &v["generators"][0];
    assert_eq!(num(g, "reordered_in_flow"), 0, "no flow reordered: {v}");
}

/// `--drop` on the AF_XDP path: one frame in four (the low bits of the sequence number)
/// never leaves, the others do, each once; dropped frames' chunks still go home.
fn drop_rule_on_the_shared_umem_path() {
    let lab = lab3(1);
    let dir = tempdir();
    let rule = "udp[23] & 3 = 0";
    // A small pool: 12000 frames pass through its 4096 frames three times, so chunks must
    // come home (after their completions) for the run to lose nothing; at 10k pps it holds
    // 0.4 s, twice the stall that cost 768 frames at 20k pps once under the full suite.
    let t = through_sink(
        &lab,
        dir.path(),
        &["--backend", "af_xdp", "--pool", "64,64", "--drop", rule],
        &["--count", "12000", "--rate", "10k", "--flows", "4"],
    );
    let (s, sent) = (&t.stats, t.sent);
    assert_eq!(s["tx_path"], COPY_PATH, "{s}");
    assert_equation(s, sent);
    assert_eq!(
        (num(s, "dropped_kernel"), num(s, "dropped_pool")),
        (0, 0),
        "loss at 10k pps (busy machine? rerun): {s}"
    );
    assert_eq!(num(s, "dropped_by_rule"), sent / 4, "{s}");
    assert_eq!(num(s, "forwarded"), sent - sent / 4, "{s}");
    assert_eq!(tcpdump_count(&t.file, &[rule]), 0, "no dropped frame left");
    assert_eq!(
        tcpdump_count(&t.file, &[]),
        sent - sent / 4,
        "the others did"
    );
    let (frames, unique, dups, reordered) = sink_frames(&t.file);
    assert_eq!((unique, dups, reordered), (frames, 0, 0), "once, in order");
}

/// While OUT is down the frames count as `dropped_tx` (none is put on the TX ring, so no
/// chunk waits for a completion that will not come); forwarding resumes when it is up.
fn out_down_counts_dropped_tx() {
    let lab = lab3(1);
    let dir = tempdir();
    let json = dir.path().join("fwd.json");
    let fwd = forward(
        &lab,
        &[
            "--backend",
            "af_xdp",
            "--stats-json",
            json.to_str().unwrap(),
        ],
    );
    let probe = lab.probe.netns.as_str();
    let changes = [(probe, "prb1", "down"), (probe, "prb1", "up")];
    let (s, err) = forward_through_link_changes(&lab, fwd, &json, &changes);
    assert_eq!(num(&s, "dropped_tx"), 3000, "the second batch: {s}");
    assert_eq!(num(&s, "forwarded"), 6000, "the others: {s}");
    let got = if_counters(&sink(&lab).netns, "snk0").expect("snk0 counters");
    assert_eq!(got.rx_packets, 6000, "the sink got what was forwarded");
    assert_eq!(err.matches("prb1 is down").count(), 1, "said once: {err}");
}

/// Each IN queue needs its own OUT queue: an OUT with fewer is refused in one line before
/// anything is forwarded.
fn out_with_fewer_queues_is_refused() {
    let lab = lab3(2);
    let ns = &lab.probe.netns;
    for args in [
        vec![
            "link", "add", "fwone", "type", "veth", "peer", "name", "fwonep",
        ],
        vec!["link", "set", "fwone", "up"],
        vec!["link", "set", "fwonep", "up"],
    ] {
        let st = Command::new("ip")
            .args(["-n", ns])
            .args(args)
            .status()
            .expect("ip link");
        assert!(st.success());
    }
    let out = poolcap_in(
        ns,
        &[
            "forward",
            "-i",
            "prb0",
            "-o",
            "fwone",
            "--backend",
            "af_xdp",
            "--queues",
            "2",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("fwone has 1 transmit queue, fewer than the 2 IN queues"),
        "{err}"
    );
}

fn stops_mid_traffic_with_every_frame_counted_from_the_umem() {
    stops_mid_traffic_with_every_frame_counted("af_xdp");
}

/// The AF_XDP forwarding tests.
pub(crate) fn trials() -> Vec<Trial> {
    vec![
        trial(
            "forward_xdp_stops_mid_traffic_with_every_frame_counted",
            stops_mid_traffic_with_every_frame_counted_from_the_umem,
        ),
        trial(
            "forward_xdp_every_frame_once_in_flow_order_on_two_queues",
            every_frame_once_in_flow_order_on_two_queues,
        ),
        trial(
            "forward_xdp_drop_rule_on_the_shared_umem_path",
            drop_rule_on_the_shared_umem_path,
        ),
        trial(
            "forward_xdp_out_down_counts_dropped_tx",
            out_down_counts_dropped_tx,
        ),
        trial(
            "forward_xdp_out_with_fewer_queues_is_refused",
            out_with_fewer_queues_is_refused,
        ),
    ]
}
