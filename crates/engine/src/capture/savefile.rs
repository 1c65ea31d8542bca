//! The file set a capture writes: the current capture file, and what happens when one is
//! closed (at a rotation or at the end).
//!
//! Each file stands alone: its own header (pcapng: section header and interface block) and,
//! in pcapng, an interface statistics block with the interface counters' change while it
//! was the current file, so the blocks of a whole set add up to the capture's totals.
//! Closing a file makes it durable as `--fsync` asks, then runs the `-z` command on it as
//! tcpdump does (`COMMAND FILE`, no shell, at the lowest priority, in parallel with the
//! capture); the writer waits for those commands at the end, so that when poolcap exits
//! every file is processed (tcpdump runs `-z` only at rotations, not on the last file).
//!
//! `--fsync`: `never` leaves write-back to the kernel (a crash of the machine, not of
//! poolcap, may lose the last seconds); `rotate` syncs each file as it is closed;
//! `interval:MS` also syncs the current file every MS milliseconds.
//!
//! If poolcap itself dies (`kill -9`), every file ends with the last write batch the kernel
//! took whole: batches are whole records (compressed: whole frames), handed over with one
//! `writev` each. One case is outside poolcap's hands: a fatal signal that arrives while
//! the kernel is copying a batch into the page cache stops the copy between two pages
//! (`generic_perform_write` checks `fatal_signal_pending`), which leaves part of a batch.
//! The writer spends a small share of its time in that copy, so this is rare, but a
//! reader must still be ready for a short last record after a `kill -9`. That is the
//! buffered path (`--buffered`, standard output, and a file system that refuses `O_DIRECT`).
//!
//! Files are written with direct I/O by default ([`FileIo::Auto`]): each file is opened with
//! `O_DIRECT`, and if its file system refuses that (EINVAL), opened again buffered, which the
//! start line says ([`WritePath`]). Why by default: through the page cache the writer is
//! throttled to write-back's pace once the dirty limit is reached (about 670 MB/s on the lab
//! disk, which takes 1.9-3.4 GB/s direct): a buffered capture of 20 GB at 870 MB/s lost half
//! its frames, a direct one 0.12%. A direct write lands in whole aligned blocks, each write
//! ending with its own padding block (pcapng, and compressed files: a zstd skippable frame
//! or an empty gzip member); pcap has no such block, so a pcap file written directly ends
//! inside its last record after `kill -9` (see `poolcap_format::DirectFile`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use poolcap_format::{
    Buffers, CaptureWriter, DirectFile, FileFormat, FileHeader, IfStats, Output, Padding, Tail,
    WriteError, DEPTH,
};

use super::compress::{Compressed, Compression};
use super::rotate::{Next, Rotation};
use crate::store::keeper::Tell;

/// The output of a capture: a file or standard output.
pub type BoxedOutput = Box<dyn Output + Send>;

/// Bytes of records per write with direct I/O: the device's pace grows with the write's size
/// (`dd oflag=direct` here: 256 KiB 0.58 GB/s, 1 MiB 1.0 GB/s, 4 MiB 1.8 GB/s), and the
/// writes go to the device from an I/O thread while the writer fills the next buffer (see
/// `poolcap_format::DirectFile`). 4 MiB was slower than 2 MiB from a file in RAM to disk
/// (3.8 GB, 3 interleaved rounds on 2 shared cores: pcap 483-515 against 757-830 MB/s,
/// pcapng 359-865 against 631-902): four buffers of 4 MiB no longer stay in the cache.
pub const DIRECT_BATCH_BYTES: usize = 2 << 20;

/// When capture files are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fsync {
    /// Never: the kernel writes back when it likes.
    #[default]
    Never,
    /// When a file is closed (rotation or end).
    Rotate,
    /// Also every so often while a file is written.
    Interval(Duration),
}

impl std::str::FromStr for Fsync {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            None if s == "never" => Ok(Fsync::Never),
            None if s == "rotate" => Ok(Fsync::Rotate),
            Some(("interval", ms)) => match ms.parse::<u64>() {
                Ok(ms) if ms > 0 => Ok(Fsync::Interval(Duration::from_millis(ms))),
                _ => Err(format!(
                    "`{ms}`: the interval is a number of milliseconds >= 1"
                )),
            },
            _ => Err(format!("`{s}`: use never, rotate or interval:MS")),
        }
    }
}

/// How capture files are written (standard output is always buffered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileIo {
    /// Direct I/O where the file system takes it, else buffered (see the module docs).
    #[default]
    Auto,
    /// Direct I/O, or an error where the file system refuses it (`--direct`).
    Direct,
    /// Through the page cache (`--buffered`).
    Buffered,
}

/// How a file is being written, as the start line says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WritePath {
    /// With `O_DIRECT`.
    Direct,
    /// Through the page cache, as asked.
    Buffered,
    /// Through the page cache, as `-U` needs: a direct write covers whole 4 KiB blocks (and
    /// pcapng pads each), not each packet.
    PacketBuffered,
    /// Through the page cache: the file system refused `O_DIRECT`.
    Fallback,
}

impl std::fmt::Display for WritePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WritePath::Direct => "with direct I/O (O_DIRECT)",
            WritePath::Buffered => "buffered (--buffered)",
            WritePath::PacketBuffered => "buffered (-U)",
            WritePath::Fallback => "buffered: its file system does not take direct I/O (O_DIRECT)",
        })
    }
}

/// Bytes a direct file may have on their way to a stalled device (see
/// `poolcap_format::direct::STALL_BYTES`): that much at most, and no more than a quarter of
/// the memory the process may still take (`available`, read as each file opens), so that a
/// long stall on a small machine or in a container ends in counted drops at the ring, not
/// in the OOM killer.
fn stall_bytes(available: Option<u64>) -> usize {
    let quarter = available.map_or(usize::MAX, |a| usize::try_from(a / 4).unwrap_or(usize::MAX));
    poolcap_format::direct::STALL_BYTES.min(quarter)
}

/// What the user asked of the output files besides their format.
#[derive(Debug, Clone, Default)]
pub struct FileOptions {
    /// `-C`, `-G`, `-W`.
    pub rotate: super::rotate::RotateSpec,
    /// `-z`.
    pub post_rotate: Option<OsString>,
    /// `--fsync`.
    pub fsync: Fsync,
    /// Direct I/O or not (`--direct`, `--buffered`).
    pub io: FileIo,
    /// `-U`: every packet handed to the output as soon as the writer takes it.
    pub packet_buffered: bool,
    /// Told of each file (the packet store's keeper): opened, its writes as they land
    /// (uncompressed pcap with direct I/O), closed whole.
    pub closed: Option<Tell>,
    /// Read while written (the packet store): once the writer is idle, every batch it
    /// wrote is visible in the file, its last records too.
    pub live_tail: bool,
}

/// How long a live file has not grown before its tail is shown: never at a steady rate,
/// where showing it (which waits for the writes on their way) could hold the writer.
const LIVE_TAIL_QUIET: Duration = Duration::from_millis(100);

/// How new files of the set are made.
#[derive(Debug, Clone)]
pub struct FileSpec {
    /// File format.
    pub format: FileFormat,
    /// What each file's header says (link type, snaplen, pcapng's interface and section
    /// options).
    pub header: FileHeader,
    /// Compression of each file.
    pub compress: Option<Compression>,
    /// When to sync.
    pub fsync: Fsync,
    /// `-z`: run `COMMAND FILE` on each closed file.
    pub post_rotate: Option<OsString>,
    /// Direct I/O or not (see [`poolcap_format::DirectFile`]).
    pub io: FileIo,
    /// `-U`: hand what is buffered to the output after every round of the writer.
    pub packet_buffered: bool,
    /// Told of each file (see [`FileOptions::closed`]).
    pub closed: Option<Tell>,
    /// See [`FileOptions::live_tail`].
    pub live_tail: bool,
    /// The write buffers the set's direct files share (see [`FileSpec::buffers`]).
    pub buffers: Buffers,
}

impl FileSpec {
    /// Write buffers for the files of one set: a closed file's go there and the next file
    /// takes them (see `poolcap_format::Buffers`), as the store's files did already. Why:
    /// each file of a rotated set (`-w -C`) made its buffers anew, memory the kernel faults
    /// in and zeroes page by page as the writer first fills it.
    pub fn buffers() -> Buffers {
        Buffers::new(2 * DEPTH)
    }

    /// Creates (truncates) `path` and writes its header; says how the file is written.
    pub fn open(&self, path: &Path) -> Result<(CaptureWriter<BoxedOutput>, WritePath), WriteError> {
        let io = |source| WriteError::Io { source, packets: 0 };
        let existing = crate::outfile::Existing::Truncate;
        let direct = match self.io {
            FileIo::Buffered => Err(WritePath::Buffered),
            FileIo::Auto if self.packet_buffered => Err(WritePath::PacketBuffered),
            FileIo::Auto | FileIo::Direct => {
                match crate::outfile::create_with(path, existing, libc::O_DIRECT) {
                    Ok(file) => Ok(file),
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        if self.io == FileIo::Direct {
                            return Err(io(std::io::Error::new(
                                e.kind(),
                                "--direct: this file system does not take direct I/O (O_DIRECT)",
                            )));
                        }
                        Err(WritePath::Fallback)
                    }
                    Err(e) => return Err(io(e)),
                }
            }
        };
        let (file, path): (BoxedOutput, _) = match direct {
            Ok(file) => {
                let mut direct = DirectFile::new(file, DIRECT_BATCH_BYTES, self.direct_tail());
                if self.live_tail {
                    let cached = std::fs::OpenOptions::new()
                        .write(true)
                        .open(path)
                        .map_err(io)?;
                    direct = direct.with_live_tail(cached);
                }
                direct = direct
                    .with_buffers(self.buffers.clone())
                    .with_stall_bytes(stall_bytes(crate::memlimit::available()));
                if let (Some(tell), Tail::Carry) = (&self.closed, self.direct_tail()) {
                    direct = direct.with_feed(tell.feed(path)).with_notes(tell.notes());
                }
                (Box::new(direct), WritePath::Direct)
            }
            Err(how) => (
                Box::new(crate::outfile::create(path, existing).map_err(io)?),
                how,
            ),
        };
        Ok((self.start(file)?, path))
    }

    /// How a direct write ends: padded with a block the file's readers skip, or (pcap) at
    /// its last whole block, the rest carried to the next write.
    fn direct_tail(&self) -> Tail {
        match (self.compress, self.format) {
            (Some(Compression::Zstd(_)), _) => Tail::Pad(Padding::Zstd),
            (Some(Compression::Gzip(_)), _) => Tail::Pad(Padding::Gzip),
            (None, FileFormat::Pcapng) => Tail::Pad(Padding::Pcapng),
            (None, FileFormat::Pcap | FileFormat::PcapNs) => Tail::Carry,
        }
    }

    /// Wraps `out` as asked (compression) and writes the header.
    pub fn start(&self, out: BoxedOutput) -> Result<CaptureWriter<BoxedOutput>, WriteError> {
        let out = match self.compress {
            None => out,
            Some(c) => Box::new(
                Compressed::new(out, c).map_err(|source| WriteError::Io { source, packets: 0 })?,
            ),
        };
        CaptureWriter::with_header(out, self.format, &self.header)
    }
}

/// The current file and the set's rotation; see the module docs.
pub struct Savefiles {
    spec: FileSpec,
    writer: Option<CaptureWriter<BoxedOutput>>,
    /// The current file's name (None: a stream or a test sink).
    path: Option<PathBuf>,
    /// How the current file is written (None: a stream or a test sink).
    write_path: Option<WritePath>,
    rotation: Option<Rotation>,
    /// `-z` commands still running.
    post: Vec<Child>,
    synced: Instant,
    /// The current file's bytes at the last sync.
    synced_bytes: u64,
    /// The current file's bytes at the last tick and since when (a live tail is shown once
    /// the file has not grown for [`LIVE_TAIL_QUIET`]), and when its tail was last shown.
    ticked_bytes: u64,
    ticked: Instant,
    shown_bytes: u64,
    /// The counters when the current file was opened.
    base: IfStats,
    /// Packets in the files closed so far.
    closed_packets: u64,
    /// Bytes of the files closed so far (before compression, without their closing
    /// statistics block).
    closed_bytes: u64,
    /// Files of a rotated set still being closed by a thread of their own.
    closing: Vec<Closing>,
}

/// How a file is closed: its statistics block, its writes still in flight, its sync.
type CloseJob = Box<dyn FnOnce() -> Result<(), WriteError> + Send>;

/// A file whose close (statistics block, the writes still in flight, sync) runs on a
/// thread of its own, so that a device that stalls at a rotation stalls no packet.
struct Closing {
    path: Option<PathBuf>,
    /// Its whole packets, already counted in `closed_packets`.
    packets: u64,
    thread: std::thread::JoinHandle<Result<(), WriteError>>,
}

impl std::fmt::Debug for Savefiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Savefiles")
            .field("path", &self.path)
            .finish()
    }
}

impl Savefiles {
    /// A set whose first file is open: `writer` writes to `file` (its name and how it is
    /// written; None for a stream).
    pub fn new(
        spec: FileSpec,
        writer: CaptureWriter<BoxedOutput>,
        file: Option<(PathBuf, WritePath)>,
        rotation: Option<Rotation>,
    ) -> Self {
        let (path, write_path) = file.unzip();
        Savefiles {
            spec,
            writer: Some(writer),
            path,
            write_path,
            rotation,
            post: Vec::new(),
            synced: Instant::now(),
            synced_bytes: 0,
            ticked_bytes: 0,
            ticked: Instant::now(),
            shown_bytes: 0,
            base: IfStats::default(),
            closed_packets: 0,
            closed_bytes: 0,
            closing: Vec::new(),
        }
    }

    /// The current file, as error messages name it.
    pub fn name(&self) -> String {
        self.path
            .as_ref()
            .map_or_else(|| "standard output".into(), |p| p.display().to_string())
    }

    /// The current file's writer (an error if opening it failed).
    pub fn writer(&mut self) -> Result<&mut CaptureWriter<BoxedOutput>, WriteError> {
        self.writer.as_mut().ok_or_else(|| WriteError::Io {
            source: std::io::Error::other("no capture file is open"),
            packets: 0,
        })
    }

    /// The current file (None for a stream).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// How the current file is written (None for a stream).
    pub fn write_path(&self) -> Option<WritePath> {
        self.write_path
    }

    /// Bytes in the current file so far.
    pub fn bytes(&self) -> u64 {
        self.writer.as_ref().map_or(0, CaptureWriter::bytes_written)
    }

    /// Bytes produced in the set's files: closed ones and the current one, headers
    /// included, before compression; a pcapng file's closing statistics block is not
    /// counted.
    pub fn bytes_total(&self) -> u64 {
        self.closed_bytes + self.bytes()
    }

    /// What goes into the current file without a rotation (see [`Rotation::room`]): packets
    /// before a time (ns) while it holds at most so many bytes; no limit without rotation.
    pub fn room(&self) -> (u64, u64) {
        self.rotation
            .as_ref()
            .map_or((u64::MAX, u64::MAX), Rotation::room)
    }

    /// Whether a packet with timestamp `ts_ns` goes to a new file, when the current one
    /// holds `bytes` (written and pending).
    pub fn before_packet(&mut self, ts_ns: u64, bytes: u64) -> Next {
        self.rotation
            .as_mut()
            .map_or(Next::Same, |r| r.before_packet(ts_ns, bytes))
    }

    /// Packets in the set's files: closed ones, and the current one's whole packets.
    pub fn packets_written(&self) -> u64 {
        self.closed_packets
            + self
                .writer
                .as_ref()
                .map_or(0, CaptureWriter::packets_written)
    }

    /// Syncs the current file if `--fsync interval` is due and it grew since the last sync,
    /// and with `-U` hands over what the format writer buffered (called after each write
    /// batch and when idle), and shows a live file's tail once it has not grown for
    /// `LIVE_TAIL_QUIET`.
    pub fn tick(&mut self) -> Result<(), WriteError> {
        self.reap(false)?;
        let bytes = self.bytes();
        if bytes != self.ticked_bytes {
            (self.ticked_bytes, self.ticked) = (bytes, Instant::now());
        }
        let quiet = bytes != self.shown_bytes && self.ticked.elapsed() >= LIVE_TAIL_QUIET;
        if self.spec.packet_buffered || (self.spec.live_tail && quiet) {
            self.writer()?.flush()?;
            self.shown_bytes = bytes;
        }
        if let Fsync::Interval(every) = self.spec.fsync {
            let bytes = self.bytes();
            if bytes > self.synced_bytes && self.synced.elapsed() >= every {
                self.writer()?.sync()?;
                (self.synced, self.synced_bytes) = (Instant::now(), bytes);
            }
        }
        Ok(())
    }

    /// Closes the current file: statistics block with the counters' change since it was
    /// opened (`totals` are the counters now), sync, `-z`, once the files still closing
    /// in the background are closed. After a failure the file keeps the whole packets the
    /// error reports.
    pub fn close(&mut self, totals: IfStats) -> Result<(), WriteError> {
        let waited = self.reap(true);
        let Some((job, packets)) = self.closing_job(totals) else {
            return waited;
        };
        let closed = job();
        let r = self.closed(self.path.clone(), packets, closed);
        waited.and(r)
    }

    /// Closes the current file as [`close`](Self::close) does, on a thread of its own, for
    /// a rotation: the next file opens at once, and the close's outcome (`-z`, the
    /// store's keeper told, an error) comes at a later [`tick`](Self::tick) or close.
    pub fn close_behind(&mut self, totals: IfStats) -> Result<(), WriteError> {
        self.reap(false)?;
        let Some((job, packets)) = self.closing_job(totals) else {
            return Ok(());
        };
        let spawned = std::thread::Builder::new()
            .name("file-close".into())
            .spawn(job);
        let path = self.path.clone();
        match spawned {
            Ok(thread) => {
                self.closed_packets += packets;
                self.closing.push(Closing {
                    path,
                    packets,
                    thread,
                });
                Ok(())
            }
            Err(e) => Err(WriteError::Io { source: e, packets }),
        }
    }

    /// Takes the current file and returns how to close it, and its whole packets.
    fn closing_job(&mut self, totals: IfStats) -> Option<(CloseJob, u64)> {
        let writer = self.writer.take()?;
        let stats = IfStats {
            received: totals.received.saturating_sub(self.base.received),
            dropped: totals.dropped.saturating_sub(self.base.dropped),
        };
        self.base = totals;
        let packets = writer.packets_written();
        self.closed_bytes += writer.bytes_written();
        let sync = self.spec.fsync != Fsync::Never;
        let job = move || {
            let mut out = writer.finish(Some(stats))?;
            if sync {
                out.sync()
                    .map_err(|source| WriteError::Io { source, packets })?;
            }
            Ok(())
        };
        Some((Box::new(job), packets))
    }

    /// Collects the files closed in the background, in the order they were closed (the
    /// store's keeper hears of them in that order): those finished, or all with `wait`.
    /// The first error is returned once each collected file is accounted for.
    fn reap(&mut self, wait: bool) -> Result<(), WriteError> {
        let mut first = Ok(());
        while let Some(c) = self.closing.first() {
            if !wait && !c.thread.is_finished() {
                break;
            }
            let c = self.closing.remove(0);
            self.closed_packets -= c.packets;
            let closed = c.thread.join().unwrap_or_else(|_| {
                Err(WriteError::Io {
                    source: std::io::Error::other("the thread closing it panicked"),
                    packets: 0,
                })
            });
            let r = self.closed(c.path, c.packets, closed);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// Accounts for a file closed with `closed`: its packets, the store's keeper, `-z`.
    fn closed(
        &mut self,
        path: Option<PathBuf>,
        packets: u64,
        closed: Result<(), WriteError>,
    ) -> Result<(), WriteError> {
        if let Err(e) = closed {
            self.closed_packets += e.packets_kept().unwrap_or(0);
            return Err(e);
        }
        self.closed_packets += packets;
        if let (Some(tell), Some(path)) = (&self.spec.closed, &path) {
            tell.closed(path.clone());
        }
        match (&self.spec.post_rotate, path) {
            (Some(cmd), Some(path)) => self.post_rotate(cmd.clone(), path, packets),
            _ => Ok(()),
        }
    }

    /// Opens `path` as the current file (after [`close`](Self::close)).
    pub fn open(&mut self, path: PathBuf) -> Result<(), WriteError> {
        // A ring of files (`-W`) comes back to a name whose file may still be closing: that
        // close ends first, or its last writes would land in the new file.
        if self.closing.iter().any(|c| c.path.as_ref() == Some(&path)) {
            self.reap(true)?;
        }
        let opened = self.spec.open(&path);
        self.path = Some(path); // errors name the file that failed to open
        let (writer, write_path) = opened?;
        (self.writer, self.write_path) = (Some(writer), Some(write_path));
        (self.synced, self.synced_bytes) = (Instant::now(), 0);
        (self.ticked_bytes, self.ticked, self.shown_bytes) = (0, Instant::now(), 0);
        Ok(())
    }

    /// Starts `cmd file` at the lowest priority, as tcpdump's `-z` does.
    fn post_rotate(
        &mut self,
        cmd: OsString,
        file: PathBuf,
        packets: u64,
    ) -> Result<(), WriteError> {
        self.post.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        let child = Command::new(&cmd)
            .arg(&file)
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| WriteError::Io {
                source: std::io::Error::new(
                    e.kind(),
                    format!("-z {}: {e}", Path::new(&cmd).display()),
                ),
                packets,
            })?;
        poolcap_sys::process::set_process_nice(child.id(), 19);
        self.post.push(child);
        Ok(())
    }

    /// Waits for the `-z` commands; returns how many failed.
    pub fn wait_post_rotate(&mut self) -> usize {
        self.post
            .drain(..)
            .map(|mut c| c.wait().is_ok_and(|s| s.success()))
            .filter(|ok| !ok)
            .count()
    }
}

#[cfg(test)]
impl FileSpec {
    /// Files of `format` with `header` for tests: buffered, uncompressed, never synced, no
    /// command after rotation, told to no one.
    pub(crate) fn plain(format: FileFormat, header: FileHeader) -> Self {
        FileSpec {
            format,
            header,
            compress: None,
            fsync: Fsync::Never,
            post_rotate: None,
            io: FileIo::Buffered,
            packet_buffered: false,
            closed: None,
            live_tail: false,
            buffers: FileSpec::buffers(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_takes_at_most_a_quarter_of_the_memory_left() {
        let most = poolcap_format::direct::STALL_BYTES;
        assert_eq!(stall_bytes(None), most, "nothing says: the most");
        assert_eq!(stall_bytes(Some(64 << 30)), most);
        assert_eq!(stall_bytes(Some(1 << 30)), 256 << 20);
    }
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn fsync_policies_parse() {
        assert_eq!("never".parse(), Ok(Fsync::Never));
        assert_eq!("rotate".parse(), Ok(Fsync::Rotate));
        assert_eq!(
            "interval:250".parse(),
            Ok(Fsync::Interval(Duration::from_millis(250)))
        );
        for bad in ["always", "interval", "interval:0", "interval:x", "rotate:1"] {
            assert!(bad.parse::<Fsync>().is_err(), "{bad}");
        }
    }

    /// An output that counts its syncs.
    struct Counted(Arc<AtomicUsize>);

    impl std::io::Write for Counted {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            Ok(b.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl poolcap_format::Output for Counted {
        fn sync(&mut self) -> std::io::Result<()> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    #[test]
    fn fsync_policies_sync_when_they_say() {
        let every = Duration::from_millis(5);
        // Syncs after: a tick once due (the header is new), a tick once due with nothing
        // new, a write and a tick once due, the close.
        for (fsync, want) in [
            (Fsync::Never, [0, 0, 0, 0]),
            (Fsync::Rotate, [0, 0, 0, 1]),
            (Fsync::Interval(every), [1, 1, 2, 3]),
        ] {
            let syncs = Arc::new(AtomicUsize::new(0));
            let spec = FileSpec {
                fsync,
                ..spec(None)
            };
            let out = spec.start(Box::new(Counted(Arc::clone(&syncs)))).unwrap();
            let mut set = Savefiles::new(spec, out, None, None);
            let mut got = Vec::new();
            std::thread::sleep(every);
            set.tick().unwrap();
            got.push(syncs.load(Ordering::Relaxed));
            std::thread::sleep(every);
            set.tick().unwrap();
            got.push(syncs.load(Ordering::Relaxed));
            set.writer().unwrap().write_packet(1, &[1; 60], 60).unwrap();
            std::thread::sleep(every);
            set.tick().unwrap();
            got.push(syncs.load(Ordering::Relaxed));
            set.close(IfStats::default()).unwrap();
            got.push(syncs.load(Ordering::Relaxed));
            assert_eq!(got, want, "{fsync:?}");
        }
    }

    fn spec(post: Option<&str>) -> FileSpec {
        FileSpec {
            fsync: Fsync::Rotate,
            post_rotate: post.map(OsString::from),
            ..FileSpec::plain(
                FileFormat::Pcapng,
                FileHeader::new(poolcap_format::LinkType::ETHERNET, 256, "t0"),
            )
        }
    }

    #[test]
    fn each_closed_file_stands_alone_with_its_own_counts_and_runs_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        // `gzip FILE` replaces each closed file by FILE.gz, as with tcpdump -z gzip.
        let spec = spec(Some("gzip"));
        let (w, how) = spec.open(&a).unwrap();
        let mut set = Savefiles::new(spec.clone(), w, Some((a.clone(), how)), None);
        set.writer().unwrap().write_packet(1, &[1; 60], 60).unwrap();
        let totals = IfStats {
            received: 5,
            dropped: 1,
        };
        set.close(totals).unwrap();
        set.open(b.clone()).unwrap();
        assert_eq!(set.packets_written(), 1);
        set.writer().unwrap().write_packet(2, &[2; 60], 60).unwrap();
        set.writer().unwrap().write_packet(3, &[3; 60], 60).unwrap();
        let totals = IfStats {
            received: 12,
            dropped: 1,
        };
        set.close(totals).unwrap();
        assert_eq!(set.packets_written(), 3);
        assert_eq!(set.wait_post_rotate(), 0);
        for (path, packets, received) in [(a, 1, 5), (b, 2, 7)] {
            let gz = PathBuf::from(format!("{}.gz", path.display()));
            let mut plain = Vec::new();
            std::io::Read::read_to_end(
                &mut flate2::read::GzDecoder::new(std::fs::File::open(&gz).unwrap()),
                &mut plain,
            )
            .unwrap();
            let f = poolcap_format::read_bytes(&plain).unwrap();
            assert_eq!(f.packets.len(), packets, "{}", gz.display());
            let stats = f.if_stats.unwrap();
            assert_eq!(stats.received, received, "{}", gz.display());
            assert!(!path.exists(), "gzip replaced {}", path.display());
        }
    }

    #[test]
    fn each_file_is_announced_once_closed_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let (tx, rx) = crate::store::keeper::Keeper::channel();
        let spec = FileSpec {
            closed: Some(tx),
            ..spec(None)
        };
        let (w, how) = spec.open(&a).unwrap();
        let mut set = Savefiles::new(spec.clone(), w, Some((a.clone(), how)), None);
        set.writer().unwrap().write_packet(1, &[1; 60], 60).unwrap();
        assert!(rx.closed().is_empty(), "the open file is not announced");
        set.close(IfStats::default()).unwrap();
        set.open(b.clone()).unwrap();
        set.close(IfStats::default()).unwrap();
        assert_eq!(rx.closed(), [a, b]);
    }

    /// An output whose sync stalls until the test lets it go (a device that stalls).
    struct Stalling(std::sync::mpsc::Receiver<()>);

    impl std::io::Write for Stalling {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            Ok(b.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl poolcap_format::Output for Stalling {
        fn sync(&mut self) -> std::io::Result<()> {
            let _ = self.0.recv();
            Ok(())
        }
    }

    #[test]
    fn a_rotation_does_not_wait_for_the_old_file_to_close() {
        // The old file's close (here its sync) stalls; the next file opens and takes
        // packets meanwhile, the count never dips, and the store's keeper hears of the old
        // file only once it is closed, before the next.
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let (tx, closed) = crate::store::keeper::Keeper::channel();
        let spec = FileSpec {
            closed: Some(tx),
            ..spec(None)
        };
        let (release, stalled) = std::sync::mpsc::channel();
        let out = spec.start(Box::new(Stalling(stalled))).unwrap();
        let mut set = Savefiles::new(spec, out, Some((a.clone(), WritePath::Direct)), None);
        set.writer().unwrap().write_packet(1, &[1; 60], 60).unwrap();
        set.close_behind(IfStats::default()).unwrap();
        set.open(b.clone()).unwrap();
        set.writer().unwrap().write_packet(2, &[2; 60], 60).unwrap();
        set.tick().unwrap();
        assert_eq!(
            set.packets_written(),
            2,
            "the closing file's packet still counts"
        );
        assert!(closed.closed().is_empty(), "announced before it was closed");
        release.send(()).unwrap();
        set.close(IfStats::default()).unwrap();
        assert_eq!(set.packets_written(), 2);
        assert_eq!(closed.closed(), [a, b]);
    }

    #[test]
    fn files_are_direct_unless_buffered_is_asked_or_minus_u_needs_it() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                FileIo::Auto,
                false,
                [WritePath::Direct, WritePath::Fallback],
            ),
            (FileIo::Auto, true, [WritePath::PacketBuffered; 2]),
            (FileIo::Buffered, false, [WritePath::Buffered; 2]),
        ];
        for (i, (io, packet_buffered, want)) in cases.into_iter().enumerate() {
            let spec = FileSpec {
                io,
                packet_buffered,
                ..spec(None)
            };
            let path = dir.path().join(i.to_string());
            let (w, how) = spec.open(&path).unwrap();
            assert!(want.contains(&how), "{io:?} -U {packet_buffered}: {how:?}");
            let mut set = Savefiles::new(spec, w, Some((path.clone(), how)), None);
            set.writer().unwrap().write_packet(1, &[1; 60], 60).unwrap();
            set.close(IfStats::default()).unwrap();
            let f = poolcap_format::read_file(&path).unwrap();
            assert_eq!(f.packets.len(), 1, "{io:?} -U {packet_buffered}");
        }
    }

    #[test]
    fn the_files_of_a_set_share_their_write_buffers() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let spec = FileSpec {
            io: FileIo::Direct,
            ..spec(None)
        };
        let (w, how) = spec.open(&a).unwrap();
        assert_eq!(how, WritePath::Direct, "a file system that takes O_DIRECT");
        let mut set = Savefiles::new(spec.clone(), w, Some((a, how)), None);
        let write = |set: &mut Savefiles, packets: u64| {
            for i in 0..packets {
                set.writer()
                    .unwrap()
                    .write_packet(i, &[1; 200], 200)
                    .unwrap();
            }
            set.tick().unwrap();
        };
        write(&mut set, 1000);
        set.close(IfStats::default()).unwrap();
        // The closed file's buffers went to the set's, and the next file takes them: one
        // that needs no more at once than are held makes none. (A file as large as the
        // first may: a write more in flight at that moment, which CI met once.)
        let (made, held) = (spec.buffers.made(), spec.buffers.held());
        assert!(made > 0 && held >= 2, "{:?}", spec.buffers);
        set.open(b).unwrap();
        write(&mut set, 1);
        set.close(IfStats::default()).unwrap();
        assert_eq!(spec.buffers.made(), made, "{:?}", spec.buffers);
        assert_eq!(spec.buffers.held(), held, "{:?}", spec.buffers);
    }

    #[test]
    fn a_missing_post_rotate_command_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let spec = spec(Some("/nonexistent/compressor"));
        let (w, how) = spec.open(&a).unwrap();
        let mut set = Savefiles::new(spec.clone(), w, Some((a, how)), None);
        let err = set.close(IfStats::default()).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/compressor"), "{err}");
    }
}
