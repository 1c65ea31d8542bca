//! `-Z USER` (capture, probe, forward): whom the process runs as once everything privileged
//! is open, decided the way tcpdump decides it. `-Z USER` switches to that user and its groups; without `-Z` a root
//! capture switches to the dedicated user [`DEFAULT_USER`] if the system has one and otherwise
//! stays root, silently; `-Z root` (any user with the current uid) stays. In every case the
//! capabilities are then dropped to none, so the capture threads, workers and writer run with
//! no privilege at all, holding only the descriptors opened before.
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

/// Checks, before anything is opened, that the plan can be carried out.
pub fn check(plan: &Plan) -> Result<()> {
    if let Plan::Become(u) = plan {
        privilege::require(&[Capability::SetUid, Capability::SetGid], "-Z")
            .map_err(|e| anyhow::anyhow!("{e}; cannot switch to user `{}`", u.name))?;
    }
    Ok(())
}

/// The plan for `-Z requested` in this process, checked ([`plan`], then [`check`]).
pub fn prepare(requested: Option<&str>) -> Result<Plan> {
    let p = plan(
        requested,
        poolcap_sys::process::effective_uid(),
        privilege::lookup_user,
    )?;
    check(&p)?;
    Ok(p)
}

/// Carries the plan out: hands the files `owned` (those that exist) to the new user, then
/// switches. Call it before the process starts threads: capabilities are per thread (the
/// user switch itself applies to every thread).
pub fn apply(plan: &Plan, owned: &[&Path]) -> Result<(), SysError> {
    if let Plan::Become(u) = plan {
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
    privilege::drop_capabilities()
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
