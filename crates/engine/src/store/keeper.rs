//! The store's keeper: a thread beside the capture that indexes each capture file once
//! the writer has closed it, then deletes the oldest whole files and their indexes to keep
//! the store within its size budget and age limit. It is two threads: one takes the notes of
//! the writes and adds them up, one (the closer) saves each closed file's index and prunes,
//! so the writes of the next file are taken while a closed one is indexed (see `take`).
//!
//! It indexes a file from what the writer noted of each write as it copied the records in:
//! the regions it cut, with their signatures (`DirectFile::with_notes`, `build::Noter`;
//! added up by `build::Written`), handed over as each direct write lands
//! (`poolcap_format::DirectFile::with_feed`), so no file is read back but its last region: a
//! 100 MB file written with direct I/O is not in the page cache, and reading it back cost
//! more CPU than writing it.
//!
//! The capture path never waits for the keeper, nor wakes it: a landed write's notes (and
//! its bytes within the file's first 4 KiB) are copied into a queue the keeper drains every
//! [`POLL`], and the write's buffer goes back to the writer at once. Why: the keeper took
//! each landed buffer itself, woken per write, and gave it back; on the capture's core each
//! wakeup preempted the capture thread (1,881 involuntary switches of it in 1M frames of
//! 1514 B at top speed, against 78 with `-w` alone). The queue holds at most
//! [`QUEUED_BYTES`]: a file whose notes find it full is fed nothing more and is read back
//! from disk at its close instead (counted in [`KeeperReport::read_back`]), as is one
//! written through the page cache. Either way the index is the one `store DIR repair`
//! builds from the file.
//!
//! What it deletes, by the packets' time and the budget, is `retention`'s rule; never the
//! file being written.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use poolcap_format::{Feed, Notes};

use super::build::{Noter, Written};
use super::index::{Index, IndexError, Saver, HEAD_BYTES};
use super::prefix::Prefixes;
use super::retention;
use super::sig::Spares;
use super::Store;
use crate::capture::worker::WORKER_NICE;

/// How often the keeper drains the queue of notes (see the module docs): what the prefix
/// indexes of the file being written cover lags the writes by this at most, besides their
/// own pace of a second or more (`prefix`; a query reads the rest of the file whole). Each
/// wakeup costs the capture's core 50-80 µs on the lab's VMs: at 100 ms they were a
/// twentieth of the store's extra CPU at 64 B / 300k pps.
pub const POLL: Duration = Duration::from_millis(250);

/// Bytes of notes queued for the keeper at most (see the module docs): at 64-byte frames
/// notes are about 3% of the bytes written, so about 1 GB of capture.
pub const QUEUED_BYTES: usize = 32 << 20;

/// A landed write of a file, as the keeper takes it.
#[derive(Debug)]
pub struct Noted {
    /// Where it starts in the file.
    at: u64,
    /// Its bytes.
    len: u64,
    /// Its bytes within the file's first [`HEAD_BYTES`].
    head: Vec<u8>,
    /// The notes of the regions its records ended (see `build::Noter`).
    notes: Vec<u8>,
}

/// What the keeper hears from the capture's writer, in order.
#[derive(Debug)]
pub enum Told {
    /// A file was opened; its writes come as `Landed` with this number.
    Opened(u64, PathBuf),
    /// A write of file number `.0` landed.
    Landed(u64, Noted),
    /// A file was closed whole.
    Closed(PathBuf),
}

/// What is told, queued for the keeper, and the bytes of notes in it; and the buffers of
/// notes the keeper has taken, for the next writes' notes.
///
/// Why the spare buffers: each landed write's notes were copied into a buffer allocated
/// anew on the capture thread and freed on the keeper; against `-w` alone the capture
/// thread had some 200 samples more of `clear_page_erms` and 170 more in the allocator (9M
/// frames of 64 bytes, perf at 10 kHz). With the buffers given back its `_int_malloc` fell
/// by half (105 -> 55 samples in two runs each).
#[derive(Debug, Default)]
struct Queue {
    told: Vec<Told>,
    bytes: usize,
    spare: Vec<Vec<u8>>,
}

/// Buffers of notes kept spare at most (see [`Queue`]): more than the writes landed
/// between two of the keeper's drains at 64 bytes.
const SPARE_NOTES: usize = 16;

/// The writer's side of the keeper's queue (cloned into each capture file set).
#[derive(Clone)]
pub struct Tell {
    queue: Arc<Mutex<Queue>>,
    /// Wakes the keeper: for a file opened or closed, not for a write.
    wake: Sender<()>,
    files: Arc<AtomicU64>,
    /// Bytes of notes queued at most ([`QUEUED_BYTES`]; less in tests).
    most: usize,
}

impl std::fmt::Debug for Tell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tell").finish_non_exhaustive()
    }
}

impl Tell {
    /// Queues `told`, unless it is a write's notes and the queue is full; whether queued.
    fn tell(&self, told: Told) -> bool {
        let Ok(mut q) = self.queue.lock() else {
            return false;
        };
        if let Told::Landed(_, n) = &told {
            if q.bytes + n.notes.len() > self.most {
                return false;
            }
            q.bytes += n.notes.len();
        }
        q.told.push(told);
        true
    }

    /// Announces the file `path`, just opened, and returns the feed its writes land in.
    pub fn feed(&self, path: &Path) -> Feed {
        let id = self.files.fetch_add(1, Ordering::Relaxed);
        self.tell(Told::Opened(id, path.to_owned()));
        // A keeper that has gone only stops hearing of files.
        let _ = self.wake.send(());
        let tell = self.clone();
        Box::new(move |landed| {
            let Some(notes) = landed.notes() else {
                // Not noted by the writer: the file is read back.
                return Some(landed);
            };
            let bytes = landed.bytes();
            let head = HEAD_BYTES.saturating_sub(landed.at() as usize);
            let mut copy = tell.spare();
            copy.extend_from_slice(notes);
            let noted = Noted {
                at: landed.at(),
                len: bytes.len() as u64,
                head: bytes[..head.min(bytes.len())].to_vec(),
                notes: copy,
            };
            // Refused when full: the file is fed nothing more, and read back.
            (!tell.tell(Told::Landed(id, noted))).then_some(landed)
        })
    }

    /// An empty buffer for a write's notes: one the keeper is done with, or a new one.
    fn spare(&self) -> Vec<u8> {
        let spare = self.queue.lock().ok().and_then(|mut q| q.spare.pop());
        spare.unwrap_or_default()
    }

    /// What the writer notes of the records it copies into a write, each region as it ends
    /// (see `build::Noter`): a file's feed takes its writes with these notes.
    pub fn notes(&self) -> Notes {
        let mut noter = Noter::default();
        Box::new(move |bytes, notes| noter.note(bytes, notes))
    }

    /// Announces the file `path`, closed whole.
    pub fn closed(&self, path: PathBuf) {
        self.tell(Told::Closed(path));
        let _ = self.wake.send(());
    }
}

/// The keeper's side of its queue.
#[derive(Debug)]
pub struct Heard {
    queue: Arc<Mutex<Queue>>,
    wake: Receiver<()>,
}

impl Heard {
    /// The files announced closed so far (what a test of the writer checks).
    #[cfg(test)]
    pub(crate) fn closed(&self) -> Vec<PathBuf> {
        self.drain(&mut Vec::new())
            .into_iter()
            .filter_map(|t| match t {
                Told::Closed(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    /// Takes what was told so far, in order, giving back the buffers of notes in `done`
    /// (emptied) for the next writes.
    fn drain(&self, done: &mut Vec<Vec<u8>>) -> Vec<Told> {
        self.queue.lock().map_or_else(
            |_| Vec::new(),
            |mut q| {
                q.bytes = 0;
                let room = SPARE_NOTES.saturating_sub(q.spare.len());
                q.spare.extend(done.drain(..).take(room).map(|mut b| {
                    b.clear();
                    b
                }));
                std::mem::take(&mut q.told)
            },
        )
    }
}

/// How much the store keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Bytes of capture files and indexes at most.
    pub size: Option<u64>,
    /// Traffic no older than this before the newest packet.
    pub keep: Option<Duration>,
}

/// What the keeper did.
#[derive(Debug, Default, Clone)]
pub struct KeeperReport {
    /// Files indexed.
    pub indexed: usize,
    /// Of those, files read back from disk (see the module docs).
    pub read_back: usize,
    /// Index bytes written.
    pub index_bytes: u64,
    /// Prefix indexes saved of files being written (see `prefix`).
    pub prefixes: usize,
    /// Time spent building and saving them.
    pub prefix_time: Duration,
    /// Files deleted (with their indexes) by retention.
    pub deleted: usize,
    /// Bytes deleted.
    pub deleted_bytes: u64,
    /// What failed, one line each.
    pub errors: Vec<String>,
}

/// The running keeper.
#[derive(Debug)]
pub struct Keeper {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<KeeperReport>,
}

impl Keeper {
    /// The channel the writer tells the keeper of its files on (made before the capture
    /// starts; the keeper itself starts after it, once privileges are dropped, as a
    /// process drops them only while it has one thread).
    pub fn channel() -> (Tell, Heard) {
        Keeper::channel_of(QUEUED_BYTES)
    }

    /// [`Keeper::channel`] with a queue of `most` bytes of notes.
    fn channel_of(most: usize) -> (Tell, Heard) {
        let (wake, woken) = std::sync::mpsc::channel();
        let queue = Arc::new(Mutex::new(Queue::default()));
        let tell = Tell {
            queue: Arc::clone(&queue),
            wake,
            files: Arc::new(AtomicU64::new(0)),
            most,
        };
        (tell, Heard { queue, wake: woken })
    }

    /// Starts the keeper of `store`, hearing of the writer's files on `heard`.
    pub fn start(store: Store, retention: Retention, heard: Heard) -> std::io::Result<Keeper> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("store-keeper".into())
            .spawn(move || {
                // Behind the capture threads on a shared core: a close's work (an index
                // encoded and written) at their priority held a capture thread off long
                // enough for its ring to fill (1514 B at top speed, 1 run in 3: 2,330
                // frames). The closer started below inherits it.
                poolcap_sys::process::set_thread_nice(WORKER_NICE);
                run(&store, retention, &heard, &flag)
            })?;
        Ok(Keeper { stop, thread })
    }

    /// Indexes what the writer announced before it ended, and returns the report.
    pub fn finish(self) -> KeeperReport {
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap_or_else(|_| KeeperReport {
            errors: vec!["the store keeper panicked".into()],
            ..KeeperReport::default()
        })
    }
}

fn run(store: &Store, retention: Retention, heard: &Heard, stop: &AtomicBool) -> KeeperReport {
    let (to_close, closing) = std::sync::mpsc::channel::<(PathBuf, Option<Written>)>();
    std::thread::scope(|s| {
        let closer = std::thread::Builder::new()
            .name("store-closer".into())
            .spawn_scoped(s, move || {
                let mut closer = Closer::default();
                for (path, written) in closing {
                    closer.close(store, retention, &path, written);
                }
                closer.report
            });
        match closer {
            Ok(closer) => {
                // Sent or not (the closer has gone, its report says why).
                let taken = take(heard, stop, |path, written| {
                    let _ = to_close.send((path, written));
                });
                drop(to_close);
                taken.add_to(closer.join().unwrap_or_else(|_| KeeperReport {
                    errors: vec!["the store closer panicked".into()],
                    ..KeeperReport::default()
                }))
            }
            Err(e) => {
                let mut closer = Closer::default();
                closer.report.errors.push(format!(
                    "no closer thread ({e}): files indexed as they close"
                ));
                let taken = take(heard, stop, |path, written| {
                    closer.close(store, retention, &path, written);
                });
                taken.add_to(closer.report)
            }
        }
    })
}

/// What taking the writer's writes did besides feeding the builders: the prefix indexes of
/// files being written (see `prefix`) it saved, and what went wrong.
#[derive(Default)]
struct Taken {
    errors: Vec<String>,
    prefixes: usize,
    prefix_time: Duration,
}

impl Taken {
    /// Adds what was taken to the closer's `report`.
    fn add_to(self, mut report: KeeperReport) -> KeeperReport {
        report.errors.extend(self.errors);
        (report.prefixes, report.prefix_time) = (self.prefixes, self.prefix_time);
        report
    }
}

/// Takes what the writer tells, every [`POLL`] or when a file opens or closes, until it has
/// gone (or `stop` is set and all is heard): feeds each landed write's notes to its file's
/// builder and hands each closed file, with its builder, to `closed`. It does nothing else:
/// the indexing and pruning at a close (tens of ms for a 100 MB file of small packets)
/// happen on the closer thread, where they held up the writes of the next file when this
/// thread did them, until the queue was full and the rest of it was read back from disk.
fn take(
    heard: &Heard,
    stop: &AtomicBool,
    mut closed: impl FnMut(PathBuf, Option<Written>),
) -> Taken {
    let mut open: HashMap<u64, (PathBuf, Written)> = HashMap::new();
    let spares = Spares::default();
    let mut done = Vec::new();
    let mut prefixes = Prefixes::default();
    let mut taken = Taken::default();
    loop {
        taken.errors.extend(prefixes.save_due(&open));
        let woken = heard.wake.recv_timeout(POLL);
        for told in heard.drain(&mut done) {
            match told {
                Told::Opened(id, path) => {
                    open.insert(id, (path, Written::with_spares(spares.clone())));
                }
                Told::Landed(id, n) => {
                    if let Some((_, w)) = open.get_mut(&id) {
                        w.land(n.at, n.len, &n.head, &n.notes);
                    }
                    done.push(n.notes);
                }
                Told::Closed(path) => {
                    let written = open
                        .iter()
                        .find(|(_, (p, _))| *p == path)
                        .map(|(id, _)| *id)
                        .inspect(|&id| taken.errors.extend(prefixes.closed(id)))
                        .and_then(|id| open.remove(&id))
                        .map(|(_, w)| w);
                    closed(path, written);
                }
            }
        }
        match woken {
            Ok(()) => {}
            Err(RecvTimeoutError::Timeout) if !stop.load(Ordering::Acquire) => {}
            // Stopped once the writer has ended (all it told was drained above), or no
            // writer is left.
            Err(_) if heard.queue.lock().is_ok_and(|q| q.told.is_empty()) => {
                taken.errors.extend(prefixes.wait());
                (taken.prefixes, taken.prefix_time) = (prefixes.saved, prefixes.spent);
                return taken;
            }
            Err(_) => {}
        }
    }
}

/// What the closer keeps from one closed file to the next: the files' ages for retention,
/// the memory indexes are saved through, and its report.
#[derive(Default)]
struct Closer {
    ages: retention::Ages,
    saver: Saver,
    report: KeeperReport,
}

impl Closer {
    /// Indexes the closed file `closed` (from `written`, or read back), then prunes the
    /// store.
    fn close(
        &mut self,
        store: &Store,
        retention: Retention,
        closed: &Path,
        written: Option<Written>,
    ) {
        let report = &mut self.report;
        match index(closed, written, &mut self.saver, report) {
            Ok(bytes) => {
                report.indexed += 1;
                report.index_bytes += bytes;
            }
            Err(e) => {
                report
                    .errors
                    .push(format!("{}: cannot index: {e}", closed.display()));
                return;
            }
        }
        if let Err(e) = retention::prune(store, retention, closed, &mut self.ages, report) {
            report
                .errors
                .push(format!("{}: retention: {e}", store.dir().display()));
        }
    }
}

/// Indexes the closed file `closed` from its bytes `written`, or reads it back if they are
/// not all there; saves the index (from the bytes, through `saver`) and returns its bytes.
fn index(
    closed: &Path,
    written: Option<Written>,
    saver: &mut Saver,
    report: &mut KeeperReport,
) -> Result<u64, IndexError> {
    let len = std::fs::metadata(closed)?.len();
    // The last region, which no record ended, read back: one region's bytes at most.
    let tail = |from: u64| {
        let mut b = vec![0u8; len.saturating_sub(from) as usize];
        std::os::unix::fs::FileExt::read_exact_at(&std::fs::File::open(closed)?, &mut b, from)?;
        Ok(b)
    };
    let bytes = match written.and_then(|w| w.finish(len, tail)) {
        Some(built) => built.save(closed, saver)?,
        None => {
            report.read_back += 1;
            Index::build(closed)?.save(closed)?
        }
    };
    super::prefix::remove(closed);
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::index::index_path;
    use poolcap_format::{CaptureWriter, DirectFile, FileFormat, Tail};
    use std::os::unix::fs::OpenOptionsExt;

    /// Writes `n` packets of mixed flows as a store file written with direct I/O in
    /// writes of 64 KiB, each lent to `tell`'s keeper as it lands; announces it closed.
    fn write_file(tell: &Tell, path: &Path, n: usize) {
        write_file_fed(tell.feed(path), tell, path, n);
    }

    /// `write_file`, its writes lent to `feed`.
    fn write_file_fed(feed: Feed, tell: &Tell, path: &Path, n: usize) {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .unwrap();
        let direct = DirectFile::new(file, 1 << 16, Tail::Carry)
            .with_feed(feed)
            .with_notes(tell.notes());
        let mut w = CaptureWriter::new(direct, FileFormat::PcapNs, 0, "t0")
            .unwrap()
            .with_buffer_size(1 << 16);
        let sample =
            poolcap_format::read_bytes(&crate::store::build::tests::sample_file(n, false)).unwrap();
        for p in &sample.packets {
            w.write_packet(p.ts_ns, &p.data, p.orig_len).unwrap();
        }
        w.finish(None).unwrap();
        tell.closed(path.to_owned());
    }

    /// Bytes of notes queued for the keeper.
    fn queued(tell: &Tell) -> usize {
        tell.queue.lock().unwrap().bytes
    }

    #[test]
    fn a_writes_notes_go_into_a_buffer_the_keeper_gave_back() {
        let (tell, heard) = Keeper::channel();
        let mut done: Vec<Vec<u8>> = (0..20).map(|_| Vec::with_capacity(1000)).collect();
        done[0].extend_from_slice(b"notes taken");
        let given = done[0].as_ptr();
        assert!(heard.drain(&mut done).is_empty());
        assert!(done.is_empty(), "every buffer given back or freed");
        let spare: Vec<Vec<u8>> = (0..=SPARE_NOTES).map(|_| tell.spare()).collect();
        assert!(spare[..SPARE_NOTES]
            .iter()
            .all(|b| b.is_empty() && b.capacity() >= 1000));
        assert!(spare.iter().any(|b| b.as_ptr() == given));
        assert_eq!(
            spare[SPARE_NOTES].capacity(),
            0,
            "{SPARE_NOTES} kept at most"
        );
    }

    #[test]
    fn a_file_is_indexed_from_its_notes_or_read_back_when_the_queue_is_full() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        // The keeper starts after the file is written (a keeper slow but not too slow):
        // every write's notes queued, none read back.
        let (tell, heard) = Keeper::channel();
        let a = dir.path().join("a");
        write_file(&tell, &a, 1000);
        assert!(queued(&tell) > 0);
        let r = Keeper::start(store.clone(), Retention::default(), heard)
            .unwrap()
            .finish();
        assert_eq!((r.indexed, r.read_back, r.errors.len()), (1, 0, 0), "{r:?}");
        assert_eq!(queued(&tell), 0, "all taken");
        // More notes than the queue holds while the keeper does not take them (it fell
        // behind): the writes that fit were queued, the rest not, and the file is read back.
        let (tell, heard) = Keeper::channel_of(2048);
        let b = dir.path().join("b");
        write_file(&tell, &b, 6000);
        assert!((1..=2048).contains(&queued(&tell)), "{}", queued(&tell));
        let r = Keeper::start(store, Retention::default(), heard)
            .unwrap()
            .finish();
        assert_eq!((r.indexed, r.read_back, r.errors.len()), (1, 1, 0), "{r:?}");
        for (f, n) in [(a, 1000), (b, 6000)] {
            let saved = Index::decode(&std::fs::read(index_path(&f)).unwrap()).unwrap();
            assert_eq!(saved, Index::build(&f).unwrap(), "{}", f.display());
            assert_eq!(saved.packets, n);
            assert!(saved.regions.len() > 5 && !saved.signatures.is_empty());
        }
    }

    #[test]
    fn the_keeper_takes_the_next_files_writes_while_a_closed_file_is_indexed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let (tell, heard) = Keeper::channel_of(2048);
        let keeper = Keeper::start(store, Retention::default(), heard).unwrap();
        // A closed file whose indexing blocks: a FIFO, read back (nothing was fed), until
        // it is opened for writing below.
        let slow = dir.path().join("slow");
        assert!(std::process::Command::new("mkfifo")
            .arg(&slow)
            .status()
            .unwrap()
            .success());
        let _ = tell.feed(&slow);
        tell.closed(slow.clone());
        // The next file, more notes than the queue holds: each write's are taken before
        // the next lands (the keeper woken, the feed waiting for it, a hang guard of 10 s),
        // none refused, none read back.
        let b = dir.path().join("b");
        let mut feed = tell.feed(&b);
        let waited = Arc::new(AtomicBool::new(false));
        let timed_out = Arc::clone(&waited);
        let wake = tell.clone();
        let taken: Feed = Box::new(move |landed| {
            let refused = feed(landed);
            if timed_out.load(Ordering::Acquire) {
                return refused;
            }
            let _ = wake.wake.send(());
            let guard = std::time::Instant::now();
            while queued(&wake) > 0 {
                if guard.elapsed() > Duration::from_secs(10) {
                    timed_out.store(true, Ordering::Release);
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            refused
        });
        write_file_fed(taken, &tell, &b, 6000);
        assert!(
            !waited.load(Ordering::Acquire),
            "a write was not taken in 10 s"
        );
        // The FIFO's reader gets its end of file: that file cannot be indexed.
        drop(std::fs::OpenOptions::new().write(true).open(&slow).unwrap());
        drop(tell);
        let r = keeper.finish();
        assert_eq!((r.indexed, r.read_back, r.errors.len()), (1, 1, 1), "{r:?}");
        let saved = Index::decode(&std::fs::read(index_path(&b)).unwrap()).unwrap();
        assert_eq!(saved, Index::build(&b).unwrap());
        assert_eq!(saved.packets, 6000);
    }
}
