//! Generator tests in a lab: what `poolcap gen` reports is checked against what independent
//! observers saw on the probe side of the wire (the interface counters, tcpdump writing a
//! file, tshark and tcpdump reading it back), frame by frame where the frames are known.
//!
//! Every test builds its own lab, so they run in parallel. No assertion is about speed: the
//! only clock-related checks are lower bounds that pacing makes certain (frames are never sent
//! before they are due), never how fast anything went.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use libtest_mimic::Trial;
use poolcap::frame::parse_tag;
use poolcap::seqcheck::SeqChecker;
use poolcap_format::{CaptureWriter, FileFormat, RecordedPacket};

use crate::common::{self, trial, Background, Lab};

pub(crate) fn trials() -> Vec<Trial> {
    vec![
        trial(
            "gen_exact_count_seen_by_counters_and_tcpdump",
            exact_count_seen_by_counters_and_tcpdump,
        ),
        trial(
            "gen_sizes_imix_and_jumbo_lengths",
            sizes_imix_and_jumbo_lengths,
        ),
        trial(
            "gen_flows_and_skew_in_the_capture",
            flows_and_skew_in_the_capture,
        ),
        trial(
            "gen_rate_limited_count_is_exact",
            rate_limited_count_is_exact,
        ),
        trial("gen_bursts_send_everything", bursts_send_everything),
        trial("gen_duration_stops", duration_stops),
        // Named with the `gen_` prefix so that `cargo test -p poolcap --test root -- gen`
        // selects every generator test.
        trial("gen_replay_is_byte_for_byte", replay_is_byte_for_byte),
        trial("gen_bad_input", bad_input),
    ]
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// tcpdump options for an exact capture: `-U` writes each packet as it arrives (so the file
/// can be watched). With `--immediate-mode` libpcap uses a TPACKET_V2 ring with one
/// snaplen-sized slot per frame, so the default 262144-byte snaplen leaves room for only a few
/// hundred frames: `-s 1600` (more than the largest frame, 1514 bytes, so nothing is cut) puts
/// two slots in a page and `-B 131072` (KiB) makes a 128 MiB ring of about 65,000 slots, more
/// than any test sends, so tcpdump cannot lose a frame even if it is not scheduled at all.
const TCPDUMP_EXACT: [&str; 5] = ["-U", "-s", "1600", "-B", "131072"];

/// tcpdump writing every frame seen on the lab's probe interface to a file in a scratch dir.
/// Fields drop in order: tcpdump is killed before its directory is removed.
pub(crate) struct Probe {
    tcpdump: Option<Background>,
    file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Probe {
    pub(crate) fn start(lab: &Lab) -> Probe {
        let dir = common::tempdir();
        let file = dir.path().join("probe.pcap");
        let path = file.to_str().expect("utf-8 temp path").to_owned();
        let mut args = TCPDUMP_EXACT.to_vec();
        args.extend(["-w", &path]);
        let tcpdump = common::tcpdump(lab, &args);
        Probe {
            tcpdump: Some(tcpdump),
            file,
            _dir: dir,
        }
    }

    /// Waits until the file holds at least `expected` frames (tcpdump has written everything
    /// that was sent), lingers a little so that any frame beyond them would show up too, stops
    /// tcpdump with SIGINT and returns the file's frames.
    pub(crate) fn stop(&mut self, expected: usize) -> Vec<RecordedPacket> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut seen = 0;
        while Instant::now() < deadline {
            // A read racing with tcpdump's write may see half a record: just look again.
            seen = poolcap_format::read_file(&self.file).map_or(0, |f| f.packets.len());
            if seen >= expected {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(150));
        let tcpdump = self.tcpdump.take().expect("probe already stopped");
        let (code, stderr) = tcpdump.stop("INT");
        assert_eq!(
            code,
            Some(0),
            "tcpdump exit code after SIGINT (it had written {seen} of {expected} frames): {stderr}"
        );
        assert!(
            stderr
                .lines()
                .any(|l| l.trim() == "0 packets dropped by kernel"),
            "tcpdump's ring overflowed, the capture cannot be exact: {stderr}"
        );
        read_packets(&self.file)
    }

    /// [`Probe::stop`], then checks that the file holds the generator's `n` frames, each
    /// once, none missing.
    pub(crate) fn stop_exact(&mut self, n: u64) -> Vec<RecordedPacket> {
        let packets = self.stop(n as usize);
        assert_eq!(
            common::check_sequences(&self.file, n),
            (n, n, 0, 0),
            "(frames, unique, missing, duplicates)"
        );
        packets
    }
}

/// A lab of `queues` queues whose probe interface tcpdump records ([`Probe`]) while the
/// generator sends `traffic`, all `n` frames of it ([`assert_sent_all`]): the lab, the
/// recording and the generator's report.
fn send_all_to_probe(queues: u16, traffic: &[&str], n: u64) -> (Lab, Probe, serde_json::Value) {
    let lab = common::lab(queues);
    let probe = Probe::start(&lab);
    let r = common::gen(&lab, traffic);
    assert_sent_all(&r, n);
    (lab, probe, r)
}

/// Runs `poolcap gen -i snd0 --count COUNT --size SIZE` in the lab's sender: its output.
fn gen_sized(lab: &Lab, count: &str, size: &str) -> std::process::Output {
    common::poolcap_in(
        &lab.sender.netns,
        &[
            "gen",
            "-i",
            &lab.sender.iface,
            "--count",
            count,
            "--size",
            size,
        ],
    )
}

/// The generator's report `r` says it sent `n` frames and the link dropped none.
fn assert_sent_all(r: &serde_json::Value, n: u64) {
    assert_eq!(u64_of(r, "frames"), n, "{r}");
    assert_eq!(u64_of(r, "link_dropped"), 0, "{r}");
}

fn read_packets(file: &Path) -> Vec<RecordedPacket> {
    poolcap_format::read_file(file)
        .unwrap_or_else(|e| panic!("read {}: {e}", file.display()))
        .packets
}

fn probe_counters(lab: &Lab) -> poolcap_lab::IfCounters {
    common::if_counters(&lab.probe.netns, &lab.probe.iface)
        .unwrap_or_else(|e| panic!("counters of {}: {e}", lab.probe.iface))
}

pub(crate) fn u64_of(report: &serde_json::Value, key: &str) -> u64 {
    report[key]
        .as_u64()
        .unwrap_or_else(|| panic!("report has no integer `{key}`: {report}"))
}

fn f64_of(report: &serde_json::Value, key: &str) -> f64 {
    report[key]
        .as_f64()
        .unwrap_or_else(|| panic!("report has no number `{key}`: {report}"))
}

/// Per generator id: (frames, unique, missing, duplicates) of the sequence numbers 0..n.
fn sequences_by_gen(packets: &[RecordedPacket], expected: &[(u32, u64)]) -> Vec<(u32, [u64; 4])> {
    let mut checker = SeqChecker::new();
    for p in packets {
        checker.observe(&p.data);
    }
    let reports = checker.reports(None);
    expected
        .iter()
        .map(|&(id, n)| {
            let r = reports.iter().find(|r| r.gen_id == id).unwrap_or_else(|| {
                panic!("no frame of generator {id} in the capture: {reports:?}")
            });
            // reports(None) bounds `missing` by the highest sequence seen; count the tail too.
            let tail = n.saturating_sub(r.max_seq.map_or(0, |m| m + 1));
            (id, [r.frames, r.unique, r.missing + tail, r.duplicates])
        })
        .collect()
}

/// The UDP source port of a generator frame (Ethernet + 20-byte IPv4 header).
fn udp_src_port(frame: &[u8]) -> u16 {
    assert!(frame.len() >= 36, "frame too short for UDP: {frame:02x?}");
    u16::from_be_bytes([frame[34], frame[35]])
}

/// The error line of a failed command: asserts that it did not panic and that stderr holds one
/// message line. clap's usage errors are followed by a blank line and its standard hint
/// "For more information, try '--help'."; those two are not counted (see the report).
pub(crate) fn error_line(what: &str, out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "{what} panicked: {stderr}"
    );
    assert!(
        out.status.code().is_some(),
        "{what} was killed by a signal: {:?}: {stderr}",
        out.status
    );
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("For more information, try"))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: expected one error line, got: {stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "{what} printed to stdout although it failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    lines[0].to_owned()
}

/// `poolcap ARGS` in the root namespace (for failures that happen before anything is sent).
pub(crate) fn poolcap_here(args: &[&str]) -> Output {
    std::process::Command::new(common::bin())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run poolcap {args:?}: {e}"))
}

/// A tiny deterministic PRNG (xorshift64*), so replayed frames and malformed files are the same
/// in every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next() >> 56) as u8).collect()
    }
}

fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// `n` distinct, valid Ethernet frames of mixed sizes (60..=1514), addressed to the MAC no lab
/// host has (02:70:63:00:ff:ff) so the probe's stack drops them after capture. Most are
/// IPv4/UDP with correct IP checksums and random payloads; every seventh is an
/// experimental-ethertype (0x88b5) frame; none carries a generator tag.
pub(crate) fn replay_frames(n: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    (0..n)
        .map(|i| {
            let len = match i {
                0 => 60,
                1 => 1514,
                2 => 61,
                3 => 1513,
                _ => 60 + (rng.next() % (1514 - 60 + 1)) as usize,
            };
            let mut f = Vec::with_capacity(len);
            f.extend_from_slice(&[0x02, 0x70, 0x63, 0x00, 0xff, 0xff]);
            f.extend_from_slice(&[0x02, 0x70, 0x63, 0x00, 0x00, 0x01]);
            if i % 7 == 6 {
                f.extend_from_slice(&[0x88, 0xb5]);
                f.extend_from_slice(&(i as u32).to_be_bytes());
            } else {
                f.extend_from_slice(&[0x08, 0x00]);
                let mut ip = [0u8; 20];
                ip[0] = 0x45;
                ip[2..4].copy_from_slice(&((len - 14) as u16).to_be_bytes());
                ip[4..6].copy_from_slice(&(i as u16).to_be_bytes());
                ip[8] = 64;
                ip[9] = 17;
                ip[12..16].copy_from_slice(&[10, 77, 0, 1]);
                ip[16..20].copy_from_slice(&[10, 77, 0, 2]);
                let sum = ipv4_checksum(&ip);
                ip[10..12].copy_from_slice(&sum.to_be_bytes());
                f.extend_from_slice(&ip);
                f.extend_from_slice(&(40_000 + i as u16).to_be_bytes());
                f.extend_from_slice(&9u16.to_be_bytes());
                f.extend_from_slice(&((len - 34) as u16).to_be_bytes());
                f.extend_from_slice(&[0, 0]); // no UDP checksum
                f.extend_from_slice(&(i as u32).to_be_bytes());
            }
            let rest = len - f.len();
            f.extend(rng.bytes(rest));
            assert_eq!(f.len(), len);
            f
        })
        .collect()
}

/// Writes `frames` 1 ms apart into a capture file of `format`.
fn write_capture(path: &Path, format: FileFormat, frames: &[Vec<u8>]) {
    let file = std::fs::File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut w = CaptureWriter::new(file, format, 0, "snd0").expect("capture writer");
    let t0 = 1_700_000_000 * 1_000_000_000u64;
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(t0 + i as u64 * 1_000_000, f, f.len() as u32)
            .expect("write packet");
    }
    w.finish(None).expect("finish capture file");
}

/// Asserts that `got` holds exactly the frames of `want`, byte for byte and in order.
pub(crate) fn assert_same_frames(what: &str, got: &[RecordedPacket], want: &[&[u8]]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            g.orig_len as usize,
            w.len(),
            "{what}: frame {i} left with {} bytes on the wire, was {}",
            g.orig_len,
            w.len()
        );
        if g.data != *w {
            let at = g.data.iter().zip(w.iter()).position(|(a, b)| a != b);
            panic!(
                "{what}: frame {i} differs (first difference at byte {at:?}; lengths {} and {})\n\
                 got  {:02x?}\nwant {:02x?}",
                g.data.len(),
                w.len(),
                &g.data[..g.data.len().min(64)],
                &w[..w.len().min(64)]
            );
        }
    }
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} frames captured, {} sent",
        got.len(),
        want.len()
    );
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

fn exact_count_seen_by_counters_and_tcpdump() {
    let lab = common::lab(1);
    let mut probe = Probe::start(&lab);
    let before = probe_counters(&lab);
    let r = common::gen(&lab, &["--count", "20000", "--size", "64"]);
    let after = probe_counters(&lab);
    assert_eq!(u64_of(&r, "frames"), 20_000, "frames reported: {r}");
    assert_eq!(u64_of(&r, "bytes"), 20_000 * 64, "bytes reported: {r}");
    assert_eq!(u64_of(&r, "link_dropped"), 0, "link drops: {r}");
    assert_eq!(r["interrupted"], false, "{r}");
    assert_eq!(
        after.rx_packets - before.rx_packets,
        20_000,
        "prb0 rx_packets before {before:?}, after {after:?}"
    );
    assert_eq!(
        after.rx_bytes - before.rx_bytes,
        20_000 * 64,
        "prb0 rx_bytes before {before:?}, after {after:?}"
    );
    assert_eq!(
        after.rx_dropped, before.rx_dropped,
        "prb0 dropped on receive"
    );

    let packets = probe.stop_exact(20_000);
    assert_eq!(packets.len(), 20_000, "frames in the tcpdump file");
    assert!(
        packets
            .iter()
            .all(|p| p.orig_len == 64 && p.data.len() == 64),
        "every frame is 64 bytes"
    );
    let gen_id = u64_of(&r, "gen_id") as u32;
    assert!(
        packets
            .iter()
            .all(|p| parse_tag(&p.data).map(|t| t.gen_id) == Some(gen_id)),
        "every frame carries generator id {gen_id}"
    );
    assert_eq!(
        common::tcpdump_count(&probe.file, &[]),
        20_000,
        "tcpdump -r"
    );
    assert_eq!(
        common::tcpdump_count(&probe.file, &["udp", "and", "src", "port", "10000"]),
        20_000,
        "tcpdump -r with a filter: one flow, UDP source port 10000"
    );
    assert_eq!(common::tshark_count(&probe.file), 20_000, "tshark -r");
}

fn sizes_imix_and_jumbo_lengths() {
    let lab = common::lab(1);
    let mut probe = Probe::start(&lab);
    let big = common::gen(
        &lab,
        &["--count", "3000", "--size", "1514", "--gen-id", "1"],
    );
    let imix = common::gen(
        &lab,
        &["--count", "12000", "--size", "imix", "--gen-id", "2"],
    );
    assert_eq!(u64_of(&big, "frames"), 3000, "{big}");
    assert_eq!(u64_of(&big, "bytes"), 3000 * 1514, "{big}");
    assert_eq!(u64_of(&imix, "frames"), 12_000, "{imix}");
    let packets = probe.stop(15_000);
    assert_eq!(packets.len(), 15_000, "frames in the capture");

    let mut imix_lens: BTreeMap<u32, u64> = BTreeMap::new();
    let mut imix_bytes = 0u64;
    for (i, p) in packets.iter().enumerate() {
        let tag = parse_tag(&p.data).unwrap_or_else(|| panic!("frame {i} has no tag"));
        assert_eq!(
            p.data.len(),
            p.orig_len as usize,
            "frame {i} was cut by the snaplen"
        );
        match tag.gen_id {
            1 => assert_eq!(p.orig_len, 1514, "frame {i} of --size 1514 ({tag:?})"),
            2 => {
                assert!(
                    [60, 590, 1514].contains(&p.orig_len),
                    "frame {i} of --size imix is {} bytes ({tag:?})",
                    p.orig_len
                );
                *imix_lens.entry(p.orig_len).or_default() += 1;
                imix_bytes += u64::from(p.orig_len);
            }
            other => panic!("frame {i} from unknown generator {other}"),
        }
        // The IP and UDP lengths agree with the frame's.
        let ip_len = u16::from_be_bytes([p.data[16], p.data[17]]) as usize;
        let udp_len = u16::from_be_bytes([p.data[38], p.data[39]]) as usize;
        assert_eq!(
            (ip_len, udp_len),
            (p.data.len() - 14, p.data.len() - 34),
            "frame {i}"
        );
    }
    assert_eq!(
        u64_of(&imix, "bytes"),
        imix_bytes,
        "imix bytes reported vs captured: {imix}"
    );
    // 7:4:1 over 12,000 frames of a shuffled 65,536-entry table: within 3 points.
    for (len, weight) in [(60u32, 7.0), (590, 4.0), (1514, 1.0)] {
        let share = imix_lens.get(&len).copied().unwrap_or(0) as f64 / 12_000.0;
        let want = weight / 12.0;
        assert!(
            (share - want).abs() <= 0.03,
            "imix share of {len}-byte frames is {share:.4}, want {want:.4} ± 0.03: {imix_lens:?}"
        );
    }
    for (id, n) in [(1u32, 3000u64), (2, 12_000)] {
        let got = sequences_by_gen(&packets, &[(id, n)]);
        assert_eq!(
            got,
            vec![(id, [n, n, 0, 0])],
            "generator {id}: [frames, unique, missing, duplicates]"
        );
    }

    // Sizes outside 60..9000 are usage errors (exit 2), found before anything is sent.
    let before = probe_counters(&lab);
    for bad in ["9001", "59", "0", "big"] {
        let out = gen_sized(&lab, "1", bad);
        let what = format!("gen --size {bad}");
        assert_eq!(out.status.code(), Some(2), "{what}: {out:?}");
        let line = error_line(&what, &out);
        assert!(
            line.contains(bad) && line.contains("--size"),
            "{what}: the error names the option and the value: {line}"
        );
    }
    // A size the CLI accepts but the 1500-byte MTU of the veth does not: a clean runtime
    // failure naming the interface, and nothing on the wire.
    let out = gen_sized(&lab, "10", "1515");
    assert!(
        !out.status.success(),
        "gen --size 1515 on a 1500 MTU: {out:?}"
    );
    let line = error_line("gen --size 1515", &out);
    assert!(line.contains(&lab.sender.iface), "{line}");
    let after = probe_counters(&lab);
    assert_eq!(
        after.rx_packets, before.rx_packets,
        "rejected sizes sent nothing"
    );
}

fn flows_and_skew_in_the_capture() {
    // Two queues: with several flows, `--qdisc-bypass auto` goes through the qdisc so the
    // flow hash spreads them over the transmit queues; tcpdump sees all queues of prb0.
    let (_lab, mut probe, r) = send_all_to_probe(
        2,
        &["--count", "20000", "--flows", "16", "--skew", "0.8"],
        20_000,
    );
    assert_eq!(
        r["qdisc_bypass"], false,
        "several flows over several tx queues must use the qdisc: {r}"
    );
    let packets = probe.stop(20_000);
    assert_eq!(packets.len(), 20_000, "frames in the capture");

    let mut by_port: BTreeMap<u16, u64> = BTreeMap::new();
    for p in &packets {
        *by_port.entry(udp_src_port(&p.data)).or_default() += 1;
    }
    assert_eq!(
        by_port.keys().copied().collect::<Vec<_>>(),
        (10_000..10_016).collect::<Vec<u16>>(),
        "16 flows on source ports 10000..10015: {by_port:?}"
    );
    let (&top_port, &top) = by_port.iter().max_by_key(|(_, &n)| n).expect("some flow");
    assert_eq!(top_port, 10_000, "flow 0 is the elephant: {by_port:?}");
    let share = top as f64 / 20_000.0;
    assert!(
        (share - 0.8).abs() <= 0.02,
        "elephant share {share:.4}, want 0.8 ± 0.02: {by_port:?}"
    );
    // The other 15 split the remaining 20% evenly (1.33% each); loose bounds.
    for (port, &n) in by_port.iter().filter(|(&p, _)| p != 10_000) {
        let s = n as f64 / 20_000.0;
        assert!(
            (0.005..=0.025).contains(&s),
            "mouse flow {port} has share {s:.4}: {by_port:?}"
        );
    }
    let id = u64_of(&r, "gen_id") as u32;
    assert_eq!(
        sequences_by_gen(&packets, &[(id, 20_000)]),
        vec![(id, [20_000, 20_000, 0, 0])],
        "[frames, unique, missing, duplicates]"
    );
}

fn rate_limited_count_is_exact() {
    let (_lab, mut probe, r) = send_all_to_probe(1, &["--rate", "50k", "--count", "10000"], 10_000);
    // Not a speed check: frame 9999 is due 0.19998 s after the start and is never sent early,
    // so a run that took less than 0.1 s was not paced at all.
    let seconds = f64_of(&r, "seconds");
    assert!(
        seconds > 0.1,
        "10000 frames at 50k pps took {seconds} s: {r}"
    );
    probe.stop_exact(10_000);
}

/// Bursts at top speed, each followed by its silence, measured from the burst's actual end:
/// 20k frames take longer than the 30 ms idle, so a schedule counted from each burst's start
/// would leave almost no gap.
fn bursts_send_everything() {
    let (_lab, mut probe, _) = send_all_to_probe(
        1,
        &["--burst", "20000", "--idle", "30ms", "--count", "60000"],
        60000,
    );
    probe.stop_exact(60000);
    let f = poolcap_format::read_file(&probe.file).expect("read the probe's file");
    let ts: Vec<u64> = f.packets.iter().map(|p| p.ts_ns).collect();
    for b in [20000, 40000] {
        let gap_ms = (ts[b] - ts[b - 1]) as f64 / 1e6;
        let burst_ms = (ts[b - 1] - ts[b - 20000]) as f64 / 1e6;
        assert!(
            gap_ms >= 29.0,
            "silence before frame {b}: {gap_ms:.1} ms after a burst of {burst_ms:.1} ms"
        );
    }
    // Inside a burst no batch waits for the silence: the two longest pauses of the whole
    // run are the two silences (a comparison, no time limit).
    let mut gaps: Vec<(u64, usize)> = ts.windows(2).map(|w| w[1] - w[0]).zip(1..).collect();
    gaps.sort_unstable_by(|a, b| b.cmp(a));
    let mut longest: Vec<usize> = gaps[..2].iter().map(|&(_, at)| at).collect();
    longest.sort_unstable();
    assert_eq!(
        longest,
        [20000, 40000],
        "the longest pauses: {:?}",
        &gaps[..3]
    );
}

fn duration_stops() {
    let lab = common::lab(1);
    let mut probe = Probe::start(&lab);
    let before = probe_counters(&lab);
    let r = common::gen(&lab, &["--duration", "300ms", "--rate", "10k"]);
    let after = probe_counters(&lab);
    let frames = u64_of(&r, "frames");
    // Pacing: frame i is never sent before i/10k s, and no batch starts at or after 300 ms,
    // so fewer than 3000 frames plus the last batch leave.
    assert!(
        frames > 0 && frames < 3000 + u64_of(&r, "batch"),
        "--duration 300ms --rate 10k sent {frames} frames: {r}"
    );
    assert_eq!(r["interrupted"], false, "{r}");
    assert_eq!(
        after.rx_packets - before.rx_packets,
        frames,
        "prb0 received what the report says was sent"
    );
    let packets = probe.stop_exact(frames);
    // The frames' send stamps: every batch went out within 300 ms of the first.
    let stamps: Vec<u64> = packets
        .iter()
        .map(|p| {
            parse_tag(&p.data)
                .and_then(|t| t.sent_ns)
                .expect("a stamped generator frame")
        })
        .collect();
    let first = *stamps.iter().min().expect("frames");
    let span = stamps
        .iter()
        .map(|&t| poolcap::frame::latency_ns(first, t))
        .max()
        .unwrap_or(0);
    assert!(
        (0..300_000_000).contains(&span),
        "a batch left {span} ns after the first, past the 300 ms"
    );
}

fn replay_is_byte_for_byte() {
    let lab = common::lab(1);
    let frames = replay_frames(200);
    let dir = common::tempdir();
    let pcap = dir.path().join("replay.pcap");
    let pcapng = dir.path().join("replay.pcapng");
    write_capture(&pcap, FileFormat::Pcap, &frames);
    write_capture(&pcapng, FileFormat::Pcapng, &frames);
    let total: u64 = frames.iter().map(|f| f.len() as u64).sum();
    let once: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let (pcap_s, pcapng_s) = (pcap.to_str().unwrap(), pcapng.to_str().unwrap());

    // (what, extra args, passes, least seconds the pacing implies)
    let runs: [(&str, Vec<&str>, u64, f64); 4] = [
        ("--topspeed", vec!["--replay", pcap_s, "--topspeed"], 1, 0.0),
        // 1 ms apart at speed 10: the last frame is due 19.9 ms after the first.
        (
            "--speed 10",
            vec!["--replay", pcap_s, "--speed", "10"],
            1,
            0.0199,
        ),
        // One pass lasts 200 ms of recorded time: at speed 20 the third pass starts at 20 ms.
        (
            "--loop 3 --speed 20",
            vec!["--replay", pcap_s, "--speed", "20", "--loop", "3"],
            3,
            0.0299,
        ),
        (
            "pcapng --topspeed --loop 2",
            vec!["--replay", pcapng_s, "--topspeed", "--loop", "2"],
            2,
            0.0,
        ),
    ];
    for (what, args, passes, least) in runs {
        let mut probe = Probe::start(&lab);
        let r = common::gen(&lab, &args);
        assert_eq!(u64_of(&r, "frames"), 200 * passes, "{what}: {r}");
        assert_eq!(u64_of(&r, "bytes"), total * passes, "{what}: {r}");
        assert_eq!(u64_of(&r, "link_dropped"), 0, "{what}: {r}");
        let seconds = f64_of(&r, "seconds");
        assert!(
            seconds >= least,
            "{what}: the run took {seconds} s, but its last frame is due at {least} s: {r}"
        );
        let got = probe.stop((200 * passes) as usize);
        let want: Vec<&[u8]> = (0..passes).flat_map(|_| once.iter().copied()).collect();
        assert_same_frames(what, &got, &want);
    }
}

fn bad_input() {
    // No lab: these fail before a frame could be sent.
    let out = poolcap_here(&["gen", "-i", "no-such-if0", "--count", "1"]);
    assert!(!out.status.success(), "gen -i no-such-if0: {out:?}");
    let line = error_line("gen -i no-such-if0", &out);
    assert!(line.contains("no-such-if0"), "names the interface: {line}");

    for rate in ["fast", "0", "10kbananas"] {
        let out = poolcap_here(&["gen", "-i", "lo", "--count", "1", "--rate", rate]);
        let what = format!("gen --rate {rate}");
        assert_eq!(out.status.code(), Some(2), "{what}: {out:?}");
        let line = error_line(&what, &out);
        assert!(line.contains("--rate"), "{what}: {line}");
    }

    // Replay input is read before the interface is looked up: with a missing interface, a
    // file that replay accepted would fail with a different message, and nothing is sent.
    let iface = "no-such-if0";
    let out = poolcap_here(&["gen", "-i", iface, "--replay", "/nonexistent"]);
    assert!(!out.status.success(), "--replay /nonexistent: {out:?}");
    let line = error_line("--replay /nonexistent", &out);
    assert!(
        line.contains("/nonexistent"),
        "names the missing file: {line}"
    );

    let dir = common::tempdir();
    let mut rng = Rng(0x5eed_f00d_cafe_beef);
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for i in 0..8 {
        let n = [1, 3, 23, 24, 25, 100, 4096, 65_536][i];
        cases.push((format!("{n} random bytes"), rng.bytes(n)));
    }
    let mut good = Vec::new();
    {
        let mut w = CaptureWriter::new(&mut good, FileFormat::Pcap, 0, "x").expect("writer");
        for f in replay_frames(3) {
            w.write_packet(1_000_000_000, &f, f.len() as u32).unwrap();
        }
        w.finish(None).expect("finish");
    }
    cases.push(("an empty file".into(), Vec::new()));
    cases.push(("a pcap without packets".into(), good[..24].to_vec()));
    cases.push((
        "a pcap cut inside its second record".into(),
        good[..24 + 16 + 60 + 10].to_vec(),
    ));
    let mut garbage_after_header = good[..24].to_vec();
    garbage_after_header.extend(rng.bytes(1000));
    cases.push((
        "a pcap header and random records".into(),
        garbage_after_header,
    ));
    let mut huge_caplen = good[..24].to_vec();
    huge_caplen.extend([
        0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0x7f,
    ]);
    cases.push(("a pcap record claiming 2 GB".into(), huge_caplen));
    let mut pcapng = 0x0a0d_0d0au32.to_le_bytes().to_vec();
    pcapng.extend(rng.bytes(200));
    cases.push(("pcapng magic and random blocks".into(), pcapng));
    for (i, (what, bytes)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.pcap"));
        std::fs::write(&path, bytes).expect("write bad file");
        let out = poolcap_here(&["gen", "-i", iface, "--replay", path.to_str().unwrap()]);
        let what = format!("--replay of {what}");
        assert!(!out.status.success(), "{what}: {out:?}");
        let line = error_line(&what, &out);
        assert!(
            line.contains(path.to_str().unwrap()) && !line.contains(iface),
            "{what}: the file is named and refused before the interface is looked up: {line}"
        );
    }
}
