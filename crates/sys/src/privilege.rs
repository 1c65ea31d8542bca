//! Privileges: checks that name the capability a step lacks in one line before anything is
//! set up, and, once a capture has opened every socket, ring, XDP program and file, the drop
//! to an unprivileged user and to no capabilities at all (what tcpdump's `-Z` does), so a bug
//! in packet parsing or writing runs with as little power as possible.
//!
//! Capabilities, the bounding set and `no_new_privs` belong to a thread, not to the process:
//! the drop is made by the only thread there is, before any other starts, and every thread
//! started later inherits it. Emptying the bounding set and setting `no_new_privs` is what
//! makes the drop hold across `execve`: a process that stays root (`-Z root`) would
//! otherwise get every capability back in the `-z` command it runs.

use std::ffi::{CStr, CString};
use std::fmt;
use std::io;

use crate::error::{Result, SysError};

/// Capabilities some part of poolcap needs, by their kernel numbers (linux/capability.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// Changing group ids (`-Z`).
    SetGid = 6,
    /// Changing user ids (`-Z`).
    SetUid = 7,
    /// Changing the capability bounding set (emptied by the drop).
    SetPcap = 8,
    /// Locking memory past RLIMIT_MEMLOCK (AF_XDP UMEM).
    IpcLock = 14,
    /// Interfaces, XDP attachment, veth and namespaces.
    NetAdmin = 12,
    /// AF_PACKET and AF_XDP sockets.
    NetRaw = 13,
    /// Network namespaces; loading BPF on kernels before CAP_BPF.
    SysAdmin = 21,
    /// Loading BPF programs and maps (XDP).
    Bpf = 39,
}

impl Capability {
    /// The name as capabilities(7) spells it.
    pub fn name(self) -> &'static str {
        match self {
            Capability::SetGid => "CAP_SETGID",
            Capability::SetUid => "CAP_SETUID",
            Capability::SetPcap => "CAP_SETPCAP",
            Capability::NetAdmin => "CAP_NET_ADMIN",
            Capability::NetRaw => "CAP_NET_RAW",
            Capability::IpcLock => "CAP_IPC_LOCK",
            Capability::SysAdmin => "CAP_SYS_ADMIN",
            Capability::Bpf => "CAP_BPF",
        }
    }

    /// True if the calling thread has this capability in its effective set.
    pub fn is_effective(self) -> bool {
        effective_caps() & (1u64 << self as u32) != 0
    }
}

/// Capabilities the current process lacks for something it was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingPrivilege {
    /// The missing capabilities' names, e.g. `CAP_NET_ADMIN and CAP_BPF`.
    pub capability: String,
    /// What they are needed for.
    pub purpose: &'static str,
}

impl fmt::Display for MissingPrivilege {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} needs {} (run as root or grant it)",
            self.purpose, self.capability
        )
    }
}

impl std::error::Error for MissingPrivilege {}

/// The effective capability set of the calling thread (capabilities are per thread), from
/// `/proc/thread-self/status`.
pub fn effective_caps() -> u64 {
    thread_status_hex("CapEff:")
}

/// A hexadecimal field of `/proc/thread-self/status`; 0 if it cannot be read.
fn thread_status_hex(field: &str) -> u64 {
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

/// Fails naming every capability of `caps` the calling thread lacks.
pub fn require(
    caps: &[Capability],
    purpose: &'static str,
) -> std::result::Result<(), MissingPrivilege> {
    let missing: Vec<&str> = caps
        .iter()
        .filter(|c| !c.is_effective())
        .map(|c| c.name())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(MissingPrivilege {
        capability: missing.join(" and "),
        purpose,
    })
}

/// Building or removing a lab: network namespaces and veth pairs.
pub fn check_lab() -> std::result::Result<(), MissingPrivilege> {
    require(&[Capability::SysAdmin], "creating network namespaces")?;
    require(&[Capability::NetAdmin], "creating veth test hosts")
}

/// Opening AF_PACKET sockets to capture or send raw frames.
pub fn check_raw_sockets(purpose: &'static str) -> std::result::Result<(), MissingPrivilege> {
    require(&[Capability::NetRaw], purpose)
}

/// Attaching poolcap's XDP program, binding AF_XDP sockets and registering `umem_bytes` of
/// UMEM. CAP_BPF may be stood in for by CAP_SYS_ADMIN, as on kernels before 5.8. The UMEM is
/// locked memory: without CAP_IPC_LOCK it must fit under RLIMIT_MEMLOCK. `purpose` names the
/// step (`AF_XDP capture`, `AF_XDP forwarding`).
pub fn check_af_xdp(
    purpose: &'static str,
    umem_bytes: u64,
) -> std::result::Result<(), MissingPrivilege> {
    let mut caps = vec![Capability::NetRaw, Capability::NetAdmin];
    if !Capability::SysAdmin.is_effective() {
        caps.push(Capability::Bpf);
    }
    let limit = memlock_limit();
    if limit.is_some_and(|l| l < umem_bytes) {
        caps.push(Capability::IpcLock);
    }
    require(&caps, purpose).map_err(|mut e| {
        if let (Some(l), true) = (limit, e.capability.contains("CAP_IPC_LOCK")) {
            e.capability = format!(
                "{} (its UMEM of {} MiB is over the memlock limit of {} MiB, see ulimit -l)",
                e.capability,
                umem_bytes.div_ceil(1 << 20),
                l >> 20
            );
        }
        e
    })
}

/// Loading BPF programs and maps and attaching them at tc ingress (the in-kernel probe).
/// CAP_BPF may be stood in for by CAP_SYS_ADMIN, as on kernels before 5.8.
pub fn check_tc_bpf(purpose: &'static str) -> std::result::Result<(), MissingPrivilege> {
    let mut caps = vec![Capability::NetAdmin];
    if !Capability::SysAdmin.is_effective() {
        caps.push(Capability::Bpf);
    }
    require(&caps, purpose)
}

/// RLIMIT_MEMLOCK's soft limit in bytes; None if unlimited.
pub fn memlock_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid, writable rlimit; getrlimit only writes into it.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0 {
        return None;
    }
    (r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// An account from the password database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Login name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
}

/// Looks `name` up in the password database (files, LDAP, whatever NSS is configured with).
pub fn lookup_user(name: &str) -> Result<Option<User>> {
    let cname = CString::new(name).map_err(|_| SysError {
        call: "getpwnam_r",
        what: name.to_owned(),
        source: io::Error::from(io::ErrorKind::InvalidInput),
    })?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: passwd is plain data; zero is a valid bit pattern for it.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: `cname` is NUL-terminated, `pw` and
        // `result` are writable, `buf` is writable for `buf.len()` bytes and outlives the use
        // of the strings getpwnam_r points into it.
        let rc = unsafe {
            libc::getpwnam_r(
                cname.as_ptr(),
                &mut pw,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 {
            return Err(SysError {
                call: "getpwnam_r",
                what: name.to_owned(),
                source: io::Error::from_raw_os_error(rc),
            });
        }
        if result.is_null() {
            return Ok(None);
        }
        // SAFETY: on success pw_name points to a NUL-terminated string inside `buf`, which is
        // alive here.
        let login = unsafe { CStr::from_ptr(pw.pw_name) };
        return Ok(Some(User {
            name: login.to_string_lossy().into_owned(),
            uid: pw.pw_uid,
            gid: pw.pw_gid,
        }));
    }
}

/// Becomes `user`, with its primary and supplementary groups, for good (real, effective and
/// saved ids). glibc applies the id changes to every thread of the process. Leaving uid 0
/// clears the permitted and effective capabilities too (no `PR_SET_KEEPCAPS`).
pub fn switch_user(user: &User) -> Result<()> {
    let cname = CString::new(user.name.as_str()).map_err(|_| SysError {
        call: "initgroups",
        what: user.name.clone(),
        source: io::Error::from(io::ErrorKind::InvalidInput),
    })?;
    // SAFETY: `cname` is a valid NUL-terminated string; initgroups reads the group database
    // and sets this process's supplementary groups.
    if unsafe { libc::initgroups(cname.as_ptr(), user.gid) } != 0 {
        return Err(SysError::last("initgroups", user.name.clone()));
    }
    // SAFETY: setresgid takes plain integers.
    if unsafe { libc::setresgid(user.gid, user.gid, user.gid) } != 0 {
        return Err(SysError::last("setresgid", user.name.clone()));
    }
    // SAFETY: setresuid takes plain integers.
    if unsafe { libc::setresuid(user.uid, user.uid, user.uid) } != 0 {
        return Err(SysError::last("setresuid", user.name.clone()));
    }
    Ok(())
}

/// `struct __user_cap_header_struct` (linux/capability.h).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct` (linux/capability.h).
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Empties the calling thread's effective, permitted, inheritable and ambient capability
/// sets. Capabilities are per thread: call it before any other thread is started (threads
/// inherit the empty sets) or in each thread.
pub fn drop_capabilities() -> Result<()> {
    // SAFETY: prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL) takes plain integers and only
    // changes this thread's ambient set.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    // EINVAL: a kernel before 4.3 has no ambient set, so nothing to clear.
    if rc != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
        return Err(SysError::last("prctl(PR_CAP_AMBIENT_CLEAR_ALL)", ""));
    }
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset reads a version-3 header and two data structs, which `header` and `data`
    // are, laid out as the kernel defines them (repr(C)); pid 0 is the calling thread.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) };
    if rc != 0 {
        return Err(SysError::last("capset", "drop all capabilities"));
    }
    Ok(())
}

/// The highest capability number this kernel knows (`/proc/sys/kernel/cap_last_cap`; 40,
/// CAP_CHECKPOINT_RESTORE, where the file cannot be read).
fn last_capability() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// Empties the calling thread's capability bounding set, so no `execve` it or its later
/// threads make can give a capability back (not even to root, or through a file's
/// capabilities). Needs CAP_SETPCAP: call it before the capabilities go.
pub fn clear_bounding_set() -> Result<()> {
    for cap in 0..=last_capability() {
        // SAFETY: prctl(PR_CAPBSET_DROP, cap) takes plain integers and only changes this
        // thread's bounding set.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if rc != 0 {
            // EINVAL: past the kernel's last capability (cap_last_cap unreadable).
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) && cap > 0 {
                break;
            }
            return Err(SysError::last("prctl(PR_CAPBSET_DROP)", cap.to_string()));
        }
    }
    Ok(())
}

/// Sets `no_new_privs` on the calling thread (inherited by the threads and children it
/// starts, kept across `execve`): set-user-id programs and file capabilities grant nothing.
pub fn set_no_new_privs() -> Result<()> {
    // SAFETY: prctl(PR_SET_NO_NEW_PRIVS, 1) takes plain integers and only sets a flag of
    // this thread.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(SysError::last("prctl(PR_SET_NO_NEW_PRIVS)", ""));
    }
    Ok(())
}

/// The calling thread's capability bounding set, from `/proc/thread-self/status`.
pub fn bounding_set() -> u64 {
    thread_status_hex("CapBnd:")
}

/// How many threads this process has (`/proc/self/task`); 0 if it cannot be read.
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_in_the_password_database_and_nobody_else_is_made_up() {
        let root = lookup_user("root").expect("getpwnam_r").expect("root");
        assert_eq!((root.uid, root.gid), (0, 0));
        assert_eq!(lookup_user("no-such-user-poolcap-x").expect("lookup"), None);
    }

    #[test]
    fn dropping_capabilities_empties_the_threads_sets() {
        // Capabilities are per thread: drop them in a thread of our own, not the harness's.
        let after = std::thread::spawn(|| {
            drop_capabilities().expect("capset");
            (
                effective_caps(),
                require(&[Capability::NetRaw], "capturing packets"),
            )
        })
        .join()
        .expect("thread");
        assert_eq!(after.0, 0);
        assert_eq!(
            after.1.expect_err("no capability is left").to_string(),
            "capturing packets needs CAP_NET_RAW (run as root or grant it)"
        );
    }

    #[test]
    fn a_sealed_thread_has_no_bounding_set_and_no_new_privs() {
        if !Capability::SetPcap.is_effective() {
            eprintln!("skipped: emptying the bounding set needs CAP_SETPCAP");
            return;
        }
        let (bounding, nnp) = std::thread::spawn(|| {
            clear_bounding_set().expect("PR_CAPBSET_DROP");
            set_no_new_privs().expect("PR_SET_NO_NEW_PRIVS");
            drop_capabilities().expect("capset");
            (bounding_set(), thread_status_hex("NoNewPrivs:"))
        })
        .join()
        .expect("thread");
        assert_eq!((bounding, nnp), (0, 1));
        assert_ne!(bounding_set(), 0, "the other threads keep theirs");
    }

    #[test]
    fn every_missing_capability_is_named() {
        let e = std::thread::spawn(|| {
            drop_capabilities().expect("capset");
            check_af_xdp("AF_XDP capture", 0)
        })
        .join()
        .expect("thread")
        .expect_err("no capability is left");
        assert_eq!(e.capability, "CAP_NET_RAW and CAP_NET_ADMIN and CAP_BPF");
    }
}
