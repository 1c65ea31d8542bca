//! The file source: a pcap or pcapng file (plain, gzip or zstd, or standard input) run
//! through the same pipeline as live traffic: filter, workers, load, writer, accounting.
//!
//! The file is read as a stream (poolcap-format's [`PacketReader`], decompressed on the
//! way): one buffer reused for the whole file and no allocation per packet, so memory does
//! not grow with the file, and each packet is copied from that buffer straight into a pool
//! chunk. The header is read at open, so the link type is known before the capture starts
//! (the startup line, the filter and the output file use it).
//!
//! Packets keep their recorded timestamps. They come as fast as the pipeline takes them
//! (a full pool makes the capture thread wait: a file never drops), or, with a speed, at
//! that multiple of their recorded pace. The next packet is decoded ahead
//! ([`PacketReader::peek`]), so its time is known before it is taken. The filter is
//! libpcap's with offline semantics, as `tcpdump -r` applies it: a VLAN tag is in the data,
//! and length tests read the recorded wire length, not the bytes kept.
//!
//! Accounting: every packet read ends in one counter, so `packets read = captured +
//! filtered + not_taken`. A stop (a signal, `--duration`) or a spent count limit (`-c`)
//! ends reading at once, as `tcpdump -r -c` does: the rest of the file is neither read nor
//! counted (a stream's length is known only once it is read). A file read to its end has
//! every packet in the counters.
//!
//! A file that goes bad part-way (cut short, a malformed record, a decompression error) is
//! read up to the error, as tcpdump reads a "truncated dump file": the packets before it
//! are captured and written, then the error, naming the file, fails the capture
//! ([`Source::finish`]). Records whose sub-second field is a second or more are read as
//! they say and counted in a warning at the end.
//!
//! A [`Gate`] can hold packets back from a recorded time on: `poolcap probe -r` cuts its
//! periods by the packets' timestamps, so it lets a period's packets through, waits until
//! the workers have analysed them, ends the period, and only then opens the gate further.

use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use poolcap_format::{decompressed, LinkType, PacketReader, ReadError};
use poolcap_sys::pcap_filter::OfflineFilter;
use poolcap_sys::poll::Readiness;
use poolcap_sys::SysError;

use super::error::{CaptureError, FileError};
use super::filter::compile_user;
use super::pool::Pool;
use super::source::{Filler, Source};

/// Packets moved per batch.
const BATCH: usize = 256;

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
    /// The file's name, or "standard input".
    what: String,
    reader: PacketReader<Box<dyn Read + Send>>,
    linktype: LinkType,
    /// The recorded time of the next packet, decoded ahead; None once the file is read (to
    /// its end, or to the error in `failure`).
    next_ts: Option<u64>,
    /// Why reading ended before the end of the file.
    failure: Option<FileError>,
    filter: Option<OfflineFilter>,
    /// Recorded nanoseconds per real nanosecond, if paced.
    speed: Option<f64>,
    started: Instant,
    first_ts: u64,
    gate: Option<Arc<Gate>>,
}

impl std::fmt::Debug for FileSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSource")
            .field("what", &self.what)
            .field("reader", &self.reader)
            .finish()
    }
}

/// What a read error says; a stream's own error (a decompressor's, the disk's) without the
/// reader's "cannot read the capture" around it.
fn why(e: ReadError) -> String {
    match e {
        ReadError::Stream(e) => e.to_string(),
        e => e.to_string(),
    }
}

impl FileSource {
    /// Opens `path` (`-`: standard input; gzip or zstd compression is recognised by its
    /// magic number and undone), reads its header and compiles `filter` with offline
    /// semantics for the file's link type; `speed` paces packets at that multiple of their
    /// recorded pace. A file of a link type poolcap does not know is refused by its number,
    /// never read as Ethernet.
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
        let src: Box<dyn Read + Send> = if path.as_os_str() == "-" {
            Box::new(std::io::stdin())
        } else {
            Box::new(std::fs::File::open(path).map_err(|e| err(e.to_string()))?)
        };
        let src = decompressed(src).map_err(|e| err(e.to_string()))?;
        let reader = PacketReader::new(src).map_err(|e| err(why(e)))?;
        let mut source = Self {
            what: what.clone(),
            reader,
            linktype: LinkType::ETHERNET,
            next_ts: None,
            failure: None,
            filter: None,
            speed: speed.filter(|s| *s > 0.0),
            started: Instant::now(),
            first_ts: 0,
            gate: None,
        };
        source.read_ahead();
        source.first_ts = source.next_ts.unwrap_or(0);
        source.linktype = match LinkType::of_file(source.reader.linktype()) {
            Ok(l) => l,
            // A pcapng file without an interface has no packets either.
            Err(_) if source.next_ts.is_none() => LinkType::ETHERNET,
            Err(e) => return Err(err(e.to_string()).into()),
        };
        source.filter = filter
            .map(|expr| compile_user(expr, source.linktype))
            .transpose()?;
        Ok(source)
    }

    /// What the file's packets start with.
    pub fn linktype(&self) -> LinkType {
        self.linktype
    }

    /// Holds packets back behind a gate, closed at first; returns the gate.
    pub fn gated(&mut self) -> Arc<Gate> {
        let gate = Arc::new(Gate {
            until: AtomicU64::new(0),
            next: AtomicU64::new(self.next_ts.unwrap_or(u64::MAX)),
            last: AtomicU64::new(self.first_ts),
            from: AtomicU64::new(0),
            late: AtomicU64::new(0),
        });
        self.gate = Some(Arc::clone(&gate));
        gate
    }

    /// Decodes the next packet ahead: its time, or the end of the file, or why it ended.
    fn read_ahead(&mut self) {
        self.next_ts = match self.reader.peek() {
            Ok(p) => p.map(|p| p.ts_ns),
            Err(e) => {
                self.failure = Some(FileError {
                    what: self.what.clone(),
                    why: why(e),
                });
                None
            }
        };
    }

    /// True when the next packet waits behind the gate.
    fn held(&self) -> bool {
        match (&self.gate, self.next_ts) {
            (Some(g), Some(ts)) => g.held(ts),
            _ => false,
        }
    }

    /// How long until the next packet is due, at the recorded pace (zero: now).
    fn until_due(&self) -> Duration {
        let (Some(speed), Some(ts)) = (self.speed, self.next_ts) else {
            return Duration::ZERO;
        };
        let due = Duration::from_secs_f64(ts.saturating_sub(self.first_ts) as f64 / 1e9 / speed);
        due.saturating_sub(self.started.elapsed())
    }

    /// True when the next packet is to be taken now.
    fn ready(&self, filler: &Filler) -> bool {
        !self.exhausted() && !filler.budget_spent() && self.until_due().is_zero() && !self.held()
    }
}

impl Source for FileSource {
    fn take_batch(&mut self, pool: &Pool, filler: &mut Filler) -> bool {
        filler.begin_batch();
        if filler.stopping() || !self.ready(filler) {
            return false;
        }
        for _ in 0..BATCH {
            if !self.ready(filler) {
                break;
            }
            // The packet read ahead (so never an error).
            if let Ok(Some(p)) = self.reader.next_packet() {
                if self
                    .filter
                    .as_ref()
                    .is_some_and(|f| !f.matches(p.data, p.orig_len))
                {
                    filler.tally.filtered += 1;
                } else {
                    filler.push_copy(pool, p.ts_ns, [p.data, &[], &[]], p.orig_len);
                    if let Some(g) = &self.gate {
                        g.last.fetch_max(p.ts_ns, Ordering::AcqRel);
                        if p.ts_ns < g.from.load(Ordering::Acquire) {
                            g.late.fetch_add(1, Ordering::AcqRel);
                        }
                    }
                }
            }
            self.read_ahead();
        }
        if let Some(g) = &self.gate {
            // After the batch's packets are in chunks (see `Gate::next`).
            g.next
                .store(self.next_ts.unwrap_or(u64::MAX), Ordering::Release);
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

    /// At most a batch (how many packets are left is known only at the end).
    fn next_batch_len(&self) -> Option<usize> {
        Some(if self.exhausted() { 0 } else { BATCH })
    }

    fn exhausted(&self) -> bool {
        self.next_ts.is_none()
    }

    /// Reading a file from RAM to disk: the writer in its own thread (its copies into the
    /// direct-I/O buffers) beside the reader (its copies into chunks) took 3.8 GB at 1.06
    /// to 1.32 GB/s until synced, against 0.78 to 1.26 with the writer run between the
    /// reader's batches (interleaved runs, 2 shared cores under load 6-7).
    fn works_per_packet(&self) -> bool {
        true
    }

    /// Warns of odd timestamps read; a file that went bad part-way fails the capture.
    fn finish(&mut self) -> Result<(), CaptureError> {
        let odd = self.reader.odd_timestamps();
        if odd > 0 {
            log::warn!(
                "warning: {}: {odd} records have a sub-second timestamp field of a second or \
                 more; their times run into the following seconds",
                self.what
            );
        }
        self.failure.take().map_or(Ok(()), |e| Err(e.into()))
    }
}
