//! Running poolcap as a systemd service (deploy/systemd): systemd is not PID 1 here, so the
//! unit is checked by `systemd-analyze verify` and the pieces it relies on are tested one by
//! one: `READY=1` on `$NOTIFY_SOCKET` once the capture captures (Type=notify), and a
//! capture started as the unit's ExecStart runs it (root, the config file, `-Z` to the user
//! the sysusers.d file makes) that owns what it writes and holds no capability.

use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use libtest_mimic::Trial;

use crate::common::{
    bin, gen, netns_command, num, on_wire, path_str as s, stats, tcpdump_count_set, tempdir, trial,
    Background,
};

pub(crate) fn trials() -> Vec<Trial> {
    let t = |name: &'static str, f: fn()| trial(&format!("service::{name}"), f);
    vec![
        t(
            "the_unit_passes_systemd_analyze_verify",
            the_unit_passes_systemd_analyze_verify,
        ),
        t(
            "ready_is_notified_once_the_capture_captures",
            ready_is_notified_once_the_capture_captures,
        ),
        t(
            "the_units_capture_drops_to_the_sysusers_user_and_owns_its_files",
            the_units_capture_drops_to_the_sysusers_user_and_owns_its_files,
        ),
    ]
}

/// The unit, its ExecStart pointing at the binary under test.
fn unit_text() -> String {
    std::fs::read_to_string(crate::deploy::path("systemd/poolcap@.service"))
        .expect("unit file")
        .replace("/usr/local/bin/poolcap", bin())
}

/// `systemd-analyze verify` finds nothing to say about `poolcap@prb0.service` (an unknown
/// key or a missing program would be named), and `systemd-analyze security` rates its
/// exposure below 5 ("OK").
fn the_unit_passes_systemd_analyze_verify() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no systemd-analyze on this machine");
        return;
    }
    let dir = tempdir();
    let unit = dir.path().join("poolcap@prb0.service");
    std::fs::write(&unit, unit_text()).expect("write unit");
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .expect("systemd-analyze verify");
    let said = String::from_utf8_lossy(&out.stderr);
    let about_it: Vec<&str> = said.lines().filter(|l| l.contains("poolcap")).collect();
    assert!(
        out.status.success() && about_it.is_empty(),
        "verify: {:?} {about_it:#?}",
        out.status
    );
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(&unit)
        .output()
        .expect("systemd-analyze security");
    let text = String::from_utf8_lossy(&out.stdout);
    let exposure: f64 = text
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for poolcap@prb0.service: "))
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in: {text}"));
    assert!(exposure < 5.0, "exposure {exposure}: {text}");
}

/// Hang guard: how long a test waits for a datagram that should come at once.
const NOTIFY_WAIT: Duration = Duration::from_secs(20);

/// A capture with `$NOTIFY_SOCKET` set sends one `READY=1`; when it arrives the capture's
/// packet socket is open and every thread has dropped its privileges, and traffic sent at
/// once is captured in full.
fn ready_is_notified_once_the_capture_captures() {
    let lab = crate::common::lab(1);
    let dir = tempdir();
    let socket = dir.path().join("notify");
    let notify = UnixDatagram::bind(&socket).expect("bind notify socket");
    notify.set_read_timeout(Some(NOTIFY_WAIT)).expect("timeout");
    let json = dir.path().join("s.json");
    let mut cmd = netns_command(&lab.probe.netns, bin());
    cmd.args(["capture", "-q", "-i", &lab.probe.iface, "-Z", "root"])
        .args(["--stats-json", s(&json)])
        .env("NOTIFY_SOCKET", &socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let cap = Background::from_child(cmd.spawn().expect("spawn capture"));
    let mut buf = [0u8; 256];
    let n = notify
        .recv(&mut buf)
        .expect("READY=1 within the hang guard");
    assert_eq!(&buf[..n], b"READY=1\n");
    let pid = cap.child.id();
    let packet_sockets = std::fs::read_to_string(format!("/proc/{pid}/net/packet"))
        .expect("net/packet")
        .lines()
        .count()
        - 1;
    assert!(packet_sockets >= 1, "no packet socket open at READY=1");
    let caps = crate::common::thread_identities(pid);
    assert!(
        caps.len() > 1 && caps.iter().all(|(_, eff)| *eff == 0),
        "threads at READY=1: {caps:?}"
    );
    let g = gen(&lab, &["--count", "1000", "--rate", "10k"]);
    std::thread::sleep(Duration::from_millis(400));
    let (code, stderr) = cap.stop("INT");
    assert_eq!(code, Some(0), "capture: {stderr}");
    assert_eq!(num(&stats(&json), "captured"), on_wire(&g), "{stderr}");
    notify.set_nonblocking(true).expect("nonblocking");
    assert!(notify.recv(&mut buf).is_err(), "a second notification");
}

/// A user made from deploy/systemd/poolcap.sysusers.conf (under a name of its own, removed
/// at the end), and the unit's ExecStart with that user, the lab's interface and a config
/// file from capture.toml.example's keys: the capture runs as that user in every thread
/// with no capability, its files (the first, made before the switch, and the rotated ones
/// after) are that user's and hold every frame.
fn the_units_capture_drops_to_the_sysusers_user_and_owns_its_files() {
    let user = format!("pctest{}", std::process::id());
    let sysusers = std::fs::read_to_string(crate::deploy::path("systemd/poolcap.sysusers.conf"))
        .expect("sysusers file")
        .replace("u poolcap ", &format!("u {user} "));
    let account = ServiceUser::create(&user, &sysusers);
    let lab = crate::common::lab(1);
    let dir = tempdir();
    // As poolcap.tmpfiles.conf makes /var/lib/poolcap: root's, writable by the user's group.
    std::os::unix::fs::chown(dir.path(), Some(0), Some(account.gid)).expect("chown dir");
    let mut perms = std::fs::metadata(dir.path()).expect("dir").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o770);
    std::fs::set_permissions(dir.path(), perms).expect("chmod dir");
    let (file, json) = (dir.path().join("u.pcap"), dir.path().join("u.json"));
    let config = dir.path().join("prb0.toml");
    std::fs::write(
        &config,
        format!(
            "write = {:?}\nformat = \"pcap\"\nrotate-size = 1\nstats-json = {:?}\nfilter = \"udp\"\n",
            s(&file),
            s(&json)
        ),
    )
    .expect("write config");
    let unit = unit_text();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let argv: Vec<String> = exec
        .replace("%I", &lab.probe.iface)
        .split_whitespace()
        .map(|w| match w {
            "poolcap" => user.clone(),
            w if w.starts_with("/etc/poolcap/") => s(&config).to_string(),
            w => w.to_string(),
        })
        .collect();
    let mut cmd = netns_command(&lab.probe.netns, &argv[0]);
    cmd.args(&argv[1..]);
    let cap = Background::start(cmd, "listening on");
    let pid = cap.child.id();
    let ids = crate::common::thread_identities(pid);
    let want = format!("{0} {0} {0} {0}", account.uid);
    assert!(
        ids.len() > 1 && ids.iter().all(|(u, eff)| *u == want && *eff == 0),
        "{argv:?}: want every thread at uid {} with no capability: {ids:?}",
        account.uid
    );
    let g = gen(
        &lab,
        &["--count", "3000", "--rate", "10k", "--size", "1000"],
    );
    std::thread::sleep(Duration::from_millis(400));
    let (code, stderr) = cap.stop("TERM");
    assert_eq!(code, Some(0), "{argv:?}: {stderr}");
    let files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p != &config)
        .collect();
    assert!(
        files.len() >= 4,
        "3 MB in 1 MB files and the stats: {files:?}"
    );
    for f in &files {
        let m = std::fs::metadata(f).expect("metadata");
        assert_eq!(
            (m.uid(), m.gid()),
            (account.uid, account.gid),
            "{}",
            f.display()
        );
    }
    assert_eq!(tcpdump_count_set(&files, &json), on_wire(&g));
    assert_eq!(num(&stats(&json), "written"), on_wire(&g));
}

/// A system user made by `systemd-sysusers` (or `useradd` where it is missing), removed on
/// drop.
struct ServiceUser {
    name: String,
    uid: u32,
    gid: u32,
}

impl ServiceUser {
    fn create(name: &str, sysusers: &str) -> ServiceUser {
        let made = match Command::new("systemd-sysusers")
            .arg("-")
            .stdin(Stdio::piped())
            .spawn()
        {
            Ok(mut child) => {
                use std::io::Write as _;
                child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(sysusers.as_bytes())
                    .expect("feed sysusers");
                child.wait().expect("systemd-sysusers")
            }
            Err(_) => {
                eprintln!("no systemd-sysusers: making {name} with useradd");
                Command::new("useradd")
                    .args(["--system", "--user-group", "--no-create-home", name])
                    .status()
                    .expect("useradd")
            }
        };
        assert!(made.success(), "creating user {name}: {made}");
        let id = |flag: &str| -> u32 {
            let out = Command::new("id").args([flag, name]).output().expect("id");
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("id {flag} {name}: {out:?}"))
        };
        ServiceUser {
            name: name.to_string(),
            uid: id("-u"),
            gid: id("-g"),
        }
    }
}

impl Drop for ServiceUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).status();
        let _ = Command::new("groupdel")
            .arg(&self.name)
            .stderr(Stdio::null())
            .status();
    }
}
