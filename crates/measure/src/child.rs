//! Child processes of a bench: started in a lab namespace, watched for their ready line,
//! stopped with SIGINT, and never left behind.
//!
//! A [`Running`] collects everything the child prints on stdout and stderr (two reader threads,
//! so a chatty child never blocks on a full pipe) and kills the child when dropped, so an error
//! or an interrupted bench cannot leave a capture or a generator running after the lab is gone.
//! The child is `ip netns exec NS taskset -c CPU TOOL ...`; `ip` and `taskset` exec into the
//! next program, so the child's PID is the tool's, and its `/proc/PID/stat` is the tool's.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use poolcap_lab::netns_command;

/// Clock ticks per second of `/proc/PID/stat` (USER_HZ, 100 on Linux).
pub const TICKS_PER_SECOND: f64 = 100.0;

/// `ip netns exec NS taskset -c CPUS PROGRAM ARGS...`.
pub(super) fn pinned(netns: &str, cpus: &str, argv: &[String]) -> Command {
    let mut cmd = netns_command(netns, "taskset");
    cmd.arg("-c").arg(cpus).args(argv);
    cmd
}

/// A started child process (and, for a tool writing into a pipe, the program reading it).
pub struct Running {
    name: String,
    child: Option<Child>,
    downstream: Option<Child>,
    pid: u32,
    text: Arc<Mutex<String>>,
    lines: Receiver<String>,
    readers: Vec<JoinHandle<()>>,
}

/// What a child printed and how it ended.
#[derive(Debug)]
pub struct Finished {
    /// Its exit status.
    pub status: ExitStatus,
    /// stdout and stderr, interleaved in arrival order.
    pub text: String,
}

fn reader(
    pipe: impl Read + Send + 'static,
    text: Arc<Mutex<String>>,
    tx: mpsc::Sender<String>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(pipe);
        let mut buf = Vec::new();
        while matches!(r.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
            let line = String::from_utf8_lossy(&buf).into_owned();
            if let Ok(mut t) = text.lock() {
                t.push_str(&line);
            }
            let _ = tx.send(line);
            buf.clear();
        }
    })
}

impl Running {
    /// Starts `cmd` with stdout and stderr captured; `name` is for messages.
    pub fn spawn(mut cmd: Command, name: &str) -> anyhow::Result<Running> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {name}"))?;
        let text = Arc::new(Mutex::new(String::new()));
        let (tx, lines) = mpsc::channel();
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(reader(out, Arc::clone(&text), tx.clone()));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(reader(err, Arc::clone(&text), tx));
        }
        Ok(Running {
            name: name.to_owned(),
            pid: child.id(),
            child: Some(child),
            downstream: None,
            text,
            lines,
            readers,
        })
    }

    /// Starts `first` with its standard output piped into `second`, whose standard output goes
    /// to `out` (`tcpdump -w - | zstd > out`). Both processes' stderr are collected; the PID
    /// is `first`'s; CPU time is the sum of both.
    pub fn spawn_pipe(
        mut first: Command,
        mut second: Command,
        out: std::fs::File,
        name: &str,
    ) -> anyhow::Result<Running> {
        let mut child = first
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {name}"))?;
        let pipe = child.stdout.take().context("no stdout pipe")?;
        let down = second
            .stdin(Stdio::from(pipe))
            .stdout(Stdio::from(out))
            .stderr(Stdio::piped())
            .spawn();
        let mut down = match down {
            Ok(d) => d,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e).with_context(|| format!("cannot start the pipe of {name}"));
            }
        };
        let text = Arc::new(Mutex::new(String::new()));
        let (tx, lines) = mpsc::channel();
        let mut readers = Vec::new();
        if let Some(err) = child.stderr.take() {
            readers.push(reader(err, Arc::clone(&text), tx.clone()));
        }
        if let Some(err) = down.stderr.take() {
            readers.push(reader(err, Arc::clone(&text), tx));
        }
        Ok(Running {
            name: name.to_owned(),
            pid: child.id(),
            child: Some(child),
            downstream: Some(down),
            text,
            lines,
            readers,
        })
    }

    /// The PIDs of every process of this run (the tool, then its pipe reader).
    pub fn pids(&self) -> Vec<u32> {
        let mut v = vec![self.pid];
        v.extend(self.downstream.as_ref().map(Child::id));
        v
    }

    /// Stops every process of this run (SIGSTOP) until [`Running::resume`]; dropping a
    /// stopped run still kills it.
    pub fn suspend(&self) -> anyhow::Result<()> {
        self.each_pid("stop", poolcap_sys::process::suspend)
    }

    /// Lets a run stopped by [`Running::suspend`] go on.
    pub fn resume(&self) -> anyhow::Result<()> {
        self.each_pid("resume", poolcap_sys::process::resume)
    }

    /// Applies `f` to every process of this run; the first failure says "cannot `verb`".
    fn each_pid(&self, verb: &str, f: fn(u32) -> std::io::Result<()>) -> anyhow::Result<()> {
        for pid in self.pids() {
            f(pid).with_context(|| format!("cannot {verb} {}", self.name))?;
        }
        Ok(())
    }

    /// Asks the child to print its statistics (SIGUSR1).
    pub fn ask_stats(&self) -> anyhow::Result<()> {
        poolcap_sys::process::ask_stats(self.pid)
            .with_context(|| format!("cannot ask {} for its statistics", self.name))
    }

    /// The child's PID (the tool's, see the module docs).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits until the tool prints the line that says it is capturing (`marker`): as
    /// [`Running::wait_for`] its "ready line".
    pub fn wait_ready(
        &mut self,
        marker: &str,
        timeout: Duration,
        stop: &AtomicBool,
    ) -> anyhow::Result<()> {
        self.wait_for(marker, "ready line", timeout, stop)
    }

    /// Waits until a line containing `marker` appears, the child's `what` (a noun, for the
    /// error); fails if the child exits first, after `timeout`, or when `stop` is set.
    pub fn wait_for(
        &mut self,
        marker: &str,
        what: &str,
        timeout: Duration,
        stop: &AtomicBool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
            match self.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(line) if line.contains(marker) => return Ok(()),
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                // Both pipes closed: the child is exiting; try_wait below will see it.
                Err(RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(Duration::from_millis(20))
                }
            }
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!(
                    "{} exited before it printed its {what} ({st}): {}",
                    self.name,
                    self.tail()
                );
            }
        }
        if stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        bail!(
            "{} printed no {what} within {timeout:?}: {}",
            self.name,
            self.tail()
        )
    }

    /// The child's CPU time so far (utime + stime of `/proc/PID/stat`, all threads), in
    /// clock ticks.
    pub fn cpu_ticks(&self) -> Option<u64> {
        let tree = with_descendants(&self.pids());
        let ticks = |pid: &u32| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            cpu_ticks_of_stat(&stat)
        };
        // The run's own processes must be there; a descendant may have just exited.
        let own: Option<u64> = self.pids().iter().map(ticks).sum();
        let more: u64 = tree
            .iter()
            .filter(|p| !self.pids().contains(p))
            .filter_map(ticks)
            .sum();
        Some(own? + more)
    }

    /// Scheduler statistics so far, summed over every process of this run and their
    /// descendants: nanoseconds on the CPU of all their threads, those that ended included
    /// (`poolcap_sys::process::process_cpu_ns`), and over the threads alive now
    /// (`/proc/PID/task/*/schedstat`) nanoseconds runnable but waiting for the CPU and
    /// timeslices run. Why not the threads' run time too: a thread that ended between two
    /// readings took its time with it, so a tool that starts threads as it goes (the store's
    /// I/O thread of each file, a thread per index saved) was charged for none of theirs.
    pub fn schedstat(&self) -> Option<Sched> {
        let mut total = Sched::default();
        for pid in with_descendants(&self.pids()) {
            total.run_ns += poolcap_sys::process::process_cpu_ns(pid).unwrap_or(0);
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for t in tasks.flatten() {
                if let Some(s) = std::fs::read_to_string(t.path().join("schedstat"))
                    .ok()
                    .and_then(|s| Sched::parse(&s))
                {
                    total.wait_ns += s.wait_ns;
                    total.slices += s.slices;
                }
            }
        }
        (total.slices > 0).then_some(total)
    }

    /// Voluntary and involuntary context switches so far, summed over every thread
    /// (`/proc/PID/task/*/status`) of every process of this run.
    pub fn switches(&self) -> Option<(u64, u64)> {
        let mut total = (0, 0);
        for pid in self.pids() {
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
            for t in tasks.flatten() {
                if let Ok(s) = std::fs::read_to_string(t.path().join("status")) {
                    let (v, n) = switches_of_status(&s);
                    total.0 += v;
                    total.1 += n;
                }
            }
        }
        Some(total)
    }

    /// Asks the child to stop (SIGINT) and waits up to `timeout` for it to exit.
    pub fn interrupt(self, timeout: Duration) -> anyhow::Result<Finished> {
        poolcap_sys::process::interrupt(self.pid)
            .with_context(|| format!("cannot interrupt {}", self.name))?;
        self.finish(timeout, None)
    }

    /// Waits up to `timeout` for the child to exit on its own; interrupts it when `stop` is set.
    pub fn wait(self, timeout: Duration, stop: &AtomicBool) -> anyhow::Result<Finished> {
        self.finish(timeout, Some(stop))
    }

    fn finish(mut self, timeout: Duration, stop: Option<&AtomicBool>) -> anyhow::Result<Finished> {
        let deadline = Instant::now() + timeout;
        let mut interrupted = false;
        let status = loop {
            let child = self.child.as_mut().context("child already reaped")?;
            if let Some(st) = child.try_wait()? {
                break st;
            }
            if Instant::now() > deadline {
                bail!("{} did not finish within {timeout:?}", self.name);
            }
            if !interrupted && stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                let _ = poolcap_sys::process::interrupt(self.pid);
                interrupted = true;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        self.child = None;
        if let Some(mut d) = self.downstream.take() {
            // The pipe reader ends when the tool closes the pipe.
            loop {
                if d.try_wait()?.is_some() {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = d.kill();
                    let _ = d.wait();
                    bail!(
                        "the pipe of {} did not finish within {timeout:?}",
                        self.name
                    );
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let text = self.text.lock().map(|t| t.clone()).unwrap_or_default();
        Ok(Finished { status, text })
    }

    fn tail(&self) -> String {
        let t = self.text.lock().map(|t| t.clone()).unwrap_or_default();
        let lines: Vec<&str> = t.lines().rev().take(5).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for mut c in [self.child.take(), self.downstream.take()]
            .into_iter()
            .flatten()
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Idle time of CPU `cpu` so far, clock ticks: the `idle` and `iowait` columns (the fourth
/// and fifth numbers) of its `cpuN` line in `/proc/stat`. With a tickless idle, the kernel
/// measures these to the nanosecond (each interrupt stops the clock), so a window's wall time
/// less them is what the CPU ran, softirq included, to a tick. The `softirq` column is no
/// measure of that: it is sampled by the tick, which an idle CPU stops, and undercounted a
/// tool CPU's receive work 2-4 times against softirq tracepoints (docs/predict.md).
pub fn idle_ticks(cpu: usize) -> Option<u64> {
    idle_ticks_of(&std::fs::read_to_string("/proc/stat").ok()?, cpu)
}

fn idle_ticks_of(stat: &str, cpu: usize) -> Option<u64> {
    let name = format!("cpu{cpu}");
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    let mut n = line.split_whitespace().skip(4).map(str::parse::<u64>);
    Some(n.next()?.ok()? + n.next()?.ok()?)
}

/// A `/proc/PID/task/TID/schedstat` line (or a sum or difference of them): what the
/// scheduler says about a task's time on and waiting for the CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sched {
    /// Nanoseconds on the CPU.
    pub run_ns: u64,
    /// Nanoseconds runnable on a run queue, waiting for the CPU.
    pub wait_ns: u64,
    /// Timeslices run.
    pub slices: u64,
}

impl Sched {
    /// The three numbers of a schedstat line.
    pub fn parse(line: &str) -> Option<Sched> {
        let mut f = line.split_whitespace().map(str::parse::<u64>);
        Some(Sched {
            run_ns: f.next()?.ok()?,
            wait_ns: f.next()?.ok()?,
            slices: f.next()?.ok()?,
        })
    }

    /// `self - before` (a thread that exited in between makes a term negative: 0).
    pub fn since(&self, before: &Sched) -> Sched {
        Sched {
            run_ns: self.run_ns.saturating_sub(before.run_ns),
            wait_ns: self.wait_ns.saturating_sub(before.wait_ns),
            slices: self.slices.saturating_sub(before.slices),
        }
    }
}

/// `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` of a `/proc/.../status` file.
pub fn switches_of_status(status: &str) -> (u64, u64) {
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|r| r.trim().parse().ok())
            .unwrap_or(0)
    };
    (
        field("voluntary_ctxt_switches:"),
        field("nonvoluntary_ctxt_switches:"),
    )
}

/// utime + stime + cutime + cstime (fields 14 to 17: the process's own CPU time and that of
/// the children it has waited for) of a `/proc/PID/stat` line. The command name (field 2)
/// may hold spaces and parentheses, so fields are counted after its closing parenthesis.
pub fn cpu_ticks_of_stat(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    (11..15).map(|i| f.get(i)?.parse::<u64>().ok()).sum()
}

/// The parent PID (field 4) of a `/proc/PID/stat` line.
fn parent_of_stat(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// `pids` and every process below them: a tool that forks its workers (pmacctd's plugins,
/// tshark's dumpcap) is charged for all of them.
fn with_descendants(pids: &[u32]) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            Some((pid, parent_of_stat(&stat)?))
        })
        .collect();
    let mut tree = pids.to_vec();
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        let children: Vec<u32> = parents
            .iter()
            .filter(|(pid, pp)| *pp == parent && !tree.contains(pid))
            .map(|(pid, _)| *pid)
            .collect();
        tree.extend(children);
        i += 1;
    }
    tree
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedstat_line_reads_and_differences_never_go_negative() {
        let a = Sched::parse("1000 250 7\n").unwrap();
        assert_eq!((a.run_ns, a.wait_ns, a.slices), (1000, 250, 7));
        assert_eq!(Sched::parse("12 x 3"), None);
        let b = Sched::parse("2000 500 14").unwrap();
        assert_eq!(b.since(&a), a);
        assert_eq!(a.since(&b), Sched::default());
        let me = std::fs::read_to_string("/proc/self/schedstat").unwrap();
        assert!(Sched::parse(&me).unwrap().run_ns > 0);
    }

    #[test]
    fn idle_time_is_the_fourth_and_fifth_numbers_of_the_cpus_line() {
        let stat = "cpu  10 0 20 300 4 0 90 0 0 0\ncpu0 5 0 10 150 2 0 40 0 0 0\n\
                    cpu1 5 0 10 150 3 0 50 0 0 0\nintr 1 2 3\n";
        assert_eq!(idle_ticks_of(stat, 1), Some(153));
        assert_eq!(idle_ticks_of(stat, 0), Some(152));
        assert_eq!(idle_ticks_of(stat, 2), None);
        assert!(idle_ticks(0).is_some());
    }

    #[test]
    fn reads_cpu_ticks_from_proc_stat() {
        let stat = "4242 (tcp dump) S 1 4242 4242 0 -1 4194560 100 0 0 0 57 196 0 0 20 0 1 0 \
                    1234 5000000 300 18446744073709551615";
        assert_eq!(cpu_ticks_of_stat(stat), Some(253));
        assert_eq!(cpu_ticks_of_stat("1 (x) S 1"), None);
        let me = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(cpu_ticks_of_stat(&me).is_some());
        let with_children = "4242 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 57 196 30 7 20 0";
        assert_eq!(cpu_ticks_of_stat(with_children), Some(290));
        assert_eq!(parent_of_stat(stat), Some(1));
    }

    #[test]
    fn descendants_include_a_forked_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let tree = with_descendants(&[std::process::id()]);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(tree[0], std::process::id());
        assert!(tree.contains(&child.id()), "{tree:?}");
    }

    #[test]
    fn collects_output_and_waits_for_ready() {
        let mut cmd = Command::new("sh");
        // Exits 3 by itself after 2 s: a shell started in the background by a
        // non-interactive shell (`cmd &`, as CI may run the tests) ignores SIGINT, and so
        // would a `sleep` it starts; either way the child must not end successfully.
        cmd.args(["-c", "echo starting; echo ready >&2; sleep 2; exit 3"]);
        let mut r = Running::spawn(cmd, "sh").unwrap();
        let stop = AtomicBool::new(false);
        r.wait_ready("ready", Duration::from_secs(5), &stop)
            .unwrap();
        assert!(r.cpu_ticks().is_some());
        let f = r.interrupt(Duration::from_secs(5)).unwrap();
        assert!(!f.status.success());
        assert!(f.text.contains("starting") && f.text.contains("ready"));
    }

    #[test]
    fn reads_context_switches() {
        let s = "Name:\tx\nvoluntary_ctxt_switches:\t57\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(switches_of_status(s), (57, 3));
        assert_eq!(switches_of_status("Name: y\n"), (0, 0));
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo ready; exec sleep 5"]);
        let mut r = Running::spawn(cmd, "sh").unwrap();
        r.wait_ready("ready", Duration::from_secs(5), &AtomicBool::new(false))
            .unwrap();
        assert!(r.switches().is_some());
    }

    #[test]
    fn pipes_one_program_into_another() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let mut first = Command::new("sh");
        first.args(["-c", "echo ready >&2; echo hello; sleep 0.2; echo world"]);
        let mut second = Command::new("tr");
        second.args(["a-z", "A-Z"]);
        let out = std::fs::File::create(&path).unwrap();
        let mut r = Running::spawn_pipe(first, second, out, "pipe").unwrap();
        assert_eq!(r.pids().len(), 2);
        r.wait_ready("ready", Duration::from_secs(5), &AtomicBool::new(false))
            .unwrap();
        let f = r
            .wait(Duration::from_secs(5), &AtomicBool::new(false))
            .unwrap();
        assert!(f.status.success());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "HELLO\nWORLD\n");
    }

    #[test]
    fn reports_a_child_that_exits_before_ready() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo no such device >&2; exit 3"]);
        let mut r = Running::spawn(cmd, "tool").unwrap();
        let e = r
            .wait_ready("ready", Duration::from_secs(5), &AtomicBool::new(false))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("exited before it printed its ready line"),
            "{e}"
        );
    }
}
