//! The store's keeper: a thread beside the capture that indexes each capture file once
//! the writer has closed it (it is told the name over a channel, and reads the file back
//! while it is still in the page cache), then deletes the oldest whole files and their
//! indexes to keep the store within its size budget and age limit. The capture path only
//! sends a file name per rotation; all indexing and deleting happens here.
//!
//! The file being written is never deleted: only files the keeper was told are closed, or
//! that were in the store before this run, are candidates. The age limit is counted back
//! from the newest packet written, so a store filled from a recorded file keeps the last
//! DURATION of its traffic too.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::index::{index_path, Index};
use super::Store;

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
    /// Index bytes written.
    pub index_bytes: u64,
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
    /// The channel the writer sends each closed file's name to (made before the capture
    /// starts; the keeper itself starts after it, once privileges are dropped, as a
    /// process drops them only while it has one thread).
    pub fn channel() -> (Sender<PathBuf>, Receiver<PathBuf>) {
        std::sync::mpsc::channel()
    }

    /// Starts the keeper of `store`, hearing of closed files on `rx`.
    pub fn start(
        store: Store,
        retention: Retention,
        rx: Receiver<PathBuf>,
    ) -> std::io::Result<Keeper> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("store-keeper".into())
            .spawn(move || run(&store, retention, &rx, &flag))?;
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

fn run(
    store: &Store,
    retention: Retention,
    rx: &Receiver<PathBuf>,
    stop: &AtomicBool,
) -> KeeperReport {
    let mut report = KeeperReport::default();
    loop {
        let closed = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(p) => p,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if !stop.load(Ordering::Acquire) => {
                continue
            }
            Err(_) => match rx.try_recv() {
                Ok(p) => p,
                Err(_) => return report,
            },
        };
        let newest = match Index::build(&closed).and_then(|i| Ok((i.save(&closed)?, i))) {
            Ok((bytes, index)) => {
                report.indexed += 1;
                report.index_bytes += bytes;
                index.last
            }
            Err(e) => {
                report
                    .errors
                    .push(format!("{}: cannot index: {e}", closed.display()));
                continue;
            }
        };
        if let Err(e) = prune(store, retention, &closed, newest, &mut report) {
            report
                .errors
                .push(format!("{}: retention: {e}", store.dir().display()));
        }
    }
}

/// Deletes the oldest files up to and including `closed` (never a later one: the file
/// being written) while the store is over its budget or they are too old.
fn prune(
    store: &Store,
    retention: Retention,
    closed: &std::path::Path,
    newest: u64,
    report: &mut KeeperReport,
) -> Result<(), super::StoreError> {
    let files = store.files()?;
    let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let mut total: u64 = files.iter().map(|f| size(f) + size(&index_path(f))).sum();
    let oldest_kept = retention
        .keep
        .map(|k| newest.saturating_sub(k.as_nanos() as u64));
    for f in files.iter().filter(|f| f.as_path() <= closed) {
        let over = retention.size.is_some_and(|s| total > s);
        let old = oldest_kept.is_some_and(|limit| {
            std::fs::read(index_path(f))
                .ok()
                .and_then(|b| Index::decode(&b).ok())
                .is_some_and(|i| i.last < limit)
        });
        if !over && !old {
            break;
        }
        let bytes = size(f) + size(&index_path(f));
        std::fs::remove_file(f).map_err(|source| super::StoreError::Io {
            what: f.display().to_string(),
            source,
        })?;
        let _ = std::fs::remove_file(index_path(f));
        total = total.saturating_sub(bytes);
        report.deleted += 1;
        report.deleted_bytes += bytes;
    }
    Ok(())
}
