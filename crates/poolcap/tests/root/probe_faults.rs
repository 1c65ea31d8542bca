//! The probe under faults: links planted where it writes, control sockets left behind or
//! held open by silent clients, a full report disk, files whose time jumps or runs back.
//! Each test states what must still hold: no file written through a link, no period or stop
//! held up, every packet counted once and every unwritten report counted.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use libtest_mimic::Trial;

use crate::common::{
    bin, lab, netns_command, num, path_str as s, start_probe, tempdir, trial, Lab, SmallFs,
};
use crate::probe::{records, start_probe_with_ctl, stop_probe, write, write_pcap};

pub(crate) fn trials() -> Vec<Trial> {
    let t = |name: &'static str, f: fn()| trial(&format!("probe_faults::{name}"), f);
    vec![
        t(
            "output_files_are_never_written_through_a_link",
            output_files_are_never_written_through_a_link,
        ),
        t(
            "a_dead_ctl_socket_is_replaced_a_live_one_refused",
            a_dead_ctl_socket_is_replaced_a_live_one_refused,
        ),
        t(
            "silent_ctl_clients_hold_up_no_command_or_stop",
            silent_ctl_clients_hold_up_no_command_or_stop,
        ),
        t(
            "a_full_report_disk_keeps_whole_lines_and_counts_the_rest",
            a_full_report_disk_keeps_whole_lines_and_counts_the_rest,
        ),
        t(
            "a_live_probe_goes_on_past_a_full_report_disk",
            a_live_probe_goes_on_past_a_full_report_disk,
        ),
        t(
            "silent_runs_say_why_and_bad_names_are_refused",
            silent_runs_say_why_and_bad_names_are_refused,
        ),
        t(
            "gaps_in_a_file_cost_no_wait_and_years_are_one_record",
            gaps_in_a_file_cost_no_wait_and_years_are_one_record,
        ),
        t(
            "a_file_whose_time_steps_back_counts_late_packets",
            a_file_whose_time_steps_back_counts_late_packets,
        ),
        t(
            "each_periods_accounting_covers_its_rules_packets_under_ctl",
            each_periods_accounting_covers_its_rules_packets_under_ctl,
        ),
        t(
            "idle_flows_rules_cost_no_more_memory_than_count_rules",
            idle_flows_rules_cost_no_more_memory_than_count_rules,
        ),
        t(
            "predict_counts_each_flows_rules_table_update",
            predict_counts_each_flows_rules_table_update,
        ),
    ]
}

const MS: u64 = 1_000_000;
const T0: u64 = 1_700_000_000_000_000_000;

/// A UDP frame from 10.9.0.1:`sport` to 10.9.0.2:9.
fn udp(sport: u16) -> Vec<u8> {
    let mut v = Vec::new();
    etherparse::PacketBuilder::ethernet2(crate::probe::MAC_A, crate::probe::MAC_B)
        .ipv4([10, 9, 0, 1], [10, 9, 0, 2], 64)
        .udp(sport, 9)
        .write(&mut v, &[0u8; 18])
        .expect("frame");
    v
}

/// Writes `packets` (timestamp in ns, frame) as a pcapng file, in the order given.
fn write_at(path: &Path, packets: &[(u64, Vec<u8>)]) {
    let out = std::fs::File::create(path).expect("create capture");
    let mut w =
        poolcap_format::CaptureWriter::new(out, poolcap_format::FileFormat::Pcapng, 65535, "t")
            .expect("header");
    for (ts, f) in packets {
        w.write_packet(*ts, f, f.len() as u32).expect("packet");
    }
    w.finish(None).expect("finish");
}

const CONFIG: &str = "period = \"1s\"\n\
    [[rule]]\nname = \"all\"\nfilter = \"\"\nactions = [\"count\"]\n";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `probe -i prb0 -q -c CFG --duration DURATION`: a probe of the lab's probe interface
/// that ends by itself.
fn live_probe<'a>(cfg: &'a Path, duration: &'a str) -> [&'a str; 8] {
    [
        "probe",
        "-i",
        "prb0",
        "-q",
        "-c",
        s(cfg),
        "--duration",
        duration,
    ]
}

/// Runs `poolcap probe -i prb0 -q -c CFG --duration 1s ARGS` in the lab's probe host: its
/// exit code and stderr.
fn probe_for_1s(lab: &Lab, cfg: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = netns_command(&lab.probe.netns, bin())
        .args(live_probe(cfg, "1s"))
        .args(args)
        .output()
        .expect("probe");
    (out.status.code(), text(&out.stderr))
}

/// Waits for `child` to exit; kills it and fails after `guard` (a hang guard, not a timing
/// claim). Returns its exit code and stderr.
fn wait_guarded(mut child: std::process::Child, guard: Duration, what: &str) -> (i32, String) {
    let deadline = Instant::now() + guard;
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return (st.code().unwrap_or(-1), err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hang guard: {what} still running after {guard:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `--report`, `calibrate -o` and `man --out-dir` refuse a symbolic link where they would
/// create a file, before doing anything else, and leave the link's target as it was.
fn output_files_are_never_written_through_a_link() {
    let lab = lab(1);
    let dir = tempdir();
    let cfg = write(dir.path(), "probe.toml", CONFIG);
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"secret").expect("victim");
    let link = dir.path().join("r.jsonl");
    std::os::unix::fs::symlink(&victim, &link).expect("symlink");
    let trace = dir.path().join("t.pcap");
    write_pcap(&trace, &crate::probe::real_looking_frames());
    let runs: Vec<(Vec<&str>, bool)> = vec![
        (
            [&live_probe(&cfg, "500ms")[..], &["--report", s(&link)]].concat(),
            true,
        ),
        (
            vec![
                "probe",
                "-r",
                s(&trace),
                "-q",
                "-c",
                s(&cfg),
                "--report",
                s(&link),
            ],
            false,
        ),
        // Refused at once, not after the minutes of measuring.
        (vec!["calibrate", "-o", s(&link), "--no-peers"], false),
    ];
    for (args, in_lab) in runs {
        let mut cmd = if in_lab {
            netns_command(&lab.probe.netns, bin())
        } else {
            Command::new(bin())
        };
        let child = cmd
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("poolcap");
        let (code, err) = wait_guarded(child, Duration::from_secs(30), &format!("{args:?}"));
        assert_ne!(code, 0, "{args:?} wrote through a link: {err}");
        assert!(err.contains("symbolic link"), "{args:?}: {err}");
        assert_eq!(
            std::fs::read(&victim).expect("victim"),
            b"secret",
            "{args:?} wrote through the link"
        );
    }
    let pages = dir.path().join("man");
    std::fs::create_dir(&pages).expect("man dir");
    std::os::unix::fs::symlink(&victim, pages.join("poolcap.1")).expect("symlink");
    let out = Command::new(bin())
        .args(["man", "--out-dir", s(&pages)])
        .output()
        .expect("poolcap man");
    assert!(!out.status.success(), "man wrote through a link");
    assert!(
        text(&out.stderr).contains("symbolic link"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read(&victim).expect("victim"), b"secret");
}

/// A probe killed with SIGKILL, or one running as `-Z`'s user (which cannot remove its
/// socket from a root-owned directory), leaves its socket behind: the next probe replaces
/// it. A socket a probe listens on, and a file that is no socket, are refused.
fn a_dead_ctl_socket_is_replaced_a_live_one_refused() {
    let lab = lab(1);
    let dir = tempdir();
    let cfg = write(dir.path(), "probe.toml", CONFIG);
    let socket = dir.path().join("ctl.sock");
    let probe = |extra: &[&str]| {
        let mut args = vec!["-c", s(&cfg), "--ctl", s(&socket)];
        args.extend_from_slice(extra);
        start_probe(&lab, &args)
    };
    let status = || {
        let out = Command::new(bin())
            .args(["ctl", s(&socket), "status"])
            .output()
            .expect("ctl");
        assert!(out.status.success(), "status: {}", text(&out.stderr));
    };

    let mut first = probe(&[]);
    status();
    first.child.kill().expect("SIGKILL");
    let _ = first.child.wait();
    assert!(socket.exists(), "SIGKILL leaves the socket");
    let second = probe(&["-Z", "nobody"]);
    status();
    // A probe on the same socket, refused with `why`.
    let refused = |why: &str| {
        let (code, err) = probe_for_1s(&lab, &cfg, &["--ctl", s(&socket)]);
        assert_ne!(code, Some(0), "{err}");
        assert!(err.contains(why), "want `{why}`: {err}");
    };
    // While it runs, another probe on the same socket is refused.
    refused("another probe is listening");
    stop_probe(second);
    assert!(
        socket.exists(),
        "-Z's user cannot remove a socket from a root-owned directory"
    );
    let third = probe(&[]);
    status();
    stop_probe(third);
    assert!(!socket.exists(), "a root probe removes its socket");

    std::fs::write(&socket, b"not a socket").expect("file");
    refused("not a socket");
    assert_eq!(std::fs::read(&socket).expect("file"), b"not a socket");
}

/// Twenty clients connect to the control socket and say nothing: `ctl status` still
/// answers, periods keep being reported, and SIGINT still stops the probe (hang guards:
/// served one at a time, each silent client held the probe for 2 s).
fn silent_ctl_clients_hold_up_no_command_or_stop() {
    let lab = lab(1);
    let dir = tempdir();
    let cfg = write(
        dir.path(),
        "probe.toml",
        &CONFIG.replace("period = \"1s\"", "period = \"200ms\""),
    );
    let (bg, report, socket) = start_probe_with_ctl(&lab, dir.path(), &cfg, &[]);
    let silent: Vec<UnixStream> = (0..20)
        .map(|_| UnixStream::connect(&socket).expect("connect"))
        .collect();
    let child = Command::new(bin())
        .args(["ctl", "--timeout", "60s", s(&socket), "status"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ctl");
    let (code, err) = wait_guarded(child, Duration::from_secs(10), "ctl status");
    assert_eq!(code, 0, "{err}");
    let silent_more: Vec<UnixStream> = (0..20)
        .map(|_| UnixStream::connect(&socket).expect("connect"))
        .collect();
    let pid = bg.child.id();
    let _ = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut bg = bg;
    while bg.child.try_wait().expect("try_wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "hang guard: SIGINT did not stop the probe within 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, stderr) = bg.wait();
    assert_eq!(code, Some(0), "{stderr}");
    drop((silent, silent_more));
    let recs = records(&report);
    assert!(
        recs.last().is_some_and(|r| r["last"] == true),
        "final report written"
    );
}

/// `probe -r` with its report on a 64 KiB file system: ten 100 ms periods of 60 flows each
/// (some 15 KiB of JSON a period), then one of a single packet. The periods that fit are
/// in the file, whole; the first that does not is cut back out, so the file ends with a
/// whole line; the probe goes on, writes the small last period that still fits, whose lines
/// say how many periods are missing, and exits 1 saying how many of how many it could not
/// write.
fn a_full_report_disk_keeps_whole_lines_and_counts_the_rest() {
    let dir = tempdir();
    let fs = SmallFs::mount("64k");
    let cfg = write(
        dir.path(),
        "probe.toml",
        "period = \"100ms\"\n\
         [[rule]]\nname = \"flows\"\nfilter = \"udp\"\nactions = [\"flows\"]\n\
         [[rule]]\nname = \"all\"\nfilter = \"\"\nactions = [\"count\"]\n",
    );
    let mut packets = Vec::new();
    for p in 0..10u64 {
        for i in 0..60u64 {
            packets.push((T0 + p * 100 * MS + i * MS, udp(1000 + i as u16)));
        }
    }
    packets.push((T0 + 1000 * MS + MS, udp(7)));
    let trace = dir.path().join("t.pcapng");
    write_at(&trace, &packets);
    let report = fs.path("r.jsonl");
    let out = Command::new(bin())
        .args([
            "probe",
            "-q",
            "-c",
            s(&cfg),
            "-r",
            s(&trace),
            "--report",
            s(&report),
        ])
        .output()
        .expect("probe -r");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let body = std::fs::read_to_string(&report).expect("report");
    assert!(body.ends_with('\n'), "the file ends with a whole line");
    let recs = records(&report);
    assert_eq!(
        recs.len() % 2,
        0,
        "whole periods only: {} lines",
        recs.len()
    );
    let written = recs.len() as u64 / 2;
    assert!(
        (1..11).contains(&written),
        "the disk holds some periods, not all: {written}"
    );
    let last = &recs[recs.len() - 1];
    assert_eq!(last["last"], true, "the small last period fits: {last}");
    assert_eq!(num(last, "packets"), 1);
    let missing = num(last, "periods_unwritten");
    assert_eq!(written + missing, 11, "every period written or counted");
    for r in &recs[..recs.len() - 2] {
        assert_eq!(num(r, "packets"), 60, "{r}");
    }
    assert!(
        err.contains(&format!(
            "{missing} of 11 periods could not be written to {}",
            s(&report)
        )) && err.contains("No space left on device"),
        "{err}"
    );
    // The capture's own accounting still covers every packet.
    assert!(err.contains("601 packets captured"), "{err}");
}

/// Small ones: a run that will export or report nothing says why in one line at start
/// (no rules; `--ipfix` and no flows rule), and survives a stderr whose reader has gone;
/// a Kafka topic Kafka refuses and `forward --drop ''` (which would drop everything) are
/// refused before anything starts; `predict --count 0` is refused, not `NaN%`.
fn silent_runs_say_why_and_bad_names_are_refused() {
    use std::io::{BufRead, BufReader};
    let lab = lab(1);
    let dir = tempdir();
    let none = write(dir.path(), "none.toml", "period = \"1s\"\n");
    let trace = dir.path().join("t.pcap");
    write_pcap(&trace, &crate::probe::real_looking_frames());
    let out = Command::new(bin())
        .args(["probe", "-q", "-r", s(&trace), "-c", s(&none)])
        .output()
        .expect("probe");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("has no rules: reports hold only the capture's accounting"),
        "{}",
        text(&out.stderr)
    );

    // --ipfix with count rules only, stderr read to the first line and then closed.
    let cfg = write(dir.path(), "probe.toml", CONFIG);
    let mut child = netns_command(&lab.probe.netns, bin())
        .args(live_probe(&cfg, "1500ms"))
        .args(["--ipfix", "127.0.0.1:4739"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("probe");
    let mut err = BufReader::new(child.stderr.take().expect("stderr"));
    let mut first = String::new();
    err.read_line(&mut first).expect("first line");
    assert!(
        first.starts_with("ipfix: no rule in")
            && first.contains("no flow records will be exported"),
        "{first}"
    );
    drop(err);
    let (code, _) = wait_guarded(child, Duration::from_secs(30), "probe --ipfix");
    assert_eq!(
        code, 0,
        "a closed stderr must not end the probe (101: a panic)"
    );

    for (topic, why) in [("a b", "` ` is not allowed"), ("", "1 to 249")] {
        let kafka = ["--kafka", "127.0.0.1:9092", "--topic", topic];
        let (code, err) = probe_for_1s(&lab, &cfg, &kafka);
        assert_eq!(code, Some(2), "topic {topic:?}: {err}");
        assert!(
            err.contains("--topic") && err.contains(why),
            "{topic:?}: {err}"
        );
    }
    for empty in ["", "  "] {
        let out = netns_command(&lab.probe.netns, bin())
            .args(["forward", "-i", "prb0", "-o", "prb0", "--drop", empty])
            .output()
            .expect("forward");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--drop {empty:?}: {err}");
        assert!(err.contains("matches every frame"), "{err}");
    }
    // A profile path that cannot be written fails before the minutes of measuring.
    let child = Command::new(bin())
        .args([
            "calibrate",
            "--no-peers",
            "-o",
            "/proc/self/nope/profile.json",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("calibrate");
    let (code, err) = wait_guarded(child, Duration::from_secs(30), "calibrate -o");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/proc/self/nope/profile.json"), "{err}");
    let out = Command::new(bin())
        .args(["predict", "--rate", "100k", "--size", "64", "--count", "0"])
        .output()
        .expect("predict");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(!text(&out.stdout).contains("NaN"));
}

/// `probe -r` with `--report`: the records of `trace` under a one-rule ("all") configuration
/// with `period`, and stderr; fails after `guard` (hang guard).
fn probe_trace(trace: &Path, period: &str, guard: Duration) -> (Vec<serde_json::Value>, String) {
    let dir = tempdir();
    let cfg = write(
        dir.path(),
        "probe.toml",
        &format!("period = \"{period}\"\n[[rule]]\nname = \"all\"\nfilter = \"\"\nactions = [\"count\"]\n"),
    );
    let report = dir.path().join("r.jsonl");
    let child = Command::new(bin())
        .args([
            "probe",
            "-q",
            "-c",
            s(&cfg),
            "-r",
            s(trace),
            "--report",
            s(&report),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("probe -r");
    let (code, err) = wait_guarded(child, guard, "probe -r");
    assert_eq!(code, 0, "{err}");
    (records(&report), err)
}

/// Nanoseconds since the epoch of an RFC 3339 time in a record.
fn ns_of(r: &serde_json::Value, key: &str) -> u64 {
    let t = humantime::parse_rfc3339(r[key].as_str().expect("time")).expect("rfc3339");
    t.duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as u64
}

/// Periods tile the time: each starts where the one before ended and none ends before it
/// starts.
fn assert_contiguous(recs: &[serde_json::Value]) {
    for (i, r) in recs.iter().enumerate() {
        assert!(ns_of(r, "period_end") >= ns_of(r, "period_start"), "{r}");
        if i > 0 {
            assert_eq!(r["period_start"], recs[i - 1]["period_end"], "record {i}");
        }
    }
}

/// Each empty period of a file cost a round through the workers (some 20 ms): a 600 s gap
/// with 100 ms periods took 121 s, a gap of years never ended. Now a gap of 30 periods gives
/// 30 empty records at once, and gaps of 600 s and of three years one record each, with
/// `empty_periods` and a line on stderr; every packet is counted (hang guard: 60 s).
fn gaps_in_a_file_cost_no_wait_and_years_are_one_record() {
    let dir = tempdir();
    const S: u64 = 1_000_000_000;
    const YEARS: u64 = 3 * 365 * 24 * 3600 * S;
    let mut packets = Vec::new();
    let mut burst = |at: u64| {
        for i in 0..5 {
            packets.push((at + i * MS, udp(1000)));
        }
    };
    burst(T0);
    burst(T0 + 3 * S + 50 * MS); // 29 empty periods between
    burst(T0 + 603 * S + 50 * MS); // 5999 between
    burst(T0 + 603 * S + 50 * MS + YEARS);
    let trace = dir.path().join("gaps.pcapng");
    write_at(&trace, &packets);
    let (recs, err) = probe_trace(&trace, "100ms", Duration::from_secs(60));
    assert_contiguous(&recs);
    let total: u64 = recs.iter().map(|r| num(r, "packets")).sum();
    assert_eq!(total, 20, "every packet once");
    let with = |n: u64| recs.iter().filter(|r| num(r, "packets") == n).count();
    assert_eq!(with(5), 4, "the four bursts");
    let merged: Vec<u64> = recs
        .iter()
        .filter_map(|r| r.get("empty_periods").and_then(serde_json::Value::as_u64))
        .collect();
    assert_eq!(merged, vec![5999, YEARS / (100 * MS) - 1], "{err}");
    // The short gap: its empty periods one by one.
    assert_eq!(with(0), 29 + 2, "{recs:?}");
    assert_eq!(
        err.matches("empty periods reported as one").count(),
        2,
        "{err}"
    );
}

/// Three recordings appended in the order 100 s, 200 s, 150 s (as `mergecap -a` does):
/// the file is read in its order, so a packet stamped before the open period is counted
/// in that period and as `late` there. Every period's count equals that reading of the
/// file, late packets included, and no period ends before it starts (the last one did).
fn a_file_whose_time_steps_back_counts_late_packets() {
    let dir = tempdir();
    const S: u64 = 1_000_000_000;
    let part = |from: u64| -> Vec<(u64, Vec<u8>)> {
        (0..40)
            .map(|i| (T0 + from * S + i * 250 * MS, udp(2000)))
            .collect()
    };
    let mut packets = part(100);
    packets.extend(part(200));
    packets.extend(part(150));
    let trace = dir.path().join("appended.pcapng");
    write_at(&trace, &packets);
    let (recs, _) = probe_trace(&trace, "1s", Duration::from_secs(60));
    assert_contiguous(&recs);
    // The definition, applied to the file in its order: periods of 1 s from the first
    // packet; a packet at or past the open period's end closes it (and any empty ones).
    let mut want: Vec<(u64, u64)> = vec![(0, 0)];
    let (mut start, period) = (packets[0].0, S);
    for (ts, _) in &packets {
        while *ts >= start + period {
            start += period;
            want.push((0, 0));
        }
        let open = want.last_mut().expect("open period");
        open.0 += 1;
        if *ts < start {
            open.1 += 1;
        }
    }
    let got: Vec<(u64, u64)> = recs
        .iter()
        .map(|r| {
            (
                num(r, "packets"),
                r.get("late").map_or(0, |l| l.as_u64().unwrap()),
            )
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        want.last(),
        Some(&(4 + 40, 40)),
        "the 150 s part is late, in the last period"
    );
}

/// Rules switched by `ctl` forty times while traffic runs (each switch ends a period): in
/// every period, `accounting.captured` and `bytes` equal the catch-all rule's packets and
/// bytes. The accounting used to be the capture counters read at the switch, which run ahead
/// of the workers by what the pools hold (2,218 against 2,800 in one period), so 119 of 427
/// periods differed while the totals agreed.
fn each_periods_accounting_covers_its_rules_packets_under_ctl() {
    let lab = lab(2);
    let dir = tempdir();
    let cfg = write(
        dir.path(),
        "probe.toml",
        "period = \"1h\"\n\
         [[rule]]\nname = \"all\"\nfilter = \"\"\nactions = [\"count\"]\n\
         [[rule]]\nname = \"p9\"\nfilter = \"udp dst port 9\"\nactions = [\"count\"]\n",
    );
    let queues = ["--queues", "2", "--load", "2000"];
    let (bg, report, socket) = start_probe_with_ctl(&lab, dir.path(), &cfg, &queues);
    let sender = netns_command(&lab.sender.netns, bin())
        .args([
            "gen",
            "-i",
            &lab.sender.iface,
            "--count",
            "60000",
            "--rate",
            "20k",
        ])
        .args(["--flows", "8"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("gen");
    for i in 0..40 {
        let verb = if i % 2 == 0 { "disable" } else { "enable" };
        let out = Command::new(bin())
            .args(["ctl", s(&socket), "rule", verb, "p9"])
            .output()
            .expect("ctl");
        assert!(out.status.success(), "{}", text(&out.stderr));
        std::thread::sleep(Duration::from_millis(60));
    }
    let (code, _) = wait_guarded(sender, Duration::from_secs(60), "gen");
    assert_eq!(code, 0);
    stop_probe(bg);
    let recs = records(&report);
    let all: Vec<&serde_json::Value> = recs.iter().filter(|r| r["rule"] == "all").collect();
    assert!(all.len() >= 41, "a period per switch: {}", all.len());
    let differ: Vec<String> = all
        .iter()
        .filter(|r| {
            let acc = &r["accounting"];
            num(acc, "captured") != num(r, "packets") || num(acc, "bytes") != num(r, "bytes")
        })
        .map(|r| {
            format!(
                "{} captured {} / all {}",
                r["period_start"], r["accounting"]["captured"], r["packets"]
            )
        })
        .collect();
    assert!(
        differ.is_empty(),
        "{} of {} periods: {differ:?}",
        differ.len(),
        all.len()
    );
    let total: u64 = all.iter().map(|r| num(r, "packets")).sum();
    assert!(total > 0, "traffic was captured");
}

/// Resident memory of process `pid`, bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    kb << 10
}

/// 1,000 `flows` rules and no traffic hold about what 1,000 count rules hold: flow tables
/// grow with the flows seen. Sized for the cap (65,536 flows) up front, 5,000 idle flows
/// rules sat at 3.4 GB against 108 MB for count rules. Measured after a period switch, which
/// makes every worker's tables anew.
fn idle_flows_rules_cost_no_more_memory_than_count_rules() {
    let lab = lab(1);
    let dir = tempdir();
    let resident = |action: &str| {
        let mut text = String::from("period = \"200ms\"\n");
        for i in 0..1000 {
            text += &format!(
                "[[rule]]\nname = \"r{i}\"\nfilter = \"udp port {}\"\nactions = [\"{action}\"]\n",
                1000 + i
            );
        }
        let cfg = write(dir.path(), &format!("{action}.toml"), &text);
        let bg = start_probe(&lab, &["-c", s(&cfg), "--workers", "2"]);
        std::thread::sleep(Duration::from_millis(700));
        let bytes = rss(bg.child.id());
        stop_probe(bg);
        bytes
    };
    let count = resident("count");
    let flows = resident("flows");
    assert!(
        flows < count + (64 << 20),
        "1000 idle flows rules: {} MiB resident, count rules {} MiB",
        flows >> 20,
        count >> 20
    );
}

/// 5,000 `flows` rules over all IP traffic lost 38-48% at 20k pps while `predict --probe`
/// said 0%: the model had a rule's filter cost but no flow-table update. With the built-in
/// profile, the same configuration now predicts loss, more than as many count rules, and
/// says it takes every flows rule to match.
fn predict_counts_each_flows_rules_table_update() {
    let dir = tempdir();
    let predict = |action: &str| {
        let mut config = String::from("period = \"1s\"\n");
        for i in 0..5000 {
            config +=
                &format!("[[rule]]\nname = \"r{i}\"\nfilter = \"ip\"\nactions = [\"{action}\"]\n");
        }
        let cfg = write(dir.path(), &format!("{action}.toml"), &config);
        let out = Command::new(bin())
            .env("POOLCAP_PROFILE", dir.path().join("none.json"))
            .args([
                "predict",
                "--rate",
                "20k",
                "--size",
                "64",
                "--probe",
                s(&cfg),
            ])
            .output()
            .expect("predict");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let loss = stdout
            .lines()
            .find_map(|l| l.strip_prefix("predicted loss "))
            .and_then(|l| l.split([' ', '%']).next())
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no loss in {stdout}"));
        (loss, stdout)
    };
    let (flows, said) = predict("flows");
    let (count, _) = predict("count");
    assert!(
        flows > 30.0 && flows > count,
        "flows {flows}%, count {count}%: {said}"
    );
    assert!(
        said.contains("4999 flows rules beyond the first are taken to update"),
        "{said}"
    );
}

/// The live form of the full report disk: 4,096 flows a period into a 64 KiB file system
/// ended the capture after the first period with a cut line. Now the probe runs until
/// SIGINT, captures every frame, the file ends with a whole line, and the exit (1) says how
/// many periods were not written.
fn a_live_probe_goes_on_past_a_full_report_disk() {
    let lab = lab(1);
    let dir = tempdir();
    let fs = SmallFs::mount("64k");
    let cfg = write(
        dir.path(),
        "probe.toml",
        "period = \"300ms\"\n[[rule]]\nname = \"flows\"\nfilter = \"udp\"\nactions = [\"flows\"]\n",
    );
    let report = fs.path("r.jsonl");
    let bg = start_probe(&lab, &["-c", s(&cfg), "--report", s(&report)]);
    let g = crate::common::gen(
        &lab,
        &["--count", "40000", "--rate", "20k", "--flows", "4096"],
    );
    std::thread::sleep(Duration::from_millis(400));
    let (code, stderr) = bg.stop("INT");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains("periods could not be written to") && stderr.contains("No space left"),
        "{stderr}"
    );
    let term = |what: &str| -> u64 {
        stderr
            .lines()
            .find_map(|l| {
                l.split_once(what)
                    .map(|(n, _)| n.trim().parse().expect("count"))
            })
            .unwrap_or_else(|| panic!("no `{what}` in {stderr}"))
    };
    let captured = term(" packets captured");
    assert_eq!(
        captured + term(" packets dropped by kernel") + term(" packets dropped by pool"),
        crate::common::on_wire(&g),
        "the capture went on after the disk filled: {stderr}"
    );
    let body = std::fs::read_to_string(&report).expect("report");
    assert!(body.is_empty() || body.ends_with('\n'), "a cut line");
    records(&report);
}
