//! Capture engine tests in a lab: every trial builds its own lab, runs `poolcap capture` on
//! the probe's `prb0` while `poolcap gen` sends numbered frames from the sender, and checks the
//! file against independent readers (tshark, tcpdump) and the engine's accounting
//! (`sent = captured + dropped_kernel + dropped_pool + filtered`).
//!
//! The capture is always stopped after the generator has returned (and a short settle), since
//! after SIGINT the engine only drains for about 20 ms.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use libtest_mimic::Trial;

use crate::common::{
    self, accounted, capture, check_sequences, gen, lab, num, on_wire, path_str, poolcap_in, stats,
    tcpdump_count, tempdir, trial, tshark_count, Background, Lab, SmallFs,
};

pub(crate) fn trials() -> Vec<Trial> {
    // Named like the default harness names tests of module `capture`, so that
    // `cargo test --test root -- capture` selects all of them.
    let t = |name: &'static str, f: fn()| trial(&format!("capture::{name}"), f);
    vec![
        t(
            "capture_formats_exact_and_readable",
            capture_formats_exact_and_readable,
        ),
        t(
            "snaplen_keeps_original_length",
            snaplen_keeps_original_length,
        ),
        t(
            "filter_matches_tcpdump_offline",
            filter_matches_tcpdump_offline,
        ),
        t("overload_drops_add_up", overload_drops_add_up),
        t(
            "compressed_capture_reads_back",
            compressed_capture_reads_back,
        ),
        t(
            "queues_2_and_4_capture_each_packet_once",
            queues_2_and_4_capture_each_packet_once,
        ),
        t("count_limit_writes_exactly_n", count_limit_writes_exactly_n),
        t(
            "stdout_stream_reads_with_tcpdump",
            stdout_stream_reads_with_tcpdump,
        ),
        t("bad_input_errors", bad_input_errors),
        t(
            "interrupted_capture_file_is_valid",
            interrupted_capture_file_is_valid,
        ),
        t("write_error_stops_cleanly", write_error_stops_cleanly),
    ]
}

// ---------------------------------------------------------------------------------------------
// Helpers local to the capture tests.

/// Time for the last frames the generator handed to the kernel to reach the capture ring.
const SETTLE: Duration = Duration::from_millis(300);

/// Starts `poolcap capture ARGS -w FILE --stats-json SJ`.
fn capture_with_stats(lab: &Lab, args: &[&str], file: &Path, sj: &Path) -> Background {
    let out = ["-w", path_str(file), "--stats-json", path_str(sj)];
    capture(lab, &[args, &out[..]].concat())
}

fn assert_no_panic(stderr: &str, what: &str) {
    assert!(!stderr.contains("panicked"), "{what} panicked:\n{stderr}");
}

/// Stops a capture with SIGINT after the generator is done; it must exit 0.
fn stop_ok(bg: Background, what: &str) -> String {
    std::thread::sleep(SETTLE);
    let (code, stderr) = bg.stop("INT");
    assert_eq!(
        code,
        Some(0),
        "{what}: exit code after SIGINT; stderr:\n{stderr}"
    );
    assert_no_panic(&stderr, what);
    stderr
}

/// Waits up to `timeout` for a process that should exit on its own; stops it and panics if it
/// does not.
fn wait_exit(mut bg: Background, timeout: Duration, what: &str) -> (Option<i32>, String) {
    let deadline = Instant::now() + timeout;
    loop {
        match bg.child.try_wait() {
            Ok(Some(_)) => return bg.wait(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let (code, stderr) = bg.stop("INT");
                panic!("{what} did not exit within {timeout:?} (SIGINT gave {code:?}); stderr:\n{stderr}");
            }
            Err(e) => panic!("{what}: wait: {e}"),
        }
    }
}

/// Reads a capture file with poolcap's reader.
fn read(file: &Path) -> poolcap_format::CaptureFile {
    poolcap_format::read_file(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()))
}

/// Generator reports of a file: (reports, untagged frames).
fn seq_reports(file: &Path) -> (Vec<poolcap::seqcheck::GenReport>, u64) {
    let mut c = poolcap::seqcheck::SeqChecker::new();
    for p in &read(file).packets {
        c.observe(&p.data);
    }
    (c.reports(None), c.untagged())
}

/// Asserts the file's timestamps never go backwards (the writer merges queues in order).
fn assert_time_ordered(file: &Path) {
    let f = read(file);
    let back = f
        .packets
        .windows(2)
        .enumerate()
        .find(|(_, w)| w[1].ts_ns < w[0].ts_ns);
    if let Some((i, w)) = back {
        panic!(
            "{}: packet {} ({} ns) is earlier than packet {} ({} ns)",
            file.display(),
            i + 2,
            w[1].ts_ns,
            i + 1,
            w[0].ts_ns
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Trials.

fn capture_formats_exact_and_readable() {
    let lab = lab(1);
    let dir = tempdir();
    for (i, format) in ["pcapng", "pcap", "pcap-ns"].into_iter().enumerate() {
        let file = dir.path().join(format!("out.{format}"));
        let sj = dir.path().join(format!("{format}.json"));
        let bg = capture_with_stats(&lab, &["--format", format], &file, &sj);
        let gen_id = (100 + i).to_string();
        let g = gen(&lab, &["--count", "10000", "--gen-id", &gen_id]);
        stop_ok(bg, format);
        assert_eq!(num(&g, "frames"), 10000, "{format}: generator report {g}");

        assert_eq!(tshark_count(&file), 10000, "{format}: tshark count");
        assert_eq!(tcpdump_count(&file, &[]), 10000, "{format}: tcpdump count");
        assert_eq!(
            check_sequences(&file, 10000),
            (10000, 10000, 0, 0),
            "{format}: (frames, unique, missing, duplicates)"
        );
        let s = stats(&sj);
        assert_eq!(num(&s, "captured"), 10000, "{format}: stats {s}");
        assert_eq!(num(&s, "written"), 10000, "{format}: stats {s}");
        assert_eq!(
            accounted(&s),
            on_wire(&g),
            "{format}: accounting {s} vs generator {g}"
        );

        let f = read(&file);
        let want = match format {
            "pcapng" => poolcap_format::FileFormat::Pcapng,
            "pcap" => poolcap_format::FileFormat::Pcap,
            _ => poolcap_format::FileFormat::PcapNs,
        };
        assert_eq!(f.format, want, "{format}: format read back");
        assert_eq!(f.linktype, 1, "{format}: link type Ethernet");
        if format == "pcapng" {
            let st = f
                .if_stats
                .expect("pcapng ends with an interface statistics block");
            assert_eq!(
                (st.received, st.dropped),
                (10000, 0),
                "pcapng interface statistics"
            );
            assert_eq!(
                crate::common::tshark_statistics_blocks(&file),
                [(10000, 0)],
                "the statistics block as tshark reads it"
            );
        }

        // Timestamp resolution: tshark prints 9 fractional digits whatever the file holds.
        let times = common::tshark_fields(&file, &["frame.time_epoch"]);
        assert_eq!(times.len(), 10000, "{format}: tshark epochs");
        let ns: Vec<u64> = times
            .iter()
            .map(|t| {
                let frac = t.split_once('.').map_or("", |(_, f)| f);
                assert_eq!(frac.len(), 9, "{format}: tshark epoch `{t}`");
                frac.parse()
                    .unwrap_or_else(|e| panic!("{format}: epoch `{t}`: {e}"))
            })
            .collect();
        let sub_us = ns.iter().filter(|&&n| n % 1000 != 0).count();
        if format == "pcap" {
            assert_eq!(sub_us, 0, "pcap is microsecond: every epoch ends in 000");
        } else {
            assert!(
                sub_us > 0,
                "{format}: nanosecond file but every timestamp is a whole microsecond"
            );
        }
    }
}

fn snaplen_keeps_original_length() {
    let lab = lab(1);
    let dir = tempdir();
    let file = dir.path().join("snap.pcapng");
    let sj = dir.path().join("snap.json");
    let bg = capture_with_stats(&lab, &["-s", "96"], &file, &sj);
    let g = gen(
        &lab,
        &["--count", "2000", "--size", "1000", "--gen-id", "7"],
    );
    let stderr = stop_ok(bg, "capture -s 96");
    assert!(stderr.contains("snapshot length 96"), "{stderr}");

    let f = read(&file);
    assert_eq!(f.snaplen, 96, "snaplen in the file header");
    assert_eq!(
        f.packets.len() as u64,
        on_wire(&g),
        "packets in file vs generator {g}"
    );
    for (i, p) in f.packets.iter().enumerate() {
        assert_eq!(
            (p.data.len(), p.orig_len),
            (96, 1000),
            "packet {} (caplen, orig_len)",
            i + 1
        );
    }
    // The 96 bytes keep the generator tag.
    let (r, untagged) = seq_reports(&file);
    assert_eq!(untagged, 0, "untagged frames");
    assert_eq!(
        (r.len(), r[0].unique, r[0].duplicates),
        (1, 2000, 0),
        "{r:?}"
    );

    let lens = common::tshark_fields(&file, &["frame.len"]);
    let caps = common::tshark_fields(&file, &["frame.cap_len"]);
    assert_eq!((lens.len(), caps.len()), (2000, 2000), "tshark rows");
    assert!(
        lens.iter().all(|l| l == "1000"),
        "tshark frame.len: {:?}",
        &lens[..5]
    );
    assert!(
        caps.iter().all(|l| l == "96"),
        "tshark frame.cap_len: {:?}",
        &caps[..5]
    );

    let s = stats(&sj);
    assert_eq!(num(&s, "captured"), 2000, "{s}");
    assert_eq!(
        num(&s, "bytes"),
        2000 * 1000,
        "wire bytes are counted, not kept bytes: {s}"
    );
}

fn filter_matches_tcpdump_offline() {
    let lab = lab(1);
    let dir = tempdir();
    let fa = dir.path().join("a.pcapng");
    let sa = dir.path().join("a.json");
    let fb = dir.path().join("b.pcapng");
    let sb = dir.path().join("b.json");
    let a = capture(
        &lab,
        &[
            "-w",
            path_str(&fa),
            "--stats-json",
            path_str(&sa),
            "udp",
            "port",
            "53",
        ],
    );
    let b = capture(&lab, &["-w", path_str(&fb), "--stats-json", path_str(&sb)]);
    // To port 53, to port 9, and from port 53 (which `port 53` also selects).
    let g1 = gen(
        &lab,
        &[
            "--count",
            "3000",
            "--size",
            "100",
            "--dst-port",
            "53",
            "--gen-id",
            "1",
        ],
    );
    let g2 = gen(
        &lab,
        &[
            "--count",
            "5000",
            "--size",
            "300",
            "--dst-port",
            "9",
            "--flows",
            "4",
            "--gen-id",
            "2",
        ],
    );
    let g3 = gen(
        &lab,
        &[
            "--count",
            "1000",
            "--size",
            "64",
            "--src-port",
            "53",
            "--dst-port",
            "9",
            "--gen-id",
            "3",
        ],
    );
    std::thread::sleep(SETTLE);
    let (ca, ea) = a.stop("INT");
    let (cb, eb) = b.stop("INT");
    assert_eq!(ca, Some(0), "filtered capture: {ea}");
    assert_eq!(cb, Some(0), "unfiltered capture: {eb}");
    assert_no_panic(&ea, "filtered capture");
    assert_no_panic(&eb, "unfiltered capture");

    let total = on_wire(&g1) + on_wire(&g2) + on_wire(&g3);
    let port53 = on_wire(&g1) + on_wire(&g3);
    assert_eq!(total, 9000, "generators: {g1} {g2} {g3}");

    let s_a = stats(&sa);
    let s_b = stats(&sb);
    assert_eq!(
        num(&s_b, "captured"),
        total,
        "unfiltered capture saw everything: {s_b}"
    );
    assert_eq!(tshark_count(&fb), total, "unfiltered file");
    let offline = tcpdump_count(&fb, &["udp", "port", "53"]);
    assert_eq!(offline, port53, "tcpdump -r B 'udp port 53'");
    assert_eq!(
        num(&s_a, "captured"),
        offline,
        "filtered capture vs tcpdump offline filter: {s_a}"
    );
    assert_eq!(tshark_count(&fa), offline, "filtered file");
    assert_eq!(
        tcpdump_count(&fa, &["udp", "port", "53"]),
        offline,
        "all of A matches"
    );
    assert_eq!(
        num(&s_a, "captured") + num(&s_a, "filtered"),
        total,
        "filtered capture accounting: {s_a}"
    );
    assert_eq!(accounted(&s_a), total, "{s_a}");
    assert_eq!(num(&s_a, "filtered"), total - port53, "{s_a}");
    // Exactly generators 1 and 3, complete.
    let (r, untagged) = seq_reports(&fa);
    assert_eq!(untagged, 0);
    let got: Vec<(u32, u64, u64)> = r
        .iter()
        .map(|r| (r.gen_id, r.unique, r.duplicates))
        .collect();
    assert_eq!(
        got,
        vec![(1, 3000, 0), (3, 1000, 0)],
        "generators in the filtered file"
    );
}

fn overload_drops_add_up() {
    let lab = lab(1);
    let dir = tempdir();
    let sj = dir.path().join("o.json");
    // ~15 ns per x-loop iteration in a debug build: ~3 ms per packet, so the two 16-packet
    // chunks take ~0.1 s to drain after SIGINT.
    let bg = capture(
        &lab,
        &[
            "--load",
            "200000",
            "--pool",
            "16,2",
            "-B",
            "256",
            "--stats-json",
            path_str(&sj),
        ],
    );
    let g = gen(&lab, &["--count", "200000", "--gen-id", "9"]);
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let (code, stderr) = bg.stop("INT");
    assert_eq!(code, Some(0), "{stderr}");
    assert_no_panic(&stderr, "overloaded capture");
    // A hang guard, not a speed check: a drain that never ends would hang the suite.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "hang guard: the drain took {:?}",
        started.elapsed()
    );
    let s = stats(&sj);
    assert_eq!(num(&g, "frames"), 200000, "{g}");
    let link = num(&g, "link_dropped");
    if link != 0 {
        // veth counts a frame its peer's backlog refused as the sender's tx_dropped: it never
        // reached a capture socket, so it is outside the engine's accounting.
        eprintln!("overload_drops_add_up: {link} frames dropped by the link on transmit");
    }
    let drops = num(&s, "dropped_kernel") + num(&s, "dropped_pool");
    assert!(drops > 0, "the overload must drop: {s}");
    assert!(num(&s, "captured") > 0, "{s}");
    assert_eq!(num(&s, "filtered"), 0, "{s}");
    assert_eq!(
        accounted(&s),
        on_wire(&g),
        "sent = captured + dropped_kernel + dropped_pool + filtered; stats {s}, generator {g}"
    );
    // Per-queue counters add up to the totals.
    let q = &s["queues"].as_array().expect("queues")[0];
    assert_eq!(accounted(q), accounted(&s), "queue 0 {q}");
}

fn queues_2_and_4_capture_each_packet_once() {
    for queues in [2u16, 4] {
        let lab = lab(queues);
        let dir = tempdir();
        for fanout in ["hash", "lb"] {
            let what = format!("{queues} queues, fanout {fanout}");
            let file = dir.path().join(format!("{fanout}.pcapng"));
            let sj = dir.path().join(format!("{fanout}.json"));
            let qs = queues.to_string();
            let bg = capture_with_stats(&lab, &["--queues", &qs, "--fanout", fanout], &file, &sj);
            let g = gen(
                &lab,
                &["--count", "20000", "--flows", "32", "--gen-id", "5"],
            );
            stop_ok(bg, &what);
            assert_eq!(on_wire(&g), 20000, "{what}: {g}");
            assert_eq!(
                check_sequences(&file, 20000),
                (20000, 20000, 0, 0),
                "{what}: (frames, unique, missing, duplicates)"
            );
            assert_time_ordered(&file);
            let s = stats(&sj);
            assert_eq!(num(&s, "captured"), 20000, "{what}: {s}");
            assert_eq!(num(&s, "written"), 20000, "{what}: {s}");
            assert_eq!(accounted(&s), 20000, "{what}: {s}");
            let per: Vec<u64> = s["queues"]
                .as_array()
                .expect("queues")
                .iter()
                .map(|q| num(q, "captured"))
                .collect();
            assert_eq!(per.len(), usize::from(queues), "{what}: {per:?}");
            assert_eq!(
                per.iter().sum::<u64>(),
                20000,
                "{what}: per-queue captured {per:?}"
            );
            let busy = per.iter().filter(|&&n| n > 0).count();
            if fanout == "hash" {
                assert!(
                    busy > 1,
                    "{what}: 32 flows all hashed to one queue: {per:?}"
                );
            } else {
                let fair = 20000 / u64::from(queues);
                assert!(
                    per.iter().all(|&n| n >= fair / 2),
                    "{what}: load balancing leaves a queue short: {per:?}"
                );
            }
        }
    }
}

fn count_limit_writes_exactly_n() {
    let lab = lab(1);
    let dir = tempdir();
    let file = dir.path().join("c.pcapng");
    let sj = dir.path().join("c.json");
    let bg = capture_with_stats(&lab, &["-c", "500"], &file, &sj);
    let g = gen(&lab, &["--count", "2000", "--gen-id", "11"]);
    assert_eq!(on_wire(&g), 2000, "{g}");
    let (code, stderr) = wait_exit(bg, Duration::from_secs(10), "capture -c 500");
    assert_eq!(code, Some(0), "{stderr}");
    assert_no_panic(&stderr, "capture -c 500");
    assert_eq!(tshark_count(&file), 500, "tshark count");
    assert_eq!(tcpdump_count(&file, &[]), 500, "tcpdump count");
    // The first 500 frames: sequence numbers 0..500, none missing.
    assert_eq!(check_sequences(&file, 500), (500, 500, 0, 0));
    let s = stats(&sj);
    assert_eq!(num(&s, "written"), 500, "{s}");
    assert_eq!(
        num(&s, "written") + num(&s, "not_written"),
        num(&s, "captured"),
        "{s}"
    );
}

fn compressed_capture_reads_back() {
    use std::io::Read;
    for (how, ext) in [("zstd:3", "zst"), ("gzip:1", "gz")] {
        let lab = lab(1);
        let dir = tempdir();
        let file = dir.path().join(format!("c.pcapng.{ext}"));
        let bg = capture(&lab, &["--compress", how, "-w", path_str(&file)]);
        let g = gen(&lab, &["--count", "5000", "--size", "256"]);
        assert_eq!(on_wire(&g), 5000, "{g}");
        std::thread::sleep(Duration::from_millis(200));
        let (code, stderr) = bg.stop("INT");
        assert_eq!(code, Some(0), "{stderr}");
        let raw = std::fs::read(&file).expect("compressed file");
        let mut plain = Vec::new();
        if ext == "zst" {
            zstd::Decoder::new(&raw[..])
                .expect("zstd")
                .read_to_end(&mut plain)
                .expect("unzstd");
        } else {
            flate2::read::MultiGzDecoder::new(&raw[..])
                .read_to_end(&mut plain)
                .expect("gunzip");
        }
        assert!(
            raw.len() < plain.len(),
            "{how}: {} compressed vs {} plain",
            raw.len(),
            plain.len()
        );
        let plain_path = dir.path().join("plain.pcapng");
        std::fs::write(&plain_path, &plain).expect("write plain");
        assert_eq!(tcpdump_count(&plain_path, &[]), 5000, "{how}");
        assert_eq!(
            check_sequences(&plain_path, 5000),
            (5000, 5000, 0, 0),
            "{how}"
        );
    }
}

fn stdout_stream_reads_with_tcpdump() {
    let lab = lab(1);
    let mut cmd = common::netns_command(&lab.probe.netns, common::bin());
    cmd.args(["capture", "-i", &lab.probe.iface, "-q", "-w", "-"])
        .stdout(Stdio::piped());
    let mut bg = Background::start(cmd, "listening on");
    let stream = bg.child.stdout.take().expect("poolcap stdout");
    let reader = Command::new("tcpdump")
        .args(["-n", "-r", "-"])
        .stdin(Stdio::from(stream))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tcpdump -r -");
    // Read tcpdump's output while poolcap writes, so neither pipe fills.
    let reader = std::thread::spawn(move || reader.wait_with_output());
    let g = gen(&lab, &["--count", "3000", "--gen-id", "12"]);
    let stderr = stop_ok(bg, "capture -w -");
    assert!(stderr.contains("3000 packets written"), "{stderr}");
    let out = reader
        .join()
        .expect("tcpdump reader thread")
        .expect("tcpdump -r -");
    let terr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tcpdump -r -: {}: {terr}", out.status);
    assert!(!terr.contains("truncated"), "tcpdump: {terr}");
    let lines = String::from_utf8_lossy(&out.stdout);
    let n = lines.lines().count() as u64;
    assert_eq!(
        n,
        on_wire(&g),
        "packets tcpdump read from the stream; stderr: {terr}"
    );
    assert_eq!(n, 3000);
    assert!(
        lines.lines().all(|l| l.contains("UDP")),
        "tcpdump decoded a non-UDP packet: {}",
        lines.lines().find(|l| !l.contains("UDP")).unwrap_or("")
    );
}

/// (what, arguments after `capture --duration 1s`, exit code (None: any non-zero), texts
/// stderr must mention).
type BadInput<'a> = (&'a str, &'a [&'a str], Option<i32>, &'a [&'a str]);

fn bad_input_errors() {
    let lab = lab(1);
    // --duration bounds any case that would wrongly start capturing.
    let cases: &[BadInput] = &[
        ("unknown interface", &["-i", "nope0"], None, &["nope0"]),
        (
            "bad filter",
            &["-i", "prb0", "udp", "prot", "53"],
            Some(2),
            &["udp prot 53", "syntax error"],
        ),
        (
            "empty pool",
            &["-i", "prb0", "--pool", "0,5"],
            Some(2),
            &["--pool"],
        ),
        (
            "no workers",
            &["-i", "prb0", "--workers", "0"],
            Some(2),
            &["--workers"],
        ),
        (
            "unwritable file",
            &["-i", "prb0", "-w", "/nonexistent-dir/x.pcapng"],
            None,
            &["/nonexistent-dir/x.pcapng"],
        ),
        (
            "unknown flag",
            &["-i", "prb0", "--bogus"],
            Some(2),
            &["--bogus"],
        ),
        (
            "snaplen not a number",
            &["-i", "prb0", "-s", "lots"],
            Some(2),
            &["-s"],
        ),
        (
            "too many queues",
            &["-i", "prb0", "--queues", "65"],
            Some(2),
            &["--queues"],
        ),
        // tcpdump refuses -c 0; poolcap must not take it as "no limit" or "stop at once".
        ("zero count", &["-i", "prb0", "-c", "0"], Some(2), &["-c"]),
    ];
    let mut problems = Vec::new();
    for (what, args, want_code, mentions) in cases {
        let mut all = vec!["capture", "--duration", "1s"];
        // Keep a filter last: insert the options before the case's arguments.
        all.extend_from_slice(args);
        let out = poolcap_in(&lab.probe.netns, &all);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        let code = out.status.code();
        let mut bad = Vec::new();
        match want_code {
            Some(c) if code != Some(*c) => bad.push(format!("exit {code:?}, want {c}")),
            None if code == Some(0) || code.is_none() => {
                bad.push(format!("exit {code:?}, want non-zero"))
            }
            _ => {}
        }
        if lines.len() != 1 || !lines[0].starts_with("poolcap:") {
            bad.push(format!(
                "want one stderr line starting `poolcap:`, got {} lines",
                lines.len()
            ));
        }
        for m in *mentions {
            if !stderr.contains(m) {
                bad.push(format!("does not mention `{m}`"));
            }
        }
        if stderr.contains("panicked") {
            bad.push("panicked".into());
        }
        if !bad.is_empty() {
            problems.push(format!(
                "{what} (poolcap {}): {}\n--- stderr ---\n{stderr}---",
                all.join(" "),
                bad.join("; ")
            ));
        }
    }
    // A usage error must not clobber the output file: tcpdump compiles the filter before it
    // opens the file.
    let dir = tempdir();
    let keep = dir.path().join("keep.pcap");
    let before = b"an earlier capture that must survive".to_vec();
    std::fs::write(&keep, &before).expect("write keep.pcap");
    let out = poolcap_in(
        &lab.probe.netns,
        &[
            "capture",
            "--duration",
            "1s",
            "-i",
            "prb0",
            "-w",
            path_str(&keep),
            "udp",
            "prot",
            "53",
        ],
    );
    let after = std::fs::read(&keep).unwrap_or_default();
    if out.status.code() != Some(2) || after != before {
        problems.push(format!(
            "bad filter with -w EXISTING: exit {:?} (want 2); the existing file went from {} \
             to {} bytes (want it untouched)",
            out.status.code(),
            before.len(),
            after.len()
        ));
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n\n"));
}

fn interrupted_capture_file_is_valid() {
    let lab = lab(1);
    let dir = tempdir();
    let file = dir.path().join("i.pcapng");
    let sj = dir.path().join("i.json");
    let bg = capture_with_stats(&lab, &[], &file, &sj);
    let (g, (code, stderr)) = std::thread::scope(|sc| {
        let sender = sc.spawn(|| {
            gen(
                &lab,
                &["--rate", "20k", "--duration", "2s", "--gen-id", "13"],
            )
        });
        std::thread::sleep(Duration::from_millis(500));
        let stopped = bg.stop("INT");
        (sender.join().expect("generator thread"), stopped)
    });
    assert_eq!(code, Some(0), "{stderr}");
    assert_no_panic(&stderr, "interrupted capture");
    let s = stats(&sj);
    let written = num(&s, "written");
    assert!(written > 0, "nothing written before the interrupt: {s}");
    assert!(
        written < num(&g, "frames"),
        "the capture should have stopped before the generator: {s} {g}"
    );
    assert_eq!(num(&s, "not_written"), 0, "{s}");
    assert_eq!(num(&s, "captured"), written, "{s}");
    assert_eq!(
        num(&s, "dropped_kernel") + num(&s, "dropped_pool"),
        0,
        "{s}"
    );
    assert_eq!(
        tshark_count(&file),
        written,
        "tshark count vs stats written"
    );
    assert_eq!(
        tcpdump_count(&file, &[]),
        written,
        "tcpdump count vs stats written"
    );
    let (r, untagged) = seq_reports(&file);
    assert_eq!(untagged, 0, "frames without a generator tag");
    assert_eq!(r.len(), 1, "{r:?}");
    let r = &r[0];
    assert_eq!(r.gen_id, 13, "{r:?}");
    assert_eq!(
        (r.frames, r.unique, r.duplicates),
        (written, written, 0),
        "{r:?}"
    );
    // Captured from the first frame on, nothing lost: sequence numbers 0..written.
    assert_eq!((r.missing, r.max_seq), (0, Some(written - 1)), "{r:?}");
    assert_eq!(r.reordered, 0, "{r:?}");
}

fn write_error_stops_cleanly() {
    let lab = lab(1);
    let dir = tempdir();
    let mut problems = Vec::new();

    // /dev/full refuses the file header, which is written before the capture starts.
    {
        let sj = dir.path().join("full.json");
        let out = poolcap_in(
            &lab.probe.netns,
            &[
                "capture",
                "-i",
                "prb0",
                "-q",
                "--duration",
                "2s",
                "-w",
                "/dev/full",
                "--stats-json",
                path_str(&sj),
            ],
        );
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_no_panic(&stderr, "capture -w /dev/full");
        let mut bad = Vec::new();
        if out.status.success() || out.status.code().is_none() {
            bad.push(format!("exit {:?}, want non-zero", out.status.code()));
        }
        if lines.len() != 1 || !lines[0].starts_with("poolcap:") {
            bad.push(format!(
                "want one line starting `poolcap:`, got {} lines",
                lines.len()
            ));
        }
        if !stderr.contains("No space left on device") {
            bad.push("does not say why (ENOSPC: `No space left on device`)".into());
        }
        if !bad.is_empty() {
            problems.push(format!(
                "-w /dev/full: {}\n--- stderr ---\n{stderr}---",
                bad.join("; ")
            ));
        }
    }

    // A 3 MiB tmpfs fills up in the middle of the capture (4.8 MB of records): room for the
    // direct writer's first 2 MiB write, not its second.
    let fs = SmallFs::mount("3m");
    let file = fs.path("x.pcapng");
    let sj = dir.path().join("small.json");
    let bg = capture_with_stats(&lab, &[], &file, &sj);
    let g = gen(&lab, &["--count", "50000", "--gen-id", "14"]);
    assert_eq!(on_wire(&g), 50000, "{g}");
    // A full disk ends the writing, not the capture: it goes on counting until stopped.
    std::thread::sleep(SETTLE);
    let (code, stderr) = bg.stop("INT");
    assert_no_panic(&stderr, "capture onto a full disk");
    let mut bad = Vec::new();
    if code == Some(0) || code.is_none() {
        bad.push(format!("exit {code:?}, want non-zero"));
    }
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("poolcap:"))
        .collect();
    if errors.len() != 1 || !errors[0].contains("write") || !errors[0].contains(path_str(&file)) {
        bad.push(format!(
            "want one `poolcap: ... write ... FILE` line, got {errors:?}"
        ));
    }
    if !stderr.contains("No space left on device") {
        bad.push("the write error does not say why (ENOSPC: `No space left on device`)".into());
    }
    for line in [
        "packets captured",
        "packets dropped by kernel",
        "packets dropped by pool",
    ] {
        if !stderr.contains(line) {
            bad.push(format!("no accounting line `{line}`"));
        }
    }
    let s = stats(&sj);
    if !s["write_error"].is_string() {
        bad.push(format!("stats json has no write_error: {s}"));
    }
    let written = num(&s, "written");
    if written + num(&s, "not_written") != num(&s, "captured") {
        bad.push(format!("written + not_written != captured: {s}"));
    }
    // The whole-record guarantee: the file is cut back to whole packets and readable.
    let in_file = tshark_count(&file);
    let f = read(&file);
    assert_eq!(
        f.packets.len() as u64,
        in_file,
        "poolcap and tshark disagree"
    );
    if in_file == 0 {
        bad.push("the file holds no packet".into());
    }
    if in_file != written {
        bad.push(format!(
            "the file holds {in_file} packets but the stats say written {written}"
        ));
    }
    let (r, untagged) = seq_reports(&file);
    if untagged != 0 || r.len() != 1 || r[0].duplicates != 0 || r[0].missing != 0 {
        bad.push(format!("file frames: untagged {untagged}, reports {r:?}"));
    }
    if !bad.is_empty() {
        problems.push(format!(
            "full tmpfs: {}\n--- stderr ---\n{stderr}\n--- stats ---\n{s}",
            bad.join("; ")
        ));
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n\n"));
}
