//! `-Z USER` (capture, probe, forward): whom the process runs as once everything privileged
//! is open, decided the way tcpdump decides it. `-Z USER` switches to that user and its groups; without `-Z` a root
//! capture switches to the dedicated user [`DEFAULT_USER`] if the system has one and otherwise
//! stays root, silently; `-Z root` (any user with the current uid) stays. In every case the
//! capabilities are then dropped to none, so the capture threads, workers and writer run with
//! no privilege at all, holding only the descriptors opened before; and the drop holds
//! across `execve`: the bounding set is emptied and `no_new_privs` set, so a `-z` command
//! run by a process that stayed root gets no capability back.
//!
//! Capabilities belong to threads: the drop is made while the process has one thread, and
//! refused (as a bug) if another already runs; every thread started later inherits it.
//!
//! The files the process created before the switch (the capture file, `--stats-json`, the
//! probe's `--report` and `--ctl` socket) are handed to the new user first, as tcpdump
//! chowns its `-w` file, so the user that runs the capture owns what it wrote; files made
//! later (rotated files) are created by that user.
//!
//! The decision ([`plan`]) is made before anything is opened, so a bad `-Z` is a usage error
//! that costs nothing; [`apply`] runs from the engine's `after_open` step.

use std::path::Path;

use anyhow::Result;
use clap::Args;
use poolcap_sys::privilege::{self, Capability, User};
use poolcap_sys::SysError;

use crate::cli::usage;

/// The unprivileged account a root capture switches to when it exists (tcpdump has its
/// `tcpdump` user for the same purpose).
pub const DEFAULT_USER: &str = "poolcap";

/// `-Z`, for the commands that drop privileges.
#[derive(Debug, Clone, Args)]
pub struct UserArg {
    /// Once the sockets, rings and files are open, switch to USER (and its groups) and drop
    /// every capability; the files made so far are handed to USER. Default for root: the
    /// `poolcap` user if it exists, else root; `-Z root` stays root.
    #[arg(short = 'Z', long = "relinquish-privileges", value_name = "USER")]
    pub user: Option<String>,
}

/// What to become once everything is open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Switch to this user, then drop every capability.
    Become(User),
    /// Stay this user, dropping every capability.
    Stay,
}

/// Decides, for a process whose effective uid is `euid`, what `-Z requested` means; `lookup`
/// reads the password database.
pub fn plan(
    requested: Option<&str>,
    euid: u32,
    lookup: impl Fn(&str) -> Result<Option<User>, SysError>,
) -> Result<Plan> {
    let user = match requested {
        Some(name) => lookup(name)?.ok_or_else(|| usage(format!("-Z: no such user `{name}`")))?,
        None if euid == 0 => match lookup(DEFAULT_USER) {
            Ok(Some(u)) => u,
            // No dedicated user (or no readable database): stay, as tcpdump does.
            _ => return Ok(Plan::Stay),
        },
        None => return Ok(Plan::Stay),
    };
    if user.uid == euid {
        return Ok(Plan::Stay);
    }
    Ok(Plan::Become(user))
}

/// Checks, before anything is opened, that the plan can be carried out: switching users
/// needs CAP_SETUID and CAP_SETGID; staying root needs CAP_SETPCAP, to empty the bounding
/// set without which root's `execve` restores every capability.
pub fn check(plan: &Plan, euid: u32) -> Result<()> {
    match plan {
        Plan::Become(u) => privilege::require(&[Capability::SetUid, Capability::SetGid], "-Z")
            .map_err(|e| anyhow::anyhow!("{e}; cannot switch to user `{}`", u.name)),
        Plan::Stay if euid == 0 => privilege::require(
            &[Capability::SetPcap],
            "staying root without capabilities (emptying the bounding set)",
        )
        .map_err(|e| anyhow::anyhow!("{e}; or switch to a user with -Z USER")),
        Plan::Stay => Ok(()),
    }
}

/// The plan for `-Z requested` in this process, checked ([`plan`], then [`check`]).
pub fn prepare(requested: Option<&str>) -> Result<Plan> {
    let euid = poolcap_sys::process::effective_uid();
    let p = plan(requested, euid, privilege::lookup_user)?;
    check(&p, euid)?;
    Ok(p)
}

/// Carries the plan out: hands the files `owned` (those that exist) to the new user, empties
/// the bounding set (where CAP_SETPCAP allows; [`check`] made sure it does for root), switches
/// user, sets `no_new_privs` and drops every capability. Fails if the process already has
/// another thread, which would keep its capabilities.
pub fn apply(plan: &Plan, owned: &[&Path]) -> Result<(), SysError> {
    let threads = privilege::thread_count();
    if threads != 1 {
        return Err(SysError {
            call: "dropping privileges",
            what: format!("{threads} threads"),
            source: std::io::Error::other(
                "threads started before the drop would keep their capabilities",
            ),
        });
    }
    let become_user = match plan {
        Plan::Become(u) => Some((u, owned)),
        Plan::Stay => None,
    };
    give_up(become_user)
}

/// Empties the bounding set (where CAP_SETPCAP allows), hands `owned` to the user and
/// switches to it if one is given, sets `no_new_privs` and drops every capability: all of
/// it for the calling thread and the threads it starts later.
fn give_up(become_user: Option<(&User, &[&Path])>) -> Result<(), SysError> {
    // The bounding set limits only what an execve grants: the effective capabilities the
    // steps below need stay until the end.
    if Capability::SetPcap.is_effective() {
        privilege::clear_bounding_set()?;
    }
    if let Some((u, owned)) = become_user {
        for path in owned {
            // lchown: the files were opened without following links; never follow one now.
            match std::os::unix::fs::lchown(path, Some(u.uid), Some(u.gid)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(SysError {
                        call: "lchown",
                        what: path.display().to_string(),
                        source,
                    })
                }
            }
        }
        privilege::switch_user(u)?;
    }
    privilege::set_no_new_privs()?;
    privilege::drop_capabilities()
}

/// Runs `start` on a thread of its own that first gives up every capability (as [`apply`]
/// does, staying the same user), so the threads `start` starts hold none while the calling
/// thread keeps its own: for the exporters of a probe that keeps CAP_BPF to reload its
/// in-kernel rules.
pub fn unprivileged<T: Send>(start: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            give_up(None)?;
            start()
        })
        .join()
        .map_err(|_| anyhow::anyhow!("a thread starting the exporters panicked"))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(name: &str) -> Result<Option<User>, SysError> {
        let user = |uid| {
            Some(User {
                name: name.to_owned(),
                uid,
                gid: uid,
            })
        };
        Ok(match name {
            "root" => user(0),
            "nobody" => user(65534),
            "poolcap" => user(990),
            _ => None,
        })
    }

    fn no_poolcap(name: &str) -> Result<Option<User>, SysError> {
        if name == DEFAULT_USER {
            Ok(None)
        } else {
            db(name)
        }
    }

    #[test]
    fn root_switches_to_the_dedicated_user_only_if_it_exists() {
        match plan(None, 0, db).expect("plan") {
            Plan::Become(u) => assert_eq!((u.name.as_str(), u.uid), ("poolcap", 990)),
            p => panic!("{p:?}"),
        }
        assert_eq!(plan(None, 0, no_poolcap).expect("plan"), Plan::Stay);
    }

    #[test]
    fn z_names_the_user_and_z_root_stays() {
        assert!(matches!(
            plan(Some("nobody"), 0, db).expect("plan"),
            Plan::Become(User { uid: 65534, .. })
        ));
        assert_eq!(plan(Some("root"), 0, db).expect("plan"), Plan::Stay);
        // Not root and no -Z: nothing to switch, only capabilities to drop.
        assert_eq!(plan(None, 1000, db).expect("plan"), Plan::Stay);
    }

    #[test]
    fn an_unknown_user_is_a_usage_error() {
        let e = plan(Some("nosuch"), 0, db).expect_err("unknown");
        assert!(e.downcast_ref::<crate::cli::UsageError>().is_some());
        assert_eq!(e.to_string(), "-Z: no such user `nosuch`");
    }
}
