//! The packet store: `capture --store`, `query`, `store status|repair`. Each query's
//! answer is compared byte for byte (`tcpdump -r -xx -n` text) with tcpdump's over the
//! same packets: the recorded input cut to the window by editcap, or the files the store
//! still holds.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use libtest_mimic::Trial;

use crate::common::*;

pub(crate) fn trials() -> Vec<Trial> {
    let t = |name: &'static str, f: fn()| trial(&format!("store::{name}"), f);
    vec![
        t(
            "queries_equal_tcpdump_for_filter_shapes_and_windows",
            queries_equal_tcpdump_for_filter_shapes_and_windows,
        ),
        t(
            "retention_deletes_the_oldest_files_and_queries_see_the_rest",
            retention_deletes_the_oldest_files_and_queries_see_the_rest,
        ),
        t(
            "a_damaged_index_is_refused_by_name_and_repaired",
            a_damaged_index_is_refused_by_name_and_repaired,
        ),
        t(
            "bad_input_is_one_line_and_fails",
            bad_input_is_one_line_and_fails,
        ),
        t(
            "a_live_capture_into_a_store_answers_as_tcpdump",
            a_live_capture_into_a_store_answers_as_tcpdump,
        ),
        t(
            "files_of_several_runs_come_out_in_time_order_merged_where_they_overlap",
            files_of_several_runs_come_out_in_time_order_merged_where_they_overlap,
        ),
        t(
            "after_kill_9_the_store_answers_and_the_next_start_indexes_the_last_file",
            after_kill_9_the_store_answers_and_the_next_start_indexes_the_last_file,
        ),
        t(
            "a_real_capture_replayed_into_the_lab_answers_as_tcpdump",
            a_real_capture_replayed_into_the_lab_answers_as_tcpdump,
        ),
        t(
            "a_store_with_two_queues_on_af_packet_and_af_xdp_holds_every_frame",
            a_store_with_two_queues_on_af_packet_and_af_xdp_holds_every_frame,
        ),
        t(
            "probe_and_forward_store_what_they_see",
            probe_and_forward_store_what_they_see,
        ),
        t(
            "queries_over_http_stream_pcap_and_refuse_bad_input",
            queries_over_http_stream_pcap_and_refuse_bad_input,
        ),
        t(
            "after_kill_9_store_repair_indexes_the_last_file",
            after_kill_9_store_repair_indexes_the_last_file,
        ),
        t(
            "a_query_across_a_retention_deletion_answers_from_the_files_it_opened",
            a_query_across_a_retention_deletion_answers_from_the_files_it_opened,
        ),
        t(
            "a_live_captures_indexes_from_its_written_bytes_equal_repairs",
            a_live_captures_indexes_from_its_written_bytes_equal_repairs,
        ),
        t(
            "retention_goes_by_the_packets_time_not_the_names",
            retention_goes_by_the_packets_time_not_the_names,
        ),
        t(
            "store_status_and_repair_refuse_bad_input_in_one_line",
            store_status_and_repair_refuse_bad_input_in_one_line,
        ),
        t(
            "a_query_during_capture_reads_the_live_file_through_its_prefix_index",
            a_query_during_capture_reads_the_live_file_through_its_prefix_index,
        ),
    ]
}

/// First packet's time: 2023-11-14T22:13:20Z.
const T0: u64 = 1_700_000_000;
/// Packets in the recorded input, one every millisecond.
const PACKETS: u32 = 24_000;

fn s(p: &Path) -> &str {
    path_str(p)
}

/// A frame of every kind the index knows (and a few it does not), varied by `i`.
fn frame(i: u32) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    let kind = i % 9;
    let payload = vec![(i % 251) as u8; 20 + (i as usize * 37) % 900];
    let (mut a, b) = (
        [10, 0, (i % 5) as u8, (i % 11) as u8],
        [10, 9, (i % 3) as u8, 1],
    );
    if i % 5000 == 4999 {
        // A rare host: a selective query reads a few regions.
        a = [192, 168, 77, 7];
    }
    let sport = (1000 + i % 40) as u16;
    let dport: u16 = [80, 443, 53, 8080][(i % 4) as usize];
    let l4 = |proto: u8| -> Vec<u8> {
        match proto {
            6 => {
                let flags = if i.is_multiple_of(7) { 0x02 } else { 0x10 };
                let mut t = Vec::new();
                t.extend_from_slice(&sport.to_be_bytes());
                t.extend_from_slice(&dport.to_be_bytes());
                t.extend_from_slice(&i.to_be_bytes());
                t.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
                t.extend_from_slice(&payload);
                t
            }
            17 => {
                let mut u = Vec::new();
                u.extend_from_slice(&sport.to_be_bytes());
                u.extend_from_slice(&dport.to_be_bytes());
                u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
                u.extend_from_slice(&[0, 0]);
                u.extend_from_slice(&payload);
                u
            }
            _ => [&[8u8, 0, 0, 0, 0, 1][..], &i.to_be_bytes(), &payload].concat(),
        }
    };
    let ipv4 = |proto: u8| -> Vec<u8> {
        let body = l4(proto);
        let len = (20 + body.len()) as u16;
        let mut h = vec![0x45, 0];
        h.extend_from_slice(&len.to_be_bytes());
        h.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
        h.extend_from_slice(&a);
        h.extend_from_slice(&b);
        [h, body].concat()
    };
    match kind {
        0..=2 => {
            f.extend_from_slice(&[0x08, 0x00]);
            f.extend(ipv4(6));
        }
        3 | 4 => {
            f.extend_from_slice(&[0x08, 0x00]);
            f.extend(ipv4(17));
        }
        5 => {
            f.extend_from_slice(&[0x08, 0x00]);
            f.extend(ipv4(1));
        }
        6 => {
            // ARP request from a to b.
            f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
            f.extend_from_slice(&[2, 0, 0, 0, 0, 1]);
            f.extend_from_slice(&a);
            f.extend_from_slice(&[0; 6]);
            f.extend_from_slice(&b);
        }
        7 => {
            // IPv6 UDP, fd00::N -> fd00::1.
            let body = l4(17);
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
            f.extend_from_slice(&(body.len() as u16).to_be_bytes());
            f.extend_from_slice(&[17, 64]);
            let mut src = [0u8; 16];
            src[0] = 0xfd;
            src[15] = (i % 6) as u8;
            let mut dst = [0u8; 16];
            dst[0] = 0xfd;
            dst[15] = 1;
            f.extend_from_slice(&src);
            f.extend_from_slice(&dst);
            f.extend(body);
        }
        _ => {
            // VLAN 7, UDP.
            f.extend_from_slice(&[0x81, 0x00, 0, 7, 0x08, 0x00]);
            f.extend(ipv4(17));
        }
    }
    f
}

/// Writes the recorded input: microsecond pcap, one packet per millisecond from T0.
fn write_input(path: &Path, packets: u32) {
    write_timed(path, packets, |i| i64::from(i) * 1000);
}

/// Writes frames `0..packets` as microsecond pcap, packet `i` at `us(i)` microseconds
/// after T0 (before it if negative).
fn write_timed(path: &Path, packets: u32, us: impl Fn(u32) -> i64) {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&[2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&65_535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    for i in 0..packets {
        let f = frame(i);
        let ts_us = (T0 as i64 * 1_000_000 + us(i)) as u64;
        out.extend_from_slice(&((ts_us / 1_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&((ts_us % 1_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&f);
    }
    std::fs::write(path, out).expect("write input");
}

fn poolcap(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("poolcap {args:?}: {e}"))
}

fn ok(args: &[&str]) -> Output {
    let out = poolcap(args);
    assert!(
        out.status.success(),
        "poolcap {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `tcpdump -r FILE -xx -n -S FILTER` text.
fn dump(file: &Path, filter: &str) -> String {
    let out = Command::new("tcpdump")
        .env("TZ", "UTC")
        // -S: absolute TCP sequence numbers (relative ones depend on what came before).
        .args(["-r", s(file), "-xx", "-n", "-S"])
        .args(filter.split_whitespace())
        .output()
        .expect("tcpdump");
    // The file being written (direct I/O) or one cut by kill -9 may end inside a record:
    // tcpdump prints the whole ones, then says so and fails, as a query stops there too.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || err.contains("truncated dump file"),
        "tcpdump -r {} {filter}: {err}",
        file.display(),
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The time `secs` after T0, as both editcap and `poolcap query` take it (UTC).
fn at(secs_after: f64) -> String {
    // Whole seconds and microseconds apart: an f64 of 1e8 s has no nanoseconds left.
    let (whole, us) = (secs_after.floor(), (secs_after.fract() * 1e6).round());
    let ns = ((i128::from(T0) + whole as i128) * 1_000_000_000 + us as i128 * 1000) as u64;
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns);
    let rfc = humantime::format_rfc3339_nanos(t).to_string();
    rfc.trim_end_matches('Z').replacen('T', " ", 1)
}

/// The input cut to `[since, until)` by editcap.
fn window(input: &Path, dir: &Path, since: Option<f64>, until: Option<f64>) -> PathBuf {
    let out = dir.join("window.pcap");
    let mut cmd = Command::new("editcap");
    cmd.env("TZ", "UTC");
    if let Some(a) = since {
        cmd.args(["-A", &at(a)]);
    }
    if let Some(b) = until {
        cmd.args(["-B", &at(b)]);
    }
    let st = cmd.arg(input).arg(&out).status().expect("editcap");
    assert!(st.success());
    out
}

/// `poolcap query STORE FILTER [--since] [--until] -w OUT`, as tcpdump text.
fn query(store: &Path, dir: &Path, filter: &str, since: Option<f64>, until: Option<f64>) -> String {
    let out = dir.join("answer.pcap");
    let (a, b) = (since.map(at), until.map(at));
    let mut args = vec!["query", s(store), "-w", s(&out)];
    if let Some(a) = &a {
        args.extend(["--since", a]);
    }
    if let Some(b) = &b {
        args.extend(["--until", b]);
    }
    args.extend(filter.split_whitespace());
    ok(&args);
    dump(&out, filter)
}

/// `packets` frames written to `DIR/in.pcap` (`write_input`) and captured into the store
/// `DIR/store` with `extra` options: the input, the store and the capture's stderr.
fn stored_input(dir: &Path, packets: u32, extra: &[&str]) -> (PathBuf, PathBuf, String) {
    let input = dir.join("in.pcap");
    write_input(&input, packets);
    let store = dir.join("store");
    let stderr = build_store(&input, &store, extra);
    (input, store, stderr)
}

fn build_store(input: &Path, store: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "capture",
        "-q",
        "-r",
        s(input),
        "--store",
        s(store),
        "-C",
        "1",
    ];
    args.extend_from_slice(extra);
    let out = ok(&args);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn status(store: &Path) -> String {
    String::from_utf8_lossy(&ok(&["store", s(store), "status"]).stdout).into_owned()
}

fn field(status: &str, name: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {status}"))
}

const SHAPES: [&str; 30] = [
    "host 192.168.77.7",
    "host 10.0.1.3",
    "src host 10.0.2.7",
    "net 10.9.1.0/24",
    "net 10.0.0.0 mask 255.255.252.0",
    "port 443",
    "tcp dst port 8080",
    "udp",
    "icmp",
    "arp",
    "ip6 and host fd00::4",
    "host 10.0.1.3 and host 10.9.0.1 and tcp port 80 and src port 1036",
    "host 10.0.4.10 or port 53",
    "not host 10.0.1.3 and tcp",
    "tcp[13] & 2 != 0",
    "tcp[13] & 2 != 0 and host 10.0.3.5",
    "vlan and udp port 53",
    "vlan 7 and host 10.0.1.3",
    "vlan 8 or arp",
    "net 10.9.0.0/16 and udp",
    "not udp",
    "not (host 10.0.1.3 or arp)",
    "! tcp and ! udp",
    "ip6 host fd00::1 and udp port 53",
    "ip6 net fd00::/124",
    "portrange 1000-1010",
    "udp portrange 50-60 or icmp",
    "ip proto \\udp and dst port 443",
    "(host 10.0.1.3 or host 10.0.2.7) and not port 80",
    "host 10.0.1.3 and (tcp or icmp)",
];

fn queries_equal_tcpdump_for_filter_shapes_and_windows() {
    let dir = tempdir();
    let (input, store, _) = stored_input(dir.path(), PACKETS, &[]);
    let st = status(&store);
    let files = field(&st, "files");
    assert!(
        files >= 4,
        "several files, so windows cross boundaries: {st}"
    );
    assert_eq!(field(&st, "packets"), u64::from(PACKETS), "{st}");
    assert_eq!(
        field(&st, "unindexed"),
        0,
        "every closed file indexed: {st}"
    );
    // Whole store, the middle across file boundaries, a slice inside one file.
    let windows = [
        (None, None),
        (Some(3.3), Some(17.9)),
        (Some(10.0), Some(10.5)),
    ];
    for (since, until) in windows {
        let reference = window(&input, dir.path(), since, until);
        for shape in SHAPES {
            let want = dump(&reference, shape);
            let got = query(&store, dir.path(), shape, since, until);
            if since.is_none() && shape != "vlan 8 or arp" {
                assert!(!want.is_empty(), "{shape}: matches something");
            }
            same(&got, &want, &format!("{shape} {since:?}..{until:?}"));
        }
    }
    // A selective query reads a small part of the store.
    let out = ok(&["query", s(&store), "--count", "host", "192.168.77.7"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let count: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert_eq!(count, u64::from(PACKETS / 5000), "{err}");
    let (read, held) = read_and_held(&err);
    assert!(read * 20 < held, "read {read} of {held}: {err}");
}

/// Asserts two tcpdump texts are equal, saying where they part (not printing them whole).
fn same(got: &str, want: &str, what: &str) {
    if got != want {
        let at = got.lines().zip(want.lines()).position(|(a, b)| a != b);
        panic!(
            "{what}: query gave {} lines, tcpdump {}; first difference at line {at:?}: {:?} vs {:?}",
            got.lines().count(),
            want.lines().count(),
            at.and_then(|n| got.lines().nth(n)),
            at.and_then(|n| want.lines().nth(n)),
        );
    }
}

/// `read R of H bytes` from a query's last line.
fn read_and_held(stderr: &str) -> (u64, u64) {
    let words: Vec<&str> = stderr
        .lines()
        .last()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let n = |w: &str| w.parse::<u64>().unwrap_or_else(|_| panic!("{stderr}"));
    let i = words
        .iter()
        .position(|w| *w == "read")
        .unwrap_or_else(|| panic!("{stderr}"));
    (n(words[i + 1]), n(words[i + 3]))
}

/// The store's capture files, oldest first.
fn capture_files(store: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().contains('.'))
        .collect();
    v.sort();
    v
}

/// tcpdump's text over each file in turn.
fn dump_files(files: &[PathBuf], filter: &str) -> String {
    files.iter().map(|f| dump(f, filter)).collect()
}

/// Asserts that `query STORE FILTER` answers as tcpdump over each capture file the store
/// holds, for each filter of `filters`.
fn answers_as_tcpdump(store: &Path, dir: &Path, filters: &[&str], what: &str) {
    let files = capture_files(store);
    for filter in filters {
        same(
            &query(store, dir, filter, None, None),
            &dump_files(&files, filter),
            &format!("{what}: {filter}"),
        );
    }
}

/// A capture into `store` in files of `mb` MB, and `gen`'s report of the traffic it was
/// sent, all of it: `count` frames of `size` bytes over `flows` flows at 20k/s.
fn capturing(
    lab: &Lab,
    store: &Path,
    mb: &str,
    traffic: [&str; 3],
) -> (Background, serde_json::Value) {
    let bg = capture(lab, &["-Z", "root", "--store", s(store), "-C", mb]);
    let [count, size, flows] = traffic;
    let g = gen(
        lab,
        &[
            "--count", count, "--size", size, "--rate", "20k", "--flows", flows,
        ],
    );
    assert!(num(&g, "frames") >= count.parse().unwrap(), "{g}");
    (bg, g)
}

fn retention_deletes_the_oldest_files_and_queries_see_the_rest() {
    let dir = tempdir();
    let (input, store, stderr) = stored_input(dir.path(), PACKETS, &["--store-size", "3M"]);
    let st = status(&store);
    let total = field(&st, "bytes") + field(&st, "index bytes");
    assert!(total <= 3_000_000, "within the budget: {st}");
    assert!(stderr.contains("deleted by retention"), "{stderr}");
    let files = capture_files(&store);
    assert!(files.len() >= 2, "{files:?}");
    // The oldest packets are gone; what is left answers as tcpdump over the files left.
    let held = field(&st, "packets");
    assert!(held < u64::from(PACKETS), "{st}");
    answers_as_tcpdump(
        &store,
        dir.path(),
        &["host 10.0.1.3", "tcp[13] & 2 != 0 and port 80", ""],
        "after retention",
    );
    // A window before what is held: one line saying what is held.
    let out = poolcap(&["query", s(&store), "--until", &at(1.0)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("the store holds 2023-11-14T22:13:"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // Age: keep the last 5 s of traffic (of 24 s).
    let aged = dir.path().join("aged");
    build_store(&input, &aged, &["--store-keep", "5s"]);
    let st = status(&aged);
    let first_held = st.lines().next().unwrap().to_owned();
    assert!(
        first_held.starts_with("held: 2023-11-14T22:13:3"),
        "only the last seconds (and the file holding the limit) are kept: {st}"
    );
}

fn a_damaged_index_is_refused_by_name_and_repaired() {
    let dir = tempdir();
    let (input, store, _) = stored_input(dir.path(), 8000, &[]);
    let files = capture_files(&store);
    let victim = PathBuf::from(format!("{}.idx", files[0].display()));
    let mut bytes = std::fs::read(&victim).unwrap();
    // In the head, which every query reads (a signature column no query reads is checked
    // by `status` and `repair`, which read every block).
    bytes[40] ^= 0x40;
    std::fs::write(&victim, &bytes).unwrap();
    let shape = "host 10.0.1.3";
    let want = dump(&input, shape);
    let out = dir.path().join("answer.pcap");
    let run = ok(&["query", s(&store), "-w", s(&out), "host", "10.0.1.3"]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains(&format!(
            "{}: index refused (damaged (checksum mismatch))",
            files[0].display()
        )),
        "{err}"
    );
    same(
        &dump(&out, shape),
        &want,
        "a refused index is never trusted",
    );
    let st = status(&store);
    assert_eq!(field(&st, "unindexed"), 1, "{st}");
    let rep = String::from_utf8_lossy(&ok(&["store", s(&store), "repair"]).stdout).into_owned();
    assert!(rep.contains("1 indexes rebuilt"), "{rep}");
    assert_eq!(field(&status(&store), "unindexed"), 0);
    let run = ok(&["query", s(&store), "-w", s(&out), "host", "10.0.1.3"]);
    assert!(!String::from_utf8_lossy(&run.stderr).contains("refused"));
    same(&dump(&out, shape), &want, shape);
    // An index of another capture file (swapped in) is refused as a mismatch.
    std::fs::copy(
        format!("{}.idx", files[1].display()),
        format!("{}.idx", files[0].display()),
    )
    .unwrap();
    let run = ok(&["query", s(&store), "-w", s(&out), "host", "10.0.1.3"]);
    assert!(String::from_utf8_lossy(&run.stderr).contains("built from a different capture file"));
    same(&dump(&out, shape), &want, shape);
    // A flipped bit in the last signature column, which this query does not read: `status`
    // reads every block and counts the file unindexed, `repair` rebuilds its index.
    ok(&["store", s(&store), "repair"]);
    let victim = PathBuf::from(format!("{}.idx", files[1].display()));
    let mut bytes = std::fs::read(&victim).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&victim, &bytes).unwrap();
    assert_eq!(field(&status(&store), "unindexed"), 1);
    let rep = String::from_utf8_lossy(&ok(&["store", s(&store), "repair"]).stdout).into_owned();
    assert!(rep.contains("1 indexes rebuilt"), "{rep}");
    assert_eq!(std::fs::read(&victim).unwrap()[last], bytes[last] ^ 1);
}

fn bad_input_is_one_line_and_fails() {
    let dir = tempdir();
    let (input, store, _) = stored_input(dir.path(), 2000, &[]);
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let newer = dir.path().join("newer");
    std::fs::create_dir(&newer).unwrap();
    std::fs::write(newer.join("poolcap-store.json"), "{\"format\": 9}").unwrap();
    for (args, says) in [
        (vec!["query", s(&plain)], "is not a poolcap store"),
        (vec!["store", s(&plain), "status"], "is not a poolcap store"),
        (vec!["query", s(&newer)], "newer poolcap (store format 9"),
        (
            vec!["query", s(&store), "udp", "prot", "53"],
            "bad filter expression",
        ),
        (
            vec!["query", s(&store), "--since", "yesterday"],
            "give RFC 3339",
        ),
        (
            vec!["query", s(&store), "--since", "2030-01-01 00:00:00"],
            "the store holds 2023-11-14T22:13:20",
        ),
        (vec!["capture", "-r", s(&input), "--store", s(&input)], ""),
    ] {
        let out = poolcap(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(says), "{args:?}: {err}");
        if args[0] == "query" || args[0] == "store" {
            assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        }
    }
}

fn a_live_capture_into_a_store_answers_as_tcpdump() {
    let lab = lab(1);
    let dir = tempdir();
    let store = dir.path().join("store");
    let (bg, g) = capturing(&lab, &store, "1", ["6000", "700", "50"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    // While the capture runs: the live file has no index and is read whole.
    let files = capture_files(&store);
    assert!(files.len() >= 2, "{files:?}");
    let mid = dir.path().join("mid.pcap");
    ok(&["query", s(&store), "-w", s(&mid), "udp"]);
    // Every packet the capture took is in a completed write by now (the writer writes a
    // batch at most 50 ms after its first packet), the last ones too.
    assert_eq!(
        tcpdump_count(&mid, &[]),
        num(&g, "frames"),
        "the query sees every packet captured so far"
    );
    same(
        &dump(&mid, "udp"),
        &dump_files(&files, "udp"),
        "during the capture",
    );
    let (code, stderr) = bg.stop("INT");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("files indexed"), "{stderr}");
    let st = status(&store);
    assert_eq!(field(&st, "unindexed"), 0, "{st}");
    answers_as_tcpdump(
        &store,
        dir.path(),
        &["udp port 9", "udp and src port 10029", ""],
        "after the capture",
    );
}

/// A query during a capture reads the file being written through the prefix index the
/// keeper saves of it (the regions of its flow there, the rest whole) and answers as tcpdump
/// over the same bytes; the closed file's index replaces the prefix index.
fn a_query_during_capture_reads_the_live_file_through_its_prefix_index() {
    let lab = lab(1);
    let dir = tempdir();
    let store = dir.path().join("store");
    // One file of 21 MB, still being written; flow 3 has 30 of its 30,000 packets.
    let (bg, _) = capturing(&lab, &store, "100", ["30000", "700", "1000"]);
    let files = capture_files(&store);
    assert_eq!(files.len(), 1, "{files:?}");
    let prefix = PathBuf::from(format!("{}.prefix.0.idx", files[0].display()));
    // No piece of a prefix index while no query came (the keeper would have saved one
    // within the second after 2 regions were fed).
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(!prefix.exists(), "a piece before any query");
    // Once a query came, the keeper saves a piece at most every second, and at the latest
    // 8 s after the last one: wait for pieces that cover nearly the whole file (hang
    // guard: 20 s).
    let started = std::time::Instant::now();
    let (read, held) = loop {
        let out = ok(&["query", s(&store), "--count", "udp src port 10003"]);
        let (read, held) = read_and_held(&String::from_utf8_lossy(&out.stderr));
        // Flow 3's 30 regions of 64 KiB (and about 2% of the others) of 330.
        if read * 6 < held {
            break (read, held);
        }
        assert!(
            started.elapsed().as_secs() < 20,
            "hang guard: read {read} of {held} bytes; prefix index there: {}",
            prefix.exists()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(held > 20_000_000, "read {read} of {held}");
    assert!(prefix.exists());
    answers_as_tcpdump(
        &store,
        dir.path(),
        &[
            "udp src port 10003",
            "udp and (port 10007 or port 10500)",
            "udp",
        ],
        "during the capture",
    );
    let (code, stderr) = bg.stop("INT");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("1 files indexed"), "{stderr}");
    let pieces: Vec<_> = std::fs::read_dir(&store)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".prefix."))
        .collect();
    assert!(
        pieces.is_empty(),
        "the index replaces the prefix index: {pieces:?}"
    );
    assert_eq!(field(&status(&store), "unindexed"), 0);
}

/// A live capture's keeper indexes each file from the bytes the writer wrote (none read
/// back), and each index is byte for byte the one `store DIR repair` builds from the file.
fn a_live_captures_indexes_from_its_written_bytes_equal_repairs() {
    let lab = lab(1);
    let dir = tempdir();
    let store = dir.path().join("store");
    let (bg, _) = capturing(&lab, &store, "1", ["20000", "imix", "5000"]);
    let (code, stderr) = bg.stop("INT");
    assert_eq!(code, Some(0), "{stderr}");
    let files = capture_files(&store);
    assert!(files.len() >= 4, "{files:?}");
    let line = format!("{} files indexed (0 read back from disk;", files.len());
    assert!(stderr.contains(&line), "want `{line}` in: {stderr}");
    let kept: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(format!("{}.idx", f.display())).unwrap())
        .collect();
    for f in &files {
        std::fs::remove_file(format!("{}.idx", f.display())).unwrap();
    }
    let out = ok(&["store", s(&store), "repair"]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(said.matches("indexed").count(), files.len(), "{said}");
    for (f, idx) in files.iter().zip(&kept) {
        let rebuilt = std::fs::read(format!("{}.idx", f.display())).unwrap();
        assert!(
            rebuilt == *idx,
            "{}: the capture's index differs",
            f.display()
        );
    }
}

/// A store whose capture was killed with SIGKILL while its last file was being written;
/// asserts the store answers as tcpdump over its files all the same.
fn killed_store(lab: &Lab, dir: &Path) -> PathBuf {
    let store = dir.join("store");
    let (bg, _) = capturing(lab, &store, "1", ["4000", "700", "20"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (code, _) = bg.stop("KILL");
    assert_ne!(code, Some(0));
    let st = status(&store);
    assert_eq!(field(&st, "unindexed"), 1, "the file being written: {st}");
    answers_as_tcpdump(&store, dir, &["udp src port 10003"], "after kill -9");
    store
}

fn after_kill_9_the_store_answers_and_the_next_start_indexes_the_last_file() {
    let lab = lab(1);
    let dir = tempdir();
    let store = killed_store(&lab, dir.path());
    // The next start indexes what the killed run left.
    let bg = capture(
        &lab,
        &["-Z", "root", "--store", s(&store), "--duration", "1s"],
    );
    let (code, stderr) = bg.wait();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("(no index)"), "{stderr}");
    let st = status(&store);
    assert_eq!(field(&st, "unindexed"), 0, "{st}");
    answers_as_tcpdump(
        &store,
        dir.path(),
        &["udp src port 10003"],
        "after the restart",
    );
}

/// The store's capture files in a query's order: by first packet time, then name.
fn files_by_time(store: &Path) -> Vec<PathBuf> {
    let mut files: Vec<(String, PathBuf)> = capture_files(store)
        .into_iter()
        .map(|f| {
            let out = Command::new("capinfos")
                .args(["-a", "-T", "-r", "-S"])
                .arg(&f)
                .output()
                .expect("capinfos");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            // `NAME\tSECONDS.FRACTION`: equal widths, so the text sorts as the time.
            let first = text
                .trim()
                .rsplit('\t')
                .next()
                .unwrap_or_default()
                .to_owned();
            (first, f)
        })
        .collect();
    files.sort();
    files.into_iter().map(|(_, f)| f).collect()
}

/// `mergecap` of `files` (a packet at a time, the earliest next one first).
fn merge(files: &[PathBuf], dir: &Path) -> PathBuf {
    let out = dir.join("merged.pcap");
    let st = Command::new("mergecap")
        .args(["-F", "pcap", "-w", s(&out)])
        .args(files)
        .status()
        .expect("mergecap");
    assert!(st.success());
    out
}

fn files_of_several_runs_come_out_in_time_order_merged_where_they_overlap() {
    let dir = tempdir();
    let store = dir.path().join("store");
    // Four runs into one store, each later by name than the one before:
    // A from T0 for 4 s; B, whose clock was set back, 100 s before T0; C at the same time
    // as A, half a millisecond later each (two runs overlapping); D, 150 s after T0, whose
    // clock went back by 60 s halfway through its only file.
    type Clock = fn(u32) -> i64;
    let runs: [(&str, u32, Clock); 4] = [
        ("a", 4000, |i| i64::from(i) * 1000),
        ("b", 3000, |i| i64::from(i) * 1000 - 100_000_000),
        ("c", 4000, |i| i64::from(i) * 1000 + 500),
        ("d", 600, |i| {
            let back = if i < 300 { 60_000_000 } else { 0 };
            210_000_000 + i64::from(i) * 1000 - back
        }),
    ];
    for (name, packets, us) in runs {
        let input = dir.path().join(format!("{name}.pcap"));
        write_timed(&input, packets, us);
        build_store(&input, &store, &[]);
        std::fs::remove_file(&input).unwrap();
    }
    let by_time = files_by_time(&store);
    assert_ne!(
        by_time,
        capture_files(&store),
        "name order is not time order"
    );
    assert_eq!(field(&status(&store), "unindexed"), 0);
    let all = merge(&by_time, dir.path());
    for (shape, since, until) in [
        ("", None, None),
        ("udp", None, None),
        ("host 10.0.1.3 or icmp", None, None),
        ("tcp[13] & 2 != 0", Some(-99.0), Some(3.0)),
        ("", Some(1.0), Some(170.0)),
    ] {
        same(
            &query(&store, dir.path(), shape, since, until),
            &dump(&window(&all, dir.path(), since, until), shape),
            &format!("{shape} {since:?}..{until:?}"),
        );
    }
}

fn after_kill_9_store_repair_indexes_the_last_file() {
    let lab = lab(1);
    let dir = tempdir();
    let store = killed_store(&lab, dir.path());
    let files = capture_files(&store);
    let want = dump_files(&files, "udp src port 10003");
    let rep = String::from_utf8_lossy(&ok(&["store", s(&store), "repair"]).stdout).into_owned();
    assert!(
        rep.contains(&format!(
            "indexed {} (no index)",
            files.last().unwrap().display()
        )),
        "{rep}"
    );
    assert!(rep.contains("1 indexes rebuilt"), "{rep}");
    assert_eq!(field(&status(&store), "unindexed"), 0);
    same(
        &query(&store, dir.path(), "udp src port 10003", None, None),
        &want,
        "after store repair",
    );
}

fn a_query_across_a_retention_deletion_answers_from_the_files_it_opened() {
    use std::io::Read;
    let dir = tempdir();
    let (input, store, _) = stored_input(dir.path(), PACKETS, &[]);
    let want = dump(&input, "");
    let files = capture_files(&store);
    assert!(files.len() >= 4, "{files:?}");
    // The query fills the pipe and waits; the oldest half of the store is deleted then, as
    // retention does (capture file, then index).
    let mut child = Command::new(bin())
        .args(["query", s(&store), "-w", "-"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("poolcap query");
    let mut stdout = child.stdout.take().unwrap();
    let mut answer = vec![0u8; 4096];
    stdout.read_exact(&mut answer).unwrap();
    for f in &files[..files.len() / 2] {
        std::fs::remove_file(f).unwrap();
        std::fs::remove_file(format!("{}.idx", f.display())).unwrap();
    }
    stdout.read_to_end(&mut answer).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = dir.path().join("answer.pcap");
    std::fs::write(&file, &answer).unwrap();
    same(
        &dump(&file, ""),
        &want,
        "every packet of the files the query opened",
    );
    // The next query sees what is left, and says nothing of what is gone.
    answers_as_tcpdump(&store, dir.path(), &[""], "after the deletion");
}

/// Wireshark's sample capture that the pcap-parser crate (a dependency of the workspace)
/// ships with its source: 5898 frames of a real LAN (ARP, IPv4 and IPv6 multicast, SSDP,
/// mDNS, NetBIOS, IGMP, Teredo, LLC).
fn real_capture() -> PathBuf {
    let cargo = std::env::var_os("CARGO_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cargo"),
        PathBuf::from,
    );
    let src = cargo.join("registry/src");
    std::fs::read_dir(&src)
        .into_iter()
        .flatten()
        .flat_map(|registry| {
            std::fs::read_dir(registry.unwrap().path())
                .into_iter()
                .flatten()
        })
        .map(|krate| krate.unwrap().path())
        .filter(|k| {
            k.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("pcap-parser-")
        })
        .map(|k| k.join("assets/wireshark_samples-test.pcapng"))
        .find(|f| f.exists())
        .unwrap_or_else(|| {
            panic!(
                "no pcap-parser-*/assets/wireshark_samples-test.pcapng under {}",
                src.display()
            )
        })
}

/// Seconds after T0 of an RFC 3339 time `store status` prints.
fn secs_after_t0(rfc: &str) -> f64 {
    let t = humantime::parse_rfc3339(rfc).unwrap_or_else(|e| panic!("{rfc}: {e}"));
    let ns = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    (ns as f64 - T0 as f64 * 1e9) / 1e9
}

fn a_real_capture_replayed_into_the_lab_answers_as_tcpdump() {
    let lab = lab(1);
    let dir = tempdir();
    let store = dir.path().join("store");
    let bg = capture(&lab, &["-Z", "root", "--store", s(&store), "-C", "1"]);
    let g = gen(
        &lab,
        &["--replay", s(&real_capture()), "--topspeed", "--loop", "3"],
    );
    assert!(num(&g, "frames") >= 3 * 5898, "{g}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (code, stderr) = bg.stop("INT");
    assert_eq!(code, Some(0), "{stderr}");
    let st = status(&store);
    assert!(field(&st, "files") >= 3, "{st}");
    assert!(field(&st, "packets") >= 3 * 5898 * 9 / 10, "{st}");
    assert_eq!(field(&st, "unindexed"), 0, "{st}");
    // The files of one run in time order, as one file, cut to each window by editcap.
    let all = merge(&files_by_time(&store), dir.path());
    let held = st.lines().next().unwrap().strip_prefix("held: ").unwrap();
    let (first, last) = held.split_once(" to ").unwrap();
    let (a, b) = (secs_after_t0(first), secs_after_t0(last));
    // Whole milliseconds: editcap compares microseconds, the packets have nanoseconds. A
    // window is at least a millisecond long: replayed at the lab's speed a file's time
    // span can be a few milliseconds, and a window that rounds to no length is refused.
    let ms = |x: f64| (x * 1000.0).round() / 1000.0;
    let cut = |from: f64, to: f64| (Some(ms(from)), Some(ms(to).max(ms(from) + 0.001)));
    let span = b - a;
    let windows = [
        (None, None),
        cut(a + span / 3.0, a + 2.0 * span / 3.0),
        cut(a + span * 0.1, a + span * 0.15),
    ];
    for (since, until) in windows {
        let reference = window(&all, dir.path(), since, until);
        for shape in [
            "arp",
            "ip6",
            "udp port 1900",
            "host 192.168.152.126",
            "net 192.168.152.0/24 and udp",
            "igmp",
            "not ip and not arp",
            "ip6 and udp port 5353",
            "udp portrange 137-138",
            "tcp",
            "dst host 224.0.0.7 and udp[4:2] > 100",
            "icmp6",
            "ip proto 2",
            "host 169.254.8.219 or ip6 net fe80::/10",
        ] {
            let want = dump(&reference, shape);
            if since.is_none() {
                assert!(!want.is_empty(), "{shape}: matches something");
            }
            same(
                &query(&store, dir.path(), shape, since, until),
                &want,
                &format!("{shape} {since:?}..{until:?}"),
            );
        }
    }
}

/// After a capture into `store` of `frames` UDP frames from the generator: the store holds
/// each once, every file is indexed, and queries answer as tcpdump over its files.
fn holds_every_frame(store: &Path, dir: &Path, frames: u64, what: &str) {
    let st = status(store);
    assert_eq!(field(&st, "unindexed"), 0, "{what}: {st}");
    let files = capture_files(store);
    assert!(files.len() >= 2, "{what}: {files:?}");
    let all = merge(&files_by_time(store), dir);
    assert_eq!(tcpdump_count(&all, &["udp"]), frames, "{what}: {st}");
    for shape in [
        "udp",
        "udp and src port 10003",
        "udp port 9 and greater 500",
    ] {
        same(
            &query(store, dir, shape, None, None),
            &dump(&all, shape),
            &format!("{what}: {shape}"),
        );
    }
}

fn a_store_with_two_queues_on_af_packet_and_af_xdp_holds_every_frame() {
    let lab = lab(2);
    for backend in ["af_packet", "af_xdp"] {
        let dir = tempdir();
        let store = dir.path().join("store");
        let bg = capture(
            &lab,
            &[
                "-Z",
                "root",
                "--backend",
                backend,
                "--queues",
                "2",
                "--store",
                s(&store),
                "-C",
                "1",
            ],
        );
        let g = gen(
            &lab,
            &[
                "--count", "5000", "--flows", "8", "--size", "700", "--rate", "20k",
            ],
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
        let (code, stderr) = bg.stop("INT");
        assert_eq!(code, Some(0), "{backend}: {stderr}");
        holds_every_frame(&store, dir.path(), num(&g, "frames"), backend);
    }
}

fn probe_and_forward_store_what_they_see() {
    let lab = crate::forward::lab3(1);
    let traffic = [
        "--count", "4000", "--flows", "8", "--size", "700", "--rate", "20k",
    ];
    // The probe.
    let dir = tempdir();
    let cfg = dir.path().join("probe.toml");
    std::fs::write(
        &cfg,
        "period = \"1s\"\n[[rule]]\nname = \"all\"\nfilter = \"ip\"\nactions = [\"count\"]\n",
    )
    .unwrap();
    let store = dir.path().join("store");
    let bg = start_probe(
        &lab,
        &[
            "-c",
            s(&cfg),
            "--store",
            s(&store),
            "--query-listen",
            "18941",
        ],
    );
    let g = gen(&lab, &traffic);
    std::thread::sleep(std::time::Duration::from_millis(500));
    // While it runs: its one file is being written (not called unindexed), with every
    // frame so far; over HTTP, the query answers as tcpdump over the file.
    let st = status(&store);
    let files = capture_files(&store);
    assert_eq!(
        (
            files.len(),
            field(&st, "being written"),
            field(&st, "unindexed")
        ),
        (1, 1, 0),
        "probe, live: {st}"
    );
    assert_eq!(
        field(&st, "bytes"),
        std::fs::metadata(&files[0]).unwrap().len()
    );
    assert_eq!(field(&st, "packets"), tcpdump_count(&files[0], &[]), "{st}");
    assert!(field(&st, "packets") >= num(&g, "frames"), "{st}");
    http_answers_as_tcpdump(&lab, 18941, &files, dir.path(), "probe");
    let (code, stderr) = bg.stop("INT");
    assert_eq!(code, Some(0), "probe: {stderr}");
    assert!(stderr.contains("files indexed"), "{stderr}");
    assert!(
        stderr.contains("store: queries on http://127.0.0.1:18941/query"),
        "{stderr}"
    );
    // One file (the default size is 1000 MB): whole once closed, indexed.
    let st = status(&store);
    assert_eq!(field(&st, "unindexed"), 0, "probe: {st}");
    let files = capture_files(&store);
    assert_eq!(
        tcpdump_count(&files[0], &["udp"]),
        num(&g, "frames"),
        "probe: {st}"
    );
    same(
        &query(&store, dir.path(), "udp and src port 10003", None, None),
        &dump(&files[0], "udp and src port 10003"),
        "probe",
    );
    // The forwarder: what it forwarded.
    let dir = tempdir();
    let store = dir.path().join("store");
    let bg = crate::forward::forward(
        &lab,
        &[
            "--store",
            s(&store),
            "--store-size",
            "10M",
            "--query-listen",
            "18942",
        ],
    );
    let g = gen(&lab, &traffic);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let files = capture_files(&store);
    assert!(files.len() >= 2, "{files:?}");
    http_answers_as_tcpdump(&lab, 18942, &files, dir.path(), "forward");
    let (code, stderr) = bg.stop("INT");
    assert_eq!(code, Some(0), "forward: {stderr}");
    // --store-size 10M: files of 1 MB.
    holds_every_frame(&store, dir.path(), num(&g, "frames"), "forward");
    let out = poolcap(&[
        "forward",
        "-i",
        "x",
        "-o",
        "y",
        "--bidirectional",
        "--store",
        "d",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("not with --bidirectional"),
        "{err}"
    );
}

/// `GET /query` on `port` in the probe's namespace answers three queries (one flow, UDP,
/// everything) byte for byte as tcpdump over `files`.
fn http_answers_as_tcpdump(lab: &Lab, port: u16, files: &[PathBuf], dir: &Path, what: &str) {
    let body = dir.join("body.pcap");
    for (params, filter) in [
        ("?filter=udp+and+src+port+10003", "udp and src port 10003"),
        ("?filter=udp", "udp"),
        ("", ""),
    ] {
        let url = format!("http://127.0.0.1:{port}/query{params}");
        let (head, _) = curl(lab, &url, &body);
        assert_eq!(head, "200 application/vnd.tcpdump.pcap", "{what} {params}");
        let want = dump_files(files, filter);
        assert!(!want.is_empty(), "{what} {params}: matches something");
        same(&dump(&body, filter), &want, &format!("{what} {params}"));
    }
}

/// `curl` in the probe's namespace: the HTTP status, content type and body of `GET url`.
fn curl(lab: &Lab, url: &str, body: &Path) -> (String, Vec<u8>) {
    let out = netns_command(&lab.probe.netns, "curl")
        // --max-time: a hang guard.
        .args([
            "-s",
            "--max-time",
            "30",
            "-o",
            s(body),
            "-w",
            "%{http_code} %{content_type}",
        ])
        .arg(url)
        .output()
        .expect("curl");
    assert!(out.status.success(), "curl {url}: {out:?}");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        std::fs::read(body).unwrap(),
    )
}

fn queries_over_http_stream_pcap_and_refuse_bad_input() {
    let lab = lab(1);
    let dir = tempdir();
    let store = dir.path().join("store");
    let bg = capture(
        &lab,
        &[
            "-Z",
            "root",
            "--store",
            s(&store),
            "-C",
            "1",
            "--query-listen",
            "18938",
        ],
    );
    gen(
        &lab,
        &[
            "--count", "6000", "--size", "700", "--rate", "20k", "--flows", "50",
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    let files = capture_files(&store);
    assert!(files.len() >= 2, "{files:?}");
    let base = "http://127.0.0.1:18938/query";
    let body = dir.path().join("body.pcap");
    // During the capture: a selective query, and all of it (4 MB: relayed as read).
    for (params, filter) in [
        (
            "?filter=udp+and+src%20port%2010003",
            "udp and src port 10003",
        ),
        ("?filter=udp", "udp"),
        ("", ""),
    ] {
        let (head, _) = curl(&lab, &format!("{base}{params}"), &body);
        assert_eq!(head, "200 application/vnd.tcpdump.pcap", "{params}");
        same(&dump(&body, filter), &dump_files(&files, filter), params);
    }
    // A window: since the first packet's second, until long after.
    let st = status(&store);
    let held = st.lines().next().unwrap().strip_prefix("held: ").unwrap();
    let first = &held[..19];
    let (head, _) = curl(
        &lab,
        &format!("{base}?since={first}Z&until=2100-01-01T00:00:00Z&filter=udp"),
        &body,
    );
    assert_eq!(head, "200 application/vnd.tcpdump.pcap");
    same(&dump(&body, "udp"), &dump_files(&files, "udp"), "a window");
    for (params, says) in [
        ("?filter=udp+prot+53", "bad filter expression"),
        ("?since=yesterday", "give RFC 3339"),
        (
            "?until=2000-01-01T00:00:00Z",
            "nothing held in that time window",
        ),
        ("?limit=5", "unknown parameter `limit`"),
    ] {
        let (head, text) = curl(&lab, &format!("{base}{params}"), &body);
        let text = String::from_utf8_lossy(&text);
        assert!(head.starts_with("400 text/plain"), "{params}: {head}");
        assert!(text.contains(says), "{params}: {text}");
        assert_eq!(text.trim().lines().count(), 1, "{params}: {text}");
    }
    let (head, _) = curl(&lab, "http://127.0.0.1:18938/other", &body);
    assert!(head.starts_with("404"), "{head}");
    let (code, stderr) = bg.stop("INT");
    assert_eq!(code, Some(0), "{stderr}");
    // A port alone listens on loopback only.
    assert!(
        stderr.contains("store: queries on http://127.0.0.1:18938/query"),
        "{stderr}"
    );
}

/// `N files indexed ... M deleted by retention` from the store's end line: (N, M).
fn indexed_and_deleted(stderr: &str) -> (u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.contains("files indexed"))
        .unwrap_or_else(|| panic!("{stderr}"));
    let before = |what: &str| -> u64 {
        let head = &line[..line.find(what).unwrap_or_else(|| panic!("{line}"))];
        let word = head.split_whitespace().last().unwrap_or_default();
        word.parse().unwrap_or_else(|_| panic!("{line}"))
    };
    (before("files indexed"), before("deleted by retention"))
}

/// `--store-keep` counts back from the newest packet held and ages each file by its last
/// packet, whatever its name says: `capture -r` of three days of traffic from 2023 (its
/// files named today) keeps the last day of it; a recording of older traffic loaded into
/// that store afterwards (its files named later still) goes whole.
fn retention_goes_by_the_packets_time_not_the_names() {
    const DAY: f64 = 86_400.0;
    let dir = tempdir();
    let input = dir.path().join("days.pcap");
    write_timed(&input, PACKETS, |i| {
        (f64::from(i) * 3.0 * DAY * 1e6 / f64::from(PACKETS)) as i64
    });
    let store = dir.path().join("store");
    let stderr = build_store(&input, &store, &["--store-keep", "1d"]);
    let (indexed, deleted) = indexed_and_deleted(&stderr);
    assert!(indexed >= 8 && deleted > 0 && deleted < indexed, "{stderr}");
    let st = status(&store);
    assert_eq!(field(&st, "unindexed"), 0, "{st}");
    // The newest packet is 3 d (less 11 s) after T0: every packet of the last 2 d is held,
    // and the first file held is the one whose last packet is not a day older than that
    // (files hold about 6 h of this traffic).
    let held = st.lines().next().unwrap().strip_prefix("held: ").unwrap();
    let first = secs_after_t0(held.split(" to ").next().unwrap());
    assert!(
        first > 1.5 * DAY && first <= 2.0 * DAY,
        "first held {first} s after T0: {st}"
    );
    let all = query(&store, dir.path(), "", None, None);
    assert!(
        all.ends_with(&dump(
            &window(&input, dir.path(), Some(2.0 * DAY), None),
            ""
        )),
        "the last day of traffic is held whole: {st}"
    );
    same(&all, &dump_files(&capture_files(&store), ""), "held");
    // A day of traffic older still, loaded now under later names: all of it is older than
    // a day before the newest packet held, so each of its files goes once closed.
    let older = dir.path().join("older.pcap");
    write_timed(&older, 8000, |i| {
        (-3.0 * DAY * 1e6 + f64::from(i) * DAY * 1e6 / 8000.0) as i64
    });
    let stderr = build_store(&older, &store, &["--store-keep", "1d"]);
    let (indexed, deleted) = indexed_and_deleted(&stderr);
    assert!(indexed >= 2 && deleted == indexed, "{stderr}");
    assert_eq!(status(&store), st, "the store holds what it held before");
}

/// `store DIR status|repair` on a directory that is not a store, a store of a newer format
/// or a damaged marker: one line, exit status 2.
fn store_status_and_repair_refuse_bad_input_in_one_line() {
    let dir = tempdir();
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let newer = dir.path().join("newer");
    std::fs::create_dir(&newer).unwrap();
    std::fs::write(newer.join("poolcap-store.json"), "{\"format\": 9}").unwrap();
    let damaged = dir.path().join("damaged");
    std::fs::create_dir(&damaged).unwrap();
    std::fs::write(damaged.join("poolcap-store.json"), "{\"form").unwrap();
    for action in ["status", "repair"] {
        for (store, says) in [
            (&plain, "is not a poolcap store"),
            (
                &newer,
                "written by a newer poolcap (store format 9; this one reads 1)",
            ),
            (&damaged, "marker is damaged"),
        ] {
            let out = poolcap(&["store", s(store), action]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{action} {}: {err}",
                store.display()
            );
            assert!(err.contains(says), "{action}: {err}");
            assert_eq!(err.trim().lines().count(), 1, "{action}: {err}");
            assert!(out.stdout.is_empty(), "{action}: {out:?}");
        }
    }
}
