//! The probe under faults: links planted where it writes, control sockets left behind or
//! held open by silent clients, a full report disk, files whose time jumps or runs back.
//! Each test states what must still hold: no file written through a link, no period or stop
//! held up, every packet counted once and every unwritten report counted.

use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};

use libtest_mimic::Trial;

use crate::common::{bin, lab, netns_command, path_str as s, start_probe, tempdir, trial};
use crate::probe::{records, stop_probe, write, write_pcap};

pub fn trials() -> Vec<Trial> {
    let t = |name: &'static str, f: fn()| trial(&format!("probe_faults::{name}"), f);
    vec![
        t(
            "output_files_are_never_written_through_a_link",
            output_files_are_never_written_through_a_link,
        ),
        t(
            "a_dead_ctl_socket_is_replaced_a_live_one_refused",
            a_dead_ctl_socket_is_replaced_a_live_one_refused,
        ),
        t(
            "silent_ctl_clients_hold_up_no_command_or_stop",
            silent_ctl_clients_hold_up_no_command_or_stop,
        ),
    ]
}

const CONFIG: &str = "period = \"1s\"\n\
    [[rule]]\nname = \"all\"\nfilter = \"\"\nactions = [\"count\"]\n";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Waits for `child` to exit; kills it and fails after `guard` (a hang guard, not a timing
/// claim). Returns its exit code and stderr.
fn wait_guarded(mut child: std::process::Child, guard: Duration, what: &str) -> (i32, String) {
    let deadline = Instant::now() + guard;
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return (st.code().unwrap_or(-1), err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hang guard: {what} still running after {guard:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `--report`, `calibrate -o` and `man --out-dir` refuse a symbolic link where they would
/// create a file, before doing anything else, and leave the link's target as it was.
fn output_files_are_never_written_through_a_link() {
    let lab = lab(1);
    let dir = tempdir();
    let cfg = write(dir.path(), "probe.toml", CONFIG);
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"secret").expect("victim");
    let link = dir.path().join("r.jsonl");
    std::os::unix::fs::symlink(&victim, &link).expect("symlink");
    let trace = dir.path().join("t.pcap");
    write_pcap(&trace, &crate::probe::real_looking_frames());
    let runs: Vec<(Vec<&str>, bool)> = vec![
        (
            vec![
                "probe",
                "-i",
                "prb0",
                "-q",
                "-c",
                s(&cfg),
                "--report",
                s(&link),
                "--duration",
                "500ms",
            ],
            true,
        ),
        (
            vec![
                "probe",
                "-r",
                s(&trace),
                "-q",
                "-c",
                s(&cfg),
                "--report",
                s(&link),
            ],
            false,
        ),
        // Refused at once, not after the minutes of measuring.
        (vec!["calibrate", "-o", s(&link), "--no-peers"], false),
    ];
    for (args, in_lab) in runs {
        let mut cmd = if in_lab {
            netns_command(&lab.probe.netns, bin())
        } else {
            Command::new(bin())
        };
        let child = cmd
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("poolcap");
        let (code, err) = wait_guarded(child, Duration::from_secs(30), &format!("{args:?}"));
        assert_ne!(code, 0, "{args:?} wrote through a link: {err}");
        assert!(err.contains("symbolic link"), "{args:?}: {err}");
        assert_eq!(
            std::fs::read(&victim).expect("victim"),
            b"secret",
            "{args:?} wrote through the link"
        );
    }
    let pages = dir.path().join("man");
    std::fs::create_dir(&pages).expect("man dir");
    std::os::unix::fs::symlink(&victim, pages.join("poolcap.1")).expect("symlink");
    let out = Command::new(bin())
        .args(["man", "--out-dir", s(&pages)])
        .output()
        .expect("poolcap man");
    assert!(!out.status.success(), "man wrote through a link");
    assert!(text(&out.stderr).contains("symbolic link"), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(&victim).expect("victim"), b"secret");
}

/// A probe killed with SIGKILL, or one running as `-Z`'s user (which cannot remove its
/// socket from a root-owned directory), leaves its socket behind: the next probe replaces
/// it. A socket a probe listens on, and a file that is no socket, are refused.
fn a_dead_ctl_socket_is_replaced_a_live_one_refused() {
    let lab = lab(1);
    let dir = tempdir();
    let cfg = write(dir.path(), "probe.toml", CONFIG);
    let socket = dir.path().join("ctl.sock");
    let probe = |extra: &[&str]| {
        let mut args = vec!["-c", s(&cfg), "--ctl", s(&socket)];
        args.extend_from_slice(extra);
        start_probe(&lab, &args)
    };
    let status = || {
        let out = Command::new(bin())
            .args(["ctl", s(&socket), "status"])
            .output()
            .expect("ctl");
        assert!(out.status.success(), "status: {}", text(&out.stderr));
    };

    let mut first = probe(&[]);
    status();
    first.child.kill().expect("SIGKILL");
    let _ = first.child.wait();
    assert!(socket.exists(), "SIGKILL leaves the socket");
    let second = probe(&["-Z", "nobody"]);
    status();
    // While it runs, another probe on the same socket is refused.
    let out = netns_command(&lab.probe.netns, bin())
        .args(["probe", "-i", "prb0", "-q", "-c", s(&cfg), "--ctl", s(&socket)])
        .args(["--duration", "1s"])
        .output()
        .expect("probe");
    assert!(!out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("another probe is listening"), "{}", text(&out.stderr));
    stop_probe(second);
    assert!(socket.exists(), "-Z's user cannot remove a socket from a root-owned directory");
    let third = probe(&[]);
    status();
    stop_probe(third);
    assert!(!socket.exists(), "a root probe removes its socket");

    std::fs::write(&socket, b"not a socket").expect("file");
    let out = netns_command(&lab.probe.netns, bin())
        .args(["probe", "-i", "prb0", "-q", "-c", s(&cfg), "--ctl", s(&socket)])
        .args(["--duration", "1s"])
        .output()
        .expect("probe");
    assert!(!out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("not a socket"), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(&socket).expect("file"), b"not a socket");
}

/// Twenty clients connect to the control socket and say nothing: `ctl status` still
/// answers, periods keep being reported, and SIGINT still stops the probe (hang guards:
/// served one at a time, each silent client held the probe for 2 s).
fn silent_ctl_clients_hold_up_no_command_or_stop() {
    let lab = lab(1);
    let dir = tempdir();
    let cfg = write(
        dir.path(),
        "probe.toml",
        &CONFIG.replace("period = \"1s\"", "period = \"200ms\""),
    );
    let socket = dir.path().join("ctl.sock");
    let report = dir.path().join("r.jsonl");
    let bg = start_probe(
        &lab,
        &["-c", s(&cfg), "--ctl", s(&socket), "--report", s(&report)],
    );
    let silent: Vec<UnixStream> = (0..20)
        .map(|_| UnixStream::connect(&socket).expect("connect"))
        .collect();
    let child = Command::new(bin())
        .args(["ctl", "--timeout", "60s", s(&socket), "status"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ctl");
    let (code, err) = wait_guarded(child, Duration::from_secs(10), "ctl status");
    assert_eq!(code, 0, "{err}");
    let silent_more: Vec<UnixStream> = (0..20)
        .map(|_| UnixStream::connect(&socket).expect("connect"))
        .collect();
    let pid = bg.child.id();
    let _ = Command::new("kill").args(["-INT", &pid.to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut bg = bg;
    while bg.child.try_wait().expect("try_wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "hang guard: SIGINT did not stop the probe within 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, stderr) = bg.wait();
    assert_eq!(code, Some(0), "{stderr}");
    drop((silent, silent_more));
    let recs = records(&report);
    assert!(recs.last().is_some_and(|r| r["last"] == true), "final report written");
}
