//! Probe tests: `poolcap probe` live in a lab and over files, checked against
//! independent tools. Every rule's packet and byte counts must equal what `tcpdump -r`
//! selects with the same filter on a capture of the same traffic (bytes summed by tshark),
//! and the flow tables must equal tshark's `-z conv,...` conversations. Counts are summed
//! over all periods, so a packet lost or counted twice at a period switch or a rule change
//! shows up as a difference.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use etherparse::{Ethernet2Header, IpNumber, Ipv4Header, PacketBuilder, UdpHeader};
use libtest_mimic::Trial;
use serde_json::Value;

use crate::common::{
    bin, gen, lab, num, on_wire, path_str as s, poolcap_in, start_probe, tcpdump_count, tempdir,
    trial, Background, Lab,
};

pub(crate) fn trials() -> Vec<Trial> {
    let t = |name: &'static str, f: fn()| trial(&format!("probe::{name}"), f);
    vec![
        t(
            "rules_match_tcpdump_and_tshark_on_generator_traffic",
            rules_match_tcpdump_and_tshark_on_generator_traffic,
        ),
        t(
            "replay_with_vlan_ipv6_fragments_matches_offline_and_live",
            replay_with_vlan_ipv6_fragments_matches_offline_and_live,
        ),
        t(
            "ctl_changes_rules_without_loss_or_double_count",
            ctl_changes_rules_without_loss_or_double_count,
        ),
        t(
            "buddy_offload_under_load_analyses_every_captured_packet",
            buddy_offload_under_load_analyses_every_captured_packet,
        ),
        t(
            "file_reports_equal_live_reports_and_cut_periods_by_timestamp",
            file_reports_equal_live_reports_and_cut_periods_by_timestamp,
        ),
        t(
            "bad_config_and_commands_fail_cleanly",
            bad_config_and_commands_fail_cleanly,
        ),
    ]
}

/// Time for the last frames the generator sent to be captured and analysed.
const SETTLE: Duration = Duration::from_millis(400);

pub(crate) fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write file");
    p
}

pub(crate) fn stop_probe(bg: Background) -> String {
    std::thread::sleep(SETTLE);
    let (code, stderr) = bg.stop("INT");
    assert_eq!(code, Some(0), "probe exit code; stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "probe panicked:\n{stderr}");
    stderr
}

/// Starts `poolcap probe -c CFG ARGS` in `lab` with its report and control socket in `dir`
/// (`report.jsonl` and `ctl.sock`, returned in that order).
pub(crate) fn start_probe_with_ctl(
    lab: &Lab,
    dir: &Path,
    cfg: &Path,
    args: &[&str],
) -> (Background, PathBuf, PathBuf) {
    let report = dir.join("report.jsonl");
    let socket = dir.join("ctl.sock");
    let files = ["-c", s(cfg), "--report", s(&report), "--ctl", s(&socket)];
    let bg = start_probe(lab, &[&files[..], args].concat());
    (bg, report, socket)
}

/// Runs `poolcap probe -c CFG --report REPORT ARGS` in `lab` while the generator sends
/// `traffic`, then stops it ([`stop_probe`]): the report's records, the probe's stderr and
/// the generator's report.
fn probe_while_sending(
    lab: &Lab,
    (cfg, report): (&Path, &Path),
    args: &[&str],
    traffic: &[&str],
) -> (Vec<Value>, String, Value) {
    let to_report = ["-c", s(cfg), "--report", s(report)];
    let bg = start_probe(lab, &[&to_report[..], args].concat());
    let g = gen(lab, traffic);
    let stderr = stop_probe(bg);
    (records(report), stderr, g)
}

pub(crate) fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l}: {e}")))
        .collect()
}

fn of_rule<'a>(recs: &'a [Value], rule: &str) -> Vec<&'a Value> {
    recs.iter().filter(|r| r["rule"] == rule).collect()
}

/// Packets and bytes of `rule`, summed over every period.
pub(crate) fn totals(recs: &[Value], rule: &str) -> (u64, u64) {
    of_rule(recs, rule).iter().fold((0, 0), |(p, b), r| {
        (p + num(r, "packets"), b + num(r, "bytes"))
    })
}

/// Packets and wire bytes `tcpdump -r FILE FILTER` selects (bytes summed by tshark).
pub(crate) fn tcpdump_selects(file: &Path, filter: &str, dir: &Path) -> (u64, u64) {
    let out = dir.join("selected.pcap");
    let st = Command::new("tcpdump")
        .args(["-r", s(file), "-w", s(&out), filter])
        .output()
        .expect("tcpdump -r -w");
    assert!(
        st.status.success(),
        "tcpdump -r {file:?} {filter}: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    let lens = Command::new("tshark")
        .args(["-n", "-r", s(&out), "-T", "fields", "-e", "frame.len"])
        .output()
        .expect("tshark");
    let lens: Vec<u64> = String::from_utf8_lossy(&lens.stdout)
        .lines()
        .map(|l| l.trim().parse().expect("frame.len"))
        .collect();
    (lens.len() as u64, lens.iter().sum())
}

/// Asserts every rule's totals equal tcpdump's selection on `file`.
fn assert_rules_match_tcpdump(recs: &[Value], rules: &[(&str, &str)], file: &Path, dir: &Path) {
    for (name, filter) in rules {
        let ours = totals(recs, name);
        let theirs = tcpdump_selects(file, filter, dir);
        assert_eq!(
            ours, theirs,
            "rule {name} (`{filter}`): probe vs tcpdump -r"
        );
    }
}

/// One conversation as tshark prints it: unordered endpoints, frames, bytes text.
#[derive(Debug)]
struct Conv {
    frames: u64,
    bytes: (u64, String),
}

/// `tshark -z conv,KIND`: conversations keyed by their two endpoints, sorted.
fn tshark_conv(file: &Path, kind: &str) -> BTreeMap<(String, String), Conv> {
    let out = Command::new("tshark")
        .args(["-n", "-q", "-r", s(file), "-z", &format!("conv,{kind}")])
        .output()
        .expect("tshark -z conv");
    assert!(out.status.success(), "tshark -z conv,{kind}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() >= 12 && w[1] == "<->").then(|| {
                let mut ends = [w[0].to_string(), w[2].to_string()];
                ends.sort();
                let [a, b] = ends;
                (
                    (a, b),
                    Conv {
                        frames: w[9].parse().expect("frames"),
                        bytes: (w[10].parse().expect("bytes"), w[11].to_string()),
                    },
                )
            })
        })
        .collect()
}

/// Whether tshark's rounded byte count ("165 kB", "60 bytes") shows `bytes`.
fn shows(bytes: u64, (value, unit): &(u64, String)) -> bool {
    let scale = match unit.as_str() {
        "bytes" => 1,
        "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return false,
    };
    bytes / scale == *value || (bytes + scale / 2) / scale == *value
}

/// Flow records of `rule` over all periods, summed per unordered pair of endpoints, where
/// `endpoint` names one side of a flow (address, or address:port) or skips it (None).
fn our_conversations(
    recs: &[Value],
    rule: &str,
    endpoint: impl Fn(&Value, &str, &str) -> Option<String>,
) -> BTreeMap<(String, String), (u64, u64)> {
    let mut out = BTreeMap::new();
    for r in of_rule(recs, rule) {
        assert_eq!(
            r["flows"]["evicted"]["flows"], 0,
            "no evictions expected: {r}"
        );
        for f in r["flows"]["list"].as_array().expect("flow list") {
            let (Some(a), Some(b)) = (endpoint(f, "src", "sport"), endpoint(f, "dst", "dport"))
            else {
                continue;
            };
            let mut ends = [a, b];
            ends.sort();
            let [a, b] = ends;
            let e = out.entry((a, b)).or_insert((0, 0));
            e.0 += num(f, "packets");
            e.1 += num(f, "bytes");
        }
    }
    out
}

fn assert_conversations(
    ours: &BTreeMap<(String, String), (u64, u64)>,
    theirs: &BTreeMap<(String, String), Conv>,
    what: &str,
) {
    assert!(!theirs.is_empty(), "{what}: tshark lists no conversation");
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>(),
        "{what}: conversations"
    );
    for (k, (frames, bytes)) in ours {
        let t = &theirs[k];
        assert_eq!(*frames, t.frames, "{what} {k:?}: frames");
        assert!(
            shows(*bytes, &t.bytes),
            "{what} {k:?}: {bytes} bytes vs tshark {:?}",
            t.bytes
        );
    }
}

fn addr4(f: &Value, a: &str, _: &str) -> Option<String> {
    let x = f[a].as_str()?;
    (!x.contains(':')).then(|| x.to_owned())
}

fn addr6(f: &Value, a: &str, _: &str) -> Option<String> {
    let x = f[a].as_str()?;
    x.contains(':').then(|| x.to_owned())
}

fn addr_port(proto: u64) -> impl Fn(&Value, &str, &str) -> Option<String> {
    move |f, a, p| {
        (f["proto"] == proto).then(|| format!("{}:{}", f[a].as_str().unwrap_or(""), f[p]))
    }
}

// ---------------------------------------------------------------------------------------------

const GEN_RULES: [(&str, &str); 4] = [
    ("all", "ip"),
    ("port9", "udp dst port 9"),
    ("src10003", "udp src port 10003"),
    ("big", "greater 500"),
];

fn rules_match_tcpdump_and_tshark_on_generator_traffic() {
    let dir = tempdir();
    let cfg = write(
        dir.path(),
        "probe.toml",
        "period = \"500ms\"\n\
         [[rule]]\nname = \"all\"\nfilter = \"ip\"\nactions = [\"count\", \"flows\", \"sizes\"]\n\
         [[rule]]\nname = \"port9\"\nfilter = \"udp dst port 9\"\nactions = [\"count\"]\n\
         [[rule]]\nname = \"src10003\"\nfilter = \"udp src port 10003\"\nactions = [\"count\"]\n\
         [[rule]]\nname = \"big\"\nfilter = \"greater 500\"\nactions = [\"count\", \"sizes\"]\n",
    );
    let report = dir.path().join("report.jsonl");
    let file = dir.path().join("probe.pcapng");
    let lab = lab(2);
    let (recs, stderr, g) = probe_while_sending(
        &lab,
        (&cfg, &report),
        &["-w", s(&file), "--queues", "2", "--workers", "2"],
        &[
            "--count", "20000", "--rate", "16k", "--flows", "8", "--size", "imix",
        ],
    );
    let periods = of_rule(&recs, "all").len();
    assert!(
        periods >= 2,
        "expected several periods, got {periods}: {stderr}"
    );
    assert_eq!(of_rule(&recs, "all").last().unwrap()["last"], true);
    let in_file = tcpdump_count(&file, &[]);
    let captured: u64 = of_rule(&recs, "all")
        .iter()
        .map(|r| num(&r["accounting"], "captured"))
        .sum();
    assert_eq!(
        captured, in_file,
        "period accounting vs file; stderr:\n{stderr}"
    );
    // Against what the generator put on the wire: every frame captured or counted dropped.
    let dropped: u64 = of_rule(&recs, "all")
        .iter()
        .map(|r| num(&r["accounting"], "dropped_kernel") + num(&r["accounting"], "dropped_pool"))
        .sum();
    assert_eq!(captured + dropped, on_wire(&g), "stderr:\n{stderr}");
    assert_rules_match_tcpdump(&recs, &GEN_RULES, &file, dir.path());
    // The flow table against tshark's UDP and IPv4 conversations.
    assert_conversations(
        &our_conversations(&recs, "all", addr_port(17)),
        &tshark_conv(&file, "udp"),
        "conv,udp",
    );
    assert_conversations(
        &our_conversations(&recs, "all", addr4),
        &tshark_conv(&file, "ip"),
        "conv,ip",
    );
    // The size histogram covers every packet of the rule.
    let sized: u64 = of_rule(&recs, "big")
        .iter()
        .flat_map(|r| r["sizes"].as_object().expect("sizes").values())
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(sized, totals(&recs, "big").0);
}

// ---------------------------------------------------------------------------------------------

pub(crate) const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
pub(crate) const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

/// A capture with plain, VLAN-tagged and fragmented IPv4, IPv6 (TCP, and UDP in a VLAN),
/// TCP conversations in both directions and ARP: what a real trace holds.
pub(crate) fn real_looking_frames() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let mut put = |b: Built, payload: &[u8]| {
        let mut v = Vec::new();
        b.write(&mut v, payload).expect("build frame");
        frames.push(v);
    };
    for i in 0..20usize {
        put(
            Built::Udp(
                PacketBuilder::ethernet2(MAC_A, MAC_B)
                    .ipv4([10, 1, 0, 1], [10, 1, 0, 2], 64)
                    .udp(1000 + (i % 3) as u16, 53),
            ),
            &vec![7u8; 20 + i * 37],
        );
    }
    for i in 0..10usize {
        put(
            Built::Udp(
                PacketBuilder::ethernet2(MAC_A, MAC_B)
                    .single_vlan(7.try_into().unwrap())
                    .ipv4([10, 2, 0, 1], [10, 2, 0, 2], 64)
                    .udp(2000, 53),
            ),
            &vec![1u8; 100 + i],
        );
    }
    for i in 0..6usize {
        put(
            Built::Udp(
                PacketBuilder::ethernet2(MAC_A, MAC_B)
                    .single_vlan(9.try_into().unwrap())
                    .ipv6(
                        [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3],
                        [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4],
                        64,
                    )
                    .udp(3000, 4000),
            ),
            &vec![2u8; 200 + i],
        );
    }
    // TCP handshakes and data, IPv6 and IPv4, both directions.
    let v6a = [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let v6b = [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    for (k, (fwd, flags, len)) in [
        (true, "S", 0),
        (false, "SA", 0),
        (true, "A", 0),
        (true, "PA", 300),
        (false, "A", 0),
        (false, "PA", 1200),
        (true, "A", 0),
        (true, "FA", 0),
        (false, "FA", 0),
        (true, "A", 0),
    ]
    .into_iter()
    .enumerate()
    {
        for v6 in [true, false] {
            let (sp, dp) = if fwd { (40000, 80) } else { (80, 40000) };
            let eth = if fwd {
                PacketBuilder::ethernet2(MAC_A, MAC_B)
            } else {
                PacketBuilder::ethernet2(MAC_B, MAC_A)
            };
            let ip = match (v6, fwd) {
                (true, true) => eth.ipv6(v6a, v6b, 64),
                (true, false) => eth.ipv6(v6b, v6a, 64),
                (false, true) => eth.ipv4([10, 3, 0, 1], [10, 3, 0, 2], 64),
                (false, false) => eth.ipv4([10, 3, 0, 2], [10, 3, 0, 1], 64),
            };
            let mut tcp = ip.tcp(sp, dp, 1000 + k as u32, 8192);
            if flags.contains('S') {
                tcp = tcp.syn();
            }
            if flags.contains('A') {
                tcp = tcp.ack(1);
            }
            if flags.contains('P') {
                tcp = tcp.psh();
            }
            if flags.contains('F') {
                tcp = tcp.fin();
            }
            put(Built::Tcp(tcp), &vec![3u8; len]);
        }
    }
    // SYNs without ACK from many sources to one host: the alert rule's traffic.
    for i in 0..12u8 {
        put(
            Built::Tcp(
                PacketBuilder::ethernet2(MAC_A, MAC_B)
                    .ipv4([10, 5, 0, i + 1], [10, 5, 0, 100], 64)
                    .tcp(50000 + u16::from(i), 443, 1, 1024)
                    .syn(),
            ),
            &[],
        );
    }
    // Two UDP datagrams of 3000 bytes, each in three IPv4 fragments.
    for id in [77u16, 78] {
        frames.extend(fragments(id));
    }
    // ARP requests: counted by rules that select them, in no flow.
    for _ in 0..2 {
        let mut arp = Ethernet2Header {
            source: MAC_A,
            destination: [0xff; 6],
            ether_type: etherparse::EtherType::ARP,
        }
        .to_bytes()
        .to_vec();
        arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        arp.extend_from_slice(&MAC_A);
        arp.extend_from_slice(&[10, 1, 0, 1, 0, 0, 0, 0, 0, 0, 10, 1, 0, 2]);
        arp.resize(60, 0);
        frames.push(arp);
    }
    frames
}

/// The builder states `real_looking_frames` writes from.
enum Built {
    Udp(etherparse::PacketBuilderStep<etherparse::UdpHeader>),
    Tcp(etherparse::PacketBuilderStep<etherparse::TcpHeader>),
}

impl Built {
    fn write(
        self,
        out: &mut Vec<u8>,
        payload: &[u8],
    ) -> Result<(), etherparse::err::packet::BuildWriteError> {
        match self {
            Self::Udp(b) => b.write(out, payload),
            Self::Tcp(b) => b.write(out, payload),
        }
    }
}

fn fragments(id: u16) -> Vec<Vec<u8>> {
    let (src, dst) = ([10, 4, 0, 1], [10, 4, 0, 2]);
    let data = vec![9u8; 3000];
    let whole = Ipv4Header::new((8 + data.len()) as u16, 64, IpNumber::UDP, src, dst).unwrap();
    let udp = UdpHeader::with_ipv4_checksum(5000, 6000, &whole, &data).unwrap();
    let mut datagram = udp.to_bytes().to_vec();
    datagram.extend_from_slice(&data);
    datagram
        .chunks(1480)
        .enumerate()
        .map(|(i, part)| {
            let mut ip = Ipv4Header::new(part.len() as u16, 64, IpNumber::UDP, src, dst).unwrap();
            ip.identification = id;
            ip.more_fragments = (i + 1) * 1480 < datagram.len();
            ip.fragment_offset = ((i * 1480 / 8) as u16).try_into().unwrap();
            ip.header_checksum = ip.calc_header_checksum();
            let mut f = Ethernet2Header {
                source: MAC_A,
                destination: MAC_B,
                ether_type: etherparse::EtherType::IPV4,
            }
            .to_bytes()
            .to_vec();
            f.extend_from_slice(&ip.to_bytes());
            f.extend_from_slice(part);
            f
        })
        .collect()
}

pub(crate) fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let out = std::fs::File::create(path).expect("create pcap");
    let mut w =
        poolcap_format::CaptureWriter::new(out, poolcap_format::FileFormat::Pcap, 65535, "built")
            .expect("pcap header");
    let t0 = 1_700_000_000_000_000_000u64;
    for (i, f) in frames.iter().enumerate() {
        // 200 us apart: a replay takes a few ms.
        w.write_packet(t0 + i as u64 * 200_000, f, f.len() as u32)
            .expect("write packet");
    }
    w.finish(None).expect("finish pcap");
}

const REPLAY_RULES: [(&str, &str); 6] = [
    ("ipall", "ip or ip6 or (vlan and (ip or ip6))"),
    ("udp", "udp"),
    ("vlan", "vlan"),
    ("syn", "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn"),
    ("web6", "ip6 and tcp port 80"),
    ("frag", "ip[6:2] & 0x3fff != 0"),
];

const REPLAY_CONFIG: &str = "period = \"1h\"\n\
    [[rule]]\nname = \"ipall\"\nfilter = \"ip or ip6 or (vlan and (ip or ip6))\"\nactions = [\"flows\"]\n\
    [[rule]]\nname = \"udp\"\nfilter = \"udp\"\nactions = [\"count\"]\n\
    [[rule]]\nname = \"vlan\"\nfilter = \"vlan\"\nactions = [\"sizes\"]\n\
    [[rule]]\nname = \"syn\"\nfilter = \"tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn\"\nactions = [\"alert\"]\nalert = { key = \"dst\", rate = 500 }\n\
    [[rule]]\nname = \"web6\"\nfilter = \"ip6 and tcp port 80\"\nactions = [\"flows\"]\ntop = 1\ntop_by = \"packets\"\n\
    [[rule]]\nname = \"frag\"\nfilter = \"ip[6:2] & 0x3fff != 0\"\nactions = [\"count\"]\n";

/// `rule`'s flow tables against tshark's IPv4, IPv6 and TCP conversations in `file`.
pub(crate) fn assert_flows_match_tshark(recs: &[Value], rule: &str, file: &Path) {
    assert_conversations(
        &our_conversations(recs, rule, addr4),
        &tshark_conv(file, "ip"),
        "conv,ip",
    );
    assert_conversations(
        &our_conversations(recs, rule, addr6),
        &tshark_conv(file, "ipv6"),
        "conv,ipv6",
    );
    assert_conversations(
        &our_conversations(recs, rule, addr_port(6)),
        &tshark_conv(file, "tcp"),
        "conv,tcp",
    );
}

fn replay_with_vlan_ipv6_fragments_matches_offline_and_live() {
    let dir = tempdir();
    let trace = dir.path().join("trace.pcap");
    let frames = real_looking_frames();
    write_pcap(&trace, &frames);
    let cfg = write(dir.path(), "probe.toml", REPLAY_CONFIG);

    // Offline: the same analysis over the file.
    let offline = dir.path().join("offline.jsonl");
    let out = Command::new(bin())
        .args([
            "probe",
            "-q",
            "-r",
            s(&trace),
            "-c",
            s(&cfg),
            "--report",
            s(&offline),
        ])
        .output()
        .expect("probe -r");
    assert!(
        out.status.success(),
        "probe -r: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let off = records(&offline);
    assert_eq!(
        totals(&off, "ipall").0 + 2,
        frames.len() as u64,
        "all but the ARPs"
    );
    assert_rules_match_tcpdump(&off, &REPLAY_RULES, &trace, dir.path());
    assert_flows_match_tshark(&off, "ipall", &trace);
    // 12 SYNs to 10.5.0.100 in a 15 ms trace: above 500/s (7.5 packets), one alert; the
    // single SYN to 10.3.0.2 is not.
    let alerts = off.iter().find(|r| r["rule"] == "syn").unwrap()["alerts"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(
        (alerts[0]["value"].as_str(), num(&alerts[0], "packets")),
        (Some("10.5.0.100"), 12)
    );
    let web6 = off.iter().find(|r| r["rule"] == "web6").unwrap();
    assert_eq!(
        (
            num(&web6["flows"], "count"),
            web6["flows"]["list"].as_array().unwrap().len()
        ),
        (2, 1)
    );

    // Live: replay it through the lab, probe on the receiving side, compare with the file
    // the probe wrote and, when nothing was lost, with the offline report.
    let lab = lab(1);
    let live = dir.path().join("live.jsonl");
    let file = dir.path().join("live.pcapng");
    let bg = start_probe(&lab, &["-c", s(&cfg), "--report", s(&live), "-w", s(&file)]);
    let out = poolcap_in(
        &lab.sender.netns,
        &["gen", "-i", &lab.sender.iface, "--replay", s(&trace)],
    );
    assert!(
        out.status.success(),
        "gen --replay: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stop_probe(bg);
    let on = records(&live);
    assert_rules_match_tcpdump(&on, &REPLAY_RULES, &file, dir.path());
    assert_flows_match_tshark(&on, "ipall", &file);
    assert_eq!(
        tcpdump_count(&file, &[]),
        frames.len() as u64,
        "every replayed frame captured"
    );
    for (name, _) in REPLAY_RULES {
        assert_eq!(
            totals(&on, name),
            totals(&off, name),
            "rule {name}: live vs offline"
        );
    }
}

// ---------------------------------------------------------------------------------------------

const CTL_CONFIG: &str = "period = \"1h\"\n\
    [[rule]]\nname = \"all\"\nfilter = \"udp\"\nactions = [\"count\"]\n\
    [[rule]]\nname = \"p9\"\nfilter = \"udp dst port 9\"\nactions = [\"count\"]\n";

/// `poolcap ctl SOCKET WORDS`: whether it succeeded, and its stdout and stderr.
pub(crate) fn ctl(socket: &Path, words: &[&str]) -> (bool, String) {
    let out = Command::new(bin())
        .args(["ctl", s(socket)])
        .args(words)
        .output()
        .expect("poolcap ctl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn ctl_changes_rules_without_loss_or_double_count() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    let cfg = write(dir.path(), "probe.toml", CTL_CONFIG);
    let lab = lab(2);
    let file = dir.path().join("probe.pcapng");
    let args = ["-w", s(&file), "--queues", "2"];
    let (bg, report, socket) = start_probe_with_ctl(&lab, dir.path(), &cfg, &args);
    let mode = std::fs::metadata(&socket)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "control socket mode");
    let sent = std::cell::Cell::new(0);
    let phase = || {
        let g = gen(&lab, &["--count", "4000", "--rate", "20k", "--flows", "4"]);
        sent.set(sent.get() + on_wire(&g));
        std::thread::sleep(SETTLE);
    };
    phase();
    let (ok, reply) = ctl(&socket, &["rule", "disable", "p9"]);
    assert!(ok && reply.starts_with("ok rule p9 disabled"), "{reply}");
    phase();
    // Refused commands change nothing.
    let (ok, reply) = ctl(&socket, &["rule", "enable", "nope"]);
    assert!(!ok && reply.contains("no rule named `nope`"), "{reply}");
    let (ok, reply) = ctl(&socket, &["frobnicate"]);
    assert!(!ok && reply.contains("unknown command"), "{reply}");
    std::fs::write(&cfg, CTL_CONFIG.replace("udp dst port 9", "udp dst port")).unwrap();
    let (ok, reply) = ctl(&socket, &["reload"]);
    assert!(
        !ok && reply.contains("keeping the running rules")
            && reply.contains("probe.toml:8: rule `p9`"),
        "{reply}"
    );
    let (ok, reply) = ctl(&socket, &["status"]);
    assert!(ok && reply.contains("p9 (disabled)"), "{reply}");
    // A valid file and SIGHUP: p9 back (enabled in the file) and a new rule.
    std::fs::write(
        &cfg,
        format!("{CTL_CONFIG}[[rule]]\nname = \"p10\"\nfilter = \"udp dst port 10\"\nactions = [\"count\"]\n"),
    )
    .unwrap();
    let _ = Command::new("kill")
        .args(["-HUP", &bg.child.id().to_string()])
        .status();
    // The manager looks at the signal flag every 20 ms; ask until the reload shows.
    let reloaded = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        ctl(&socket, &["status"]).1.contains("rules: all, p9, p10")
    });
    assert!(reloaded, "SIGHUP reload: {}", ctl(&socket, &["status"]).1);
    phase();
    let (ok, reply) = ctl(&socket, &["period", "300ms"]);
    assert!(ok, "{reply}");
    phase();
    stop_probe(bg);

    let recs = records(&report);
    let all = of_rule(&recs, "all");
    let p9 = of_rule(&recs, "p9");
    assert_eq!(all.len(), p9.len());
    // Every captured packet counted once, across all switches.
    assert_eq!(totals(&recs, "all").0, tcpdump_count(&file, &["udp"]));
    // And every frame the generator put on the wire captured or counted dropped.
    let acc = |k: &str| -> u64 { all.iter().map(|r| num(&r["accounting"], k)).sum() };
    assert_eq!(
        acc("captured") + acc("dropped_kernel") + acc("dropped_pool"),
        sent.get(),
        "accounting over the periods vs the generator"
    );
    // p9 counted exactly the generator's packets (all to port 9) while enabled, none else.
    for (a, p) in all.iter().zip(&p9) {
        assert_eq!(a["period_start"], p["period_start"]);
        let want = if p["enabled"] == true {
            num(a, "packets")
        } else {
            0
        };
        assert_eq!(num(p, "packets"), want, "{p}");
    }
    // Changes: said when they took effect, and that is where the next period starts.
    let changed: Vec<(&str, &str)> = all
        .iter()
        .flat_map(|r| {
            r["changes"].as_array().into_iter().flatten().map(move |c| {
                assert_eq!(c["at"], r["period_start"], "{r}");
                (
                    c["what"].as_str().unwrap(),
                    r["period_start"].as_str().unwrap(),
                )
            })
        })
        .collect();
    let whats: Vec<&str> = changed.iter().map(|c| c.0).collect();
    assert_eq!(whats.len(), 3, "{whats:?}");
    assert_eq!(whats[0], "rule p9 disabled");
    assert!(
        whats[1].starts_with("reload: period 1h; rules: all, p9, p10"),
        "{whats:?}"
    );
    assert_eq!(whats[2], "period 300ms");
    // The first period ends at the disable: it holds exactly the packets the file stamps
    // before that instant (the first phase).
    let first = num(all[0], "packets");
    let cut = changed[0].1;
    let before = packets_before(&file, cut);
    assert_eq!(first, before, "packets before the switch at {cut}");
    assert!(of_rule(&recs, "p10").iter().all(|r| num(r, "packets") == 0));
    assert!(
        all.len() >= 5,
        "the 300 ms period cut the last phase: {} periods",
        all.len()
    );
}

/// Packets of `file` stamped before the RFC 3339 time `at` (nanosecond precision).
fn packets_before(file: &Path, at: &str) -> u64 {
    let t: std::time::SystemTime = humantime_parse(at);
    let ns = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    poolcap_format::read_file(file)
        .expect("read capture")
        .packets
        .iter()
        .filter(|p| p.ts_ns < ns)
        .count() as u64
}

fn humantime_parse(at: &str) -> std::time::SystemTime {
    // "2026-11-23T14:59:36.135466196Z": date -d is the independent parser.
    let out = Command::new("date")
        .args(["-u", "-d", at, "+%s%N"])
        .output()
        .expect("date");
    let ns: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("date +%s%N");
    std::time::UNIX_EPOCH + Duration::from_nanos(ns)
}

// ---------------------------------------------------------------------------------------------

/// The probe's workers are the engine's: with a heavy extra load, tiny pools and buddy
/// offload, chunks of the hot queue are analysed by the other queue's worker, packets may be
/// dropped, and still the periods' accounting adds up to what was sent and the rules saw
/// exactly the captured packets.
fn buddy_offload_under_load_analyses_every_captured_packet() {
    let dir = tempdir();
    let cfg = write(
        dir.path(),
        "probe.toml",
        "period = \"500ms\"\n[[rule]]\nname = \"all\"\nfilter = \"udp\"\nactions = [\"flows\"]\n",
    );
    let report = dir.path().join("report.jsonl");
    let lab = lab(2);
    let (recs, stderr, g) = probe_while_sending(
        &lab,
        (&cfg, &report),
        &[
            "--queues",
            "2",
            "--workers",
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
    let all = of_rule(&recs, "all");
    let sum = |k: &str| -> u64 { all.iter().map(|r| num(&r["accounting"], k)).sum() };
    let captured = sum("captured");
    assert_eq!(
        captured + sum("dropped_kernel") + sum("dropped_pool") + sum("filtered"),
        num(&g, "frames") - num(&g, "link_dropped"),
        "sent = captured + drops + filtered over the periods; stderr:\n{stderr}"
    );
    assert_eq!(
        totals(&recs, "all").0,
        captured,
        "the rules saw every captured packet"
    );
    let flows: u64 = all
        .iter()
        .flat_map(|r| r["flows"]["list"].as_array().unwrap().iter())
        .map(|f| num(f, "packets"))
        .sum();
    assert_eq!(flows, captured, "flows add up");
    let offloaded: u64 = stderr
        .lines()
        .filter_map(|l| l.split("offloaded out ").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    assert!(offloaded > 0, "no chunk was offloaded: {stderr}");
}

// ---------------------------------------------------------------------------------------------

/// Runs `poolcap probe -q -c CONFIG --report OUT ARGS` (with `stdin` as its standard input)
/// and returns its records.
pub(crate) fn probe_file(
    cfg: &Path,
    out: &Path,
    args: &[&str],
    stdin: Option<&Path>,
) -> Vec<Value> {
    let mut cmd = Command::new(bin());
    cmd.args(["probe", "-q", "-c", s(cfg), "--report", s(out)])
        .args(args);
    if let Some(f) = stdin {
        cmd.stdin(std::fs::File::open(f).expect("open stdin file"));
    }
    let o = cmd.output().expect("poolcap probe -r");
    assert!(
        o.status.success(),
        "probe {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    records(out)
}

/// A report without what depends on when and where it ran: the period's wall-clock times
/// and the kernel's and pool's drops (a file loses nothing; a live probe may).
fn comparable(recs: &[Value]) -> Vec<Value> {
    recs.iter()
        .map(|r| {
            let mut r = r.clone();
            let o = r.as_object_mut().expect("record");
            o.remove("period_start");
            o.remove("period_end");
            let acc = o["accounting"].as_object_mut().expect("accounting");
            acc.remove("dropped_kernel");
            acc.remove("dropped_pool");
            r
        })
        .collect()
}

/// `probe -r` runs the same engine and rules as `probe -i`: over the file a live probe wrote,
/// with 2 workers, from a path and from standard input (zstd-compressed), its report equals
/// the live one; and its periods follow the packets' timestamps, each holding exactly the
/// file's packets recorded in it.
fn file_reports_equal_live_reports_and_cut_periods_by_timestamp() {
    let dir = tempdir();
    let cfg = write(
        dir.path(),
        "probe.toml",
        "period = \"1h\"\n\
         [[rule]]\nname = \"all\"\nfilter = \"ip\"\nactions = [\"count\", \"flows\", \"sizes\"]\n\
         [[rule]]\nname = \"port9\"\nfilter = \"udp dst port 9\"\nactions = [\"count\"]\n\
         [[rule]]\nname = \"big\"\nfilter = \"greater 500\"\nactions = [\"sizes\"]\n",
    );
    let live = dir.path().join("live.jsonl");
    let file = dir.path().join("live.pcapng");
    let lab = lab(2);
    let (on, _, _) = probe_while_sending(
        &lab,
        (&cfg, &live),
        &["-w", s(&file)],
        &[
            "--count", "6000", "--rate", "10k", "--flows", "8", "--size", "imix",
        ],
    );
    let in_file = tcpdump_count(&file, &[]);
    assert!(in_file > 0, "nothing captured");

    let off = probe_file(
        &cfg,
        &dir.path().join("off.jsonl"),
        &["-r", s(&file), "--workers", "2"],
        None,
    );
    assert_eq!(comparable(&off), comparable(&on), "probe -r vs probe -i");
    for r in &off {
        let acc = &r["accounting"];
        assert_eq!(
            (
                num(acc, "captured"),
                num(acc, "dropped_kernel"),
                num(acc, "dropped_pool")
            ),
            (in_file, 0, 0),
            "a file loses nothing"
        );
    }
    let zst = dir.path().join("live.pcapng.zst");
    let z = Command::new("zstd")
        .args(["-q", "-f", s(&file), "-o", s(&zst)])
        .status()
        .expect("zstd");
    assert!(z.success());
    let piped = probe_file(
        &cfg,
        &dir.path().join("stdin.jsonl"),
        &["-r", "-"],
        Some(&zst),
    );
    assert_eq!(
        comparable(&piped),
        comparable(&off),
        "probe -r - vs probe -r FILE"
    );

    // Short periods, paced: each period holds the packets recorded in it.
    let short = write(
        dir.path(),
        "short.toml",
        "period = \"150ms\"\n[[rule]]\nname = \"all\"\nfilter = \"ip\"\nactions = [\"count\"]\n",
    );
    let cut = probe_file(
        &short,
        &dir.path().join("cut.jsonl"),
        &["-r", s(&file), "--speed", "4", "--workers", "2"],
        None,
    );
    assert!(cut.len() >= 3, "periods: {}", cut.len());
    let last = cut.len() - 1;
    for (i, r) in cut.iter().enumerate() {
        let start = packets_before(&file, r["period_start"].as_str().unwrap());
        let end = if i == last {
            in_file
        } else {
            packets_before(&file, r["period_end"].as_str().unwrap())
        };
        assert_eq!(num(r, "packets"), end - start, "period {i}: {r}");
        assert_eq!(num(&r["accounting"], "captured"), end - start, "period {i}");
    }
}

// ---------------------------------------------------------------------------------------------

fn bad_config_and_commands_fail_cleanly() {
    let dir = tempdir();
    let bad = write(
        dir.path(),
        "bad.toml",
        "period = \"1s\"\n[[rule]]\nname = \"web\"\nfilter = \"tcp port\"\nactions = [\"count\"]\n",
    );
    let trace = dir.path().join("t.pcap");
    write_pcap(&trace, &real_looking_frames());
    let out = Command::new(bin())
        .args(["probe", "-r", s(&trace), "-c", s(&bad)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!(
            "{}:4: rule `web`: filter `tcp port`",
            bad.display()
        )),
        "{err}"
    );
    let unknown = write(dir.path(), "unknown.toml", "period = \"1s\"\n[[rule]]\nname = \"x\"\nfilter = \"ip\"\nactions = [\"count\"]\nsample = 3\n");
    let out = Command::new(bin())
        .args(["probe", "-r", s(&trace), "-c", s(&unknown)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unknown.toml:6: rule `x`: unknown field `sample`"),
        "{err}"
    );
    let (ok, reply) = ctl(&dir.path().join("none.sock"), &["status"]);
    assert!(!ok && reply.contains("cannot connect"), "{reply}");
}
