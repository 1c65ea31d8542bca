//! A capture file written with `O_DIRECT`: batches of records go from aligned buffers to the
//! device, past the page cache, written by an I/O thread while the writer fills the next.
//!
//! Why direct I/O: a buffered write copies every byte into the page cache and makes ext4
//! account for every page (delayed allocation, buffer heads, LRU); on the veth lab that was
//! most of the writer's CPU at 1514-byte frames (`copy_folio_from_iter_atomic` alone 40% of
//! poolcap's samples), and once the dirty limit is reached the kernel throttles the writer
//! to write-back's pace (about 670 MB/s here, against 1.9-3.4 GB/s for `dd oflag=direct`).
//! The records are still gathered into an aligned buffer (a copy in user space, into memory
//! that stays in the cache), since direct I/O needs aligned memory, offsets and lengths, and
//! the records sit wherever their chunks are.
//!
//! Why an I/O thread: a direct write returns once the device has the data. Made by the
//! thread that frames the records, each write held the writer (and behind it the pools)
//! for the device's time: 273 MB/s from a file in RAM where `dd oflag=direct` wrote
//! 3.4 GB/s. Here the writer hands each batch's buffer to the I/O thread and goes on
//! filling another; it waits only when [`STALL_BYTES`] of buffers are on their way.
//!
//! Why so many bytes may wait: a device stalls now and then, and the whole device, not one
//! write: on the lab's virtual disk a 2 MiB write takes about 1 ms, but over 20 GB some
//! take 50-800 ms, and four writes made at once all stall together. While the writer
//! waits, the packets pile up in the kernel ring (36 MiB by default, 50 ms at 1514-byte
//! frames at the lab's top rate) and the ring drops the rest: 8 of the 9 20 GB runs that
//! lost packets with 8 MiB of buffers had a write of 139-505 ms. So the writer copies on
//! into new buffers while the device stalls, up to [`STALL_BYTES`]; it keeps [`DEPTH`]
//! buffers between stalls and frees the rest once their writes have landed, so the memory
//! is taken only while the device is behind. One thread,
//! writing in order, so no write lands before an earlier one: several writers (threads or
//! io_uring) would keep more writes at the device, but a later write landing first leaves
//! a hole of zeros in a file cut short by `kill -9`. The first write (the file's header) is
//! made by the caller: a file opened before the process drops its privileges starts no
//! thread that keeps them (capabilities are per thread).
//!
//! The whole-record guarantee: a direct write covers whole aligned blocks, so with
//! [`Tail::Pad`] each write is padded to the next [`ALIGN`] bytes with a block every reader
//! of the format skips ([`Padding`]: a pcapng Name Resolution Block naming nothing, a zstd
//! skippable frame, an empty gzip member). Every write ends at a block boundary, the file's
//! size is always the end of the last whole write, and `kill -9` leaves only whole writes,
//! each ending with whole records (or whole compressed frames). A failed write is reported
//! at the next batch end (or sync, or close): the writes queued after it are not made, and
//! the file is cut back to the end of the last write that landed whole; [`Output::landed`]
//! tells the writer where that is, so it counts the packets the file holds. The padding
//! makes the file a little larger than the records it holds (at most [`ALIGN`] + 20 bytes
//! per write).
//!
//! Classic pcap has no block a reader skips, so a pcap batch cannot be padded
//! ([`Tail::Carry`]): a write covers the batch's whole aligned blocks only, and the bytes past
//! the last block boundary (part of a record, at most [`ALIGN`] - 1 bytes) stay in the buffer
//! and lead the next write. At the end (and after a failed write) the tail is written too
//! and the file cut to its exact length, so a stopped capture, a full disk or an I/O error
//! leave only whole records. While the capture runs the file ends at a block boundary, so
//! after `kill -9` its last record is cut short: every pcap reader handles that as it does a
//! `tcpdump -w` killed the same way (whose stdio buffer is flushed in fixed-size pieces):
//! libpcap hands over every whole record, then reports "truncated dump file"; Wireshark's
//! readers say the file was "cut short in the middle of a packet".
//!
//! A file read while it is written (the packet store's live file) can show its carried
//! tail too ([`DirectFile::with_live_tail`]): a flush, made by the writer when it is idle,
//! waits for the writes on their way and writes the tail through a second handle, through
//! the page cache (direct I/O cannot write less than a block, and a block padded with
//! zeros would show readers a record of zeros until it is cut), at the place the next
//! direct write rewrites it whole; the kernel writes the cached page back before that
//! write. So a reader sees every ended batch once the writer has been idle, and only whole
//! records.
//!
//! A file's bytes can be fed to a consumer as its writes land ([`DirectFile::with_feed`]; the
//! packet store's indexer, which so never reads the file back): each landed buffer is lent
//! ([`Landed`], with its offset in the file), and comes back to the file's [`Buffers`] when
//! the consumer drops it. A consumer that refuses one (it is behind) is fed nothing more of
//! the file, and the writer never waits for it. The carried tail written at the close is fed
//! too, so with [`Tail::Carry`] the bytes fed are the file's bytes, in order, with no gap.
//!
//! What a consumer needs of each record can be noted as the bytes are copied in
//! ([`DirectFile::with_notes`]), where they are in the CPU's caches, and lent with the write
//! ([`Landed::notes`]): the packet store's regions and their signatures. Read from the
//! landed buffer, each record was a miss of the caches (the buffer was written up to a batch
//! earlier, on the same core), and each record header's place depended on the one before:
//! about 250 ns per 1514-byte packet, against 55-65 ns for the same work on the bytes of a
//! file read through.
//!
//! Buffers are kept for reuse ([`Buffers`], shared by the files of a rotated set with
//! [`DirectFile::with_buffers`]): a buffer lent to the feed, one past the [`DEPTH`] a file
//! keeps, and a closed file's buffers go there, and a file takes its buffers from there
//! before it makes new ones. Why: a new buffer is memory the kernel faults in and zeroes
//! page by page as the writer first fills it, and with a feed that held up to 16 buffers
//! and a new file every 100 MB, the writer filled mostly new buffers: 60k page
//! faults in 2 s at 1514-byte frames, the capture thread's time in `clear_page_erms` and
//! `memset`, where `-w` alone faulted 7 times.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::memory::Memory;
use crate::write::{clone_io, Output};

/// Alignment of the buffer's memory, of every write's offset and of its length: the page
/// size, which covers the logical block size of every common device.
pub const ALIGN: usize = 4096;

/// Buffers a file keeps between stalls: one the writer fills, the others written by the
/// I/O thread or waiting for it, so the device always has the next write queued.
pub const DEPTH: usize = 4;

/// Bytes of buffers on their way to the device before the writer waits for it, at most
/// (a capture asks for less where memory is short, [`DirectFile::with_stall_bytes`]): a
/// stall of 650 ms at 1.6 GB/s (1514-byte frames at the lab's top rate), with the kernel
/// ring's 36 MiB. Made only while the device is behind, freed once it has caught up. Why
/// so many: with 256 MiB, 20 GB at 1.6 GB/s on a virtual disk that writes 2.0 GB/s on
/// average (fio, 2 MiB writes at depth 4) but 1.5 GB/s in its slowest 100 ms lost frames
/// in 2 of 3 runs even with huge pages (one run filled all 256 MiB); with 1 GiB none in
/// 3 of 3, the most taken 164 MB (BENCHMARKS.md, disk).
pub const STALL_BYTES: usize = 1 << 30;

/// What a batch's bytes past its last aligned block become; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Padded with a block readers skip.
    Pad(Padding),
    /// Kept for the next write (pcap).
    Carry,
}

/// A block that readers of a format skip, made to any length from its smallest up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// A pcapng Name Resolution Block naming nothing (a comment of spaces); pcapng blocks
    /// are multiples of 4 bytes, so the padding is too.
    Pcapng,
    /// A zstd skippable frame (magic 0x184D2A50).
    Zstd,
    /// An empty gzip member whose header carries a comment of spaces.
    Gzip,
}

impl Padding {
    /// The smallest block.
    fn min(self) -> usize {
        match self {
            // Type, length, nrb_record_end, trailing length.
            Padding::Pcapng => 16,
            // Magic, length.
            Padding::Zstd => 8,
            // Header, the comment's NUL, an empty deflate block, CRC-32 and length.
            Padding::Gzip => 21,
        }
    }

    /// Bytes of padding that bring `len` bytes to a multiple of [`ALIGN`].
    fn after(self, len: usize) -> usize {
        match len.next_multiple_of(ALIGN) - len {
            0 => 0,
            p if p < self.min() => p + ALIGN,
            p => p,
        }
    }

    /// Fills `out` (empty, or at least [`min`](Self::min) bytes) with one block.
    fn fill(self, out: &mut [u8]) {
        if out.is_empty() {
            return;
        }
        match self {
            Padding::Pcapng => put_nrb(out),
            Padding::Zstd => {
                let len = u32::try_from(out.len() - 8).unwrap_or(u32::MAX);
                out[..4].copy_from_slice(&ZSTD_SKIPPABLE.to_le_bytes());
                out[4..8].copy_from_slice(&len.to_le_bytes());
                out[8..].fill(0);
            }
            Padding::Gzip => {
                let n = out.len();
                // Magic, deflate, FCOMMENT, no time, no extra flags, OS unknown.
                out[..10].copy_from_slice(&[0x1f, 0x8b, 8, 0x10, 0, 0, 0, 0, 0, 255]);
                out[10..n - 11].fill(b' ');
                out[n - 11] = 0; // the comment's end
                out[n - 10..n - 8].copy_from_slice(&[3, 0]); // an empty final fixed block
                out[n - 8..].fill(0); // CRC-32 and length of nothing
            }
        }
    }
}

/// pcapng Name Resolution Block: its records end with `nrb_record_end`, it may carry
/// options (a comment), and a reader that does not resolve names skips it.
const NRB_TYPE: u32 = 4;
const OPT_COMMENT: u16 = 1;
/// The first of the zstd skippable frames' magic numbers.
const ZSTD_SKIPPABLE: u32 = 0x184D_2A50;

/// Memory for direct I/O: `len` bytes from the start of `mem` (page-aligned, in huge pages:
/// see `memory`), and the notes made of bytes as they were copied in (see [`Notes`]).
#[derive(Default)]
struct Aligned {
    mem: Memory,
    len: usize,
    notes: Vec<u8>,
}

impl Aligned {
    fn with_room(bytes: usize) -> Self {
        let mut a = Aligned::default();
        a.reserve(bytes);
        a
    }

    fn bytes(&self) -> &[u8] {
        &self.mem[..self.len]
    }

    /// Emptied for the next batch.
    fn clear(&mut self) {
        self.len = 0;
        self.notes.clear();
    }

    /// Makes room for `more` bytes after the `len` held.
    fn reserve(&mut self, more: usize) {
        let need = self.len + more;
        if need <= self.mem.len() {
            return;
        }
        let mut mem = Memory::new(need.next_multiple_of(ALIGN));
        mem[..self.len].copy_from_slice(self.bytes());
        self.mem = mem;
    }

    fn append(&mut self, bytes: &[u8]) {
        self.extend(bytes.len(), |room| room.copy_from_slice(bytes));
    }

    /// Appends `bufs`, handing `notes` each run of [`NOTE_RUN`] bytes (the last one
    /// shorter) as soon as it is copied in, from here: one call per run however many
    /// slices it came in (a slice per 1514-byte record, noted one by one, cost a call
    /// per record).
    fn append_noted(&mut self, bufs: &[IoSlice<'_>], notes: &mut Notes) {
        let mut noted = self.len;
        for buf in bufs {
            let mut b: &[u8] = buf;
            while !b.is_empty() {
                let n = b.len().min(NOTE_RUN - (self.len - noted));
                self.append(&b[..n]);
                b = &b[n..];
                if self.len - noted == NOTE_RUN {
                    self.note_from(noted, notes);
                    noted = self.len;
                }
            }
        }
        if self.len > noted {
            self.note_from(noted, notes);
        }
    }

    /// Hands `notes` the bytes from `from` on, and this buffer's notes to append to.
    fn note_from(&mut self, from: usize, notes: &mut Notes) {
        let Aligned {
            mem,
            len,
            notes: out,
        } = self;
        notes(&mem[from..*len], out);
    }

    /// Appends `n` bytes that `fill` writes.
    fn extend(&mut self, n: usize, fill: impl FnOnce(&mut [u8])) {
        self.reserve(n);
        let at = self.len;
        fill(&mut self.mem[at..at + n]);
        self.len += n;
    }
}

/// Buffers kept for the next write or the next file (see the module docs); clones share
/// them.
#[derive(Clone)]
pub struct Buffers {
    held: Arc<Mutex<Vec<Aligned>>>,
    most: usize,
    /// New buffers made by the files taking from here.
    made: Arc<std::sync::atomic::AtomicUsize>,
}

impl std::fmt::Debug for Buffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffers")
            .field("held", &self.held())
            .field("most", &self.most)
            .field("made", &self.made())
            .finish()
    }
}

impl Buffers {
    /// Keeps at most `most` buffers; frees the rest as they come.
    pub fn new(most: usize) -> Self {
        Buffers {
            held: Arc::default(),
            most,
            made: Arc::default(),
        }
    }

    /// Buffers held now.
    pub fn held(&self) -> usize {
        self.held.lock().map_or(0, |h| h.len())
    }

    /// New buffers made so far by the files that take from here.
    pub fn made(&self) -> usize {
        self.made.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A held buffer, emptied, or a new one of `room` bytes.
    fn take(&self, room: usize) -> Aligned {
        let mut b = match self.held.lock().ok().and_then(|mut h| h.pop()) {
            Some(b) => b,
            None => {
                self.made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Aligned::with_room(room)
            }
        };
        b.clear();
        b
    }

    /// Keeps `buf` if fewer than `most` are held, else frees it.
    fn give(&self, buf: Aligned) {
        if let Ok(mut held) = self.held.lock() {
            if held.len() < self.most && !buf.mem.is_empty() {
                held.push(buf);
            }
        }
    }
}

/// A landed write's bytes, lent to the file's feed (see the module docs): dropping it
/// gives the buffer back to its file's [`Buffers`].
pub struct Landed {
    at: u64,
    buf: Aligned,
    home: Buffers,
    /// The file notes its writes (see [`Notes`]).
    noted: bool,
}

impl Landed {
    /// Offset of the first byte in the file.
    pub fn at(&self) -> u64 {
        self.at
    }

    /// The bytes written there.
    pub fn bytes(&self) -> &[u8] {
        self.buf.bytes()
    }

    /// The notes made as bytes were copied into this write's buffer (see [`Notes`]), in the
    /// order copied: of its bytes, except those carried from the write before (noted with
    /// that one), and of its carried tail (which leads the next write). `None` if the file
    /// notes nothing.
    pub fn notes(&self) -> Option<&[u8]> {
        self.noted.then_some(&self.buf.notes[..])
    }
}

impl Drop for Landed {
    fn drop(&mut self) {
        self.home.give(std::mem::take(&mut self.buf));
    }
}

/// Takes each landed write of a file in order, or gives it back (`Some`) when it cannot
/// take it now; the file then feeds it nothing more.
pub type Feed = Box<dyn FnMut(Landed) -> Option<Landed> + Send>;

/// Notes what a consumer of the feed needs of the bytes copied into a write's buffer, while
/// they are in the CPU's caches: called with each run of bytes copied, in file order (runs
/// may end anywhere), and the notes of the buffer it went into, which it appends to.
pub type Notes = Box<dyn FnMut(&[u8], &mut Vec<u8>) + Send>;

/// Bytes copied in before they are noted (see [`Notes`]): a run of records handed over may
/// be a whole batch (2 MiB), as large as the core's L2 cache.
const NOTE_RUN: usize = 64 << 10;

/// A buffer of whole blocks to write at `at`.
struct Job {
    buf: Aligned,
    at: u64,
}

/// What became of a job.
enum Outcome {
    Written,
    /// The write failed after its first `landed` bytes.
    Failed {
        error: io::Error,
        landed: usize,
    },
    /// Not made: an earlier write failed.
    Skipped,
}

/// A job's buffer back from the I/O thread.
struct Done {
    buf: Aligned,
    outcome: Outcome,
}

/// Writes the job's buffer whole, retrying short and interrupted writes; on failure says
/// how much landed.
fn write_job(file: &File, job: &Job) -> Outcome {
    let bytes = job.buf.bytes();
    let mut done = 0;
    while done < bytes.len() {
        match file.write_at(&bytes[done..], job.at + done as u64) {
            Ok(0) => {
                return Outcome::Failed {
                    error: io::ErrorKind::WriteZero.into(),
                    landed: done,
                }
            }
            Ok(k) => done += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => {
                return Outcome::Failed {
                    error,
                    landed: done,
                }
            }
        }
    }
    Outcome::Written
}

/// The I/O thread: writes the jobs in order; after a failure sends the rest back unmade.
fn write_jobs(file: &File, jobs: Receiver<Job>, done: Sender<Done>) {
    let mut failed = false;
    for job in jobs {
        let outcome = if failed {
            Outcome::Skipped
        } else {
            write_job(file, &job)
        };
        failed |= matches!(outcome, Outcome::Failed { .. });
        let buf = job.buf;
        if done.send(Done { buf, outcome }).is_err() {
            return;
        }
    }
}

/// The I/O thread and its queues.
struct Io {
    jobs: Sender<Job>,
    done: Receiver<Done>,
    thread: JoinHandle<()>,
}

/// A write on its way: where it goes, and the batches it completes.
struct Flight {
    at: u64,
    /// Bytes of whole batches once it has landed (with [`Tail::Carry`], its carried tail
    /// included: those bytes lead the next write and stay in memory until then).
    ended: u64,
}

/// A failed write.
struct Lost {
    error: io::Error,
    /// Its buffer: with [`Tail::Carry`] it starts with the tail of the last landed batch.
    buf: Aligned,
    at: u64,
    /// Its bytes that landed.
    landed: usize,
    /// The end of the last whole batch before it.
    good: u64,
}

/// A file opened with `O_DIRECT` (by the caller, who knows how it must be created), taking
/// whole batches of records; see the module docs.
pub struct DirectFile {
    file: Arc<File>,
    tail: Tail,
    /// The batch being gathered; with [`Tail::Carry`], after the carried tail. Taken at
    /// the first write (so from the buffers [`DirectFile::with_buffers`] gives).
    cur: Aligned,
    /// Buffers back from the I/O thread.
    spare: Vec<Aligned>,
    /// Buffers the file has (at most `most`; [`DEPTH`] once the device has caught up),
    /// not counting those lent to the feed.
    buffers: usize,
    /// Where buffers go when the file has no use for them, and come from before new ones
    /// are made (none kept unless [`DirectFile::with_buffers`] says).
    kept: Buffers,
    /// Most buffers: [`STALL_BYTES`] of them (or as [`DirectFile::with_stall_bytes`] says),
    /// at least [`DEPTH`].
    most: usize,
    /// Room of a new buffer: a usual batch and its padding.
    room: usize,
    /// Bytes the writer handed over in whole batches (padding not counted).
    ended: u64,
    /// Bytes of the file written or on their way: where the next write goes.
    physical: u64,
    /// The end of the batches known to have landed.
    landed: u64,
    flights: VecDeque<Flight>,
    io: Option<Io>,
    lost: Option<Lost>,
    /// A handle to the same file through the page cache, for the live tail.
    cached: Option<File>,
    /// Bytes of ended batches readers can see (with `cached`).
    shown: u64,
    /// Where landed writes go, while it takes them.
    feed: Option<Feed>,
    /// Notes made for the feed as bytes are copied in, while it takes them.
    notes: Option<Notes>,
}

impl std::fmt::Debug for DirectFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectFile")
            .field("tail", &self.tail)
            .field("ended", &self.ended)
            .field("physical", &self.physical)
            .field("landed", &self.landed)
            .field("in_flight", &self.flights.len())
            .finish()
    }
}

impl DirectFile {
    /// Wraps `file`, empty and opened for writing with `O_DIRECT`; `batch` is the usual
    /// size of a batch (a buffer grows for a larger one); `tail` says how a batch ends.
    pub fn new(file: File, batch: usize, tail: Tail) -> Self {
        let room = batch + 2 * ALIGN;
        DirectFile {
            file: Arc::new(file),
            tail,
            cur: Aligned::default(),
            spare: Vec::new(),
            buffers: 1,
            kept: Buffers::new(0),
            most: (STALL_BYTES / room).max(DEPTH),
            room,
            ended: 0,
            physical: 0,
            landed: 0,
            flights: VecDeque::new(),
            io: None,
            lost: None,
            cached: None,
            shown: 0,
            feed: None,
            notes: None,
        }
    }

    /// Waits for the device once `bytes` of buffers are on their way (instead of
    /// [`STALL_BYTES`]), at least [`DEPTH`] buffers.
    pub fn with_stall_bytes(mut self, bytes: usize) -> Self {
        self.most = (bytes / self.room).max(DEPTH);
        self
    }

    /// Lends each write to `feed` once it has landed (see the module docs).
    pub fn with_feed(mut self, feed: Feed) -> Self {
        self.feed = Some(feed);
        self
    }

    /// Notes each run of bytes copied in with `notes`, for the feed (see [`Notes`]).
    pub fn with_notes(mut self, notes: Notes) -> Self {
        self.notes = Some(notes);
        self
    }

    /// Takes buffers from `kept` and leaves them there (see the module docs): the files of
    /// a rotated set share them.
    pub fn with_buffers(mut self, kept: Buffers) -> Self {
        self.kept = kept;
        self
    }

    /// Lends the bytes `buf` written at `at` to the feed; the buffer back if it has none
    /// or does not take it.
    fn lend(&mut self, at: u64, buf: Aligned) -> Option<Aligned> {
        let Some(feed) = &mut self.feed else {
            return Some(buf);
        };
        let (home, noted) = (self.kept.clone(), self.notes.is_some());
        match feed(Landed {
            at,
            buf,
            home,
            noted,
        }) {
            None => {
                // The buffer goes to `kept` when the feed drops it.
                self.buffers -= 1;
                None
            }
            Some(mut refused) => {
                (self.feed, self.notes) = (None, None);
                Some(std::mem::take(&mut refused.buf))
            }
        }
    }

    /// A buffer for the next batch: a kept one, or a new one.
    fn fresh(&self) -> Aligned {
        self.kept.take(self.room)
    }

    /// Shows readers the carried tail at each flush, written through `cached`: the same
    /// file, opened without `O_DIRECT` (see the module docs).
    pub fn with_live_tail(mut self, cached: File) -> Self {
        self.cached = Some(cached);
        self
    }

    /// Bytes at the buffer's start that belong to batches already handed over (the carried
    /// tail; 0 with [`Tail::Pad`]).
    fn carried(&self) -> usize {
        match self.tail {
            Tail::Pad(_) => 0,
            Tail::Carry => usize::try_from(self.ended - self.physical).unwrap_or(usize::MAX),
        }
    }

    /// Hands the first `n` bytes of the current buffer (whole blocks) to the I/O thread,
    /// and goes on with a free buffer that starts with the rest.
    fn submit(&mut self, n: usize) -> io::Result<()> {
        let mut next = self.free_buffer()?;
        next.append(&self.cur.bytes()[n..]);
        self.cur.len = n;
        let buf = std::mem::replace(&mut self.cur, next);
        let job = Job {
            buf,
            at: self.physical,
        };
        self.flights.push_back(Flight {
            at: self.physical,
            ended: self.ended,
        });
        self.physical += n as u64;
        if self.io.is_none() && job.at == 0 {
            // The file's first write, by the caller (see the module docs).
            let outcome = write_job(&self.file, &job);
            self.settle(Done {
                buf: job.buf,
                outcome,
            });
            return self.check();
        }
        self.io()?
            .jobs
            .send(job)
            .map_err(|_| io::Error::other("the direct-I/O thread has ended"))
    }

    /// The I/O thread, started on first use.
    fn io(&mut self) -> io::Result<&Io> {
        if self.io.is_none() {
            // Unbounded: the buffers bound it.
            let (jobs, queued) = mpsc::channel();
            let (finished, done) = mpsc::channel();
            let file = Arc::clone(&self.file);
            let thread = std::thread::Builder::new()
                .name("direct-io".into())
                .spawn(move || write_jobs(&file, queued, finished))?;
            self.io = Some(Io { jobs, done, thread });
        }
        self.io
            .as_ref()
            .ok_or_else(|| io::Error::other("no direct-I/O thread"))
    }

    /// An empty buffer: a spare one, a kept or new one while fewer than `most` exist, or
    /// else the oldest write's once it has landed.
    fn free_buffer(&mut self) -> io::Result<Aligned> {
        if self.spare.is_empty() && self.buffers >= self.most {
            self.wait_one()?;
            self.check()?;
        }
        Ok(match self.spare.pop() {
            Some(mut b) => {
                b.clear();
                b
            }
            None => {
                self.buffers += 1;
                self.fresh()
            }
        })
    }

    /// Notes what became of the oldest write on its way.
    fn settle(&mut self, done: Done) {
        let Some(flight) = self.flights.pop_front() else {
            return;
        };
        match done.outcome {
            Outcome::Written => {
                self.landed = flight.ended;
                if let Some(buf) = self.lend(flight.at, done.buf) {
                    self.keep(buf);
                }
            }
            Outcome::Skipped => self.keep(done.buf),
            Outcome::Failed { error, landed } => {
                self.lost = Some(Lost {
                    error,
                    buf: done.buf,
                    at: flight.at,
                    landed,
                    good: self.landed,
                });
            }
        }
    }

    /// Keeps a buffer whose write is done for the next batch, or gives it to `kept` when
    /// [`DEPTH`] are kept already (a stall's buffers, once the device has caught up).
    fn keep(&mut self, buf: Aligned) {
        if self.buffers > DEPTH && self.spare.len() + 1 >= DEPTH {
            self.buffers -= 1;
            self.kept.give(buf);
        } else {
            self.spare.push(buf);
        }
    }

    /// Waits for the oldest write on its way.
    fn wait_one(&mut self) -> io::Result<()> {
        let ended = || io::Error::other("the direct-I/O thread has ended");
        let done = self.io.as_ref().ok_or_else(ended)?.done.recv();
        self.settle(done.map_err(|_| ended())?);
        Ok(())
    }

    /// Waits for every write on its way.
    fn wait_all(&mut self) -> io::Result<()> {
        while !self.flights.is_empty() {
            self.wait_one()?;
        }
        Ok(())
    }

    /// Notes the writes that have finished, without waiting.
    fn reap(&mut self) {
        while let Some(done) = self.io.as_ref().and_then(|io| io.done.try_recv().ok()) {
            self.settle(done);
        }
    }

    /// The failure of an earlier write, if one failed.
    fn check(&self) -> io::Result<()> {
        self.lost
            .as_ref()
            .map_or(Ok(()), |l| Err(clone_io(&l.error)))
    }

    /// Ends the file where the write at `at` begins ([`Tail::Pad`]), or at `end`
    /// ([`Tail::Carry`]): the first `end - at` bytes of `buf` are the carried tail of the
    /// batches before `at`, written in a zero-padded block unless the first `landed` bytes
    /// at `at` hold them already.
    fn cut(&self, mut buf: Aligned, at: u64, landed: usize, end: u64) -> io::Result<()> {
        if self.tail != Tail::Carry {
            return self.file.set_len(at);
        }
        let tail = usize::try_from(end - at).unwrap_or(usize::MAX);
        if tail > 0 && landed < tail {
            let block = tail.next_multiple_of(ALIGN);
            buf.len = tail;
            buf.extend(block - tail, |zeros| zeros.fill(0));
            self.file.write_all_at(buf.bytes(), at)?;
        }
        self.file.set_len(end)
    }
}

impl Write for DirectFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if self.cur.mem.is_empty() {
            self.cur = self.fresh();
        }
        let len = bufs.iter().map(|b| b.len()).sum();
        self.cur.reserve(len);
        match &mut self.notes {
            None => bufs.iter().for_each(|b| self.cur.append(b)),
            // Noted run by run, each just copied: still in the core's caches.
            Some(notes) => self.cur.append_noted(bufs, notes),
        }
        Ok(len)
    }

    /// With a live tail: makes every ended batch visible to readers (see the module docs).
    fn flush(&mut self) -> io::Result<()> {
        let tail = self.carried();
        if self.cached.is_none() || tail == 0 || self.shown == self.ended {
            return Ok(());
        }
        self.wait_all()?;
        self.check()?;
        if let Some(cached) = &self.cached {
            cached.write_all_at(&self.cur.bytes()[..tail], self.physical)?;
        }
        self.shown = self.ended;
        Ok(())
    }
}

impl Output for DirectFile {
    /// Hands the batch's whole aligned blocks to the I/O thread: padded to the last one
    /// ([`Tail::Pad`]), or up to it, the rest carried ([`Tail::Carry`]). Reports an
    /// earlier write's failure.
    fn end_batch(&mut self) -> io::Result<()> {
        self.reap();
        self.check()?;
        let records = self.cur.len - self.carried();
        if records == 0 {
            return Ok(());
        }
        let blocks = match self.tail {
            Tail::Pad(p) => {
                self.cur.extend(p.after(self.cur.len), |pad| p.fill(pad));
                self.cur.len
            }
            Tail::Carry => self.cur.len / ALIGN * ALIGN,
        };
        self.ended += records as u64;
        if blocks > 0 {
            self.submit(blocks)?;
        }
        Ok(())
    }

    /// Only whole batches survive a failed write.
    fn partial_batch_kept(&self, _accepted: usize) -> usize {
        0
    }

    /// The end of the batches known written; after a failure, of those before it.
    fn landed(&self) -> Option<u64> {
        Some(self.lost.as_ref().map_or(self.landed, |l| l.good))
    }

    /// `len` must be the end of the last whole batch the file holds once every write on its
    /// way has finished ([`landed`](Output::landed) after a failure): the file is cut back to
    /// where that batch's write ends ([`Tail::Pad`]) or to `len` exactly, its carried tail
    /// written first ([`Tail::Carry`]). The file takes no more writes.
    fn truncate_to(&mut self, len: u64) -> io::Result<()> {
        self.wait_all()?;
        let good = self.lost.as_ref().map_or(self.ended, |l| l.good);
        if len != good {
            return Err(io::Error::other(format!(
                "a direct-I/O file is cut back only to the end of its last whole batch \
                 ({good} bytes), not {len}"
            )));
        }
        match self.lost.take() {
            Some(l) => self.cut(l.buf, l.at, l.landed, good),
            None => {
                let cur = std::mem::take(&mut self.cur);
                self.cut(cur, self.physical, 0, good)
            }
        }
    }

    fn sync(&mut self) -> io::Result<()> {
        self.wait_all()?;
        self.check()?;
        self.file.sync_data()
    }

    /// Writes the last batch, waits for every write, and writes the carried tail.
    fn close(&mut self) -> io::Result<()> {
        self.end_batch()?;
        self.wait_all()?;
        self.check()?;
        let tail = self.carried();
        if tail > 0 {
            let mut cur = std::mem::take(&mut self.cur);
            if self.feed.is_some() {
                let mut last = self.fresh();
                self.buffers += 1;
                last.append(&cur.bytes()[..tail]);
                last.notes = std::mem::take(&mut cur.notes);
                self.lend(self.physical, last);
            }
            self.cut(cur, self.physical, 0, self.ended)?;
        }
        Ok(())
    }
}

/// The I/O thread finishes the writes on their way before the file is closed; the file's
/// buffers go to `kept`.
impl Drop for DirectFile {
    fn drop(&mut self) {
        if let Some(io) = self.io.take() {
            drop(io.jobs);
            for done in io.done.iter() {
                self.kept.give(done.buf);
            }
            let _ = io.thread.join();
        }
        for buf in self.spare.drain(..).chain([std::mem::take(&mut self.cur)]) {
            self.kept.give(buf);
        }
    }
}

/// Fills `out` (0, 16, 20, or at least 24 bytes, a multiple of 4) with one Name Resolution
/// Block naming nothing: 20 bytes hold an empty option list, more a comment of spaces.
fn put_nrb(out: &mut [u8]) {
    let n = out.len();
    let len = u32::try_from(n).unwrap_or(u32::MAX).to_ne_bytes();
    out[..4].copy_from_slice(&NRB_TYPE.to_ne_bytes());
    out[4..8].copy_from_slice(&len);
    out[8..12].fill(0); // nrb_record_end
    let options = &mut out[12..n - 4];
    if options.len() >= 8 {
        let comment = options.len() - 8;
        let code_len = [OPT_COMMENT, u16::try_from(comment).unwrap_or(u16::MAX)];
        options[..2].copy_from_slice(&code_len[0].to_ne_bytes());
        options[2..4].copy_from_slice(&code_len[1].to_ne_bytes());
        options[4..4 + comment].fill(b' ');
    }
    let end = options.len().saturating_sub(4);
    options[end..].fill(0); // opt_endofopt (or nothing when there is no room for options)
    out[n - 4..].copy_from_slice(&len);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{read_bytes, CaptureWriter, FileFormat, IfStats, ReadError};
    use std::fs::OpenOptions;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn padding_reaches_the_next_aligned_end_with_one_block() {
        for pad in [Padding::Pcapng, Padding::Zstd, Padding::Gzip] {
            for len in (0..3 * ALIGN).step_by(4) {
                let p = pad.after(len);
                assert_eq!((len + p) % ALIGN, 0, "{pad:?} {len}");
                assert!(p == 0 || p >= pad.min(), "{pad:?} {len}: {p}");
            }
        }
    }

    /// Two frames of `pad`'s format with a padding block of every length from the smallest
    /// to a block between them decompress to the two frames' bytes.
    #[test]
    fn compressed_padding_is_skipped_by_the_decoders() {
        use std::io::Read;
        for pad in [Padding::Zstd, Padding::Gzip] {
            let frame = |bytes: &[u8]| match pad {
                Padding::Zstd => zstd::bulk::compress(bytes, 1).unwrap(),
                _ => {
                    let mut e = flate2::write::GzEncoder::new(Vec::new(), Default::default());
                    e.write_all(bytes).unwrap();
                    e.finish().unwrap()
                }
            };
            for n in (pad.min()..ALIGN + 64).step_by(37) {
                let mut padding = vec![0xee; n];
                pad.fill(&mut padding);
                let stream = [frame(b"first "), padding, frame(b"second")].concat();
                let mut plain = Vec::new();
                match pad {
                    Padding::Zstd => zstd::Decoder::new(&stream[..])
                        .unwrap()
                        .read_to_end(&mut plain),
                    _ => flate2::read::MultiGzDecoder::new(&stream[..]).read_to_end(&mut plain),
                }
                .unwrap_or_else(|e| panic!("{pad:?} {n}: {e}"));
                assert_eq!(plain, b"first second", "{pad:?} {n}");
            }
        }
    }

    /// A file of `packets` packets of growing sizes in `format`, written in batches of
    /// `per_batch` through a `DirectFile` on the temporary directory's file system; `check`
    /// looks at the file after each batch, with writes on their way, and again once synced
    /// (its last argument).
    /// A new file at `path`, opened for direct I/O.
    fn new_direct(path: &std::path::Path) -> std::fs::File {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .unwrap()
    }

    fn write_direct(
        format: FileFormat,
        packets: usize,
        per_batch: usize,
        check: impl Fn(&[u8], usize, bool),
    ) -> (Vec<u8>, u64) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d");
        let file = new_direct(&path);
        let tail = if format == FileFormat::Pcapng {
            Tail::Pad(Padding::Pcapng)
        } else {
            Tail::Carry
        };
        let mut w = CaptureWriter::new(DirectFile::new(file, 1 << 16, tail), format, 0, "t0")
            .unwrap()
            .with_buffer_size(1 << 20);
        for i in 0..packets {
            let data = vec![i as u8; 60 + i % 1400];
            w.write_packet(i as u64 * 1000, &data, data.len() as u32)
                .unwrap();
            if (i + 1) % per_batch == 0 {
                // An empty record run ends the batch (and writes what write_packet gathered).
                w.write_records(&[], 0).unwrap();
                check(&std::fs::read(&path).unwrap(), i + 1, false);
                w.sync().unwrap();
                check(&std::fs::read(&path).unwrap(), i + 1, true);
            }
        }
        let written = w.packets_written();
        w.finish(Some(IfStats {
            received: packets as u64,
            dropped: 0,
        }))
        .unwrap();
        (std::fs::read(&path).unwrap(), written)
    }

    fn check_packets(f: &crate::CaptureFile, n: usize) {
        assert_eq!(f.packets.len(), n);
        for (i, p) in f.packets.iter().enumerate() {
            assert_eq!(p.ts_ns, i as u64 * 1000);
            assert_eq!(p.data, vec![i as u8; 60 + i % 1400], "packet {i}");
        }
    }

    #[test]
    fn every_batch_ends_aligned_and_every_packet_reads_back_once() {
        // While writes are on their way the file holds the first batches; once synced, all.
        let whole_batches = |bytes: &[u8], n: usize, synced: bool| {
            assert_eq!(bytes.len() % ALIGN, 0, "the file is whole aligned blocks");
            let f = read_bytes(bytes).unwrap();
            check_packets(&f, if synced { n } else { f.packets.len().min(n) });
        };
        let (bytes, written) = write_direct(FileFormat::Pcapng, 1000, 37, whole_batches);
        assert_eq!(written, 1000);
        assert_eq!(bytes.len() % ALIGN, 0, "the file is whole aligned blocks");
        let f = read_bytes(&bytes).unwrap();
        check_packets(&f, 1000);
        assert_eq!(
            f.if_stats.map(|s| s.received),
            Some(1000),
            "statistics block kept"
        );
    }

    #[test]
    fn pcap_carries_the_tail_while_running_and_ends_exact() {
        // While running: whole blocks, every packet before the last block boundary whole,
        // at most the record that crosses it cut short (what kill -9 leaves).
        let blocks = |bytes: &[u8], n: usize, synced: bool| {
            assert_eq!(bytes.len() % ALIGN, 0, "the file is whole aligned blocks");
            if !synced {
                // Writes on their way: whole blocks of the first records.
                let whole = match read_bytes(bytes) {
                    Ok(f) => f.packets,
                    Err(ReadError::Truncated { packets: 0, .. }) => Vec::new(),
                    Err(ReadError::Truncated { offset, .. }) => {
                        read_bytes(&bytes[..offset]).unwrap().packets
                    }
                    Err(e) => panic!("{e}"),
                };
                assert!(whole.len() <= n);
                for (i, p) in whole.iter().enumerate() {
                    assert_eq!(p.data, vec![i as u8; 60 + i % 1400], "packet {i}");
                }
                return;
            }
            let records: usize = (0..n).map(|i| 16 + 60 + i % 1400).sum();
            let whole = match read_bytes(bytes) {
                Ok(f) => f.packets.len(),
                Err(ReadError::Truncated { packets, .. }) => packets as usize,
                Err(e) => panic!("{e}"),
            };
            let past = 24 + (0..=whole).map(|i| 16 + 60 + i % 1400).sum::<usize>();
            assert!(whole == n || past > bytes.len(), "{whole} of {n} whole");
            assert!(
                24 + records - bytes.len() < ALIGN,
                "the tail is under a block"
            );
        };
        for format in [FileFormat::Pcap, FileFormat::PcapNs] {
            let (bytes, written) = write_direct(format, 1000, 37, blocks);
            assert_eq!(written, 1000);
            let records: usize = (0..1000).map(|i| 16 + 60 + i % 1400).sum();
            assert_eq!(bytes.len(), 24 + records, "{format}: exactly the records");
            check_packets(&read_bytes(&bytes).unwrap(), 1000);
        }
    }

    /// While the device is behind, the writer makes buffers for its stall bytes of batches
    /// without waiting for it; once their writes have landed it keeps [`DEPTH`].
    #[test]
    fn a_stalled_device_takes_stall_bytes_before_the_writer_waits() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("s")).unwrap();
        let d = DirectFile::new(file, 1 << 20, Tail::Pad(Padding::Pcapng));
        assert_eq!(d.most, STALL_BYTES / d.room, "the default");
        let mut d = d.with_stall_bytes(100 << 20);
        // No I/O thread runs, so a writer that has to wait for one gets an error.
        let most = (100 << 20) / d.room;
        assert_eq!(d.most, most);
        assert!(most > 50, "{most}");
        let mut on_their_way = Vec::new();
        for i in 1..most {
            let buf = d.free_buffer();
            on_their_way.push(buf.unwrap_or_else(|e| panic!("buffer {i} of {most}: {e}")));
            d.flights.push_back(Flight { at: 0, ended: 0 });
        }
        assert!(
            d.free_buffer().is_err(),
            "past its stall bytes the writer waits"
        );
        for buf in on_their_way {
            let outcome = Outcome::Written;
            d.settle(Done { buf, outcome });
        }
        assert_eq!((d.buffers, d.spare.len()), (DEPTH, DEPTH - 1));
    }

    #[test]
    fn a_live_tail_shows_every_ended_batch_whole_at_each_flush() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("live");
        let file = new_direct(&path);
        let cached = OpenOptions::new().write(true).open(&path).unwrap();
        let direct = DirectFile::new(file, 1 << 16, Tail::Carry).with_live_tail(cached);
        let mut w = CaptureWriter::new(direct, FileFormat::PcapNs, 0, "t0")
            .unwrap()
            .with_buffer_size(1 << 20);
        for i in 0..1000 {
            let data = vec![i as u8; 60 + i % 1400];
            w.write_packet(i as u64 * 1000, &data, data.len() as u32)
                .unwrap();
            if (i + 1) % 37 == 0 {
                w.write_records(&[], 0).unwrap();
                w.flush().unwrap();
                // Every packet so far, whole, and nothing past them (no block of zeros).
                check_packets(&read_bytes(&std::fs::read(&path).unwrap()).unwrap(), i + 1);
            }
        }
        w.finish(None).unwrap();
        check_packets(&read_bytes(&std::fs::read(&path).unwrap()).unwrap(), 1000);
    }

    /// Writes 3000 nanosecond-pcap records of 60..1459 bytes into `direct` in 64 KiB
    /// batches, and closes it.
    fn write_mixed(direct: DirectFile) {
        let mut w = CaptureWriter::new(direct, FileFormat::PcapNs, 0, "t0")
            .unwrap()
            .with_buffer_size(1 << 16);
        for i in 0..3000 {
            let data = vec![i as u8; 60 + i % 1400];
            w.write_packet(i as u64 * 1000, &data, data.len() as u32)
                .unwrap();
        }
        w.finish(None).unwrap();
    }

    /// Writes 3000 records of mixed sizes into a direct pcap file fed to a feed that takes
    /// `take` writes then refuses; returns the file's bytes and the writes fed.
    fn fed_file(take: usize) -> (Vec<u8>, Vec<(u64, Vec<u8>)>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fed");
        let file = new_direct(&path);
        let got = Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = Arc::clone(&got);
        let feed: Feed = Box::new(move |l: Landed| {
            let mut got = into.lock().unwrap();
            if got.len() == take {
                return Some(l);
            }
            assert!(l.notes().is_none(), "a file without notes lends none");
            got.push((l.at(), l.bytes().to_vec()));
            None // dropped here: the buffer goes home
        });
        write_mixed(DirectFile::new(file, 1 << 16, Tail::Carry).with_feed(feed));
        let fed = got.lock().unwrap().clone();
        (std::fs::read(&path).unwrap(), fed)
    }

    #[test]
    fn a_feed_gets_the_files_bytes_in_order_until_it_refuses_one() {
        let (bytes, fed) = fed_file(usize::MAX);
        check_packets(&read_bytes(&bytes).unwrap(), 3000);
        assert!(fed.len() > 10, "{} writes", fed.len());
        let mut whole = Vec::new();
        for (at, b) in &fed {
            assert_eq!(*at, whole.len() as u64, "in order, no gap");
            whole.extend_from_slice(b);
        }
        assert_eq!(whole, bytes, "the carried tail at the close included");
        // Refused at the fifth write: four fed, none after, the file whole all the same.
        let (bytes, fed) = fed_file(4);
        check_packets(&read_bytes(&bytes).unwrap(), 3000);
        assert_eq!(fed.len(), 4);
        assert!(fed
            .iter()
            .all(|(at, b)| bytes[*at as usize..][..b.len()] == b[..]));
    }

    #[test]
    fn the_notes_of_the_bytes_copied_in_are_lent_in_order_with_the_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("noted");
        let got = Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = Arc::clone(&got);
        let feed: Feed = Box::new(move |l: Landed| {
            into.lock()
                .unwrap()
                .push((l.at(), l.notes().map(<[u8]>::to_vec)));
            None
        });
        // Notes each run copied in whole: their notes, in order, are the file's bytes.
        let notes: Notes = Box::new(|bytes: &[u8], notes: &mut Vec<u8>| {
            notes.extend_from_slice(bytes);
        });
        write_mixed(
            DirectFile::new(new_direct(&path), 1 << 16, Tail::Carry)
                .with_feed(feed)
                .with_notes(notes),
        );
        let bytes = std::fs::read(&path).unwrap();
        let lent = got.lock().unwrap();
        assert!(lent.len() > 10, "{} writes", lent.len());
        let mut noted = Vec::new();
        for (at, notes) in lent.iter() {
            // A write's notes are of the bytes copied into its buffer: none of a later one.
            assert!(
                *at <= noted.len() as u64,
                "notes ahead of their write at {at}"
            );
            noted.extend_from_slice(notes.as_deref().expect("noted"));
        }
        assert_eq!(noted, bytes);
    }

    #[test]
    fn a_run_of_slices_is_noted_once_per_run_not_per_slice() {
        let dir = tempfile::tempdir().unwrap();
        let runs = Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = Arc::clone(&runs);
        let notes: Notes = Box::new(move |bytes: &[u8], _: &mut Vec<u8>| {
            into.lock().unwrap().push(bytes.to_vec());
        });
        let mut file = DirectFile::new(new_direct(&dir.path().join("runs")), 1 << 20, Tail::Carry)
            .with_notes(notes);
        // A slice per 1530-byte record, as records framed in a ring are handed over.
        let records: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; 1530]).collect();
        let slices: Vec<IoSlice<'_>> = records.iter().map(|r| IoSlice::new(r)).collect();
        assert_eq!(file.write_vectored(&slices).unwrap(), 153_000);
        let runs = runs.lock().unwrap();
        let lens: Vec<usize> = runs.iter().map(Vec::len).collect();
        assert_eq!(lens, [NOTE_RUN, NOTE_RUN, 153_000 - 2 * NOTE_RUN]);
        assert_eq!(runs.concat(), records.concat(), "noted in the order copied");
    }

    #[test]
    fn the_files_of_a_set_reuse_the_buffers_lent_and_left() {
        let dir = tempfile::tempdir().unwrap();
        let kept = Buffers::new(2 * DEPTH);
        let lent = Arc::new(std::sync::Mutex::new(Vec::new()));
        for i in 0..3 {
            let path = dir.path().join(format!("f{i}"));
            let into = Arc::clone(&lent);
            // The feed holds every write until the file is closed (a keeper behind).
            let feed: Feed = Box::new(move |l: Landed| {
                into.lock().unwrap().push(l);
                None
            });
            write_mixed(
                DirectFile::new(new_direct(&path), 1 << 16, Tail::Carry)
                    .with_feed(feed)
                    .with_buffers(kept.clone()),
            );
            check_packets(&read_bytes(&std::fs::read(&path).unwrap()).unwrap(), 3000);
            let fed = std::mem::take(&mut *lent.lock().unwrap());
            assert!(fed.len() > 2 * DEPTH, "{} writes lent", fed.len());
            if i > 0 {
                // The file left its own buffers, but it took every kept one first (its
                // feed held more than were kept), and made new ones only after.
                assert!(kept.held() <= DEPTH + 1, "{} kept", kept.held());
            }
            let made = kept.made();
            drop(fed);
            assert_eq!(
                kept.held(),
                2 * DEPTH,
                "lent buffers back, at most {} kept",
                2 * DEPTH
            );
            assert_eq!(kept.made(), made, "none made while none is written");
        }
    }

    #[test]
    fn a_cut_goes_back_to_the_last_whole_batch() {
        let dir = tempfile::tempdir().unwrap();
        for (tail, len) in [(Tail::Pad(Padding::Pcapng), ALIGN), (Tail::Carry, 100)] {
            let path = dir.path().join(format!("{tail:?}"));
            let file = std::fs::File::create(&path).unwrap();
            let mut d = DirectFile::new(file, 64, tail);
            d.write_all(&[1u8; 100]).unwrap();
            d.end_batch().unwrap();
            d.write_all(&[2u8; 40]).unwrap();
            assert!(d.truncate_to(50).is_err(), "not a batch end");
            d.truncate_to(100).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes.len(), len, "{tail:?}");
            assert_eq!(bytes[..100], [1u8; 100], "{tail:?}");
        }
    }
}
