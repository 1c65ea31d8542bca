//! The file source: a pcap or pcapng file (plain, gzip or zstd, or standard input) run
//! through the same pipeline as live traffic: filter, workers, load, writer, accounting.
//!
//! Packets keep their recorded timestamps. They come as fast as the pipeline takes them
//! (a full pool makes the capture thread wait: a file never drops), or, with a speed, at
//! that multiple of their recorded pace. The filter is libpcap's with offline semantics, as
//! `tcpdump -r` applies it: a VLAN tag is in the data, and length tests read the recorded
//! wire length, not the bytes kept. A stop ends reading at once; the
//! packets not read count as `not_taken`, so `packets in the file = captured + filtered +
//! not_taken`.
//!
//! The file is decoded into memory first (poolcap-format's checked reader), so a bad file is
//! reported before the capture starts.
//!
//! A [`Gate`] can hold packets back from a recorded time on: `poolcap probe -r` cuts its
//! periods by the packets' timestamps, so it lets a period's packets through, waits until
//! the workers have analysed them, ends the period, and only then opens the gate further.

use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use poolcap_format::{LinkType, RecordedPacket};
use poolcap_sys::pcap_filter::OfflineFilter;
use poolcap_sys::poll::Readiness;
use poolcap_sys::SysError;

use super::filter::compile_user;
use super::pool::Pool;
use super::source::{Filler, KernelDrops, Source};
use super::CaptureError;

/// Packets moved per batch.
const BATCH: usize = 256;

/// A file that cannot be captured from.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {what}: {why}")]
pub struct FileError {
    /// The file (or standard input).
    pub what: String,
    /// Why.
    pub why: String,
}

/// How long a held source sleeps before it looks at its gate again.
const HELD_WAIT: Duration = Duration::from_millis(1);

/// Holds a file's packets back from a recorded time on (see the module docs). Times are
/// nanoseconds since the epoch, as the packets' timestamps.
#[derive(Debug)]
pub struct Gate {
    /// Packets recorded at or after this time are held.
    until: AtomicU64,
    /// The recorded time of the next packet not yet taken (`u64::MAX` once none is left).
    next: AtomicU64,
    /// The latest recorded time of the packets taken (the first packet's before any is).
    last: AtomicU64,
    /// Packets taken stamped before this time (the open period's start) are late.
    from: AtomicU64,
    /// Late packets taken so far (not those the filter rejected).
    late: AtomicU64,
}

impl Gate {
    /// Opens the period `[from, until)`: lets packets recorded before `until` through and
    /// counts those recorded before `from` as late (a file whose time steps back).
    pub fn open(&self, from: u64, until: u64) {
        self.from.store(from, Ordering::Release);
        self.until.store(until, Ordering::Release);
    }

    /// Late packets taken so far (see [`open`](Self::open)).
    pub fn late(&self) -> u64 {
        self.late.load(Ordering::Acquire)
    }

    /// The recorded time of the next packet not yet taken; `None` at the end of the file.
    /// Once it is at or past the gate's time, every earlier packet has been put into a
    /// chunk (Acquire pairs with the source's Release after its batch).
    pub fn next(&self) -> Option<u64> {
        Some(self.next.load(Ordering::Acquire)).filter(|t| *t != u64::MAX)
    }

    /// The latest recorded time of the packets taken.
    pub fn last(&self) -> u64 {
        self.last.load(Ordering::Acquire)
    }

    fn held(&self, ts: u64) -> bool {
        ts >= self.until.load(Ordering::Acquire)
    }
}

/// See the module docs.
pub struct FileSource {
    packets: Vec<RecordedPacket>,
    linktype: LinkType,
    next: usize,
    filter: Option<OfflineFilter>,
    /// Recorded nanoseconds per real nanosecond, if paced.
    speed: Option<f64>,
    started: Instant,
    first_ts: u64,
    reported: bool,
    gate: Option<Arc<Gate>>,
}

impl std::fmt::Debug for FileSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSource")
            .field("packets", &self.packets.len())
            .field("next", &self.next)
            .finish()
    }
}

/// Reads all of `path` (`-`: standard input), undoing gzip or zstd compression, which is
/// recognised by its magic number.
fn read_all(path: &Path) -> Result<Vec<u8>, String> {
    let raw = if path.as_os_str() == "-" {
        let mut b = Vec::new();
        std::io::stdin()
            .read_to_end(&mut b)
            .map_err(|e| e.to_string())?;
        b
    } else {
        std::fs::read(path).map_err(|e| e.to_string())?
    };
    let mut out = Vec::new();
    match raw.get(..4) {
        Some([0x1f, 0x8b, ..]) => {
            flate2::read::MultiGzDecoder::new(&raw[..])
                .read_to_end(&mut out)
                .map_err(|e| format!("gzip: {e}"))?;
            Ok(out)
        }
        Some([0x28, 0xb5, 0x2f, 0xfd]) => {
            zstd::stream::decode_all(&raw[..]).map_err(|e| format!("zstd: {e}"))
        }
        _ => Ok(raw),
    }
}

impl FileSource {
    /// Opens and decodes `path`, compiles `filter` with offline semantics for the file's
    /// link type; `speed` paces packets at that multiple of their recorded pace. A file of
    /// a link type poolcap does not know is refused by its number, never read as Ethernet;
    /// records whose sub-second field is a second or more are read as they say (the time
    /// runs into the next seconds, as tcpdump shows it) and counted in a warning.
    pub fn open(
        path: &Path,
        filter: Option<&str>,
        speed: Option<f64>,
    ) -> Result<Self, CaptureError> {
        let what = if path.as_os_str() == "-" {
            "standard input".to_string()
        } else {
            path.display().to_string()
        };
        let err = |why: String| FileError {
            what: what.clone(),
            why,
        };
        let bytes = read_all(path).map_err(err)?;
        let file = poolcap_format::read_bytes(&bytes).map_err(|e| err(e.to_string()))?;
        let linktype = match LinkType::of_file(file.linktype) {
            Ok(l) => l,
            // A pcapng file without an interface has no packets either.
            Err(_) if file.packets.is_empty() => LinkType::ETHERNET,
            Err(e) => return Err(err(e.to_string()).into()),
        };
        if file.odd_timestamps > 0 {
            eprintln!(
                "warning: {what}: {} records have a sub-second timestamp field of a second or \
                 more; their times run into the following seconds",
                file.odd_timestamps
            );
        }
        let filter = filter
            .map(|expr| compile_user(expr, linktype))
            .transpose()?;
        let mut source = Self::new(file.packets, filter, speed);
        source.linktype = linktype;
        Ok(source)
    }

    /// What the file's packets start with.
    pub fn linktype(&self) -> LinkType {
        self.linktype
    }

    /// A source of `packets`.
    pub fn new(
        packets: Vec<RecordedPacket>,
        filter: Option<OfflineFilter>,
        speed: Option<f64>,
    ) -> Self {
        Self {
            first_ts: packets.first().map_or(0, |p| p.ts_ns),
            packets,
            linktype: LinkType::ETHERNET,
            next: 0,
            filter,
            speed: speed.filter(|s| *s > 0.0),
            started: Instant::now(),
            reported: false,
            gate: None,
        }
    }

    /// Holds packets back behind a gate, closed at first; returns the gate.
    pub fn gated(&mut self) -> Arc<Gate> {
        let gate = Arc::new(Gate {
            until: AtomicU64::new(0),
            next: AtomicU64::new(self.packets.first().map_or(u64::MAX, |p| p.ts_ns)),
            last: AtomicU64::new(self.first_ts),
            from: AtomicU64::new(0),
            late: AtomicU64::new(0),
        });
        self.gate = Some(Arc::clone(&gate));
        gate
    }

    /// True when the next packet waits behind the gate.
    fn held(&self) -> bool {
        match (&self.gate, self.packets.get(self.next)) {
            (Some(g), Some(p)) => g.held(p.ts_ns),
            _ => false,
        }
    }

    /// How long until the next packet is due, at the recorded pace (zero: now).
    fn until_due(&self) -> Duration {
        let (Some(speed), Some(p)) = (self.speed, self.packets.get(self.next)) else {
            return Duration::ZERO;
        };
        let due =
            Duration::from_secs_f64(p.ts_ns.saturating_sub(self.first_ts) as f64 / 1e9 / speed);
        due.saturating_sub(self.started.elapsed())
    }
}

impl Source for FileSource {
    fn take_batch(&mut self, pool: &Pool, filler: &mut Filler) -> bool {
        filler.begin_batch();
        if filler.stopping() || self.exhausted() || !self.until_due().is_zero() || self.held() {
            return false;
        }
        let end = (self.next + BATCH).min(self.packets.len());
        while self.next < end && self.until_due().is_zero() && !self.held() {
            let p = &self.packets[self.next];
            self.next += 1;
            if self
                .filter
                .as_ref()
                .is_some_and(|f| !f.matches(&p.data, p.orig_len))
            {
                filler.tally.filtered += 1;
                continue;
            }
            filler.push_copy(pool, p.ts_ns, [&p.data, &[], &[]], p.orig_len);
            if let Some(g) = &self.gate {
                g.last.fetch_max(p.ts_ns, Ordering::AcqRel);
                if p.ts_ns < g.from.load(Ordering::Acquire) {
                    g.late.fetch_add(1, Ordering::AcqRel);
                }
            }
        }
        if let Some(g) = &self.gate {
            // After the batch's packets are in chunks (see `Gate::next`).
            let next = self.packets.get(self.next).map_or(u64::MAX, |p| p.ts_ns);
            g.next.store(next, Ordering::Release);
        }
        true
    }

    /// Sleeps until the next packet is due (at most `timeout`), or briefly while it is held
    /// behind the gate.
    fn poll(&self, timeout: Duration) -> Result<Readiness, SysError> {
        let wait = if self.held() {
            HELD_WAIT
        } else {
            self.until_due()
        }
        .min(timeout);
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        Ok(Readiness::Readable)
    }

    fn next_batch_len(&self) -> Option<usize> {
        Some((self.packets.len() - self.next).min(BATCH))
    }

    /// Every packet of the file has "arrived": those not read by the end count as not
    /// taken.
    fn kernel_drops(&mut self) -> Result<KernelDrops, SysError> {
        let received = if std::mem::replace(&mut self.reported, true) {
            0
        } else {
            self.packets.len() as u64
        };
        Ok(KernelDrops {
            received: Some(received),
            ..KernelDrops::default()
        })
    }

    fn exhausted(&self) -> bool {
        self.next == self.packets.len()
    }
}
