//! Hardening of the command line and the lab tools: a capture whose stderr closes
//! or that gets SIGHUP still ends with its statistics and file; output paths are checked before
//! capturing and never followed through a symbolic link; privileges are given up once
//! everything is open, and the capabilities a capture needs are named when missing; the pool
//! fits the memory cgroup; `check --expect` is exact; demos and labs leave nothing running.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use libtest_mimic::Trial;

use crate::common::{
    bin, capture, check_sequences, gen, lab, netns_command, num, path_str, poolcap_in, stats,
    tcpdump_count, tempdir, thread_identities, trial, Background, Lab,
};

pub(crate) fn trials() -> Vec<Trial> {
    let t = |name: &'static str, f: fn()| trial(&format!("cli::{name}"), f);
    vec![
        t(
            "closed_stderr_keeps_statistics_and_file",
            closed_stderr_keeps_statistics_and_file,
        ),
        t("sighup_stops_with_summary", sighup_stops_with_summary),
        t(
            "output_paths_checked_at_start",
            output_paths_checked_at_start,
        ),
        t(
            "check_expect_is_exact_and_reads_compressed",
            check_expect_is_exact_and_reads_compressed,
        ),
        t(
            "privileges_dropped_after_opening",
            privileges_dropped_after_opening,
        ),
        t(
            "needed_capabilities_suffice_or_are_named",
            needed_capabilities_suffice_or_are_named,
        ),
        t(
            "forward_and_probe_ask_for_what_af_xdp_needs",
            forward_and_probe_ask_for_what_af_xdp_needs,
        ),
        t("pool_must_fit_memory_cgroup", pool_must_fit_memory_cgroup),
        t(
            "lab_down_leaves_running_processes_unless_forced",
            lab_down_leaves_running_processes_unless_forced,
        ),
        t("demo_leaves_nothing_behind", demo_leaves_nothing_behind),
        t(
            "list_interfaces_and_missing_arguments",
            list_interfaces_and_missing_arguments,
        ),
    ]
}

/// Time for the last frames the generator handed to the kernel to reach the capture ring.
const SETTLE: Duration = Duration::from_millis(300);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `cmd` and returns its output.
fn output(mut cmd: Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"))
}

/// Asserts a failed run printed exactly one line, starting `poolcap:`, mentioning `what`.
fn assert_one_line_error(out: &Output, what: &str, context: &str) {
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        !out.status.success() && out.status.code().is_some(),
        "{context}: exit {:?}, want an error exit; stderr:\n{stderr}",
        out.status
    );
    assert!(
        lines.len() == 1 && lines[0].starts_with("poolcap:") && lines[0].contains(what),
        "{context}: want one line `poolcap: ...{what}...`, got:\n{stderr}"
    );
}

/// Waits (up to `limit`, a bound against hanging, not a measurement) until `done` holds.
fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------------------------

/// `poolcap capture ... 2> >(head -c 1)`: stderr is a pipe closed by its reader. The status
/// line and the summary then fail with EPIPE; the capture must still exit 0 with its
/// statistics file and capture file complete (it used to panic, exit 101, and write neither).
fn closed_stderr_keeps_statistics_and_file() {
    let lab = lab(1);
    let dir = tempdir();
    let file = dir.path().join("e.pcapng");
    let sj = dir.path().join("e.json");
    let mut cmd = netns_command(&lab.probe.netns, bin());
    // Not -q: the status line printer must survive the closed pipe too.
    cmd.args(["capture", "-i", &lab.probe.iface, "-w"])
        .args([path_str(&file), "--stats-json", path_str(&sj)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn capture");
    let mut err = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    while !line.contains("listening on") {
        line.clear();
        let n = err.read_line(&mut line).expect("read stderr");
        assert!(n > 0, "capture ended before listening");
    }
    drop(err); // the reader goes away: every later write to stderr fails with EPIPE
    let g = gen(&lab, &["--count", "2000", "--gen-id", "31"]);
    assert_eq!(num(&g, "frames"), 2000, "{g}");
    // Past one status period, so the status line is printed into the closed pipe.
    std::thread::sleep(Duration::from_millis(1300));
    poolcap_sys::process::interrupt(child.id()).expect("SIGINT");
    let status = child.wait().expect("wait");
    assert_eq!(
        status.code(),
        Some(0),
        "capture with closed stderr: {status}"
    );
    let s = stats(&sj);
    assert_eq!(num(&s, "captured"), 2000, "{s}");
    assert_eq!(num(&s, "written"), 2000, "{s}");
    assert_eq!(tcpdump_count(&file, &[]), 2000);
}

/// SIGHUP (terminal closed, ssh session ended) stops a capture as SIGTERM does: summary,
/// statistics, exit 0. It used to kill it with no summary (exit 129).
fn sighup_stops_with_summary() {
    let lab = lab(1);
    let dir = tempdir();
    let sj = dir.path().join("h.json");
    let bg = capture(&lab, &["--stats-json", path_str(&sj)]);
    gen(&lab, &["--count", "1000"]);
    std::thread::sleep(SETTLE);
    let (code, stderr) = bg.stop("HUP");
    assert_eq!(code, Some(0), "after SIGHUP:\n{stderr}");
    assert!(stderr.contains("1000 packets captured"), "{stderr}");
    assert_eq!(num(&stats(&sj), "captured"), 1000);
}

/// Runs `poolcap capture -i prb0 --duration 5s ARGS` in the lab's probe host (a capture
/// whose ARGS are refused ends at once): its output.
fn capture_for_5s(lab: &Lab, args: &[&str]) -> std::process::Output {
    let capture = ["capture", "-i", "prb0", "--duration", "5s"];
    poolcap_in(&lab.probe.netns, &[&capture[..], args].concat())
}

/// A `--stats-json` path that cannot be written fails before capturing (exit 2, one line),
/// not after the capture; and no output file is written through a symbolic link, so a link
/// planted in a shared directory cannot make a root capture overwrite its target.
fn output_paths_checked_at_start() {
    let lab = lab(1);
    let dir = tempdir();
    let out = capture_for_5s(&lab, &["--stats-json", "/nonexistent-dir/s.json"]);
    assert_one_line_error(
        &out,
        "/nonexistent-dir/s.json",
        "--stats-json in a missing dir",
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    // The OS error is printed once, not once by the message and again as its cause.
    let out = capture_for_5s(&lab, &["-w", "/nonexistent-dir/x.pcapng"]);
    assert_one_line_error(&out, "/nonexistent-dir/x.pcapng", "-w in a missing dir");
    assert_eq!(
        text(&out.stderr)
            .matches("No such file or directory")
            .count(),
        1,
        "{}",
        text(&out.stderr)
    );

    // A capture that never starts (bad filter) leaves no empty statistics file behind.
    let sj = dir.path().join("never.json");
    let out = poolcap_in(
        &lab.probe.netns,
        &[
            "capture",
            "-i",
            "prb0",
            "--stats-json",
            path_str(&sj),
            "udp",
            "prot",
            "53",
        ],
    );
    assert_one_line_error(&out, "syntax error", "bad filter with --stats-json");
    assert!(
        !sj.exists(),
        "a capture that never started left {}",
        sj.display()
    );

    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"root-owned data").expect("victim");
    let link = dir.path().join("link.pcapng");
    std::os::unix::fs::symlink(&victim, &link).expect("symlink");
    let real = dir.path().join("real.pcapng");
    for args in [
        vec!["-w", path_str(&link)],
        vec!["-w", path_str(&real), "--stats-json", path_str(&link)],
    ] {
        let out = capture_for_5s(&lab, &args);
        assert_one_line_error(&out, "symbolic link", &format!("{args:?}"));
        assert_eq!(
            std::fs::read(&victim).expect("victim"),
            b"root-owned data",
            "{args:?} wrote through the link"
        );
    }
}

/// `check --expect N` passes exactly frames 0..N, each once: a file with more frames (the
/// generator sent more) or duplicates fails, with the reason. zstd and gzip files, as
/// `capture --compress` writes them, are read whatever their name.
fn check_expect_is_exact_and_reads_compressed() {
    let lab = lab(1);
    let dir = tempdir();
    let zst = dir.path().join("c.pcapng.zst");
    let bg = capture(&lab, &["--compress", "zstd:1", "-w", path_str(&zst)]);
    gen(&lab, &["--count", "2000", "--gen-id", "32"]);
    std::thread::sleep(SETTLE);
    let (code, stderr) = bg.stop("INT");
    assert_eq!(code, Some(0), "{stderr}");
    let check = |file: &Path, expect: &str| {
        output({
            let mut c = Command::new(bin());
            c.arg("check").arg(file).args(["--expect", expect]);
            c
        })
    };
    let ok = check(&zst, "2000");
    assert!(ok.status.success(), "zstd file: {}", text(&ok.stderr));
    assert!(
        text(&ok.stdout).contains("2000 unique, 0 missing"),
        "{}",
        text(&ok.stdout)
    );

    let fewer = check(&zst, "1000");
    assert_one_line_error(&fewer, "1000 extra", "--expect 1000 of 2000 frames");

    // The same packets, uncompressed, then with 5 frames twice, gzip-compressed and
    // without an extension.
    let plain = poolcap::capfile::read(&zst).expect("read zstd capture");
    assert_eq!(plain.packets.len(), 2000);
    let mut w = poolcap_format::CaptureWriter::new(
        Vec::new(),
        poolcap_format::FileFormat::Pcap,
        262_144,
        "prb0",
    )
    .expect("pcap header");
    for p in plain.packets.iter().chain(&plain.packets[..5]) {
        w.write_packet(p.ts_ns, &p.data, p.orig_len)
            .expect("record");
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&w.finish(None).expect("finish"))
        .expect("gzip");
    let dup = dir.path().join("dup");
    std::fs::write(&dup, gz.finish().expect("gzip")).expect("write dup");
    let dups = check(&dup, "2000");
    assert_one_line_error(&dups, "5 duplicated", "5 duplicated frames");
}

/// Privileges after everything is open, checked on every thread of the running capture:
/// `-Z nobody` runs as nobody with no capabilities, yet writes its file and its statistics
/// into a directory only root may write to (both were opened before); without `-Z` root stays
/// root (no `poolcap` user here, or that user if there is one) and `-Z root` stays root, both
/// with no capabilities left.
fn privileges_dropped_after_opening() {
    let lab = lab(1);
    let dir = tempdir(); // mode 0700, owned by root
    let poolcap_uid = Command::new("id")
        .args(["-u", "poolcap"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| text(&o.stdout).trim().to_owned());
    let default_uid = poolcap_uid.unwrap_or_else(|| "0".to_owned());
    for (z, uid) in [
        (Some("nobody"), "65534"),
        (None, default_uid.as_str()),
        (Some("root"), "0"),
    ] {
        let file = dir.path().join("z.pcapng");
        let sj = dir.path().join("z.json");
        let mut args = vec!["-w", path_str(&file), "--stats-json", path_str(&sj)];
        if let Some(user) = z {
            args.extend(["-Z", user]);
        }
        let bg = capture(&lab, &args);
        let ids = thread_identities(bg.child.id());
        let want = format!("{uid} {uid} {uid} {uid}");
        assert!(
            ids.len() > 1 && ids.iter().all(|(u, caps)| *u == want && *caps == 0),
            "-Z {z:?}: want every thread at uid {uid} with no capabilities: {ids:?}"
        );
        gen(&lab, &["--count", "1000"]);
        std::thread::sleep(SETTLE);
        let (code, stderr) = bg.stop("INT");
        assert_eq!(code, Some(0), "-Z {z:?}:\n{stderr}");
        assert_eq!(num(&stats(&sj), "written"), 1000, "-Z {z:?}");
        assert_eq!(check_sequences(&file, 1000), (1000, 1000, 0, 0), "-Z {z:?}");
    }
    // An unknown user is bad usage, before anything is opened.
    let out = capture_for_5s(&lab, &["-Z", "no-such-user-x"]);
    assert_one_line_error(&out, "no-such-user-x", "-Z unknown");
    assert_eq!(out.status.code(), Some(2));
}

/// `ip netns exec NETNS [prlimit ...] setpriv ... poolcap ARGS`: poolcap as `nobody` holding
/// exactly `caps` (ambient), or, with `caps` starting with `-`, as root without them.
fn restricted(netns: &str, caps: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("ip");
    // A fixed memlock limit (lowered: raising it needs CAP_SYS_RESOURCE), so what AF_XDP
    // needs does not depend on the machine's default.
    cmd.args([
        "netns",
        "exec",
        netns,
        "prlimit",
        "--memlock=4194304:4194304",
    ]);
    cmd.arg("setpriv");
    if caps.starts_with('-') {
        cmd.arg(format!("--bounding-set={caps}"));
    } else {
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(format!("--inh-caps={caps}"))
            .arg(format!("--ambient-caps={caps}"));
    }
    cmd.arg("--").arg(bin()).args(args);
    cmd
}

/// With only the capabilities a backend needs, as an unprivileged user, capture works
/// (AF_PACKET: CAP_NET_RAW; AF_XDP: CAP_NET_RAW, CAP_NET_ADMIN, CAP_BPF with a UMEM under the
/// memlock limit); without one, the error names exactly the capability missing.
fn needed_capabilities_suffice_or_are_named() {
    let lab = lab(1);
    let dir = tempdir();
    let mut perms = std::fs::metadata(dir.path()).expect("dir").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o777);
    std::fs::set_permissions(dir.path(), perms).expect("chmod");
    let ns = lab.probe.netns.clone();
    // (backend caps, extra args) that must capture.
    let small_pool = ["--pool", "64,16"]; // 1024 frames of 2 KiB: a 2 MiB UMEM, under 4 MiB
    for (what, caps, extra) in [
        ("af_packet", "+net_raw", &[][..]),
        ("af_xdp", "+net_raw,+net_admin,+bpf", &small_pool[..]),
    ] {
        let sj = dir.path().join(format!("{what}.json"));
        let file = dir.path().join(format!("{what}.pcapng"));
        let mut args = vec!["capture", "-q", "-i", "prb0", "--backend", what, "-w"];
        args.extend([path_str(&file), "--stats-json", path_str(&sj)]);
        args.extend(extra);
        let bg = Background::start(restricted(&ns, caps, &args), "listening on");
        gen(&lab, &["--count", "500"]);
        std::thread::sleep(SETTLE);
        let (code, stderr) = bg.stop("INT");
        assert_eq!(code, Some(0), "{what} with {caps}:\n{stderr}");
        assert_eq!(num(&stats(&sj), "written"), 500, "{what} with {caps}");
        assert_eq!(tcpdump_count(&file, &[]), 500, "{what} with {caps}");
    }
    let base = ["capture", "-q", "-i", "prb0", "--duration", "5s"];
    let cases: [(&str, &str, &[&str]); 5] = [
        ("-net_raw", "capturing packets needs CAP_NET_RAW", &[]),
        (
            "-net_admin",
            "AF_XDP capture needs CAP_NET_ADMIN",
            &["--backend", "af_xdp"],
        ),
        (
            "+net_raw,+net_admin",
            "AF_XDP capture needs CAP_BPF",
            &["--backend", "af_xdp"],
        ),
        (
            "+net_raw,+net_admin,+bpf",
            "AF_XDP capture needs CAP_IPC_LOCK (its UMEM of 32 MiB",
            &["--backend", "af_xdp"],
        ),
        (
            "+net_raw",
            "-Z needs CAP_SETUID and CAP_SETGID",
            &["-Z", "daemon"],
        ),
    ];
    for (caps, want, extra) in cases {
        let mut args = base.to_vec();
        args.extend(extra);
        let out = output(restricted(&ns, caps, &args));
        assert_one_line_error(&out, want, &format!("{caps} {extra:?}"));
    }
}

/// `forward` and `probe` with `--backend af_xdp` ask for what AF_XDP needs, as `capture`
/// does: as an unprivileged user holding only CAP_NET_RAW (enough for AF_PACKET), the one-line
/// error names CAP_NET_ADMIN and CAP_BPF before anything is opened; and with those too, the
/// UMEM over the memlock limit names CAP_IPC_LOCK. `probe --in-kernel` names what its tc
/// programs need.
fn forward_and_probe_ask_for_what_af_xdp_needs() {
    let lab = poolcap_lab::Lab::unique(1, 3).unwrap_or_else(|e| panic!("lab up: {e}"));
    let dir = tempdir();
    let config = dir.path().join("probe.toml");
    std::fs::write(
        &config,
        "period = \"1s\"\n[[rule]]\nname = \"all\"\nfilter = \"ip\"\nactions = [\"count\"]\n",
    )
    .expect("probe config");
    let mut perms = std::fs::metadata(dir.path()).expect("dir").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(dir.path(), perms).expect("chmod");
    let forward = [
        "forward",
        "-q",
        "-i",
        "prb0",
        "-o",
        "prb1",
        "--backend",
        "af_xdp",
    ];
    let probe = [
        "probe",
        "-q",
        "-i",
        "prb0",
        "-c",
        path_str(&config),
        "--backend",
        "af_xdp",
    ];
    for (args, what) in [
        (&forward[..], "AF_XDP forwarding"),
        (&probe[..], "AF_XDP capture"),
    ] {
        let out = output(restricted(&lab.probe.netns, "+net_raw", args));
        let want = format!("{what} needs CAP_NET_ADMIN and CAP_BPF");
        assert_one_line_error(&out, &want, &format!("{args:?} with CAP_NET_RAW"));
        let out = output(restricted(
            &lab.probe.netns,
            "+net_raw,+net_admin,+bpf",
            args,
        ));
        let want = format!("{what} needs CAP_IPC_LOCK (its UMEM of 32 MiB");
        assert_one_line_error(&out, &want, &format!("{args:?} with the XDP capabilities"));
    }
    // The in-kernel probe goes through the same launch: its tc programs are checked for
    // before any is loaded.
    let in_kernel = [
        "probe",
        "-q",
        "-i",
        "prb0",
        "-c",
        path_str(&config),
        "--in-kernel",
    ];
    let out = output(restricted(&lab.probe.netns, "+net_raw", &in_kernel));
    let want = "placing probe rules in the kernel needs CAP_NET_ADMIN and CAP_BPF";
    assert_one_line_error(&out, want, "--in-kernel with CAP_NET_RAW");
}

/// A memory cgroup this test creates and removes, v2 or v1, whichever has the controller.
struct MemCgroup {
    dir: PathBuf,
}

impl MemCgroup {
    fn new(limit: u64) -> MemCgroup {
        let name = format!("poolcap-test-{}", std::process::id());
        let has_memory = |root: &str| {
            std::fs::read_to_string(format!("{root}/cgroup.controllers"))
                .is_ok_and(|c| c.split_whitespace().any(|x| x == "memory"))
        };
        let (dir, limit_file) = if let Some(root) = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .into_iter()
            .find(|r| has_memory(r))
        {
            // Children of the root cgroup get the controller through its subtree_control.
            let _ = std::fs::write(format!("{root}/cgroup.subtree_control"), "+memory");
            (Path::new(root).join(&name), "memory.max")
        } else if Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists() {
            (
                Path::new("/sys/fs/cgroup/memory").join(&name),
                "memory.limit_in_bytes",
            )
        } else {
            panic!("no memory cgroup controller (v2 or v1) to test with");
        };
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        let cg = MemCgroup { dir };
        std::fs::write(cg.dir.join(limit_file), limit.to_string()).expect("set limit");
        cg
    }

    /// `sh -c 'echo $$ > cgroup.procs; exec nsenter --net=NETNS poolcap ARGS'`. nsenter,
    /// not `ip netns exec`, which mounts a fresh /sys and with it hides the cgroup files.
    fn run_in(&self, netns: &str, args: &[&str]) -> Output {
        let procs = self.dir.join("cgroup.procs");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"echo $$ > "$0" && exec nsenter "$@""#)
            .arg(&procs)
            .arg(format!("--net=/run/netns/{netns}"))
            .arg(bin())
            .args(args);
        output(cmd)
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// In a 256 MiB memory cgroup a 2 GB pool is refused before anything is allocated (it used
/// to be allocated against the machine's MemAvailable and end with the OOM killer), while a
/// small pool still captures.
fn pool_must_fit_memory_cgroup() {
    let lab = lab(1);
    let cg = MemCgroup::new(256 << 20);
    let big = cg.run_in(
        &lab.probe.netns,
        &[
            "capture",
            "-q",
            "-i",
            "prb0",
            "--duration",
            "5s",
            "--pool",
            "1000000,1",
        ],
    );
    assert_one_line_error(&big, "MiB are available", "--pool 1000000,1 in 256 MiB");
    let available: u64 = text(&big.stderr)
        .split("only ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `only N MiB`: {}", text(&big.stderr)));
    assert!(available <= 256, "{}", text(&big.stderr));
    let small = cg.run_in(
        &lab.probe.netns,
        &[
            "capture",
            "-q",
            "-i",
            "prb0",
            "--duration",
            "1s",
            "--pool",
            "64,16",
        ],
    );
    assert!(
        small.status.success(),
        "small pool: {}",
        text(&small.stderr)
    );
}

/// A lab name unique to this test process.
fn lab_name(tag: &str) -> String {
    format!("{tag}{}", std::process::id())
}

/// Removes lab `name` (and ends what runs in it) when dropped, for tests that build labs
/// through the command line.
struct LabByName(String);

impl Drop for LabByName {
    fn drop(&mut self) {
        let _ = Command::new(bin())
            .args(["lab", "down", "--force", "--name", &self.0])
            .output();
    }
}

fn netns_exists(ns: &str) -> bool {
    Path::new("/run/netns").join(ns).exists()
}

fn pids_in(ns: &str) -> Vec<u32> {
    let out = output({
        let mut c = Command::new("ip");
        c.args(["netns", "pids", ns]);
        c
    });
    text(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Deleting a namespace with processes inside only hides it: `lab down` must say so and keep
/// the lab, and `--force` ends the processes and then removes it.
fn lab_down_leaves_running_processes_unless_forced() {
    let name = lab_name("cli");
    let _guard = LabByName(name.clone());
    let up = output({
        let mut c = Command::new(bin());
        c.args(["lab", "up", "--name", &name]);
        c
    });
    assert!(up.status.success(), "lab up: {}", text(&up.stderr));
    let probe = format!("poolcap-{name}-probe");
    let mut sleeper: Child = netns_command(&probe, "sleep")
        .arg("60")
        .spawn()
        .expect("sleep in the lab");
    wait_until(Duration::from_secs(5), "sleep in the namespace", || {
        pids_in(&probe).contains(&sleeper.id())
    });
    let down = |force: bool| {
        output({
            let mut c = Command::new(bin());
            c.args(["lab", "down", "--name", &name]);
            if force {
                c.arg("--force");
            }
            c
        })
    };
    let refused = down(false);
    assert_one_line_error(
        &refused,
        &sleeper.id().to_string(),
        "lab down with a process",
    );
    assert!(
        text(&refused.stderr).contains("--force"),
        "{}",
        text(&refused.stderr)
    );
    assert!(
        netns_exists(&probe),
        "lab down removed a lab with a process inside"
    );
    assert_eq!(
        sleeper.try_wait().expect("try_wait"),
        None,
        "the process was ended"
    );

    let forced = down(true);
    assert!(
        forced.status.success(),
        "down --force: {}",
        text(&forced.stderr)
    );
    assert!(
        text(&forced.stdout).contains("removed"),
        "{}",
        text(&forced.stdout)
    );
    let st = sleeper.wait().expect("wait sleep");
    assert!(
        st.code().is_none(),
        "sleep should have been ended by a signal: {st}"
    );
    assert!(!netns_exists(&probe), "lab still there after --force");
}

/// Starts `poolcap demo` and reads its stdout until the capture is listening.
fn start_demo(dir: &Path) -> (Child, Vec<String>) {
    let mut child = Command::new(bin())
        .arg("demo")
        .arg("-w")
        .arg(dir.join("demo.pcapng"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn demo");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        let n = out.read_line(&mut line).expect("demo stdout");
        assert!(n > 0, "demo ended before its capture listened: {lines:?}");
        lines.push(line.trim_end().to_owned());
        if line.contains("capture: listening on") {
            break;
        }
    }
    // Keep reading so the demo never blocks on a full pipe.
    std::thread::spawn(move || for _ in out.lines() {});
    (child, lines)
}

/// A demo killed with SIGKILL takes its children with it (the capture used to run on as an
/// orphan) and its lab is removed by the next demo; a demo stopped with SIGINT (Ctrl-C)
/// removes its own lab and exits 130.
fn demo_leaves_nothing_behind() {
    let dir = tempdir();
    let (mut first, _) = start_demo(dir.path());
    let first_lab = format!("demo{}", first.id());
    let _g1 = LabByName(first_lab.clone());
    let probe = format!("poolcap-{first_lab}-probe");
    assert!(!pids_in(&probe).is_empty(), "no capture running in {probe}");
    first.kill().expect("SIGKILL demo");
    first.wait().expect("wait demo");
    wait_until(
        Duration::from_secs(10),
        "the killed demo's capture to end",
        || pids_in(&probe).is_empty(),
    );
    assert!(
        netns_exists(&probe),
        "expected the killed demo's lab to be left"
    );

    let (second, lines) = start_demo(dir.path());
    let second_lab = format!("demo{}", second.id());
    let _g2 = LabByName(second_lab.clone());
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("removed lab \"{first_lab}\""))),
        "{lines:?}"
    );
    assert!(
        !netns_exists(&probe),
        "the killed demo's lab is still there"
    );
    poolcap_sys::process::interrupt(second.id()).expect("SIGINT demo");
    let st = second.wait_with_output().expect("wait demo").status;
    assert_eq!(st.code(), Some(130), "demo after SIGINT: {st}");
    for host in ["sender", "probe"] {
        let ns = format!("poolcap-{second_lab}-{host}");
        assert!(!netns_exists(&ns), "{ns} left behind after SIGINT");
    }
}

/// `capture -D` lists the namespace's interfaces as tcpdump -D does; a capture without `-i`
/// names the missing argument (it used to print only "the following required arguments were
/// not provided:").
fn list_interfaces_and_missing_arguments() {
    let lab = lab(2);
    let out = poolcap_in(&lab.probe.netns, &["capture", "-D"]);
    assert!(out.status.success(), "-D: {}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 2, "lo and prb0 only: {lines:?}");
    assert!(
        lines[0].starts_with("1.lo [Up, Running, Loopback]"),
        "{lines:?}"
    );
    assert!(
        lines[1].contains(".prb0 [Up, Running] (2 rx queues)"),
        "{lines:?}"
    );
    let out = poolcap_in(&lab.probe.netns, &["capture", "-w", "/dev/null"]);
    assert_one_line_error(&out, "--interface", "capture without -i");
    assert_eq!(out.status.code(), Some(2));
}
