//! Exports as collectors read them: a capture file whose flows are known to the byte (VLAN
//! tags, ICMP and ICMPv6 messages, a flow longer than the active timeout and one with a gap
//! longer than the idle timeout, in the file's time) goes through `probe -r FILE --ipfix`,
//! and two independent decoders read the export: nfcapd/nfdump, and tshark's CFLOW/IPFIX
//! dissector on a capture of the datagrams. Both must agree with the file and with the
//! probe's own report: octets are IP bytes (IANA's octetDeltaCount), layer-2 octets the
//! frames', ICMP type and code, VLAN id, ingress interface, and the exporting process's
//! options record counts every record and message it sent.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use libtest_mimic::Trial;
use serde_json::Value;

use crate::common::{lab, netns_command, path_str as s, poolcap_in, tempdir, trial, Background};

pub(crate) fn trials() -> Vec<Trial> {
    let t = |name: &'static str, f: fn()| trial(&format!("collectors::{name}"), f);
    vec![t(
        "ipfix_of_a_file_reads_alike_in_nfdump_and_tshark",
        ipfix_of_a_file_reads_alike_in_nfdump_and_tshark,
    )]
}

/// The first packet's time in the known file (s since the epoch).
const T0: u64 = 1_700_000_000;

/// One flow of the known file, and how many records an export with a 10 s active and a
/// 5 s idle timeout makes of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Known {
    pub proto: u8,
    pub src: &'static str,
    pub sport: u16,
    pub packets: u64,
    /// IP header and payload.
    pub ip_bytes: u64,
    /// Whole frames.
    pub l2_bytes: u64,
    pub vlan: u16,
    /// ICMP (type, code).
    pub icmp: (u8, u8),
    pub records: usize,
}

fn csum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum >> 16) + (sum & 0xffff);
    }
    !(sum as u16)
}

fn ether(vlan: Option<u16>, ethertype: u16, ip: &[u8]) -> Vec<u8> {
    let mut f = [[2u8; 6], [4u8; 6]].concat();
    if let Some(id) = vlan {
        f.extend(0x8100u16.to_be_bytes());
        f.extend(id.to_be_bytes());
    }
    f.extend(ethertype.to_be_bytes());
    f.extend(ip);
    f
}

fn ip4(src: [u8; 4], dst: [u8; 4], proto: u8, l4: &[u8]) -> Vec<u8> {
    let len = (20 + l4.len()) as u16;
    let mut h = vec![0x45, 0];
    h.extend(len.to_be_bytes());
    h.extend([0, 0, 0, 0, 64, proto, 0, 0]);
    h.extend(src);
    h.extend(dst);
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    [h, l4.to_vec()].concat()
}

fn ip6(src: u8, dst: u8, next: u8, l4: &[u8]) -> Vec<u8> {
    let addr = |last: u8| {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        a[15] = last;
        a
    };
    let mut h = vec![0x60, 0, 0, 0];
    h.extend((l4.len() as u16).to_be_bytes());
    h.extend([next, 64]);
    h.extend(addr(src));
    h.extend(addr(dst));
    [h, l4.to_vec()].concat()
}

fn udp(sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    let mut h = Vec::new();
    for x in [sport, dport, 8 + payload as u16, 0] {
        h.extend(x.to_be_bytes());
    }
    h.resize(8 + payload, 0);
    h
}

fn tcp_ack(sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend(sport.to_be_bytes());
    h.extend(dport.to_be_bytes());
    h.extend([0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 0x03, 0xe8, 0, 0, 0, 0]);
    h.resize(20 + payload, 0);
    h
}

fn icmp(kind: u8, code: u8, payload: usize) -> Vec<u8> {
    let mut h = vec![kind, code, 0, 0, 0, 0, 0, 0];
    h.resize(8 + payload, 0);
    h
}

/// Writes the known file (pcap, microseconds) to `path`; returns its flows.
pub(crate) fn write_known_file(path: &Path) -> Vec<Known> {
    // (ms after T0, frame)
    let mut packets: Vec<(u64, Vec<u8>)> = Vec::new();
    let (a, b, c) = ([10, 1, 0, 1], [10, 1, 0, 2], [10, 1, 0, 3]);
    for i in 0..5 {
        packets.push((
            i * 1000,
            ether(Some(42), 0x0800, &ip4(a, b, 17, &udp(1000, 53, 100))),
        ));
    }
    for i in 0..3 {
        packets.push((
            i * 1000 + 500,
            ether(None, 0x0800, &ip4(a, c, 1, &icmp(8, 0, 56))),
        ));
    }
    for i in 0..2 {
        packets.push((
            i * 1000 + 250,
            ether(Some(7), 0x86dd, &ip6(1, 2, 58, &icmp(1, 4, 40))),
        ));
    }
    // 31 s of one TCP flow: three records of at most 10 s each.
    for i in 0..31 {
        let f = ip4([10, 1, 0, 4], [10, 1, 0, 5], 6, &tcp_ack(2000, 80, 200));
        packets.push((i * 1000 + 100, ether(None, 0x0800, &f)));
    }
    // Two packets 20 s apart: two records (idle after 5 s).
    for t in [200, 20_200] {
        let f = ip4([10, 1, 0, 6], [10, 1, 0, 7], 17, &udp(3000, 9, 10));
        packets.push((t, ether(None, 0x0800, &f)));
    }
    packets.sort_by_key(|p| p.0);
    let mut out = Vec::new();
    for x in [
        0xa1b2c3d4u32.to_le_bytes().as_slice(),
        &2u16.to_le_bytes(),
        &4u16.to_le_bytes(),
    ] {
        out.extend(x);
    }
    for x in [0u32, 0, 65535, 1] {
        out.extend(x.to_le_bytes());
    }
    for (ms, frame) in &packets {
        let ts = T0 * 1000 + ms;
        for x in [
            ts / 1000,
            ts % 1000 * 1000,
            frame.len() as u64,
            frame.len() as u64,
        ] {
            out.extend((x as u32).to_le_bytes());
        }
        out.extend(frame);
    }
    std::fs::write(path, out).expect("write the known file");
    let known = |proto, src, sport, packets: u64, ip: u64, l2: u64, vlan, icmp, records| Known {
        proto,
        src,
        sport,
        packets,
        ip_bytes: packets * ip,
        l2_bytes: packets * (ip + l2),
        vlan,
        icmp,
        records,
    };
    vec![
        known(17, "10.1.0.1", 1000, 5, 128, 18, 42, (0, 0), 1),
        known(1, "10.1.0.1", 0, 3, 84, 14, 0, (8, 0), 1),
        known(58, "2001:db8::1", 0, 2, 88, 18, 7, (1, 4), 1),
        known(6, "10.1.0.4", 2000, 31, 240, 14, 0, (0, 0), 3),
        known(17, "10.1.0.6", 3000, 2, 38, 14, 0, (0, 0), 2),
    ]
}

/// One flow as a decoder read it, summed over its records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Read {
    records: usize,
    packets: u64,
    ip_bytes: u64,
    l2_bytes: Option<u64>,
    vlan: u16,
    icmp: (u8, u8),
    ingress: u32,
}

type Flows = BTreeMap<(u8, String, u16), Read>;

fn expected(known: &[Known], l2: bool) -> Flows {
    known
        .iter()
        .map(|k| {
            (
                (k.proto, k.src.to_string(), k.sport),
                Read {
                    records: k.records,
                    packets: k.packets,
                    ip_bytes: k.ip_bytes,
                    l2_bytes: l2.then_some(k.l2_bytes),
                    vlan: k.vlan,
                    icmp: k.icmp,
                    ingress: 0,
                },
            )
        })
        .collect()
}

fn add(flows: &mut Flows, key: (u8, String, u16), r: Read) {
    let f = flows.entry(key).or_default();
    f.records += 1;
    f.packets += r.packets;
    f.ip_bytes += r.ip_bytes;
    f.l2_bytes = r.l2_bytes.map(|b| b + f.l2_bytes.unwrap_or(0));
    (f.vlan, f.icmp, f.ingress) = (r.vlan, r.icmp, r.ingress);
}

fn int<T: std::str::FromStr>(s: &str) -> T {
    s.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a number: `{s}`"))
}

/// The flows nfdump reads from nfcapd's files in `dir`.
fn nfdump_read(dir: &Path) -> Flows {
    let out = Command::new("nfdump")
        .args(["-q", "-N", "-R", s(dir), "-o"])
        .arg("fmt:%pr,%sa,%sp,%pkt,%byt,%in,%svln,%it,%ic")
        .output()
        .expect("run nfdump");
    assert!(out.status.success(), "nfdump: {out:?}");
    let mut flows = Flows::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        assert_eq!(f.len(), 9, "nfdump line {line}");
        let read = Read {
            records: 1,
            packets: int(f[3]),
            ip_bytes: int(f[4]),
            l2_bytes: None,
            ingress: int(f[5]),
            vlan: int(f[6]),
            icmp: (int(f[7]), int(f[8])),
        };
        add(&mut flows, (int(f[0]), f[1].to_string(), int(f[2])), read);
    }
    flows
}

/// What tshark reads from a capture of the export: the flows, and the last options record
/// (messages, flow records, not sent) with the data messages (with flow records) before it.
fn tshark_read(capture: &Path) -> (Flows, Option<(u64, u64, u64)>, u64) {
    const FIELDS: [&str; 15] = [
        "cflow.srcaddr",
        "cflow.srcaddrv6",
        "cflow.srcport",
        "cflow.protocol",
        "cflow.octets",
        "cflow.packets",
        "cflow.layer2_octet_delta_count",
        "cflow.vlanid",
        "cflow.inputint",
        "cflow.icmp_type_code_ipv4",
        "cflow.icmp_ipv6_type",
        "cflow.icmp_ipv6_code",
        "cflow.packetsexp",
        "cflow.flowsexp",
        "cflow.notsent_flows",
    ];
    let mut cmd = Command::new("tshark");
    cmd.args([
        "-r",
        s(capture),
        "-d",
        "udp.port==4739,cflow",
        "-T",
        "fields",
    ])
    .args([
        "-E",
        "separator=,",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=;",
    ]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.stderr(Stdio::null()).output().expect("run tshark");
    assert!(out.status.success(), "tshark: {out:?}");
    let (mut flows, mut stats, mut data_messages) = (Flows::new(), None, 0);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // One line per message; a field's values in its records, `;`-separated.
        let cols: Vec<Vec<&str>> = line
            .split(',')
            .map(|c| c.split(';').filter(|v| !v.is_empty()).collect())
            .collect();
        assert_eq!(cols.len(), FIELDS.len(), "tshark line {line}");
        let (m, f, n) = (&cols[12], &cols[13], &cols[14]);
        if !f.is_empty() {
            stats = Some((int(m[0]), int(f[0]), int(n[0])));
        }
        let records = cols[4].len();
        if records > 0 {
            data_messages += 1;
        }
        for i in 0..records {
            let v6 = cols[0].is_empty();
            let src = if v6 { cols[1][i] } else { cols[0][i] };
            let icmp = if v6 {
                (int(cols[10][i]), int(cols[11][i]))
            } else {
                let tc = u16::from_str_radix(cols[9][i].trim_start_matches("0x"), 16)
                    .expect("icmp type code");
                ((tc >> 8) as u8, tc as u8)
            };
            let read = Read {
                records: 1,
                packets: int(cols[5][i]),
                ip_bytes: int(cols[4][i]),
                l2_bytes: Some(int(cols[6][i])),
                vlan: int(cols[7][i]),
                icmp,
                ingress: int(cols[8][i]),
            };
            add(
                &mut flows,
                (int(cols[3][i]), src.to_string(), int(cols[2][i])),
                read,
            );
        }
    }
    (flows, stats, data_messages)
}

/// The probe's report, summed per flow: (packets, bytes, IP bytes).
pub(crate) fn report_flows(path: &Path) -> BTreeMap<(u8, String, u16), (u64, u64, u64)> {
    let mut flows = BTreeMap::new();
    for line in std::fs::read_to_string(path).expect("read report").lines() {
        let r: Value = serde_json::from_str(line).expect("report line");
        for f in r["flows"]["list"].as_array().expect("flows") {
            let n = |k: &str| f[k].as_u64().unwrap_or_else(|| panic!("{k} in {f}"));
            let key = (
                n("proto") as u8,
                f["src"].as_str().expect("src").to_string(),
                n("sport") as u16,
            );
            let e: &mut (u64, u64, u64) = flows.entry(key).or_default();
            (e.0, e.1, e.2) = (e.0 + n("packets"), e.1 + n("bytes"), e.2 + n("ip_bytes"));
        }
    }
    flows
}

/// Every flow, VLAN tag and ICMP message of the known file, exported from `probe -r` over
/// UDP with a 10 s active and a 5 s idle timeout measured in the file's time (the file is
/// read in well under a second): nfdump and tshark read the same records, with IP octets,
/// frame octets (tshark; nfdump keeps no layer-2 count), VLAN id, ICMP type and code and
/// ingress interface 0 (a file), and these add up to the file and to the probe's report.
/// The options record at the end counts every record exported, none not sent, and every
/// data message before it.
fn ipfix_of_a_file_reads_alike_in_nfdump_and_tshark() {
    let lab = lab(1);
    let netns = &lab.probe.netns;
    let dir = tempdir();
    let file = dir.path().join("known.pcap");
    let known = write_known_file(&file);
    let config = dir.path().join("probe.toml");
    std::fs::write(
        &config,
        "period = \"1s\"\n[[rule]]\nname = \"all\"\nfilter = \"ip or ip6 or (vlan and (ip or ip6))\"\nactions = [\"flows\"]\n",
    )
    .expect("write config");
    let (flows_dir, export, report) = (
        dir.path().join("flows"),
        dir.path().join("export.pcap"),
        dir.path().join("report.jsonl"),
    );
    std::fs::create_dir_all(&flows_dir).expect("mkdir flows");
    let mut cmd = netns_command(netns, "nfcapd");
    cmd.args(["-w", s(&flows_dir), "-p", "4739", "-b", "127.0.0.1"])
        .stdout(Stdio::null());
    let nfcapd = Background::start(cmd, "Bound to");
    let mut cmd = netns_command(netns, "tcpdump");
    cmd.args(["-i", "lo", "-U", "-w", s(&export), "udp", "port", "4739"])
        .stdout(Stdio::null());
    let tcpdump = Background::start(cmd, "listening on");
    let out = poolcap_in(
        netns,
        &[
            "probe",
            "-r",
            s(&file),
            "-c",
            s(&config),
            "-q",
            "--report",
            s(&report),
            "--ipfix",
            "127.0.0.1:4739",
            "--ipfix-active",
            "10s",
            "--ipfix-idle",
            "5s",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "probe: {stderr}");
    assert!(
        stderr.contains("ipfix: 8 flow records exported, 0 not delivered"),
        "{stderr}"
    );
    // tcpdump has the datagrams once the kernel looped them back; -U writes each at once.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (_, log) = tcpdump.stop("INT");
    assert!(log.contains("0 packets dropped by kernel"), "{log}");
    let (code, log) = nfcapd.stop("TERM");
    assert_eq!(code, Some(0), "nfcapd: {log}");

    let probe: BTreeMap<_, _> = report_flows(&report);
    let from_file: BTreeMap<_, _> = known
        .iter()
        .map(|k| {
            (
                (k.proto, k.src.to_string(), k.sport),
                (k.packets, k.l2_bytes, k.ip_bytes),
            )
        })
        .collect();
    assert_eq!(probe, from_file, "the probe's report: wire and IP bytes");
    assert_eq!(nfdump_read(&flows_dir), expected(&known, false), "nfdump");
    let (tshark, stats, data_messages) = tshark_read(&export);
    assert_eq!(tshark, expected(&known, true), "tshark");
    assert_eq!(
        stats,
        Some((data_messages, 8, 0)),
        "options record: messages, flow records, not sent"
    );
}
