//! AF_XDP backend tests in a lab (native XDP on veth, copy mode).

use std::path::{Path, PathBuf};
use std::process::Command;

use libtest_mimic::Trial;

use crate::common::{
    bin, capture, check_sequences, gen, lab, netns_command, num, stats, tempdir, trial, Lab,
};

/// Captures with `args` into `dir`'s `NAME.pcapng` (stats in `NAME.json`) while `traffic`
/// runs: the stats JSON and the file.
fn capture_run(
    lab: &Lab,
    (dir, name): (&Path, &str),
    args: &[&str],
    traffic: &[&[&str]],
) -> (serde_json::Value, PathBuf) {
    let file = dir.join(format!("{name}.pcapng"));
    let json = dir.join(format!("{name}.json"));
    let mut all = vec![
        "-w",
        file.to_str().unwrap(),
        "--stats-json",
        json.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    let cap = capture(lab, &all);
    for t in traffic {
        gen(lab, t);
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (code, err) = cap.stop("INT");
    assert_eq!(code, Some(0), "capture {args:?} failed: {err}");
    assert!(err.contains("backend af_"), "no backend report: {err}");
    (stats(&json), file)
}

fn xdp_attached(lab: &Lab) -> bool {
    let out = Command::new("ip")
        .args([
            "-n",
            &lab.probe.netns,
            "-d",
            "link",
            "show",
            &lab.probe.iface,
        ])
        .output()
        .expect("ip link");
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

fn xdp_exact_counts_on_1_2_4_queues() {
    for q in [1u16, 2, 4] {
        let lab = lab(q);
        let dir = tempdir();
        let qs = q.to_string();
        let (s, file) = capture_run(
            &lab,
            (dir.path(), "x"),
            &["--backend", "af_xdp", "--queues", &qs],
            &[&["--count", "20000", "--flows", "32"]],
        );
        assert_eq!(num(&s, "captured"), 20000, "{q} queues: {s}");
        assert_eq!(
            num(&s, "dropped_kernel") + num(&s, "dropped_pool") + num(&s, "filtered"),
            0,
            "{s}"
        );
        assert_eq!(
            check_sequences(&file, 20000),
            (20000, 20000, 0, 0),
            "{q} queues"
        );
        let per: Vec<u64> = s["queues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| num(x, "captured"))
            .collect();
        assert_eq!(per.iter().sum::<u64>(), 20000);
        if q > 1 {
            assert!(
                per.iter().filter(|&&n| n > 0).count() > 1,
                "flows did not spread over queues: {per:?}"
            );
        }
        assert!(!xdp_attached(&lab), "the XDP program outlived the capture");
    }
}

/// The frames of a file as sorted lines of (length, source port, payload) from tshark.
fn frames_by_tshark(file: &Path) -> Vec<String> {
    let fields = ["frame.len", "udp.srcport", "udp.dstport", "data.data"];
    let mut lines: Vec<String> = crate::common::tshark_fields(file, &fields)
        .iter()
        .map(|l| without_send_time(l))
        .collect();
    lines.sort();
    lines
}

/// A tshark line (`len, ports, payload hex`) with the generator's send time blanked: two runs
/// of the same traffic send the same frames at different times (PCG2 tags, payload bytes
/// 16..22).
fn without_send_time(line: &str) -> String {
    let (head, data) = line.rsplit_once('\t').unwrap_or((line, ""));
    if data.starts_with("50434732") && data.len() >= 44 {
        format!("{head}\t{}{}{}", &data[..32], "-".repeat(12), &data[44..])
    } else {
        line.to_string()
    }
}

fn xdp_file_holds_the_same_frames_as_af_packet() {
    let lab = lab(2);
    let dir = tempdir();
    let traffic: &[&str] = &[
        "--count", "5000", "--flows", "8", "--size", "imix", "--gen-id", "7", "--seed", "3",
    ];
    let mut files = Vec::new();
    for backend in ["af_packet", "af_xdp"] {
        let (s, file) = capture_run(
            &lab,
            (dir.path(), backend),
            &["--backend", backend, "--queues", "2"],
            &[traffic],
        );
        assert_eq!(num(&s, "captured"), 5000, "{backend}: {s}");
        files.push(file);
    }
    let (a, b) = (frames_by_tshark(&files[0]), frames_by_tshark(&files[1]));
    assert_eq!(a.len(), 5000);
    assert!(a == b, "AF_PACKET and AF_XDP files differ");
}

fn xdp_filters_agree_with_af_packet() {
    let lab = lab(2);
    let dir = tempdir();
    let traffic: [&[&str]; 2] = [
        &["--count", "3000", "--dst-port", "53", "--gen-id", "1"],
        &[
            "--count",
            "4000",
            "--dst-port",
            "9",
            "--gen-id",
            "2",
            "--flows",
            "4",
        ],
    ];
    let mut captured = Vec::new();
    for backend in ["af_packet", "af_xdp"] {
        let (s, _) = capture_run(
            &lab,
            (dir.path(), backend),
            &[
                "--backend",
                backend,
                "--queues",
                "2",
                "udp",
                "and",
                "dst",
                "port",
                "53",
            ],
            &traffic,
        );
        assert_eq!(
            num(&s, "captured") + num(&s, "filtered"),
            7000,
            "{backend}: every frame accounted for: {s}"
        );
        assert_eq!(
            num(&s, "dropped_kernel") + num(&s, "dropped_pool"),
            0,
            "{s}"
        );
        captured.push(num(&s, "captured"));
        if backend == "af_xdp" {
            let per: u64 = s["queues"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| num(x, "filtered"))
                .sum();
            assert_eq!(
                per, 4000,
                "AF_XDP filters in user space, so each queue counts its own: {s}"
            );
        }
    }
    assert_eq!(captured, vec![3000, 3000]);
}

/// Runs `poolcap capture -i prb0 --backend af_xdp ARGS` in the lab's probe host: its exit
/// code and stderr.
fn capture_af_xdp(lab: &Lab, args: &[&str]) -> (Option<i32>, String) {
    let out = netns_command(&lab.probe.netns, bin())
        .args(["capture", "-i", &lab.probe.iface, "--backend", "af_xdp"])
        .args(args)
        .output()
        .expect("run poolcap");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn xdp_errors_are_clear() {
    let lab = lab(2);
    let iface = lab.probe.iface.clone();
    let (code, err) = capture_af_xdp(&lab, &["--queues", "4", "-c", "1"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("2 receive queues") && err.lines().count() == 1,
        "{err}"
    );
    let (code, err) = capture_af_xdp(&lab, &["--zero-copy", "required", "-c", "1"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("zero-copy"), "{err}");
    assert!(
        !xdp_attached(&lab),
        "a failed start left the XDP program attached"
    );
    // Somebody else's program is reported, not replaced, unless --force.
    let obj = concat!(env!("CARGO_MANIFEST_DIR"), "/../sys/bpf/xsk_redirect.o");
    let st = Command::new("ip")
        .args([
            "-n",
            &lab.probe.netns,
            "link",
            "set",
            "dev",
            &iface,
            "xdpgeneric",
            "obj",
            obj,
            // The program without the receive time: it loads on every kernel (see
            // `poolcap_sys::xdp::XdpRedirect::attach`).
            "program",
            "poolcap_xsk_plain",
        ])
        .status()
        .expect("ip");
    assert!(st.success());
    let (code, err) = capture_af_xdp(&lab, &["-c", "1"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("already attached") && err.contains("--force"),
        "{err}"
    );
    assert!(xdp_attached(&lab), "the foreign program must stay");
    let (code, err) = capture_af_xdp(&lab, &["--force", "--duration", "300ms", "-q"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        !xdp_attached(&lab),
        "after --force and exit no program is left"
    );
}

pub(crate) fn trials() -> Vec<Trial> {
    vec![
        trial(
            "xdp::exact_counts_on_1_2_4_queues",
            xdp_exact_counts_on_1_2_4_queues,
        ),
        trial(
            "xdp::file_holds_the_same_frames_as_af_packet",
            xdp_file_holds_the_same_frames_as_af_packet,
        ),
        trial(
            "xdp::filters_agree_with_af_packet",
            xdp_filters_agree_with_af_packet,
        ),
        trial("xdp::errors_are_clear", xdp_errors_are_clear),
    ]
}
