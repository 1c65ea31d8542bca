//! What a capture is asked to do: its input, output and every setting, resolved by the CLI
//! (or a test) and handed to [`super::Engine::start`]. A module of its own so that the
//! stages that read the configuration need not import the engine.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use poolcap_core::policy::PolicySpec;
use poolcap_core::wait::WaitStrategy;
use poolcap_format::FileFormat;
use poolcap_sys::rx_ring::RingGeometry;
use poolcap_sys::socket::FanoutMode;

use super::backend::BackendConfig;
use super::pool::PoolSize;
use super::savefile::BoxedOutput;
use super::source::Source;
use super::{compress, savefile};

/// Where a capture's packets come from.
pub enum Input {
    /// The interface `iface`, through the configured backend.
    Live,
    /// A pcap/pcapng file (plain, gzip or zstd; `-` for standard input), as fast as the
    /// pipeline takes it or at `speed` times its recorded pace.
    File {
        /// The file.
        path: PathBuf,
        /// Pace, as a multiple of the recorded one.
        speed: Option<f64>,
    },
    /// Sources built by the caller (tests: `mem`), one per queue.
    Sources(Vec<Box<dyn Source>>),
}

/// A resolved capture.
pub struct CaptureConfig {
    /// Where packets come from.
    pub input: Input,
    /// Interface (for a file: the name recorded in the output).
    pub iface: String,
    /// Receive queues (fanout sockets).
    pub queues: usize,
    /// Fanout mode.
    pub fanout: FanoutMode,
    /// Pool per queue.
    pub pool: PoolSize,
    /// Worker threads.
    pub workers: usize,
    /// x-loop iterations per packet.
    pub load: u32,
    /// Run the load in the capture thread on the kernel ring (no pool, no workers).
    pub in_place: bool,
    /// Capture threads' wait strategy.
    pub wait: WaitStrategy,
    /// Bytes kept per packet.
    pub snaplen: u32,
    /// Kernel ring per queue.
    pub ring: RingGeometry,
    /// tcpdump filter expression.
    pub filter: Option<String>,
    /// Output and its format.
    pub output: Option<(Output, FileFormat)>,
    /// Compress the output.
    pub compress: Option<compress::Compression>,
    /// Rotation, `-z` and `--fsync` of output files.
    pub files: savefile::FileOptions,
    /// Stop after this many packets.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// CPUs to pin capture threads (then workers) to, round robin.
    pub cpus: Option<Vec<usize>>,
    /// Seal a partly filled chunk after this long without new packets.
    pub seal_after: Duration,
    /// Offload policy.
    pub policy: PolicySpec,
    /// Backend (AF_PACKET, AF_XDP).
    pub backend: BackendConfig,
    /// Buddy groups (every queue in exactly one).
    pub buddy_groups: Vec<Vec<usize>>,
    /// Print a status line this often on stderr (None: quiet).
    pub status_every: Option<Duration>,
    /// Run the probe's rules on the workers instead of the x-loop (`poolcap probe`).
    pub probe: Option<Arc<poolcap_probe::Hub>>,
    /// Put the interface in promiscuous mode while capturing (tcpdump's default; `-p`
    /// turns it off).
    pub promiscuous: bool,
    /// Set (by SIGUSR1) to have the running accounting printed; the supervisor clears it.
    pub stats_request: Option<Arc<AtomicBool>>,
}

impl std::fmt::Debug for CaptureConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureConfig")
            .field("iface", &self.iface)
            .field("queues", &self.queues)
            .finish()
    }
}

/// Where captured packets go.
pub enum Output {
    /// Standard output (`-w -`).
    Stdout,
    /// A file, created (truncated) only once everything else is set up.
    File(PathBuf),
    /// Any other sink (tests).
    Sink(BoxedOutput),
}
