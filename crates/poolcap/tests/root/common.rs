//! Helpers shared by the root tests: run `poolcap` (or a peer tool) inside a lab host, start
//! a capture in the background and wait until it listens, stop it by PID, read files back.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub(crate) use poolcap_lab::{if_counters, netns_command, Lab};

/// A test that panics with context on failure.
pub(crate) fn trial(name: &str, f: fn()) -> libtest_mimic::Trial {
    libtest_mimic::Trial::test(name, move || {
        f();
        Ok(())
    })
}

/// The poolcap binary under test.
pub(crate) fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_poolcap")
}

/// A fresh lab with `queues` queues, unique to this test.
pub(crate) fn lab(queues: u16) -> Lab {
    Lab::unique(queues, 2).unwrap_or_else(|e| panic!("lab up: {e}"))
}

/// Runs `poolcap ARGS` in `netns` and returns its output (panics if it cannot start).
pub(crate) fn poolcap_in(netns: &str, args: &[&str]) -> Output {
    netns_command(netns, bin())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run poolcap {args:?}: {e}"))
}

/// Runs `poolcap gen -i snd0 ARGS --json` in the lab's sender and returns the JSON report.
pub(crate) fn gen(lab: &Lab, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["gen", "-i", &lab.sender.iface, "--json"];
    all.extend_from_slice(args);
    let out = poolcap_in(&lab.sender.netns, &all);
    assert!(
        out.status.success(),
        "gen {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("gen json: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// A background process whose stderr is collected; killed on drop if still running.
pub(crate) struct Background {
    pub child: Child,
    stderr_lines: mpsc::Receiver<String>,
    pub stderr: Vec<String>,
}

impl Background {
    /// Starts `cmd` and waits (up to 20 s) for a stderr line containing `ready`.
    pub(crate) fn start(mut cmd: Command, ready: &str) -> Background {
        let child = cmd
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let mut bg = Background::from_child(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match bg.stderr_lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    let hit = line.contains(ready);
                    bg.stderr.push(line);
                    if hit {
                        return bg;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                    if let Ok(Some(st)) = bg.child.try_wait() {
                        panic!("{cmd:?} exited with {st} before `{ready}`: {:?}", bg.stderr);
                    }
                }
                Err(_) => panic!("{cmd:?} never printed `{ready}`: {:?}", bg.stderr),
            }
        }
    }

    /// Collects the stderr (piped) of a child already spawned, without waiting for it.
    pub(crate) fn from_child(mut child: Child) -> Background {
        let err = child.stderr.take().expect("stderr piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Background {
            child,
            stderr_lines: rx,
            stderr: Vec::new(),
        }
    }

    /// Waits up to `timeout` for a new stderr line containing `needle`; true if one came.
    pub(crate) fn wait_for(&mut self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.stderr_lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = line.contains(needle);
                    self.stderr.push(line);
                    if hit {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
        false
    }

    /// Sends `signal` (e.g. "INT") to the process by PID and waits for it; returns its exit
    /// code and all of its stderr.
    pub(crate) fn stop(self, signal: &str) -> (Option<i32>, String) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status();
        self.wait()
    }

    /// Waits for the process to exit on its own.
    pub(crate) fn wait(self) -> (Option<i32>, String) {
        let (code, stderr, _) = self.wait_with_stdout();
        (code, stderr)
    }

    /// Waits for the process to exit on its own; also returns its standard output (if it
    /// was piped).
    pub(crate) fn wait_with_stdout(mut self) -> (Option<i32>, String, String) {
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        let status = self.child.wait().expect("wait");
        while let Ok(line) = self.stderr_lines.recv_timeout(Duration::from_millis(500)) {
            self.stderr.push(line);
        }
        (status.code(), self.stderr.join("\n"), out)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `poolcap capture -i prb0 ARGS` in the lab's probe and waits until it listens.
pub(crate) fn capture(lab: &Lab, args: &[&str]) -> Background {
    let mut cmd = netns_command(&lab.probe.netns, bin());
    cmd.args(["capture", "-i", &lab.probe.iface, "-q"])
        .args(args);
    Background::start(cmd, "listening on")
}

/// Starts `tcpdump -i prb0 ARGS` in the lab's probe and waits until it listens.
pub(crate) fn tcpdump(lab: &Lab, args: &[&str]) -> Background {
    let mut cmd = netns_command(&lab.probe.netns, "tcpdump");
    cmd.args([
        "-i",
        &lab.probe.iface,
        "-n",
        "--immediate-mode",
        "-Z",
        "root",
    ])
    .args(args);
    Background::start(cmd, "listening on")
}

/// Packets tcpdump reads in every capture file of `files` but `except` (a rotated set beside
/// its stats file).
pub(crate) fn tcpdump_count_set(files: &[PathBuf], except: &Path) -> u64 {
    files
        .iter()
        .filter(|f| f.as_path() != except)
        .map(|f| tcpdump_count(f, &[]))
        .sum()
}

/// Counts the packets of a capture file with `tcpdump -r` (an independent reader), applying
/// an optional filter expression.
pub(crate) fn tcpdump_count(file: &Path, filter: &[&str]) -> u64 {
    let mut cmd = Command::new("tcpdump");
    cmd.arg("-nr").arg(file).args(filter);
    lines_read(cmd, file).lines().count() as u64
}

/// Counts the packets of a capture file with tshark.
pub(crate) fn tshark_count(file: &Path) -> u64 {
    tshark_fields(file, &["frame.number"]).len() as u64
}

/// `fields` of every packet of a capture file as tshark reads them: a line a packet, the
/// fields separated by tabs.
pub(crate) fn tshark_fields(file: &Path, fields: &[&str]) -> Vec<String> {
    let mut tshark = Command::new("tshark");
    tshark.arg("-r").arg(file).args(["-T", "fields"]);
    for f in fields {
        tshark.args(["-e", f]);
    }
    lines_read(tshark, file)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The standard output of `reader` (tcpdump, tshark) reading `file`, which it must read
/// without error.
fn lines_read(mut reader: Command, file: &Path) -> String {
    let out = reader
        .output()
        .unwrap_or_else(|e| panic!("{reader:?}: {e}"));
    assert!(
        out.status.success(),
        "{reader:?} {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Checks the generator frames of a file: returns (frames, unique, missing, duplicates) of
/// the only generator in it.
pub(crate) fn check_sequences(file: &Path, expected: u64) -> (u64, u64, u64, u64) {
    let f =
        poolcap_format::read_file(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
    let mut c = poolcap::seqcheck::SeqChecker::new();
    for p in &f.packets {
        c.observe(&p.data);
    }
    let r = c.reports(Some(expected));
    assert_eq!(
        r.len(),
        1,
        "expected one generator in {}: {r:?}",
        file.display()
    );
    (r[0].frames, r[0].unique, r[0].missing, r[0].duplicates)
}

/// A scratch directory removed on drop.
pub(crate) fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// Reads a `--stats-json` file.
pub(crate) fn stats(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("stats json {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("stats json {}: {e}: {text}", path.display()))
}

/// An unsigned field of a JSON object (panics naming the field and the object).
pub(crate) fn num(v: &serde_json::Value, key: &str) -> u64 {
    v.get(key)
        .and_then(serde_json::Value::as_u64)
        .unwrap_or_else(|| panic!("no unsigned `{key}` in {v}"))
}

/// captured + dropped_kernel + dropped_pool + filtered of a stats object.
pub(crate) fn accounted(s: &serde_json::Value) -> u64 {
    num(s, "captured") + num(s, "dropped_kernel") + num(s, "dropped_pool") + num(s, "filtered")
}

/// A small tmpfs mounted on a scratch directory, so a capture file runs out of space
/// (ENOSPC) after `size` bytes (or a ramfs); unmounted on drop.
pub(crate) struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    pub(crate) fn mount(size: &str) -> SmallFs {
        let dir = tempdir();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "poolcap-test"])
            .arg(dir.path())
            .status()
            .expect("mount");
        assert!(st.success(), "mount tmpfs on {}", dir.path().display());
        SmallFs { dir }
    }

    /// A ramfs (no size limit): a file system that refuses `O_DIRECT` (tmpfs takes it
    /// since Linux 6.6).
    pub(crate) fn ramfs() -> SmallFs {
        let dir = tempdir();
        let st = Command::new("mount")
            .args(["-t", "ramfs", "poolcap-test"])
            .arg(dir.path())
            .status()
            .expect("mount");
        assert!(st.success(), "mount ramfs on {}", dir.path().display());
        SmallFs { dir }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// `Uid:` (real, effective, saved, fs) and `CapEff:` of every thread of process `pid`.
pub(crate) fn thread_identities(pid: u32) -> Vec<(String, u64)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("task dir");
    tasks
        .map(|t| {
            let status =
                std::fs::read_to_string(t.expect("task").path().join("status")).expect("status");
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
                    .unwrap_or_else(|| panic!("no {name} in {status}"))
            };
            let caps = u64::from_str_radix(&field("CapEff:"), 16).expect("CapEff");
            (field("Uid:"), caps)
        })
        .collect()
}

/// A path as a command-line argument.
pub(crate) fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Frames the generator's JSON report says reached the wire (sent less link drops).
pub(crate) fn on_wire(g: &serde_json::Value) -> u64 {
    num(g, "frames") - num(g, "link_dropped")
}

/// Starts `poolcap probe -i prb0 -q ARGS` in the lab's probe host; waits until it runs.
pub(crate) fn start_probe(lab: &Lab, args: &[&str]) -> Background {
    let mut cmd = netns_command(&lab.probe.netns, bin());
    cmd.args(["probe", "-i", &lab.probe.iface, "-q"])
        .args(args)
        .stdout(Stdio::null());
    Background::start(cmd, "probing on")
}

/// The interface statistics blocks of a pcapng file as tshark's own pcapng dissector reads
/// the file's structure (an outside reader): (received, dropped) per block.
pub(crate) fn tshark_statistics_blocks(file: &Path) -> Vec<(u64, u64)> {
    let mut tshark = Command::new("tshark");
    tshark
        .args(["-X", "read_format:MIME Files Format", "-r"])
        .arg(file)
        .args([
            "-T",
            "fields",
            "-e",
            "pcapng.options.option.data.interface.received",
            "-e",
            "pcapng.options.option.data.interface.dropped",
        ]);
    lines_read(tshark, file)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let n: Vec<u64> = l
                .split('\t')
                .map(|x| {
                    x.trim()
                        .parse()
                        .unwrap_or_else(|_| panic!("tshark ISB `{l}`"))
                })
                .collect();
            (n[0], n[1])
        })
        .collect()
}
