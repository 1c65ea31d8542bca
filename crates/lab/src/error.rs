//! Why a lab could not be built, inspected or removed: one variant per cause, each naming the
//! lab or the exact `ip` command (which names the namespace) so the message is actionable.

use poolcap_sys::privilege::MissingPrivilege;

/// An error building, inspecting or removing a lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The process lacks a capability labs need.
    #[error(transparent)]
    Privilege(#[from] MissingPrivilege),
    /// The lab name is empty, too long or has characters other than `[A-Za-z0-9_-]`.
    #[error("invalid lab name {0:?}: use 1 to 20 characters from A-Z, a-z, 0-9, '_' and '-'")]
    InvalidName(String),
    /// The number of queues per interface is outside `1..=64`.
    #[error("invalid number of queues {0}: use 1 to 64")]
    InvalidQueues(u16),
    /// The number of hosts is neither 2 nor 3.
    #[error("invalid number of hosts {0}: use 2 (sender, probe) or 3 (sender, probe, sink)")]
    InvalidHosts(u8),
    /// A namespace of a lab with this name already exists.
    #[error("lab {0} already exists; remove it with `poolcap lab down --name {0}`")]
    Exists(String),
    /// No namespace of a lab with this name exists.
    #[error("no lab named {0} exists (see `poolcap lab status`)")]
    NotFound(String),
    /// Processes still run inside the lab's namespaces.
    #[error(
        "lab {name} still has processes running inside (PIDs {}); stop them, or remove it \
         anyway with `poolcap lab down --name {name} --force`, which ends them",
        pids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
    )]
    Busy {
        /// The lab.
        name: String,
        /// The processes.
        pids: Vec<u32>,
    },
    /// Processes in the lab survived SIGKILL (e.g. stuck in the kernel).
    #[error("processes {0:?} in the lab did not end, even after SIGKILL")]
    Unkillable(Vec<u32>),
    /// A command could not be started at all (e.g. `ip` is not installed).
    #[error("could not run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why it could not be started.
        source: std::io::Error,
    },
    /// A command ran and failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it printed on standard error, trimmed.
        stderr: String,
    },
    /// A command succeeded but its output was not what `ip` prints.
    #[error("unexpected output from `{command}`: {detail}")]
    Output {
        /// The command line.
        command: String,
        /// What was wrong with it.
        detail: String,
    },
}

impl LabError {
    /// True if the error is about the requested lab itself (name, queues, hosts) rather than
    /// the system, so a command line can report it as bad usage.
    pub fn is_invalid_spec(&self) -> bool {
        matches!(
            self,
            LabError::InvalidName(_) | LabError::InvalidQueues(_) | LabError::InvalidHosts(_)
        )
    }
}
