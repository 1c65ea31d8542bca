//! Facts about this process that only a syscall tells: effective user and CPU time.

/// True when the process runs with effective user id 0.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
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

/// Sends SIGINT to process `pid` (one this process started), asking it to stop cleanly.
pub fn interrupt(pid: u32) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: kill() takes plain integers and has no memory effects on this process.
    let rc = unsafe { libc::kill(pid, libc::SIGINT) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
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
