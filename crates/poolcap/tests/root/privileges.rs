//! Privilege drop of `probe` and `forward`, as `capture` does it (its own test
//! is in cli.rs): once every socket, file, the ctl socket and the metrics listener are open,
//! every thread of the process runs as `-Z`'s user with no capability, and the files the
//! process made belong to that user, as tcpdump hands its `-w` file over. A root-owned 0700
//! directory is used where the files are opened before the drop (a dropped process could not
//! create them there), an open one where rotated files are made after it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use libtest_mimic::Trial;

use crate::common::{
    bin, capture, gen, netns_command, num, on_wire, path_str as s, start_probe, stats,
    tcpdump_count, tcpdump_count_set, tempdir, thread_identities, trial, Background, Lab,
};

pub(crate) fn trials() -> Vec<Trial> {
    let t = |name: &'static str, f: fn()| trial(&format!("privileges::{name}"), f);
    vec![
        t(
            "probe_runs_as_the_dropped_user_and_owns_its_files",
            probe_runs_as_the_dropped_user_and_owns_its_files,
        ),
        t(
            "forward_runs_as_the_dropped_user_and_owns_its_stats",
            forward_runs_as_the_dropped_user_and_owns_its_stats,
        ),
        t(
            "rotated_capture_files_belong_to_the_dropped_user",
            rotated_capture_files_belong_to_the_dropped_user,
        ),
        t(
            "every_thread_of_a_root_capture_probe_and_forward_is_sealed",
            every_thread_of_a_root_capture_probe_and_forward_is_sealed,
        ),
        t(
            "a_root_captures_post_rotate_command_runs_without_capabilities",
            a_root_captures_post_rotate_command_runs_without_capabilities,
        ),
        t(
            "the_in_kernel_probes_exporter_threads_are_sealed",
            the_in_kernel_probes_exporter_threads_are_sealed,
        ),
        t(
            "a_probe_keeping_privileges_for_kernel_rules_exports_without_them",
            a_probe_keeping_privileges_for_kernel_rules_exports_without_them,
        ),
    ]
}

const NOBODY: u32 = 65534;
const SETTLE: Duration = Duration::from_millis(400);

/// Sends `traffic` from the generator while `tool` runs, then stops `tool` with SIGINT, on
/// which it must exit 0 (`what` names it): the generator's report and the tool's stderr.
fn send_then_stop(
    lab: &Lab,
    tool: Background,
    traffic: &[&str],
    what: &str,
) -> (serde_json::Value, String) {
    let g = gen(lab, traffic);
    std::thread::sleep(SETTLE);
    let (code, stderr) = tool.stop("INT");
    assert_eq!(code, Some(0), "{what}: {stderr}");
    (g, stderr)
}

/// Starts `poolcap probe -Z root ARGS` with one rule, `all` (`(filter, action)`, see
/// [`one_rule_config`]), reporting into `dir`, and checks that its threads are sealed: the
/// probe and its report file.
fn sealed_root_probe(
    lab: &Lab,
    dir: &Path,
    (filter, action): (&str, &str),
    args: &[&str],
) -> (Background, PathBuf) {
    let config = one_rule_config(dir, filter, action);
    let report = dir.join("r.jsonl");
    let root = ["-Z", "root", "-c", s(&config), "--report", s(&report)];
    let probe = start_probe(lab, &[&root[..], args].concat());
    assert_sealed(&probe, &format!("probe -Z root {}", args.join(" ")));
    (probe, report)
}

/// Packets a probe's report (`--report`, one JSON object a line) counts over all its lines.
fn reported_packets(report: &Path) -> u64 {
    std::fs::read_to_string(report)
        .expect("report")
        .lines()
        .map(|l| num(&serde_json::from_str(l).expect("json line"), "packets"))
        .sum()
}

/// Writes `probe.toml` into `dir`: one rule, `all`, with `filter` and `action`, reported
/// every 250 ms.
fn one_rule_config(dir: &Path, filter: &str, action: &str) -> PathBuf {
    let text = format!(
        "period = \"250ms\"\n[[rule]]\nname = \"all\"\nfilter = \"{filter}\"\nactions = [\"{action}\"]\n"
    );
    crate::probe::write(dir, "probe.toml", &text)
}

/// Every thread of `bg` runs as `uid` (real, effective, saved, fs) with no capability.
fn assert_dropped(bg: &Background, uid: u32, what: &str) {
    let ids = thread_identities(bg.child.id());
    let want = format!("{uid} {uid} {uid} {uid}");
    assert!(
        ids.len() > 1 && ids.iter().all(|(u, caps)| *u == want && *caps == 0),
        "{what}: want every thread at uid {uid} with no capabilities: {ids:?}"
    );
}

fn owner(p: &Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (m.uid(), m.gid())
}

/// `probe -Z nobody` with a capture file, a report, a ctl socket, metrics and an IPFIX
/// exporter: every thread (the exporter's and the metrics server's too) is nobody's with
/// no capability; `ctl status` still answers; the file, report and socket are nobody's; and
/// the probe counted every frame. Without `-Z` (no `poolcap` user here) it stays root with
/// no capability.
fn probe_runs_as_the_dropped_user_and_owns_its_files() {
    let lab = crate::common::lab(1);
    let dir = tempdir(); // 0700, root's
    let config = one_rule_config(dir.path(), "ip", "flows");
    let default_uid = Command::new("id")
        .args(["-u", "poolcap"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(0);
    for (z, uid) in [(Some("nobody"), NOBODY), (None, default_uid)] {
        let run = uid.to_string();
        let (file, report, ctl) = (
            dir.path().join(format!("p{run}.pcapng")),
            dir.path().join(format!("r{run}.jsonl")),
            dir.path().join(format!("ctl{run}.sock")),
        );
        let mut args = vec![
            "-c",
            s(&config),
            "-w",
            s(&file),
            "--report",
            s(&report),
            "--ctl",
            s(&ctl),
            "--metrics",
            "127.0.0.1:9464",
            "--ipfix",
            "127.0.0.1:4739",
        ];
        if let Some(user) = z {
            args.extend(["-Z", user]);
        }
        let probe = start_probe(&lab, &args);
        assert_dropped(&probe, uid, &format!("probe -Z {z:?}"));
        for p in [&file, &report, &ctl] {
            assert_eq!(owner(p), (uid, uid), "-Z {z:?}: {}", p.display());
        }
        let status = netns_command(&lab.probe.netns, bin())
            .args(["ctl", s(&ctl), "status"])
            .output()
            .expect("run ctl");
        assert!(status.status.success(), "ctl status: {status:?}");
        let (g, stderr) = send_then_stop(
            &lab,
            probe,
            &["--count", "1000", "--rate", "10k", "--flows", "4"],
            &format!("probe -Z {z:?}"),
        );
        let packets = reported_packets(&report);
        assert_eq!(packets, on_wire(&g), "-Z {z:?}: {stderr}");
        assert_eq!(tcpdump_count(&file, &[]), on_wire(&g), "-Z {z:?}");
        assert_eq!(owner(&file), (uid, uid), "-Z {z:?}: at the end");
        let _ = std::fs::remove_file(&ctl);
    }
}

/// `forward -Z nobody --stats-json` in a root-owned 0700 directory: every thread is
/// nobody's with no capability, every frame is forwarded, and the stats file (opened before
/// the drop, written at the end) is nobody's.
fn forward_runs_as_the_dropped_user_and_owns_its_stats() {
    let lab = Lab::unique(1, 3).unwrap_or_else(|e| panic!("lab up: {e}"));
    let dir = tempdir();
    let json = dir.path().join("fwd.json");
    let mut cmd = netns_command(&lab.probe.netns, bin());
    cmd.args(["forward", "-i", "prb0", "-o", "prb1", "-q", "-Z", "nobody"])
        .args(["--stats-json", s(&json)]);
    let fwd = Background::start(cmd, "listening on");
    assert_dropped(&fwd, NOBODY, "forward -Z nobody");
    let (g, _) = send_then_stop(&lab, fwd, &["--count", "2000", "--rate", "10k"], "forward");
    let st = stats(&json);
    assert_eq!(num(&st, "received"), on_wire(&g), "{st}");
    assert_eq!(num(&st, "forwarded"), on_wire(&g), "{st}");
    assert_eq!(owner(&json), (NOBODY, NOBODY));
}

/// `capture -Z nobody -C 1` into a directory anyone may write to: the first file and the
/// stats file (made before the drop, then handed over) and every rotated file (made after)
/// are nobody's, and together hold every frame.
fn rotated_capture_files_belong_to_the_dropped_user() {
    let lab = crate::common::lab(1);
    let dir = tempdir();
    let mut perms = std::fs::metadata(dir.path()).expect("dir").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o777);
    std::fs::set_permissions(dir.path(), perms).expect("chmod");
    let (file, json) = (dir.path().join("z.pcap"), dir.path().join("z.json"));
    let cap = capture(
        &lab,
        &[
            "-Z",
            "nobody",
            "--format",
            "pcap",
            "-w",
            s(&file),
            "-C",
            "1",
            "--stats-json",
            s(&json),
        ],
    );
    let (g, _) = send_then_stop(
        &lab,
        cap,
        &["--count", "3000", "--rate", "10k", "--size", "1000"],
        "capture",
    );
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert!(
        files.len() >= 4,
        "3 MB in 1 MB files and the stats: {files:?}"
    );
    for f in &files {
        assert_eq!(owner(f), (NOBODY, NOBODY), "{}", f.display());
    }
    assert_eq!(tcpdump_count_set(&files, &json), on_wire(&g));
    assert_eq!(num(&stats(&json), "written"), on_wire(&g));
}

/// The capability sets and `no_new_privs` of a `/proc/.../status`, as `Name=value` words.
fn seal_fields(status: &str) -> String {
    [
        "CapInh",
        "CapPrm",
        "CapEff",
        "CapBnd",
        "CapAmb",
        "NoNewPrivs",
    ]
    .iter()
    .map(|name| {
        let value = status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in {status}"));
        format!("{name}={}", value.trim().trim_start_matches('0'))
    })
    .collect::<Vec<_>>()
    .join(" ")
}

/// What a thread holds with no capability left and none to be regained.
const SEALED: &str = "CapInh= CapPrm= CapEff= CapBnd= CapAmb= NoNewPrivs=1";

/// Each thread of `bg`: its name and [`seal_fields`].
fn thread_seals(bg: &Background) -> Vec<(String, String)> {
    let pid = bg.child.id();
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("task dir")
        .map(|t| {
            let status =
                std::fs::read_to_string(t.expect("task").path().join("status")).expect("status");
            let name = status.lines().next().unwrap_or_default();
            let name = name.trim_start_matches("Name:").trim().to_string();
            (name, seal_fields(&status))
        })
        .collect()
}

/// Every thread of `bg` (more than one) has empty capability sets, bounding set included,
/// and `no_new_privs`.
fn assert_sealed(bg: &Background, what: &str) {
    let threads = thread_seals(bg);
    assert!(
        threads.len() > 1 && threads.iter().all(|(_, f)| f == SEALED),
        "{what}: want every thread at `{SEALED}`: {threads:#?}"
    );
}

/// `-Z root` capture (metrics, a rotating file), probe (metrics, an IPFIX exporter to a
/// local UDP port, a report) and a two-way forward: every thread sealed; the capture still
/// writes every frame.
fn every_thread_of_a_root_capture_probe_and_forward_is_sealed() {
    let lab = crate::common::lab(1);
    let dir = tempdir();
    let file = dir.path().join("c.pcap");
    let cap = capture(
        &lab,
        &[
            "-Z",
            "root",
            "-w",
            s(&file),
            "-C",
            "1",
            "--metrics",
            "127.0.0.1:9464",
        ],
    );
    assert_sealed(&cap, "capture -Z root");
    let (g, _) = send_then_stop(&lab, cap, &["--count", "500", "--rate", "10k"], "capture");
    assert_eq!(tcpdump_count(&file, &[]), on_wire(&g));

    let exporting = ["--metrics", "127.0.0.1:9464", "--ipfix", "127.0.0.1:4739"];
    let (probe, _) = sealed_root_probe(&lab, dir.path(), ("ip", "flows"), &exporting);
    let (code, stderr) = probe.stop("INT");
    assert_eq!(code, Some(0), "probe: {stderr}");

    let fwd_lab = Lab::unique(1, 3).unwrap_or_else(|e| panic!("lab up: {e}"));
    let mut cmd = netns_command(&fwd_lab.probe.netns, bin());
    // Both directions: the second is opened before the first starts its threads.
    cmd.args(["forward", "-i", "prb0", "-o", "prb1", "-q", "-Z", "root"])
        .arg("--bidirectional");
    let fwd = Background::start(cmd, "listening on");
    assert_sealed(&fwd, "forward --bidirectional -Z root");
    let (code, stderr) = fwd.stop("INT");
    assert_eq!(code, Some(0), "forward: {stderr}");
}

/// `capture -Z root -C 1 -z SCRIPT`: the script, run by a process that stayed root, prints
/// its own capability sets into a file beside each closed capture file: all empty, and
/// `no_new_privs` set, so it regained nothing at `execve`.
fn a_root_captures_post_rotate_command_runs_without_capabilities() {
    let lab = crate::common::lab(1);
    let dir = tempdir();
    let script = dir.path().join("caps.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\ngrep -E '^(Cap|NoNewPrivs)' /proc/self/status > \"$1.caps\"\n",
    )
    .expect("write script");
    let mut perms = std::fs::metadata(&script).expect("script").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).expect("chmod");
    let file = dir.path().join("z.pcap");
    let cap = capture(
        &lab,
        &["-Z", "root", "-w", s(&file), "-C", "1", "-z", s(&script)],
    );
    send_then_stop(
        &lab,
        cap,
        &["--count", "2500", "--rate", "10k", "--size", "1000"],
        "capture",
    );
    let reports: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "caps"))
        .collect();
    assert!(reports.len() >= 2, "2.5 MB in 1 MB files: {reports:?}");
    for r in &reports {
        let status = std::fs::read_to_string(r).expect("caps file");
        assert_eq!(seal_fields(&status), SEALED, "{}: {status}", r.display());
    }
}

/// `probe --in-kernel -Z root --ipfix`: the exporter's threads start after the drop and hold
/// nothing; the probe still counts every frame.
fn the_in_kernel_probes_exporter_threads_are_sealed() {
    let lab = crate::common::lab(1);
    let dir = tempdir();
    let in_kernel = ["--in-kernel", "--ipfix", "127.0.0.1:4739"];
    let (probe, report) = sealed_root_probe(&lab, dir.path(), ("udp", "count"), &in_kernel);
    let (g, stderr) = send_then_stop(&lab, probe, &["--count", "1000", "--rate", "10k"], "probe");
    let packets = reported_packets(&report);
    assert_eq!(packets, on_wire(&g), "{stderr}");
}

/// `probe --in-kernel --ipfix` without `-Z` keeps its privileges (a rule change loads new
/// programs), but its IPFIX exporter's thread, which talks to the network, holds none; with
/// `--metrics` too, the socket-based probe's exporter thread likewise.
fn a_probe_keeping_privileges_for_kernel_rules_exports_without_them() {
    let lab = crate::common::lab(1);
    let dir = tempdir();
    let config = one_rule_config(dir.path(), "udp", "flows");
    for extra in [&[][..], &["--metrics", "127.0.0.1:9464"][..]] {
        let mut args = vec!["--in-kernel", "-c", s(&config), "--ipfix", "127.0.0.1:4739"];
        args.extend(extra);
        let probe = start_probe(&lab, &args);
        // A thread names itself once it runs: look until the exporter's has (hang guard).
        let mut threads = thread_seals(&probe);
        for _ in 0..100 {
            if threads.iter().any(|(name, _)| name == "ipfix") {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
            threads = thread_seals(&probe);
        }
        let named = |n: &str| {
            threads
                .iter()
                .find(|(name, _)| name == n)
                .unwrap_or_else(|| panic!("{extra:?}: no `{n}` thread: {threads:#?}"))
                .1
                .clone()
        };
        assert_eq!(named("ipfix"), SEALED, "{extra:?}: {threads:#?}");
        assert_ne!(
            named("poolcap"),
            SEALED,
            "{extra:?}: the probe keeps CAP_BPF"
        );
        let (code, stderr) = probe.stop("INT");
        assert_eq!(code, Some(0), "{extra:?}: {stderr}");
    }
}
