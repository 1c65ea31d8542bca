//! `poolcap capture -r`: a capture file through the whole pipeline, without privileges.
//! Each test writes a small pcap by hand (Ethernet, IPv4 UDP and TCP, 802.1Q-tagged frames,
//! ARP) and checks poolcap's output and accounting against `tcpdump -r` on the same file.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

#[path = "support/mix.rs"]
mod mix;

use mix::{write_pcap, FRAMES};

fn poolcap(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_poolcap"))
        .arg("capture")
        .arg("-q")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run poolcap");
    if let Some(bytes) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(bytes)
            .expect("feed stdin");
    }
    child.wait_with_output().expect("poolcap output")
}

/// Runs `poolcap capture -r ARGS --stats-json`; panics unless it succeeds; returns the JSON.
fn read_ok(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> serde_json::Value {
    let sj = dir.join("s.json");
    // Options first: the filter expression takes the rest of the line.
    let mut all = vec!["--stats-json", sj.to_str().expect("utf-8")];
    all.extend_from_slice(args);
    let out = poolcap(&all, stdin);
    assert!(
        out.status.success(),
        "poolcap capture {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&sj).expect("stats json")).expect("json")
}

fn num(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no `{k}` in {v}"))
}

/// `tcpdump -r FILE ARGS` output lines.
fn tcpdump(file: &Path, args: &[&str]) -> Vec<String> {
    let out = Command::new("tcpdump")
        .arg("-nr")
        .arg(file)
        .args(args)
        .output()
        .expect("tcpdump -r");
    assert!(
        out.status.success(),
        "tcpdump -r: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn setup() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("in.pcap");
    write_pcap(&file);
    assert_eq!(tcpdump(&file, &[]).len() as u64, u64::from(FRAMES));
    (dir, file)
}

#[test]
fn a_file_goes_through_the_pipeline_unchanged_and_accounted() {
    let (dir, file) = setup();
    let out = dir.path().join("out.pcap");
    for extra in [
        &[][..],
        &["--load", "200", "--workers", "2"][..],
        &["--speed", "8"][..],
    ] {
        let mut args = vec!["-r", file.to_str().unwrap(), "-w", out.to_str().unwrap()];
        args.extend_from_slice(&["--format", "pcap"]);
        args.extend_from_slice(extra);
        let s = read_ok(dir.path(), &args, None);
        assert_eq!(num(&s, "captured"), u64::from(FRAMES), "{extra:?}: {s}");
        assert_eq!(num(&s, "written"), u64::from(FRAMES), "{extra:?}: {s}");
        let sum = num(&s, "dropped_kernel")
            + num(&s, "dropped_pool")
            + num(&s, "filtered")
            + num(&s, "not_taken");
        assert_eq!(sum, 0, "{extra:?}: {s}");
        // Times, headers and every byte, as tcpdump prints them.
        assert_eq!(
            tcpdump(&out, &["-tt", "-xx"]),
            tcpdump(&file, &["-tt", "-xx"]),
            "{extra:?}: the output differs from the input"
        );
    }
}

#[test]
fn filters_select_what_tcpdump_r_selects_vlan_frames_included() {
    let (dir, file) = setup();
    for filter in [
        "tcp",
        "udp",
        "not tcp",
        "port 80",
        "vlan",
        "vlan and tcp",
        "vlan 100",
        "arp",
        "udp port 53",
    ] {
        let want = tcpdump(&file, &[filter]).len() as u64;
        let out = dir.path().join("f.pcapng");
        let s = read_ok(
            dir.path(),
            &[
                "-r",
                file.to_str().unwrap(),
                "-w",
                out.to_str().unwrap(),
                filter,
            ],
            None,
        );
        assert_eq!(num(&s, "captured"), want, "`{filter}`: {s}");
        assert_eq!(
            num(&s, "filtered"),
            u64::from(FRAMES) - want,
            "`{filter}`: {s}"
        );
        assert_eq!(
            tcpdump(&out, &[]).len() as u64,
            want,
            "`{filter}`: file read back"
        );
    }
}

#[test]
fn compressed_files_standard_input_and_a_count_limit() {
    let (dir, file) = setup();
    let raw = std::fs::read(&file).expect("pcap");
    let gz = dir.path().join("in.pcap.gz");
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(&raw).expect("gzip");
    std::fs::write(&gz, e.finish().expect("gzip")).expect("write gz");
    let zst = dir.path().join("in.pcap.zst");
    std::fs::write(&zst, zstd::encode_all(&raw[..], 3).expect("zstd")).expect("write zst");
    for path in [&gz, &zst] {
        let s = read_ok(dir.path(), &["-r", path.to_str().unwrap()], None);
        assert_eq!(
            num(&s, "captured"),
            u64::from(FRAMES),
            "{}: {s}",
            path.display()
        );
    }
    let s = read_ok(
        dir.path(),
        &["-r", "-", "tcp"],
        Some(&std::fs::read(&zst).unwrap()),
    );
    assert_eq!(
        num(&s, "captured"),
        tcpdump(&file, &["tcp"]).len() as u64,
        "stdin: {s}"
    );
    // The count limit ends reading, as `tcpdump -r -c`: the rest of the file is not read,
    // so the counters hold the 7 packets read.
    let s = read_ok(dir.path(), &["-r", file.to_str().unwrap(), "-c", "7"], None);
    assert_eq!(
        (
            num(&s, "captured"),
            num(&s, "filtered"),
            num(&s, "not_taken")
        ),
        (7, 0, 0),
        "-c 7: {s}"
    );
}

#[test]
fn a_stop_mid_file_counts_and_writes_the_packets_read() {
    let (dir, file) = setup();
    let out = dir.path().join("out.pcap");
    // 400 frames 1 ms apart at a tenth of their pace take 4 s; the stop comes after 1 s.
    let s = read_ok(
        dir.path(),
        &[
            "-r",
            file.to_str().unwrap(),
            "-w",
            out.to_str().unwrap(),
            "--speed",
            "0.1",
            "--duration",
            "1s",
        ],
        None,
    );
    let read = num(&s, "captured");
    assert!(read > 0 && read < u64::from(FRAMES), "{s}");
    assert_eq!(num(&s, "filtered") + num(&s, "not_taken"), 0, "{s}");
    assert_eq!(num(&s, "written"), read, "{s}");
    assert_eq!(
        tcpdump(&out, &["-tt", "-xx"]),
        tcpdump(&file, &["-tt", "-xx", "-c", &read.to_string()]),
        "the file's first packets"
    );
}

/// Runs `poolcap capture -r ARGS --stats-json`, expecting it to fail; returns the JSON and
/// standard error.
fn read_failing(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> (serde_json::Value, String) {
    let sj = dir.join("s.json");
    let mut all = vec!["--stats-json", sj.to_str().expect("utf-8")];
    all.extend_from_slice(args);
    let out = poolcap(&all, stdin);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    let s = serde_json::from_str(&std::fs::read_to_string(&sj).expect("stats json")).expect("json");
    (s, err)
}

/// Byte offset of record `n` (from 0) in a pcap written by `write_pcap`.
fn record_at(n: u32) -> usize {
    24 + (0..n).map(|i| 16 + mix::frame(i).len()).sum::<usize>()
}

#[test]
fn a_file_that_goes_bad_part_way_gives_its_packets_then_one_error_line() {
    let (dir, file) = setup();
    let raw = std::fs::read(&file).expect("pcap");
    let out = dir.path().join("out.pcap");
    let o = out.to_str().unwrap();
    // Cut inside record 300; then a record 250 whose length field is impossible.
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&cut, &raw[..record_at(300) + 20]).expect("write");
    let mut bad = raw.clone();
    let at = record_at(250);
    bad[at + 8..at + 12].copy_from_slice(&0x7fff_0000u32.to_le_bytes());
    let bad_file = dir.path().join("bad.pcap");
    std::fs::write(&bad_file, &bad).expect("write");
    for (f, good, says) in [(&cut, 300u64, "truncated"), (&bad_file, 250, "malformed")] {
        let name = f.to_str().unwrap();
        let (s, err) = read_failing(dir.path(), &["-r", name, "-w", o, "--format", "pcap"], None);
        assert_eq!(num(&s, "captured"), good, "{name}: {s}");
        assert_eq!(num(&s, "written"), good, "{name}: {s}");
        assert_eq!(num(&s, "filtered") + num(&s, "not_taken"), 0, "{name}: {s}");
        let last = err.lines().last().unwrap_or_default();
        assert!(last.contains(name) && last.contains(says), "{name}: {err}");
        assert_eq!(
            err.lines().filter(|l| l.contains(says)).count(),
            1,
            "one line: {err}"
        );
        // What was written is the file's first packets, whole.
        assert_eq!(
            tcpdump(&out, &["-tt", "-xx"]),
            tcpdump(&file, &["-tt", "-xx", "-c", &good.to_string()]),
            "{name}: the packets before the error"
        );
    }
    // A cut zstd stream on standard input: its whole packets, then the error.
    let zst = zstd::encode_all(&raw[..], 3).expect("zstd");
    let (s, err) = read_failing(
        dir.path(),
        &["-r", "-", "-w", o],
        Some(&zst[..zst.len() / 2]),
    );
    let got = num(&s, "captured");
    assert!(got > 0 && got < u64::from(FRAMES), "{s}");
    assert_eq!(tcpdump(&out, &[]).len() as u64, got);
    assert!(
        err.lines()
            .last()
            .unwrap_or_default()
            .contains("standard input"),
        "{err}"
    );
}

#[test]
fn standard_input_compressed_reads_back_byte_for_byte() {
    let (dir, file) = setup();
    let raw = std::fs::read(&file).expect("pcap");
    let out = dir.path().join("out.pcap");
    let zst = zstd::encode_all(&raw[..], 3).expect("zstd");
    let s = read_ok(
        dir.path(),
        &["-r", "-", "-w", out.to_str().unwrap(), "--format", "pcap"],
        Some(&zst),
    );
    assert_eq!(num(&s, "written"), u64::from(FRAMES), "{s}");
    assert_eq!(
        tcpdump(&out, &["-tt", "-xx"]),
        tcpdump(&file, &["-tt", "-xx"])
    );
}

/// A 400 MB file is read with memory that does not grow with it (it used to be read whole,
/// then copied packet by packet: more than twice its size).
#[test]
fn reading_a_large_file_takes_memory_far_below_its_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let big = dir.path().join("big.pcap");
    let frame = vec![0x5a_u8; 8000];
    let mut f = std::io::BufWriter::new(std::fs::File::create(&big).expect("create"));
    for word in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65_535, 1] {
        f.write_all(&word.to_le_bytes()).expect("write");
    }
    let records = 50_000u32;
    for i in 0..records {
        for word in [1_700_000_000 + i / 1000, (i % 1000) * 1000, 8000, 8000] {
            f.write_all(&word.to_le_bytes()).expect("write");
        }
        f.write_all(&frame).expect("write");
    }
    f.into_inner().expect("flush").sync_all().expect("sync");
    let size_kb = std::fs::metadata(&big).expect("size").len() / 1024;
    for extra in [&[][..], &["--workers", "1", "--load", "1"][..]] {
        let rss = dir.path().join("rss");
        let sj = dir.path().join("s.json");
        let out = Command::new("/usr/bin/time")
            .args(["-f", "%M", "-o", rss.to_str().unwrap()])
            .arg(env!("CARGO_BIN_EXE_poolcap"))
            .args(["capture", "-q", "--stats-json", sj.to_str().unwrap(), "-r"])
            .arg(&big)
            .args(extra)
            .output()
            .expect("/usr/bin/time poolcap");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&sj).expect("json")).expect("json");
        assert_eq!(num(&s, "captured"), u64::from(records), "{extra:?}: {s}");
        let peak_kb: u64 = std::fs::read_to_string(&rss)
            .expect("rss")
            .trim()
            .parse()
            .expect("KB");
        assert!(
            peak_kb < size_kb / 4,
            "{extra:?}: peak RSS {peak_kb} KB for a {size_kb} KB file"
        );
    }
}

#[test]
fn unreadable_files_are_one_line_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk.pcap");
    std::fs::write(&junk, b"this is not a capture file at all").expect("write");
    for (args, says) in [
        (vec!["-r", "/nonexistent/x.pcap"], "cannot read"),
        (
            vec!["-r", junk.to_str().unwrap()],
            "not a pcap or pcapng file",
        ),
        (vec!["-r", junk.to_str().unwrap(), "--speed", "0"], "speed"),
        (
            vec!["-r", junk.to_str().unwrap(), "-i", "lo"],
            "cannot be used",
        ),
    ] {
        let out = poolcap(&args, None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// `capture --config FILE`: the file's keys stand for the flags of the same names (the same
/// packets written as with the flags), flags on the command line win over the file, and an
/// unknown key is a one-line usage error naming it.
#[test]
fn a_config_file_stands_for_its_flags_and_the_command_line_wins() {
    let (dir, file) = setup();
    let (by_file, by_flags) = (dir.path().join("c.pcap"), dir.path().join("f.pcap"));
    let config = dir.path().join("capture.toml");
    std::fs::write(
        &config,
        format!(
            "read = {:?}\nwrite = {:?}\nformat = \"pcap\"\ncount = 3\nfilter = \"udp\"\n",
            file.to_str().unwrap(),
            by_file.to_str().unwrap()
        ),
    )
    .expect("write config");
    let cfg = config.to_str().unwrap();
    let s = read_ok(dir.path(), &["--config", cfg], None);
    assert_eq!(num(&s, "written"), 3, "{s}");
    read_ok(
        dir.path(),
        &[
            "-r",
            file.to_str().unwrap(),
            "-w",
            by_flags.to_str().unwrap(),
        ]
        .into_iter()
        .chain(["--format", "pcap", "-c", "3", "udp"])
        .collect::<Vec<_>>(),
        None,
    );
    let udp = tcpdump(&by_flags, &["-tt", "-xx"]);
    assert!(!udp.is_empty());
    assert_eq!(tcpdump(&by_file, &["-tt", "-xx"]), udp);
    assert_eq!(tcpdump(&by_file, &["udp"]).len(), 3);

    // The command line's count and filter win over the file's.
    let s = read_ok(dir.path(), &["--config", cfg, "-c", "2", "tcp"], None);
    assert_eq!(num(&s, "written"), 2, "{s}");
    assert_eq!(tcpdump(&by_file, &["tcp"]).len(), 2);

    std::fs::write(&config, "interface = \"lo\"\nsnaplenn = 96\n").expect("write config");
    let out = poolcap(&["--config", cfg], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err.trim(),
        format!("poolcap: {cfg}: unknown key `snaplenn` (see --help)")
    );
}
