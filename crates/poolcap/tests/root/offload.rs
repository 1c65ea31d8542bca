//! Advanced-mode tests in a lab: buddy offloading and congestion control keep every packet
//! accounted for.

use libtest_mimic::Trial;

use crate::common::{accounted, capture, gen, if_counters, lab, stats, tempdir, trial, Lab};

/// Frames prb0 received so far, by the kernel's interface counter (a judge outside poolcap).
fn rx_packets(lab: &Lab) -> u64 {
    if_counters(&lab.probe.netns, &lab.probe.iface)
        .expect("prb0 counters")
        .rx_packets
}

/// Checks the accounting against the frames prb0 received since `before`.
fn assert_kernel_agrees(lab: &Lab, before: u64, s: &serde_json::Value) {
    assert_eq!(
        accounted(s),
        rx_packets(lab) - before,
        "accounted = frames prb0 received (rx_packets): {s}"
    );
}

/// Captures with `args` on a lab of `queues` queues while the generator sends `traffic`, and
/// stops the capture 300 ms after (exit 0). Every frame sent is accounted for, and that
/// accounting is what prb0's own counter received: the stats and the generator's report.
fn capture_accounted(
    queues: u16,
    args: &[&str],
    traffic: &[&str],
) -> (serde_json::Value, serde_json::Value) {
    let lab = lab(queues);
    let dir = tempdir();
    let json = dir.path().join("stats.json");
    let stats_json = ["--stats-json", json.to_str().unwrap()];
    let cap = capture(&lab, &[args, &stats_json[..]].concat());
    let rx_before = rx_packets(&lab);
    let sent = gen(&lab, traffic);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (code, err) = cap.stop("INT");
    assert_eq!(code, Some(0), "capture failed: {err}");
    let s = stats(&json);
    assert_kernel_agrees(&lab, rx_before, &s);
    assert_eq!(
        accounted(&s),
        sent["frames"].as_u64().unwrap(),
        "sent = captured + dropped_kernel + dropped_pool + filtered: {s}"
    );
    (s, sent)
}

fn queue_sum(s: &serde_json::Value, key: &str) -> u64 {
    s["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .map(|q| q[key].as_u64().expect(key))
        .sum()
}

/// Two queues, one elephant flow, a heavy per-packet load: the hot queue's backlog passes T
/// and its chunks go to the other queue's worker.
fn buddy_offloads_and_accounts_exactly() {
    let (s, sent) = capture_accounted(
        2,
        &[
            "--queues",
            "2",
            "--load",
            "20000",
            "--pool",
            "32,16",
            "--offload",
            "buddy:50",
        ],
        &[
            "--count", "60000", "--rate", "60k", "--flows", "16", "--skew", "0.8",
        ],
    );
    assert_eq!(sent["link_dropped"].as_u64(), Some(0));
    let out = queue_sum(&s, "offloaded_out");
    assert!(out > 0, "no chunk was offloaded: {s}");
    assert_eq!(
        out,
        queue_sum(&s, "offloaded_in"),
        "what one queue sends out another takes in"
    );
    assert_eq!(queue_sum(&s, "captured"), s["captured"].as_u64().unwrap());
}

/// With congestion control the capture pauses at the high mark and the kernel counts what
/// it then drops.
fn congestion_pauses_and_accounts_exactly() {
    let (s, _) = capture_accounted(
        1,
        &[
            "--load",
            "50000",
            "--pool",
            "32,16",
            "-B",
            "256",
            "--offload",
            "congestion:75,25",
        ],
        &["--count", "50000"],
    );
    assert!(queue_sum(&s, "paused_ms") > 0, "capture never paused: {s}");
    assert!(
        s["dropped_kernel"].as_u64().unwrap() > 0,
        "the kernel dropped nothing while paused: {s}"
    );
}

/// The plain in-place reader (the baseline peer) accounts for every packet too, and its
/// only buffer is the kernel ring: under overload the kernel drops, the pool never does.
fn inplace_reader_accounts_exactly() {
    let (s, _) = capture_accounted(
        2,
        &["--queues", "2", "--inplace", "--load", "20000", "-B", "256"],
        &["--count", "50000", "--flows", "8"],
    );
    assert_eq!(s["dropped_pool"].as_u64(), Some(0), "{s}");
    assert!(
        s["dropped_kernel"].as_u64().unwrap() > 0,
        "a 256 KiB ring under this load must overflow: {s}"
    );
}

pub(crate) fn trials() -> Vec<Trial> {
    vec![
        trial(
            "inplace_reader_accounts_exactly",
            inplace_reader_accounts_exactly,
        ),
        trial(
            "buddy_offloads_and_accounts_exactly",
            buddy_offloads_and_accounts_exactly,
        ),
        trial(
            "congestion_pauses_and_accounts_exactly",
            congestion_pauses_and_accounts_exactly,
        ),
    ]
}
