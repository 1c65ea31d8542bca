//! The store's keeper: a thread beside the capture that indexes each capture file once
//! the writer has closed it, then deletes the oldest whole files and their indexes to keep
//! the store within its size budget and age limit. It is two threads: one takes the writes
//! lent to it and parses them, one (the closer) saves each closed file's index and prunes,
//! so the writes of the next file are taken while a closed one is indexed (see `take`).
//!
//! It indexes a file from the bytes the writer wrote, lent to it as each direct write lands
//! (`poolcap_format::DirectFile::with_feed`) with the notes of the regions the writer cut,
//! with their signatures, as it copied the records in (`DirectFile::with_notes`,
//! `build::Noter`; added up by `build::Written`), so no file is read back but its last
//! region: a 100 MB file written with direct I/O is not in the page cache,
//! and reading it back cost more CPU than writing it. The capture path never waits for the
//! keeper: at most [`LENT`] writes are lent at a time, and a file whose write finds them all
//! lent (the keeper is behind) lends nothing more; that file, one written through the page
//! cache, and one whose bytes fed do not add up to the closed file are read back from disk
//! instead (counted in [`KeeperReport::read_back`]). Either way the index is the one `store DIR
//! repair` builds from the file.
//!
//! What it deletes, by the packets' time and the budget, is `retention`'s rule; never the
//! file being written.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use poolcap_format::{Buffers, Feed, Landed, Notes, DEPTH};

use super::build::{Noter, Written};
use super::index::{Index, IndexError};
use super::prefix::Prefixes;
use super::retention;
use super::Store;
use crate::capture::worker::WORKER_NICE;

/// Writes lent to the keeper at most (2 MiB each: 32 MiB, about 40 ms of the lab's top
/// write rate), so a keeper that falls behind holds bounded memory.
pub const LENT: usize = 16;

/// What the keeper hears from the capture's writer.
pub enum Told {
    /// A file was opened; its writes come as `Landed` with this number.
    Opened(u64, PathBuf),
    /// A write of file number `.0` landed.
    Landed(u64, Landed),
    /// A file was closed whole.
    Closed(PathBuf),
}

/// The writer's side of the keeper's channel (cloned into each capture file set).
#[derive(Clone)]
pub struct Tell {
    tx: Sender<Told>,
    files: Arc<AtomicU64>,
    lent: Arc<AtomicUsize>,
    buffers: Buffers,
}

impl std::fmt::Debug for Tell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tell").finish_non_exhaustive()
    }
}

impl Tell {
    /// Announces the file `path`, just opened, and returns the feed its writes land in.
    pub fn feed(&self, path: &Path) -> Feed {
        let id = self.files.fetch_add(1, Ordering::Relaxed);
        // A listener that went away only stops hearing of files.
        let _ = self.tx.send(Told::Opened(id, path.to_owned()));
        let (tx, lent) = (self.tx.clone(), Arc::clone(&self.lent));
        Box::new(move |landed| {
            if lent.fetch_add(1, Ordering::AcqRel) >= LENT {
                lent.fetch_sub(1, Ordering::AcqRel);
                return Some(landed);
            }
            // Sent or dropped (the keeper has gone): either way the buffer goes home.
            let _ = tx.send(Told::Landed(id, landed));
            None
        })
    }

    /// What the writer notes of the records it copies into a write, each region as it ends
    /// (see `build::Noter`): a file's feed takes its writes with these notes.
    pub fn notes(&self) -> Notes {
        let mut noter = Noter::default();
        Box::new(move |bytes, notes| noter.note(bytes, notes))
    }

    /// The buffers the writers' files share: the ones lent come back there, for the next
    /// write or the next file (enough for [`LENT`] and one file's own).
    pub fn buffers(&self) -> Buffers {
        self.buffers.clone()
    }

    /// Announces the file `path`, closed whole.
    pub fn closed(&self, path: PathBuf) {
        let _ = self.tx.send(Told::Closed(path));
    }
}

/// The keeper's side of its channel.
#[derive(Debug)]
pub struct Heard {
    rx: Receiver<Told>,
    lent: Arc<AtomicUsize>,
}

impl Heard {
    /// The files announced closed so far (what a test of the writer checks).
    #[cfg(test)]
    pub(crate) fn closed(&self) -> Vec<PathBuf> {
        self.rx
            .try_iter()
            .filter_map(|t| match t {
                Told::Closed(p) => Some(p),
                _ => None,
            })
            .collect()
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
        let (tx, rx) = std::sync::mpsc::channel();
        let lent = Arc::new(AtomicUsize::new(0));
        let tell = Tell {
            tx,
            files: Arc::new(AtomicU64::new(0)),
            lent: Arc::clone(&lent),
            buffers: Buffers::new(LENT + DEPTH),
        };
        (tell, Heard { rx, lent })
    }

    /// Starts the keeper of `store`, hearing of the writer's files on `heard`.
    pub fn start(store: Store, retention: Retention, heard: Heard) -> std::io::Result<Keeper> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("store-keeper".into())
            .spawn(move || run(&store, retention, &heard, &flag))?;
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
                // Behind the capture threads on a shared core: a close's work (an index
                // encoded and written) at their priority held a capture thread off long
                // enough for its ring to fill (1514 B at top speed, 1 run in 3: 2,330
                // frames). Not the thread that takes the writes: behind the capture
                // thread it gave the lent buffers back late, and the writer made new ones
                // (6k page faults per 1M frames at 1514 B, 18% of the process in
                // clear_page).
                poolcap_sys::process::set_thread_nice(WORKER_NICE);
                let (mut report, mut ages) = (KeeperReport::default(), retention::Ages::default());
                for (path, written) in closing {
                    close(store, retention, &path, written, &mut ages, &mut report);
                }
                report
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
                let (mut report, mut ages) = (KeeperReport::default(), retention::Ages::default());
                report.errors.push(format!(
                    "no closer thread ({e}): files indexed as they close"
                ));
                let taken = take(heard, stop, |path, written| {
                    close(store, retention, &path, written, &mut ages, &mut report);
                });
                taken.add_to(report)
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

/// Takes what the writer tells until it has gone (or `stop` is set and all is heard):
/// feeds each landed write to its file's builder and hands each closed file, with its
/// builder, to `closed`. It does nothing else, so the writes lent come back at once: the
/// indexing and pruning at a close (tens of ms for a 100 MB file of small packets) happen
/// on the closer thread, where they held the writes of the next file (up to [`LENT`] of
/// them, 40 ms of writes) and made the writer refuse the rest of it, which was then read
/// back from disk, holding the next file up in turn.
fn take(
    heard: &Heard,
    stop: &AtomicBool,
    mut closed: impl FnMut(PathBuf, Option<Written>),
) -> Taken {
    let mut open: HashMap<u64, (PathBuf, Written)> = HashMap::new();
    let mut prefixes = Prefixes::default();
    let mut taken = Taken::default();
    loop {
        taken.errors.extend(prefixes.save_due(&open));
        let told = match heard.rx.recv_timeout(Duration::from_millis(100)) {
            Ok(t) => t,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if !stop.load(Ordering::Acquire) => {
                continue
            }
            Err(_) => match heard.rx.try_recv() {
                Ok(t) => t,
                Err(_) => {
                    taken.errors.extend(prefixes.wait());
                    (taken.prefixes, taken.prefix_time) = (prefixes.saved, prefixes.spent);
                    return taken;
                }
            },
        };
        match told {
            Told::Opened(id, path) => {
                open.insert(id, (path, Written::new()));
            }
            Told::Landed(id, landed) => {
                if let Some((_, w)) = open.get_mut(&id) {
                    match landed.notes() {
                        Some(notes) => w.land(landed.at(), landed.bytes(), notes),
                        None => w.feed(landed.at(), landed.bytes()),
                    }
                }
                drop(landed);
                heard.lent.fetch_sub(1, Ordering::AcqRel);
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
}

/// Indexes the closed file `closed` (from `written`, or read back), then prunes the store.
fn close(
    store: &Store,
    retention: Retention,
    closed: &Path,
    written: Option<Written>,
    ages: &mut retention::Ages,
    report: &mut KeeperReport,
) {
    match index(closed, written, report) {
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
    if let Err(e) = retention::prune(store, retention, closed, ages, report) {
        report
            .errors
            .push(format!("{}: retention: {e}", store.dir().display()));
    }
}

/// Indexes the closed file `closed` from its bytes `written`, or reads it back if they are
/// not all there; saves the index and returns its bytes.
fn index(
    closed: &Path,
    written: Option<Written>,
    report: &mut KeeperReport,
) -> Result<u64, IndexError> {
    let len = std::fs::metadata(closed)?.len();
    // The last region, which no record ended, read back: one region's bytes at most.
    let tail = |from: u64| {
        let mut b = vec![0u8; len.saturating_sub(from) as usize];
        std::os::unix::fs::FileExt::read_exact_at(&std::fs::File::open(closed)?, &mut b, from)?;
        Ok(b)
    };
    let index = match written.and_then(|w| w.finish(len, tail)) {
        Some(i) => i,
        None => {
            report.read_back += 1;
            Index::build(closed)?
        }
    };
    let bytes = index.save(closed)?;
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

    #[test]
    fn a_file_is_indexed_from_its_written_bytes_or_read_back_when_the_keeper_is_behind() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        // A file of fewer writes than LENT: every write lent (the keeper starts after it,
        // as a keeper that is slow but not too slow), none read back.
        let (tell, heard) = Keeper::channel();
        let a = dir.path().join("a");
        write_file(&tell, &a, 1000);
        let lent = heard.lent.load(Ordering::Acquire);
        assert!(lent > 3 && lent < LENT, "{lent} writes");
        let r = Keeper::start(store.clone(), Retention::default(), heard)
            .unwrap()
            .finish();
        assert_eq!((r.indexed, r.read_back, r.errors.len()), (1, 0, 0), "{r:?}");
        // More writes than LENT while the keeper does not take them (it fell behind):
        // LENT writes were lent, the rest not, and the file is read back.
        let (tell, heard) = Keeper::channel();
        let b = dir.path().join("b");
        write_file(&tell, &b, 6000);
        assert_eq!(heard.lent.load(Ordering::Acquire), LENT, "lent at most");
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
        let (tell, heard) = Keeper::channel();
        let lent = Arc::clone(&heard.lent);
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
        // The next file, more writes than LENT: each is taken before the next lands (the
        // feed waits for it, a hang guard of 10 s), none refused, none read back.
        let b = dir.path().join("b");
        let mut feed = tell.feed(&b);
        let waited = Arc::new(AtomicBool::new(false));
        let timed_out = Arc::clone(&waited);
        let taken: Feed = Box::new(move |landed| {
            let refused = feed(landed);
            if timed_out.load(Ordering::Acquire) {
                return refused;
            }
            let guard = std::time::Instant::now();
            while lent.load(Ordering::Acquire) > 0 {
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
