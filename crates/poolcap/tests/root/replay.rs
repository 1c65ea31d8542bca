//! Replay of awkward capture files in a lab: timestamps that go back in time, a sub-second
//! field that is no time, frames too big or too small for the link, raw IP link types. Each
//! file is built here (with poolcap-format's writer or by hand), replayed with `poolcap gen
//! --replay`, and what left is checked frame by frame in an independent tcpdump capture.
//!
//! A replay that stalls would hang the suite, so replays run under `timeout`: a stall fails
//! the test with a message instead. No assertion is about speed.

use std::path::Path;
use std::process::Output;

use libtest_mimic::Trial;
use poolcap_format::{CaptureWriter, FileFormat};

use crate::common::{self, netns_command, trial, Lab};
use crate::gen::{assert_same_frames, error_line, poolcap_here, replay_frames, u64_of, Probe};

pub(crate) fn trials() -> Vec<Trial> {
    // The `gen_replay_` prefix: `-- gen` selects every generator test, `-- gen_replay` these.
    vec![
        trial(
            "gen_replay_backward_timestamps_do_not_stall",
            backward_timestamps_do_not_stall,
        ),
        trial(
            "gen_replay_absurd_timestamp_fraction_is_refused",
            absurd_timestamp_fraction_is_refused,
        ),
        trial(
            "gen_replay_skips_frames_the_link_cannot_carry",
            skips_frames_the_link_cannot_carry,
        ),
        trial(
            "gen_replay_raw_ip_goes_out_behind_ethernet",
            raw_ip_goes_out_behind_ethernet,
        ),
    ]
}

/// 2023-11-14, in ns.
const T0: u64 = 1_700_000_000 * 1_000_000_000;

/// Seconds a replay of these few-millisecond files may take before it counts as stalled.
const STALLED_AFTER: &str = "30";

/// Runs `poolcap gen -i snd0 ARGS` in the sender under `timeout`; fails if it stalled.
fn replay(lab: &Lab, args: &[&str]) -> Output {
    let out = netns_command(&lab.sender.netns, "timeout")
        .args(["-s", "KILL", STALLED_AFTER, common::bin()])
        .args(["gen", "-i", &lab.sender.iface])
        .args(args)
        .output()
        .expect("run timeout poolcap gen");
    assert!(
        out.status.code().is_some(),
        "gen {args:?} stalled: not done after {STALLED_AFTER} s ({:?}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "gen {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The JSON report of a `--json` replay.
fn report(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("gen json: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// Writes `frames` with timestamps `ts_ns` into a pcapng section or a pcap file.
fn encode(format: FileFormat, frames: &[Vec<u8>], ts_ns: &[u64]) -> Vec<u8> {
    let mut w = CaptureWriter::new(Vec::new(), format, 0, "snd0").expect("capture writer");
    for (f, &ts) in frames.iter().zip(ts_ns) {
        w.write_packet(ts, f, f.len() as u32).expect("write packet");
    }
    w.finish(None).expect("finish capture file")
}

/// A little-endian microsecond pcap of link type `linktype`, record by record.
fn pcap_by_hand(linktype: u32, records: &[(u32, u32, &[u8])]) -> Vec<u8> {
    let mut b = Vec::new();
    for word in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65_535, linktype] {
        b.extend_from_slice(&word.to_le_bytes());
    }
    for &(sec, usec, data) in records {
        for word in [sec, usec, data.len() as u32, data.len() as u32] {
            b.extend_from_slice(&word.to_le_bytes());
        }
        b.extend_from_slice(data);
    }
    b
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path.to_str().expect("utf-8 temp path").to_owned()
}

fn backward_timestamps_do_not_stall() {
    let lab = common::lab(1);
    let dir = common::tempdir();
    let frames = replay_frames(12);
    let want: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let ms = 1_000_000;
    // Records 2 and 3 swapped, and a step of 1 us back before record 5.
    let swapped: Vec<u64> = [0, ms, 3 * ms, 2 * ms, 4 * ms, 4 * ms - 1_000]
        .into_iter()
        .chain((6..12).map(|i| i * ms))
        .map(|t| T0 + t)
        .collect();
    let pcap = write(
        dir.path(),
        "swapped.pcap",
        &encode(FileFormat::Pcap, &frames, &swapped),
    );
    // Two pcapng sections, the second recorded a day before the first.
    let first: Vec<u64> = (0..6).map(|i| T0 + i * ms).collect();
    let second: Vec<u64> = (0..6).map(|i| T0 - 86_400 * 1_000 * ms + i * ms).collect();
    let mut sections = encode(FileFormat::Pcapng, &frames[..6], &first);
    sections.extend(encode(FileFormat::Pcapng, &frames[6..], &second));
    let pcapng = write(dir.path(), "sections.pcapng", &sections);

    for (what, file, back) in [
        ("swapped records and a 1 us step back", &pcap, 2),
        ("a second pcapng section", &pcapng, 1),
    ] {
        let mut probe = Probe::start(&lab);
        let out = replay(&lab, &["--json", "--replay", file]);
        let r = report(&out);
        assert_eq!(u64_of(&r, "frames"), 12, "{what}: {r}");
        assert_eq!(u64_of(&r, "skipped_too_big"), 0, "{what}: {r}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "replay: {back} timestamps of {file} go back in time"
            )),
            "{what}: says how many timestamps went back: {stderr}"
        );
        assert_same_frames(what, &probe.stop(12), &want);
    }
}

fn absurd_timestamp_fraction_is_refused() {
    // No lab: the file is refused before the interface is looked up.
    let dir = common::tempdir();
    let frames = replay_frames(2);
    let sec = 1_700_000_000;
    let file = write(
        dir.path(),
        "fraction.pcap",
        &pcap_by_hand(1, &[(sec, 0, &frames[0]), (sec, 2_000_000_000, &frames[1])]),
    );
    let out = poolcap_here(&["gen", "-i", "no-such-if0", "--replay", &file]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let line = error_line("--replay of a 2e9 us field", &out);
    assert_eq!(
        line,
        format!(
            "poolcap: cannot replay {file}: 1 records have a timestamp fraction of a second \
             or more"
        )
    );
}

fn skips_frames_the_link_cannot_carry() {
    let lab = common::lab(1);
    let dir = common::tempdir();
    let good = replay_frames(20);
    let mut jumbo = good[0].clone();
    jumbo.resize(9000, 0xa5);
    let runt = good[1][..13].to_vec();
    let mut frames = good.clone();
    frames.insert(5, jumbo);
    frames.insert(12, runt);
    let ts: Vec<u64> = (0..frames.len() as u64).map(|i| T0 + i * 100_000).collect();
    let file = write(
        dir.path(),
        "jumbo.pcap",
        &encode(FileFormat::Pcap, &frames, &ts),
    );

    let mut probe = Probe::start(&lab);
    let out = replay(&lab, &["--json", "--replay", &file, "--loop", "2"]);
    let r = report(&out);
    assert_eq!(u64_of(&r, "frames"), 40, "{r}");
    assert_eq!(u64_of(&r, "skipped_too_big"), 2, "{r}");
    assert_eq!(u64_of(&r, "skipped_malformed"), 2, "{r}");
    let once: Vec<&[u8]> = good.iter().map(Vec::as_slice).collect();
    let want: Vec<&[u8]> = once.iter().chain(&once).copied().collect();
    let got = probe.stop(40);
    assert_eq!(got.len(), 40, "frames in the capture");
    assert_same_frames("a replay skipping a jumbo frame and a runt", &got, &want);

    // The text summary says so too.
    let out = replay(&lab, &["--replay", &file, "--topspeed"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("replay frames skipped: 1 longer than the link carries, 1 malformed"),
        "{stdout}"
    );
}

/// An IPv4/UDP packet of `len` bytes with a valid header checksum, or an IPv6/UDP one.
fn ip_packet(v6: bool, len: usize, id: u8) -> Vec<u8> {
    let mut p = vec![id; len];
    if v6 {
        p[..8].copy_from_slice(&[0x60, 0, 0, 0, 0, 0, 17, 64]);
        p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        return p;
    }
    p[..12].copy_from_slice(&[0x45, 0, 0, 0, 0, id, 0, 0, 64, 17, 0, 0]);
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[12..20].copy_from_slice(&[10, 77, 0, 1, 10, 77, 0, 2]);
    let sum: u32 = p[..20]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let sum = (sum & 0xffff) + (sum >> 16);
    p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    p
}

fn raw_ip_goes_out_behind_ethernet() {
    let lab = common::lab(1);
    let dir = common::tempdir();
    let src: Vec<u8> = lab
        .sender
        .mac
        .split(':')
        .map(|b| u8::from_str_radix(b, 16).expect("sender MAC"))
        .collect();
    let dst = [0x02, 0x70, 0x63, 0x00, 0xff, 0xff];
    let (v4, v6) = (ip_packet(false, 100, 1), ip_packet(true, 200, 2));
    let (v4b, v6b) = (ip_packet(false, 1500, 3), ip_packet(true, 48, 4));
    let behind_ethernet = |p: &Vec<u8>| {
        let ethertype: [u8; 2] = if p[0] >> 4 == 6 { [0x86, 0xdd] } else { [8, 0] };
        [&dst[..], &src, &ethertype, p].concat()
    };
    let records = |packets: &[&Vec<u8>]| -> Vec<(u32, u32, Vec<u8>)> {
        (0..packets.len())
            .map(|i| (1_700_000_000, i as u32 * 100, packets[i].clone()))
            .collect()
    };
    // (link type, packets in the file, packets sent)
    type Case<'a> = (u32, Vec<&'a Vec<u8>>, Vec<&'a Vec<u8>>);
    let cases: [Case; 3] = [
        (101, vec![&v4, &v6, &v4b, &v6b], vec![&v4, &v6, &v4b, &v6b]),
        (228, vec![&v4, &v4b], vec![&v4, &v4b]),
        (229, vec![&v6, &v6b], vec![&v6, &v6b]),
    ];
    for (linktype, packets, sent) in cases {
        let recs = records(&packets);
        let recs: Vec<(u32, u32, &[u8])> = recs.iter().map(|(s, u, d)| (*s, *u, &d[..])).collect();
        let file = write(
            dir.path(),
            &format!("raw{linktype}.pcap"),
            &pcap_by_hand(linktype, &recs),
        );
        let mut probe = Probe::start(&lab);
        let out = replay(&lab, &["--json", "--replay", &file]);
        let r = report(&out);
        assert_eq!(u64_of(&r, "frames"), sent.len() as u64, "{linktype}: {r}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("holds raw IP packets (link type {linktype})"))
                && stderr.contains("synthetic Ethernet header"),
            "{linktype}: says that it wraps the packets: {stderr}"
        );
        let want: Vec<Vec<u8>> = sent.iter().map(|p| behind_ethernet(p)).collect();
        let want: Vec<&[u8]> = want.iter().map(Vec::as_slice).collect();
        assert_same_frames(
            &format!("link type {linktype}"),
            &probe.stop(want.len()),
            &want,
        );
    }

    // Another link type (Linux cooked capture) is refused, naming it.
    let file = write(
        dir.path(),
        "sll.pcap",
        &pcap_by_hand(113, &[(1_700_000_000, 0, &[0u8; 60][..])]),
    );
    let out = poolcap_here(&["gen", "-i", "no-such-if0", "--replay", &file]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let line = error_line("--replay of link type 113", &out);
    assert!(
        line.contains(&file) && line.contains("link type 113 cannot be replayed on Ethernet"),
        "{line}"
    );
}
