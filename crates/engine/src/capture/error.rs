//! Why a capture fails: one error type for every stage (sources, sinks, threads, set-up), in
//! a leaf module so that each stage can return it without importing the engine that runs
//! them all.

use std::path::PathBuf;

use poolcap_sys::SysError;

use super::filter::FilterError;

/// Why a capture could not start or failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// No such interface.
    #[error("no such interface `{0}`")]
    NoInterface(String),
    /// The filter did not compile.
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// Pools and rings need more memory than is available.
    #[error("pools and rings need {need_mib} MiB but only {avail_mib} MiB are available; use a smaller --pool or -B")]
    Memory {
        /// MiB needed.
        need_mib: u64,
        /// MiB available.
        avail_mib: u64,
    },
    /// A kernel call failed.
    #[error(transparent)]
    Sys(#[from] SysError),
    /// The output file could not be created.
    #[error("cannot write {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The capture file could not be read.
    #[error(transparent)]
    File(#[from] FileError),
    /// AF_XDP could not be set up.
    #[error("{0}")]
    Xdp(String),
    /// The file header could not be written.
    #[error("cannot write the capture file header: {0}")]
    Header(poolcap_format::WriteError),
    /// The interface's link type is not one poolcap can capture.
    #[error("`{iface}` has link type ARPHRD {arphrd}, which poolcap cannot capture from (it captures Ethernet, loopback, raw IP devices such as tun, WireGuard and IP tunnels, 802.11 and CAN)")]
    LinkType {
        /// The interface.
        iface: String,
        /// Its ARPHRD_ type.
        arphrd: u16,
    },
    /// The interface was deleted while capturing.
    #[error("interface `{0}` disappeared during the capture")]
    LinkGone(String),
    /// A capture thread failed while running.
    #[error("capture thread of queue {queue} failed: {source}")]
    Thread {
        /// Queue.
        queue: usize,
        /// Error.
        source: SysError,
    },
}

/// A file that cannot be captured from.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {what}: {why}")]
pub struct FileError {
    /// The file (or standard input).
    pub what: String,
    /// Why.
    pub why: String,
}
