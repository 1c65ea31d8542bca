//! Why a probe could not start or stopped: one typed error for the probe's public
//! functions, as [`CaptureError`] is for the capture's, so a caller can tell a capture that
//! failed from a report it could not write (which it reports, and exits on, differently).

use std::path::PathBuf;

use poolcap_probe::hub::Late;
use poolcap_sys::SysError;

use super::report_file::Unwritten;
use crate::capture::CaptureError;

/// Why the probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The capture under the probe failed (or could not start).
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// A kernel call failed (eBPF maps and programs, the control socket's options).
    #[error(transparent)]
    Sys(#[from] SysError),
    /// The in-kernel rules could not be built or placed.
    #[error("{0}")]
    Kernel(String),
    /// The workers did not hand over a period's tallies in time.
    #[error(transparent)]
    Late(#[from] Late),
    /// Periods could not be written to the report file.
    #[error(transparent)]
    Unwritten(#[from] Unwritten),
    /// A file or socket could not be created, read or written.
    #[error("{what} {}: {source}", path.display())]
    Path {
        /// What was being done ("cannot write", "cannot connect to").
        what: &'static str,
        /// The file or socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The control socket's path cannot be used, or its probe did not answer.
    #[error("{0}")]
    Control(String),
    /// The input file is not one the probe reads.
    #[error("{0}")]
    Input(String),
    /// A thread could not be started, or a period's records encoded.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A thread of the probe panicked.
    #[error("the {0} panicked")]
    Panicked(&'static str),
}

impl ProbeError {
    /// `what` failed on `path` because of `source`.
    pub fn path(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Path {
            what,
            path: path.into(),
            source,
        }
    }
}

impl From<serde_json::Error> for ProbeError {
    fn from(e: serde_json::Error) -> Self {
        Self::Io(e.into())
    }
}
