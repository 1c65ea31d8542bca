//! Running `ip` and reading its JSON output. Every failure carries the full command line and
//! `ip`'s own stderr, because that is what tells a user which namespace or device is at fault.

use crate::LabError;
use serde::de::DeserializeOwned;
use std::process::Command;

/// `ip netns exec NETNS PROGRAM`, ready for `.args(...)`: runs a program inside a lab host.
pub fn netns_command(netns: &str, program: &str) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", netns, program]);
    cmd
}

/// `ip ARGS...`.
pub(crate) fn ip<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut cmd = Command::new("ip");
    cmd.args(args);
    cmd
}

/// The command line as a user would type it, for error messages.
pub(crate) fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `cmd` to completion and returns its stdout; a non-zero exit is an error carrying stderr.
pub(crate) fn run(mut cmd: Command) -> Result<String, LabError> {
    let out = cmd.output().map_err(|source| LabError::Spawn {
        command: describe(&cmd),
        source,
    })?;
    if !out.status.success() {
        return Err(LabError::Failed {
            command: describe(&cmd),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    String::from_utf8(out.stdout).map_err(|_| LabError::Output {
        command: describe(&cmd),
        detail: "not UTF-8".to_owned(),
    })
}

/// Runs `cmd` (an `ip -j ...` command) and parses its JSON output as `T`.
pub(crate) fn run_json<T: DeserializeOwned>(cmd: Command) -> Result<T, LabError> {
    let command = describe(&cmd);
    let text = run(cmd)?;
    // `ip -j` prints nothing at all for some empty listings.
    let text = if text.trim().is_empty() { "[]" } else { &text };
    serde_json::from_str(text).map_err(|e| LabError::Output {
        command,
        detail: e.to_string(),
    })
}
