//! What a capture configuration needs from the process before anything is opened: the
//! capabilities of its backend and, for AF_XDP, the locked memory of its UMEM. One answer
//! for every command that opens a live capture (`capture`, `forward`, `probe`), so they ask
//! for the same privileges for the same backend, and a missing one is named in one line
//! before a socket, ring, XDP program or file exists.

use poolcap_sys::privilege::{self, MissingPrivilege};

use super::backend::{umem_frame_size, BackendKind};
use super::config::{CaptureConfig, Input};

/// The privileges a configuration needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// A file or the caller's own sources: nothing from the kernel.
    Nothing,
    /// AF_PACKET sockets: CAP_NET_RAW.
    RawSockets,
    /// An XDP program and AF_XDP sockets (CAP_NET_RAW, CAP_NET_ADMIN, CAP_BPF) and a UMEM of
    /// `umem_bytes` of locked memory (CAP_IPC_LOCK past RLIMIT_MEMLOCK).
    AfXdp {
        /// Every queue's UMEM together.
        umem_bytes: u64,
    },
    /// BPF programs at tc ingress (the in-kernel probe): CAP_NET_ADMIN and CAP_BPF.
    TcPrograms,
}

impl Needs {
    /// What `cfg` needs: its input and backend decide.
    pub fn of(cfg: &CaptureConfig) -> Self {
        match (&cfg.input, cfg.backend.kind) {
            (Input::Live, BackendKind::AfXdp) => {
                let frames = (cfg.pool.cells * cfg.pool.chunks) as u64;
                let frame = u64::from(umem_frame_size(cfg.pool.cell_size));
                Self::AfXdp {
                    umem_bytes: cfg.queues as u64 * frames * frame,
                }
            }
            (Input::Live, _) => Self::RawSockets,
            _ => Self::Nothing,
        }
    }

    /// Whether the process has what is needed, else which capabilities lack; `doing` names
    /// the step in the error (`capturing packets`, `forwarding packets`).
    pub fn check(self, doing: Doing) -> Result<(), MissingPrivilege> {
        match self {
            Self::Nothing => Ok(()),
            Self::RawSockets => privilege::check_raw_sockets(doing.raw_sockets()),
            Self::AfXdp { umem_bytes } => privilege::check_af_xdp(doing.af_xdp(), umem_bytes),
            Self::TcPrograms => privilege::check_tc_bpf("placing probe rules in the kernel"),
        }
    }
}

/// What a command does with its sockets, as its missing-privilege error says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Doing {
    /// `capture` and `probe`.
    Capturing,
    /// `forward`.
    Forwarding,
}

impl Doing {
    fn raw_sockets(self) -> &'static str {
        match self {
            Self::Capturing => "capturing packets",
            Self::Forwarding => "forwarding packets",
        }
    }

    fn af_xdp(self) -> &'static str {
        match self {
            Self::Capturing => "AF_XDP capture",
            Self::Forwarding => "AF_XDP forwarding",
        }
    }
}
