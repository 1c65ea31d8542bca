//! Facts about this process that only a syscall tells (effective user, CPU time) and the
//! signals it sends and arranges for its children.

/// True when the process runs with effective user id 0.
pub fn is_root() -> bool {
    effective_uid() == 0
}

/// The effective user id.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// User and system CPU seconds consumed so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTime {
    /// Seconds spent in user space.
    pub user: f64,
    /// Seconds spent in the kernel on behalf of the process.
    pub system: f64,
}

/// Whose CPU time to read.
#[derive(Debug, Clone, Copy)]
pub enum Who {
    /// This process, all its threads.
    SelfProcess,
    /// Children that have terminated and been waited for.
    Children,
}

/// CPU time of this process or of its waited-for children (`getrusage`).
pub fn cpu_time(who: Who) -> CpuTime {
    let flag = match who {
        Who::SelfProcess => libc::RUSAGE_SELF,
        Who::Children => libc::RUSAGE_CHILDREN,
    };
    // SAFETY: rusage is plain data; zero is a valid bit pattern for it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; getrusage only writes into it.
    let rc = unsafe { libc::getrusage(flag, &mut ru) };
    if rc != 0 {
        return CpuTime::default();
    }
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    CpuTime {
        user: secs(ru.ru_utime),
        system: secs(ru.ru_stime),
    }
}

/// Nanoseconds process `pid` has run on a CPU so far, all its threads, those that have
/// ended included (its `CLOCK_PROCESS_CPUTIME_ID`, read from outside); `None` if it is
/// gone. Summing `/proc/PID/task/*/schedstat` instead leaves out every thread that ended.
pub fn process_cpu_ns(pid: u32) -> Option<u64> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `clock` is a valid, writable clockid_t; the call only writes into it.
    if unsafe { libc::clock_getcpuclockid(pid, &mut clock) } != 0 {
        return None;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes into it.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Sends SIGINT to process `pid` (one this process started), asking it to stop cleanly.
pub fn interrupt(pid: u32) -> std::io::Result<()> {
    send_signal(pid, libc::SIGINT)
}

/// Asks process `pid` to print its statistics (SIGUSR1, as pmacctd and dd take it).
pub fn ask_stats(pid: u32) -> std::io::Result<()> {
    send_signal(pid, libc::SIGUSR1)
}

/// Stops process `pid` (SIGSTOP) until [`resume`]: it keeps its sockets, and the kernel
/// keeps filling their rings.
pub fn suspend(pid: u32) -> std::io::Result<()> {
    send_signal(pid, libc::SIGSTOP)
}

/// Lets a process stopped by [`suspend`] run again (SIGCONT).
pub fn resume(pid: u32) -> std::io::Result<()> {
    send_signal(pid, libc::SIGCONT)
}

/// Sends signal `sig` (e.g. `libc::SIGTERM`) to process `pid`.
pub fn send_signal(pid: u32, sig: libc::c_int) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: kill() takes plain integers and has no memory effects on this process.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// True if a process `pid` exists (in this PID namespace), whoever owns it.
pub fn is_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill() with signal 0 only checks that the process exists; no signal is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Makes the child `cmd` starts receive `sig` when this process's spawning thread ends, by
/// SIGKILL too (PR_SET_PDEATHSIG), so a killed parent leaves no orphan running. A parent that
/// died before the child set it makes the spawn fail instead of leaving an orphan.
pub fn kill_child_with_parent(cmd: &mut std::process::Command, sig: libc::c_int) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let hook = move || -> std::io::Result<()> {
        // SAFETY: prctl(PR_SET_PDEATHSIG) takes plain integers; it is async-signal-safe, as
        // code between fork and exec must be.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: getppid has no preconditions and is async-signal-safe.
        if unsafe { libc::getppid() } != parent {
            // ESRCH: the parent is gone. A raw OS error allocates nothing.
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(())
    };
    // SAFETY: between fork and exec the hook only makes async-signal-safe system calls and
    // never allocates (its errors are raw OS errors), as pre_exec requires.
    unsafe {
        cmd.pre_exec(hook);
    }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes into it.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Nanoseconds to add to a CLOCK_MONOTONIC time (e.g. `bpf_ktime_get_ns`) to get wall-clock
/// time, as of now.
pub fn monotonic_to_realtime_offset() -> i64 {
    let a = clock_ns(libc::CLOCK_REALTIME);
    let m = clock_ns(libc::CLOCK_MONOTONIC);
    let b = clock_ns(libc::CLOCK_REALTIME);
    (a / 2 + b / 2) as i64 - m as i64
}

/// Restores the default action of SIGPIPE (terminate quietly), as C command-line tools have
/// it: `poolcap gen ... | head -1` then ends without an error. Rust programs start with
/// SIGPIPE ignored, which turns a closed pipe into a panic in `println!`.
pub fn default_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL installs no Rust handler and has no
    // memory effects; it is done once, before any thread is spawned.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Sets the nice value of the calling thread (Linux schedules threads separately). Raising
/// it needs no privilege; returns false if the kernel refused.
pub fn set_thread_nice(nice: i32) -> bool {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: setpriority takes plain integers; `tid` names this thread.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) == 0 }
}

/// Sets the nice value of process `pid` (a child this process started). Returns false if
/// the kernel refused.
pub fn set_process_nice(pid: u32, nice: i32) -> bool {
    // SAFETY: setpriority takes plain integers; a stale pid only makes it fail.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, pid as libc::id_t, nice) == 0 }
}

/// Sets the calling thread's timer slack (how late the kernel may end its sleeps to group
/// wakeups; 50 us by default) to `ns`: a paced sender that sleeps until a frame is due needs
/// its sleeps to end on time. Returns false if the kernel refused.
pub fn set_timer_slack_ns(ns: u64) -> bool {
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes plain integers and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_cpu_time_keeps_the_time_of_threads_that_ended() {
        let me = std::process::id();
        let before = process_cpu_ns(me).unwrap();
        // A thread runs until the process has run 50 ms more, and ends: those 50 ms stay.
        std::thread::spawn(move || {
            while process_cpu_ns(me).unwrap() - before < 50_000_000 {
                std::hint::spin_loop();
            }
        })
        .join()
        .unwrap();
        let spent = process_cpu_ns(me).unwrap() - before;
        assert!(spent >= 50_000_000, "{spent} ns");
        assert_eq!(process_cpu_ns(u32::MAX), None, "no such process");
    }
}
