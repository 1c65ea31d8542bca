//! Field capture: what an operator meets off the lab's own path. Promiscuous mode (held by
//! each capture socket, given back at exit and at SIGKILL), the link type of non-Ethernet
//! interfaces (a tun device fed by a writer), every interface at once (`-i any`), tcpdump's
//! first-minute habits (`-s 0`, `-w` by extension, `-U`, printed lines, SIGUSR1), pcapng
//! metadata as dumpcap writes it, and loss before the kernel ring (the interface's own drop
//! counters). Files are judged by tcpdump, tshark and capinfos.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use libtest_mimic::Trial;

use crate::common::{
    self, bin, capture, gen, lab, netns_command, num, path_str as s, poolcap_in, stats, tcpdump,
    tcpdump_count, tempdir, trial, Background,
};
use crate::forward::lab3;

pub(crate) fn trials() -> Vec<Trial> {
    let t = |name: &'static str, f: fn()| trial(&format!("field::{name}"), f);
    vec![
        t(
            "promiscuous_while_capturing_and_given_back_at_exit_and_kill",
            promiscuous_while_capturing_and_given_back_at_exit_and_kill,
        ),
        t(
            "probe_forward_and_af_xdp_are_promiscuous_too",
            probe_forward_and_af_xdp_are_promiscuous_too,
        ),
        t(
            "tun_capture_is_raw_ip_byte_for_byte_as_tcpdump",
            tun_capture_is_raw_ip_byte_for_byte_as_tcpdump,
        ),
        t(
            "any_captures_every_interface_with_its_index",
            any_captures_every_interface_with_its_index,
        ),
        t(
            "snaplen_zero_and_format_by_file_name",
            snaplen_zero_and_format_by_file_name,
        ),
        t(
            "packet_buffered_stream_reaches_a_reader_while_capturing",
            packet_buffered_stream_reaches_a_reader_while_capturing,
        ),
        t(
            "printed_lines_match_tcpdump_live_and_from_a_file",
            printed_lines_match_tcpdump_live_and_from_a_file,
        ),
        t(
            "sigusr1_prints_the_accounting_and_goes_on",
            sigusr1_prints_the_accounting_and_goes_on,
        ),
        t(
            "pcapng_metadata_as_dumpcap_writes_it",
            pcapng_metadata_as_dumpcap_writes_it,
        ),
        t(
            "frames_the_interface_drops_are_counted_as_dropped_nic",
            frames_the_interface_drops_are_counted_as_dropped_nic,
        ),
        t(
            "odd_timestamps_are_read_and_unknown_link_types_refused",
            odd_timestamps_are_read_and_unknown_link_types_refused,
        ),
    ]
}

/// The kernel's promiscuity count of `iface` in `netns` (`ip -d link show`).
fn promiscuity(netns: &str, iface: &str) -> u64 {
    let out = Command::new("ip")
        .args(["-n", netns, "-d", "link", "show", "dev", iface])
        .output()
        .expect("ip link show");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .skip_while(|w| *w != "promiscuity")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no promiscuity in {text}"))
}

/// Waits (hang guard: 5 s) until `iface`'s promiscuity is `want`; returns what it was last.
fn promiscuity_becomes(netns: &str, iface: &str, want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = promiscuity(netns, iface);
        if now == want || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Each capture socket holds one promiscuity reference while it is open (as libpcap's),
/// so two queues hold two; an ordinary exit and a SIGKILL give them back (the kernel drops
/// a socket's membership with the socket), and `-p` takes none.
fn promiscuous_while_capturing_and_given_back_at_exit_and_kill() {
    let lab = lab(2);
    let (ns, ifc) = (&lab.probe.netns, &lab.probe.iface);
    assert_eq!(promiscuity(ns, ifc), 0, "before");
    for stop in ["INT", "KILL"] {
        let bg = capture(&lab, &["--queues", "2"]);
        assert_eq!(promiscuity(ns, ifc), 2, "two queues' sockets ({stop})");
        let (code, err) = bg.stop(stop);
        if stop == "INT" {
            assert_eq!(code, Some(0), "{err}");
        }
        assert_eq!(promiscuity_becomes(ns, ifc, 0), 0, "after SIG{stop}");
    }
    let bg = capture(&lab, &["-p"]);
    assert_eq!(promiscuity(ns, ifc), 0, "-p keeps it off");
    let (code, err) = bg.stop("INT");
    assert_eq!(code, Some(0), "{err}");
    // libpcap ignores promiscuous mode on every interface; so does poolcap, -p or not.
    for args in [&["-i", "any", "-q"][..], &["-i", "any", "-q", "-p"]] {
        let mut cmd = netns_command(ns, bin());
        cmd.arg("capture").args(args).stdout(Stdio::null());
        let bg = Background::start(cmd, "listening on any");
        assert_eq!(promiscuity(ns, ifc), 0, "{args:?}");
        let (code, err) = bg.stop("INT");
        assert_eq!(code, Some(0), "{args:?}: {err}");
    }
}

/// The probe and the forwarder ask for promiscuous mode as capture does; AF_XDP, whose
/// sockets cannot ask, holds a packet socket that does, and gives it back at SIGKILL too.
fn probe_forward_and_af_xdp_are_promiscuous_too() {
    let lab = lab3(1);
    let (ns, ifc) = (&lab.probe.netns, &lab.probe.iface);
    let out_if = &lab.probe_fwd.as_ref().expect("three hosts").iface;
    let dir = tempdir();
    let config = dir.path().join("p.toml");
    let rule =
        "period = \"1s\"\n[[rule]]\nname = \"all\"\nfilter = \"ip\"\nactions = [\"count\"]\n";
    std::fs::write(&config, rule).expect("config");
    let probe = common::start_probe(&lab, &["-c", s(&config)]);
    assert_eq!(promiscuity(ns, ifc), 1, "probe");
    let (code, err) = probe.stop("INT");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(promiscuity_becomes(ns, ifc, 0), 0, "after the probe");

    let mut cmd = netns_command(ns, bin());
    cmd.args(["forward", "-i", ifc, "-o", out_if, "-q"]);
    let fwd = Background::start(cmd, "listening on");
    assert_eq!(promiscuity(ns, ifc), 1, "forward's IN");
    let (code, err) = fwd.stop("INT");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(promiscuity_becomes(ns, ifc, 0), 0, "after forward");

    let xdp = capture(&lab, &["--backend", "af_xdp"]);
    assert_eq!(promiscuity(ns, ifc), 1, "AF_XDP's holder socket");
    let _ = xdp.stop("KILL");
    assert_eq!(
        promiscuity_becomes(ns, ifc, 0),
        0,
        "after SIGKILL of AF_XDP"
    );
}

/// Writes `count` UDP datagrams 10.99.0.2:5000 > 10.99.0.1:9 (payload = index) and `count`
/// TCP segments 10.99.0.3:80 > 10.99.0.1:4000 into tun device `dev` of `netns`, as a VPN
/// daemon would: the kernel receives them on `dev` as raw IP packets. Paced (2k packets a
/// second), as tcpdump, the judge, drops some of an unpaced burst.
fn feed_tun(netns: &str, dev: &str, count: usize) {
    let script = r#"
import fcntl, os, socket, struct, sys, time
dev, count = sys.argv[1], int(sys.argv[2])
fd = os.open("/dev/net/tun", os.O_RDWR)
fcntl.ioctl(fd, 0x400454ca, struct.pack("16sH", dev.encode(), 0x0001 | 0x1000))
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
def ip(src, proto, payload):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0, 64, proto, 0,
                    socket.inet_aton(src), socket.inet_aton("10.99.0.1"))
    return h[:10] + struct.pack("!H", csum(h)) + h[12:] + payload
for i in range(count):
    data = struct.pack("!I", i) * 4
    os.write(fd, ip("10.99.0.2", 17, struct.pack("!HHHH", 5000, 9, 8 + len(data), 0) + data))
    seg = struct.pack("!HHIIBBHHH", 80, 4000, i, 0, 0x50, 0x18, 512, 0, 0) + data
    os.write(fd, ip("10.99.0.3", 6, seg))
    time.sleep(0.001)
"#;
    // On one CPU: a writer that migrates puts packets on two CPUs' backlogs, which the
    // kernel may deliver in another order.
    let st = netns_command(netns, "taskset")
        .args(["-c", "0", "python3", "-c", script, dev, &count.to_string()])
        .status()
        .expect("python3");
    assert!(st.success(), "feeding {dev}");
}

/// `tcpdump -r -n -t -xx FILE [FILTER]`: every packet, byte for byte, without times; one
/// string per packet (its summary line and hex lines).
fn hex_dump(file: &Path, filter: &[&str]) -> Vec<String> {
    let out = Command::new("tcpdump")
        .args(["-r"])
        .arg(file)
        .args(["-n", "-t", "-xx"])
        .args(filter)
        .output()
        .expect("tcpdump -r");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut packets: Vec<String> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        match packets.last_mut() {
            Some(p) if line.starts_with('\t') => {
                p.push('\n');
                p.push_str(line);
            }
            _ => packets.push(line.to_owned()),
        }
    }
    packets
}

/// Asserts that two dumps hold the same packets (in any order: see [`feed_tun`]).
fn same_packets(what: &str, mut a: Vec<String>, mut b: Vec<String>) {
    a.sort();
    b.sort();
    let first_diff = a.iter().zip(&b).position(|(x, y)| x != y);
    assert!(
        a.len() == b.len() && first_diff.is_none(),
        "{what}: {} packets against {}; first difference: {:?}",
        a.len(),
        b.len(),
        first_diff.map(|i| (&a[i], &b[i]))
    );
}

/// A tun device has no link-layer header: poolcap says RAW and writes LINKTYPE_RAW, so
/// tcpdump decodes the same packets, byte for byte, as from a live tcpdump's file; a
/// filter selects what tcpdump's selects; tshark reads raw IP; `-r` of the file with a
/// filter keeps its link type.
fn tun_capture_is_raw_ip_byte_for_byte_as_tcpdump() {
    let lab = lab(1);
    let ns = &lab.probe.netns;
    let dir = tempdir();
    for cmd in [
        "ip tuntap add dev tun9 mode tun",
        "ip addr add 10.99.0.1/24 dev tun9",
        "ip link set tun9 up",
    ] {
        let args: Vec<&str> = cmd.split(' ').collect();
        let st = netns_command(ns, args[0])
            .args(&args[1..])
            .status()
            .expect(cmd);
        assert!(st.success(), "{cmd}");
    }
    let (ours, theirs) = (dir.path().join("p.pcap"), dir.path().join("t.pcap"));
    let ours_udp = dir.path().join("pu.pcapng");
    let start = |args: &[&str]| {
        let mut cmd = netns_command(ns, bin());
        cmd.args(["capture", "-i", "tun9", "-q"]).args(args);
        Background::start(cmd, "listening on")
    };
    let p = start(&["-w", s(&ours)]);
    assert!(
        p.stderr
            .iter()
            .any(|l| l.contains("link-type RAW (Raw IP)")),
        "{:?}",
        p.stderr
    );
    let pf = start(&[
        "-w",
        s(&ours_udp),
        "host",
        "10.99.0.2",
        "and",
        "udp",
        "port",
        "5000",
    ]);
    let mut tcmd = netns_command(ns, "tcpdump");
    tcmd.args([
        "-i",
        "tun9",
        "-n",
        "--immediate-mode",
        "-Z",
        "root",
        "-B",
        "16384",
    ])
    .args(["-w", s(&theirs)]);
    let t = Background::start(tcmd, "listening on");
    feed_tun(ns, "tun9", 150);
    std::thread::sleep(Duration::from_millis(300));
    for bg in [p, pf, t] {
        let (code, err) = bg.stop("INT");
        assert_eq!(code, Some(0), "{err}");
        let lost_none = err
            .lines()
            .any(|l| l.starts_with("0 packets dropped by kernel"));
        assert!(lost_none, "a capture lost packets: {err}");
    }
    // What was fed in, not the kernel's answers out of tun9 (ICMP port unreachable, TCP
    // resets, IPv6 router solicitations), which come and go while the captures start.
    let fed = ["src", "host", "10.99.0.2", "or", "src", "host", "10.99.0.3"];
    let ours_all = hex_dump(&ours, &fed);
    assert_eq!(ours_all.len(), 300);
    same_packets("all", ours_all, hex_dump(&theirs, &fed));
    for filter in [&["host", "10.99.0.2"][..], &["tcp", "port", "80"]] {
        same_packets(
            &filter.join(" "),
            hex_dump(&ours, filter),
            hex_dump(&theirs, filter),
        );
    }
    let udp = hex_dump(
        &theirs,
        &["host", "10.99.0.2", "and", "udp", "port", "5000"],
    );
    assert_eq!(udp.len(), 150);
    same_packets("live filter", hex_dump(&ours_udp, &[]), udp);
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&ours)
        .args(["-T", "fields", "-e", "frame.protocols"])
        .output()
        .expect("tshark");
    let protocols = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        protocols
            .lines()
            .filter(|l| l.starts_with("raw:ip:udp"))
            .count(),
        150
    );
    assert_eq!(
        protocols
            .lines()
            .filter(|l| l.starts_with("raw:ip:tcp"))
            .count(),
        150
    );
    // Read back with a filter: raw IP stays raw IP.
    let again = dir.path().join("again.pcap");
    let out = poolcap_in(
        ns,
        &["capture", "-r", s(&ours), "-q", "-w", s(&again), "tcp"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    same_packets("-r tcp", hex_dump(&again, &[]), hex_dump(&theirs, &["tcp"]));
    assert_eq!(hex_dump(&again, &[]).len(), 150);
}

/// The interface index of `iface` in `netns`.
fn ifindex(netns: &str, iface: &str) -> String {
    let out = netns_command(netns, "cat")
        .arg(format!("/sys/class/net/{iface}/ifindex"))
        .output()
        .expect("cat ifindex");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `-i any` with traffic on two interfaces: every frame of both is in the file, each with
/// its interface's index (tshark reads LINUX_SLL2), and the filter runs on every interface.
fn any_captures_every_interface_with_its_index() {
    let lab = lab3(1);
    let sink = lab.sink.as_ref().expect("sink");
    let fwd = lab.probe_fwd.as_ref().expect("probe's second interface");
    let ns = &lab.probe.netns;
    let dir = tempdir();
    let file = dir.path().join("any.pcapng");
    let mut cmd = netns_command(ns, bin());
    cmd.args([
        "capture",
        "-i",
        "any",
        "-q",
        "-w",
        s(&file),
        "udp",
        "port",
        "9",
    ]);
    let bg = Background::start(cmd, "link-type LINUX_SLL2");
    let a = gen(&lab, &["--count", "300", "--rate", "20k"]);
    let out = poolcap_in(
        &sink.netns,
        &[
            "gen",
            "-i",
            &sink.iface,
            "--json",
            "--count",
            "200",
            "--rate",
            "20k",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::thread::sleep(Duration::from_millis(300));
    let (code, err) = bg.stop("INT");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(num(&a, "frames"), 300);
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .args(["-T", "fields", "-e", "sll.ifindex", "-e", "udp.dstport"])
        .output()
        .expect("tshark");
    let fields = String::from_utf8_lossy(&out.stdout);
    let on = |index: &str| {
        fields
            .lines()
            .filter(|l| l.split('\t').next() == Some(index))
            .count()
    };
    let (prb0, prb1) = (ifindex(ns, &lab.probe.iface), ifindex(ns, &fwd.iface));
    assert_eq!((on(&prb0), on(&prb1)), (300, 200), "{fields}");
    assert_eq!(fields.lines().count(), 500, "only what the filter selects");
    assert_eq!(tcpdump_count(&file, &["udp", "port", "9"]), 500);
}

/// `-s 0` is tcpdump's 262144; `-w` picks the format by the file's name unless `--format`
/// says otherwise.
fn snaplen_zero_and_format_by_file_name() {
    let dir = tempdir();
    let source = dir.path().join("src.pcapng");
    let mut w = poolcap_format::CaptureWriter::new(
        std::fs::File::create(&source).expect("create"),
        poolcap_format::FileFormat::Pcapng,
        0,
        "x",
    )
    .expect("writer");
    w.write_packet(1_700_000_000_000_000_000, &[0u8; 60], 60)
        .expect("packet");
    w.finish(None).expect("finish");
    for (name, format, want_magic, want_snap) in [
        ("a.pcap", None, 0xa1b2_c3d4u32, 262_144),
        ("a.cap", None, 0xa1b2_c3d4, 262_144),
        ("a.pcapng", None, 0x0a0d_0d0a, 262_144),
        ("a.pcap.zst", None, 0xfd2f_b528, 262_144),
        ("a.pcap", Some("pcapng"), 0x0a0d_0d0a, 262_144),
        ("a.out", None, 0x0a0d_0d0a, 262_144),
    ] {
        let out_file = dir.path().join(name);
        let mut args = vec![
            "capture",
            "-r",
            s(&source),
            "-q",
            "-s",
            "0",
            "-w",
            s(&out_file),
        ];
        if name.ends_with(".zst") {
            args.extend(["--compress", "zstd"]);
        }
        if let Some(f) = format {
            args.extend(["--format", f]);
        }
        let out = Command::new(bin()).args(&args).output().expect("run");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bytes = std::fs::read(&out_file).expect("read");
        let magic = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
        assert_eq!(magic, want_magic, "{name} {format:?}");
        if magic == 0xa1b2_c3d4 {
            let snap = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
            assert_eq!(snap, want_snap, "{name}: -s 0");
        }
    }
    let out = Command::new(bin())
        .args(["capture", "-r", s(&source), "-q", "-s", "x"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "-s x is refused");
}

/// `-U -w - | tcpdump -r -`: each packet reaches the reader while the capture still runs.
fn packet_buffered_stream_reaches_a_reader_while_capturing() {
    let lab = lab(1);
    let mut cap = netns_command(&lab.probe.netns, bin());
    cap.args(["capture", "-i", &lab.probe.iface, "-q", "-U", "-w", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut cap = cap.spawn().expect("capture");
    let mut reader = Command::new("tcpdump")
        .args(["-r", "-", "-n", "-l", "-q"])
        .stdin(cap.stdout.take().expect("piped"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("tcpdump -r -");
    std::thread::sleep(Duration::from_millis(700));
    gen(&lab, &["--count", "5", "--rate", "1k"]);
    let (tx, rx) = std::sync::mpsc::channel();
    let out = reader.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Hang guard: the 5 lines come long before this, the capture still running.
    let lines: Vec<String> = (0..5)
        .map_while(|_| rx.recv_timeout(Duration::from_secs(10)).ok())
        .collect();
    let running = cap.try_wait().expect("try_wait").is_none();
    let _ = common::netns_command(&lab.probe.netns, "kill")
        .args(["-INT", &cap.id().to_string()])
        .status();
    let _ = cap.wait();
    let _ = reader.wait();
    assert!(running, "the capture was still running");
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert!(lines.iter().all(|l| l.contains("UDP, length")), "{lines:?}");
}

/// The lines of `tcpdump -q -n` after their time.
fn without_time(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split_once(' ').map_or(l, |x| x.1).to_owned())
        .collect()
}

/// `--print` prints what `tcpdump -q -n` prints, live (both on the same traffic) and from
/// a file with `-r`.
fn printed_lines_match_tcpdump_live_and_from_a_file() {
    let lab = lab(1);
    let dir = tempdir();
    let file = dir.path().join("t.pcap");
    let mut cmd = netns_command(&lab.probe.netns, bin());
    cmd.args(["capture", "-i", &lab.probe.iface, "--print", "-c", "20"])
        .stdout(Stdio::piped());
    let ours = Background::start(cmd, "listening on");
    let theirs = tcpdump(&lab, &["-q", "-c", "20", "-w", s(&file)]);
    gen(&lab, &["--count", "20", "--rate", "2k", "--flows", "4"]);
    let (code, err, printed) = ours.wait_with_stdout();
    assert_eq!(code, Some(0), "{err}");
    let (tcode, terr) = theirs.wait();
    assert_eq!(tcode, Some(0), "{terr}");
    let tcpdump_q = Command::new("tcpdump")
        .arg("-r")
        .arg(&file)
        .args(["-q", "-n"])
        .output()
        .expect("tcpdump -r");
    let want = without_time(&String::from_utf8_lossy(&tcpdump_q.stdout));
    assert_eq!(want.len(), 20);
    assert_eq!(without_time(&printed), want, "live");
    let out = Command::new(bin())
        .args(["capture", "-r", s(&file), "--print"])
        .output()
        .expect("poolcap -r");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        without_time(&String::from_utf8_lossy(&out.stdout)),
        want,
        "-r"
    );
}

/// SIGUSR1 prints the accounting so far on stderr, and the capture goes on.
fn sigusr1_prints_the_accounting_and_goes_on() {
    let lab = lab(1);
    let mut bg = capture(&lab, &[]);
    gen(&lab, &["--count", "100", "--rate", "10k"]);
    std::thread::sleep(Duration::from_millis(200));
    let pid = bg.child.id();
    poolcap_sys::process::send_signal(pid, libc::SIGUSR1).expect("SIGUSR1");
    assert!(
        bg.wait_for(
            "100 packets captured, 0 dropped by kernel",
            Duration::from_secs(5)
        ),
        "{:?}",
        bg.stderr
    );
    assert!(
        bg.child.try_wait().expect("try_wait").is_none(),
        "still capturing"
    );
    gen(&lab, &["--count", "50", "--rate", "10k"]);
    std::thread::sleep(Duration::from_millis(200));
    let (code, err) = bg.stop("INT");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("150 packets captured ("), "{err}");
}

/// The options of the Interface Statistics Block of a little-endian pcapng file, walked
/// here block by block (not by poolcap's reader): code -> value bytes.
fn isb_options(bytes: &[u8]) -> Vec<(u16, Vec<u8>)> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
    let mut at = 0;
    while at + 12 <= bytes.len() {
        let (kind, len) = (u32_at(at), u32_at(at + 4) as usize);
        if kind == 5 {
            let mut opts = Vec::new();
            let mut o = at + 20;
            while o + 4 <= at + len - 4 {
                let code = u16::from_le_bytes([bytes[o], bytes[o + 1]]);
                let n = usize::from(u16::from_le_bytes([bytes[o + 2], bytes[o + 3]]));
                if code == 0 {
                    break;
                }
                opts.push((code, bytes[o + 4..o + 4 + n].to_vec()));
                o += 4 + n.next_multiple_of(4);
            }
            return opts;
        }
        at += len;
    }
    panic!("no interface statistics block");
}

/// capinfos shows the section's OS and application and the interface's name, filter and
/// resolution; the statistics block holds the start and end times around the packets and
/// the kernel's received and dropped counts.
fn pcapng_metadata_as_dumpcap_writes_it() {
    let lab = lab(1);
    let dir = tempdir();
    let file = dir.path().join("m.pcapng");
    let before = std::time::SystemTime::now();
    let bg = capture(&lab, &["-w", s(&file), "udp"]);
    gen(&lab, &["--count", "40", "--rate", "2k"]);
    std::thread::sleep(Duration::from_millis(200));
    let (code, err) = bg.stop("INT");
    assert_eq!(code, Some(0), "{err}");
    let out = Command::new("capinfos")
        .arg("-M")
        .arg(&file)
        .output()
        .expect("capinfos");
    let info = String::from_utf8_lossy(&out.stdout);
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    for want in [
        format!("Capture oper-sys:    Linux {}", release.trim()),
        format!("Capture application: poolcap {}", env!("CARGO_PKG_VERSION")),
        "Name = prb0".into(),
        "Filter string = udp".into(),
        "Time precision = nanoseconds (9)".into(),
        "Number of stat entries = 1".into(),
        "Number of packets:   40".into(),
    ] {
        assert!(info.contains(&want), "capinfos lacks `{want}`:\n{info}");
    }
    let bytes = std::fs::read(&file).expect("read");
    let opts = isb_options(&bytes);
    let opt = |code: u16| {
        opts.iter()
            .find(|o| o.0 == code)
            .map(|o| o.1.clone())
            .unwrap_or_else(|| panic!("no option {code} in {opts:?}"))
    };
    let ts = |v: Vec<u8>| {
        let high = u64::from(u32::from_le_bytes(v[..4].try_into().expect("4")));
        let low = u64::from(u32::from_le_bytes(v[4..8].try_into().expect("4")));
        high << 32 | low
    };
    let u64_of = |v: Vec<u8>| u64::from_le_bytes(v[..8].try_into().expect("8"));
    let (start, end) = (ts(opt(2)), ts(opt(3)));
    let f = poolcap_format::read_file(&file).expect("read");
    let first = f.packets.first().expect("packets").ts_ns;
    let last = f.packets.last().expect("packets").ts_ns;
    let since_epoch = before
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_nanos() as u64;
    assert!(
        since_epoch <= start && start <= first,
        "isb_starttime {start} first {first}"
    );
    assert!(last <= end, "isb_endtime {end} last {last}");
    // Received: what the kernel saw (the 40 the filter took); dropped: none.
    assert_eq!((u64_of(opt(4)), u64_of(opt(5))), (40, 0));
}

/// A datagram longer than the receiving veth's MTU is dropped by the interface before any
/// socket sees it (its `rx_dropped`): those count as `dropped_nic`, equal to the
/// interface's own counter, so sent = captured + filtered + dropped_nic.
fn frames_the_interface_drops_are_counted_as_dropped_nic() {
    let lab = lab(1);
    let (ns, ifc) = (&lab.probe.netns, &lab.probe.iface);
    let st = Command::new("ip")
        .args(["-n", ns, "link", "set", "dev", ifc, "mtu", "1000"])
        .status()
        .expect("ip link set mtu");
    assert!(st.success());
    let rx_dropped = || common::if_counters(ns, ifc).expect("counters").rx_dropped;
    let dir = tempdir();
    let json = dir.path().join("s.json");
    let bg = capture(&lab, &["--stats-json", s(&json), "udp"]);
    let before = rx_dropped();
    let small = gen(&lab, &["--count", "300", "--size", "500", "--rate", "20k"]);
    // 200 datagrams of 1400 bytes from a UDP socket, which does not retry what the link
    // refuses (the generator would).
    let st = netns_command(&lab.sender.netns, "python3")
        .args([
            "-c",
            "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             for _ in range(200):\n    try: s.sendto(b'x' * 1400, ('10.77.0.2', 9))\n    \
             except OSError: pass\n",
        ])
        .status()
        .expect("python3");
    assert!(st.success());
    std::thread::sleep(Duration::from_millis(300));
    let (code, err) = bg.stop("INT");
    assert_eq!(code, Some(0), "{err}");
    let dropped = rx_dropped() - before;
    assert_eq!(dropped, 200, "the interface's own count");
    let r = stats(&json);
    assert_eq!(num(&small, "frames"), 300);
    assert_eq!(
        (num(&r, "captured"), num(&r, "dropped_nic")),
        (300, dropped),
        "{r}"
    );
    assert!(
        err.contains("200 packets dropped by the interface"),
        "{err}"
    );
}

/// A pcap record whose microseconds are a million or more is read (tcpdump and Wireshark
/// show the odd time), counted in a warning; a file of a link type poolcap does not know
/// is refused by its number, never read as Ethernet.
fn odd_timestamps_are_read_and_unknown_link_types_refused() {
    let dir = tempdir();
    let frame = [0u8; 60];
    let pcap = |linktype: u32, records: &[(u32, u32)]| {
        let mut b = Vec::new();
        for word in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65_535, linktype] {
            b.extend_from_slice(&word.to_le_bytes());
        }
        for &(sec, usec) in records {
            for word in [sec, usec, 60, 60] {
                b.extend_from_slice(&word.to_le_bytes());
            }
            b.extend_from_slice(&frame);
        }
        b
    };
    let odd = dir.path().join("odd.pcap");
    std::fs::write(&odd, pcap(1, &[(1000, 0), (1000, 2_000_000), (1003, 5)])).expect("write");
    let copy = dir.path().join("copy.pcap");
    let out = Command::new(bin())
        .args(["capture", "-r", s(&odd), "-q", "-w", s(&copy)])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("1 records have a sub-second timestamp field"),
        "{err}"
    );
    assert_eq!(tcpdump_count(&copy, &[]), 3);
    let out = Command::new(bin())
        .args(["check", s(&odd)])
        .output()
        .expect("check");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("malformed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let usb = dir.path().join("usb.pcap");
    std::fs::write(&usb, pcap(189, &[(1000, 0)])).expect("write");
    let out = Command::new(bin())
        .args(["capture", "-r", s(&usb), "-q"])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("link type 189 is not supported"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
}
