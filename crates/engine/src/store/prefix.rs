//! Prefix indexes of the files being written: now and then the keeper saves the index of
//! the whole regions of an open file fed since its last save, as the file's next piece
//! (`build::Builder::piece`; `NAME.prefix.K.idx`, K from 0, written under a temporary name
//! and renamed), so that a query during the capture reads only the candidate pages of the
//! part its pieces cover (each starting where the one before ends) and the rest of the file
//! whole, instead of a live file of up to -C bytes whole.
//!
//! Pieces, not one prefix index saved again whole: a save of everything fed so far cost in
//! proportion to the file, each second (a copy of all the builder's pairs and their
//! grouping and encoding), so a file's saves cost several times its index at close; a
//! piece costs what was fed since the last one. So that a long file at a slow rate does not
//! leave hundreds of pieces for a query to open, a piece waits until an eighth of what
//! was fed by the last one has been fed since, or for 8 s: some 8·ln(size / 128 KiB)
//! pieces a file at high rates (55 for 1 GB), at most one per 8 s at low ones, and at
//! most an eighth of the file or 8 s of it read whole.
//!
//! Only while queries come: a query touches [`WANTED`] in the store's directory as it starts
//! ([`want`]), and the keeper saves pieces only within [`WANTED_FOR`] of the last touch. A
//! capture nobody queries while it runs (the usual case: Stenographer makes a file visible
//! to queries only once it is closed) pays nothing for them, where pieces cost more than the
//! closed file's index (at 64 B / 300k pps over 65,536 flows, 80-130 ms of CPU per 1.5M
//! packets against the closer's 40-65). The first query during a capture reads the live
//! file whole (up to -C bytes); the keeper's first piece then covers everything fed so far,
//! within a second or so, and the queries after it read only what the pieces select.
//!
//! When: at most every [`EVERY`], once at least two regions more were fed, and no sooner
//! after a save than `QUIET` times what it took, which keeps the saves to a twentieth of a
//! core whatever happens. The keeper only copies the builder, without the pairs of the
//! regions before the piece (`Written::snapshot`); a thread of its own builds and saves
//! the piece, one at a time, so that the keeper goes on taking the writer's writes (a
//! save on the keeper's thread held it long enough for the writer to stop lending, and
//! the file was read back at its close). The closed file's index replaces its pieces (the
//! keeper waits for a save under way, then deletes them, the last first, once the index
//! is saved); those left by a crash are used until `repair` (or the next start) indexes
//! the file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::build::Written;
use super::index::{Cover, REGION_BYTES};
use crate::capture::worker::WORKER_NICE;

/// How often a piece is saved at most.
pub const EVERY: Duration = Duration::from_secs(1);
/// A save is followed by at least this many times its own duration without one.
const QUIET: u32 = 20;
/// A piece waits until this share of what was fed by the last one has been fed since...
const GROWTH: u64 = 8;
/// ... or until this many times [`EVERY`] have passed since the last one.
const LATEST: u32 = 8;

/// The file in a store's directory whose time says when a query last came (see [`want`]).
pub const WANTED: &str = ".prefix-wanted";
/// Pieces are saved while the last query came within this long.
pub const WANTED_FOR: Duration = Duration::from_secs(600);

/// Tells the keeper of the store in `dir` that a query came, so that it saves pieces of its
/// live files (see the module docs). A query that cannot (a store it may only read) reads
/// the live files whole after the pieces saved so far, as it would anyway.
pub fn want(dir: &Path) {
    let touched = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(WANTED))
        .and_then(|f| f.set_modified(std::time::SystemTime::now()));
    // A hint: without it, the live files are read whole.
    let _ = touched;
}

/// Whether a query came to the store in `dir` within [`WANTED_FOR`] (a time ahead of the
/// clock, set back since, counts as now).
fn wanted(dir: &Path) -> bool {
    std::fs::metadata(dir.join(WANTED))
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().map_or(true, |e| e < WANTED_FOR))
}

/// Piece `k` of the prefix index of the capture file `capture`.
pub fn piece_path(capture: &Path, k: u32) -> PathBuf {
    let mut name = capture.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".prefix.{k}.idx"));
    capture.with_file_name(name)
}

/// The pieces of `capture`'s prefix index there are, in order (from piece 0 to the first
/// missing one).
pub fn pieces(capture: &Path) -> Vec<PathBuf> {
    (0..)
        .map(|k| piece_path(capture, k))
        .take_while(|p| p.exists())
        .collect()
}

/// Deletes `capture`'s prefix index, if any (its whole index is saved, or it is deleted):
/// the last piece first, so that one cut short leaves pieces from the first on.
pub fn remove(capture: &Path) {
    // Absent, mostly: a file closed within a second of its opening had none.
    for p in pieces(capture).iter().rev() {
        let _ = std::fs::remove_file(p);
    }
}

/// An open file's next piece.
#[derive(Debug)]
struct Due {
    /// When it may be saved.
    next: Instant,
    /// Bytes fed when the last one was copied.
    fed: u64,
    /// Its first region (where the last one saved ended).
    from: u32,
    /// Its number.
    k: u32,
}

/// A save under way: its file's number, the region after its piece, and the thread's
/// outcome (its time, and what failed).
type Saving = (u64, u32, JoinHandle<(Duration, Option<String>)>);

/// When each open file's next piece is due, and what the saves cost.
#[derive(Debug, Default)]
pub struct Prefixes {
    due: HashMap<u64, Due>,
    saving: Option<Saving>,
    /// When it was last looked whether queries come, and whether they did.
    queried: Option<(Instant, bool)>,
    /// Pieces saved.
    pub saved: usize,
    /// Time spent copying builders, building and saving pieces.
    pub spent: Duration,
}

impl Prefixes {
    /// Starts saving the next piece of a file of `open` (file number: path, bytes fed)
    /// that is due, unless a save is under way; returns what failed.
    pub fn save_due(&mut self, open: &HashMap<u64, (PathBuf, Written)>) -> Vec<String> {
        let mut errors = Vec::new();
        if self
            .saving
            .as_ref()
            .is_some_and(|(_, _, t)| !t.is_finished())
        {
            return errors;
        }
        errors.extend(self.wait());
        let now = Instant::now();
        let Some(dir) = open.values().next().and_then(|(p, _)| p.parent()) else {
            return errors;
        };
        if self.queried.is_none_or(|(looked, _)| now >= looked + EVERY) {
            self.queried = Some((now, wanted(dir)));
        }
        if self.queried.is_some_and(|(_, queried)| !queried) {
            return errors;
        }
        for (id, (path, written)) in open {
            let due = self.due.entry(*id).or_insert(Due {
                next: now + EVERY,
                fed: 0,
                from: 0,
                k: 0,
            });
            let grown = written.fed().saturating_sub(due.fed);
            let waited = now >= due.next + EVERY * (LATEST - 1);
            if now < due.next || grown < 2 * REGION_BYTES || (grown < due.fed / GROWTH && !waited) {
                continue;
            }
            let Some((builder, head_crc)) = written.snapshot(due.from) else {
                continue;
            };
            let (from, whole) = (due.from, builder.whole());
            if whole <= from {
                continue;
            }
            let copied = now.elapsed();
            (due.next, due.fed) = (now + EVERY, written.fed());
            let at = piece_path(path, due.k);
            let spawned = std::thread::Builder::new()
                .name("store-prefix".into())
                .spawn(move || {
                    poolcap_sys::process::set_thread_nice(WORKER_NICE);
                    let t = Instant::now();
                    let saved = builder
                        .piece(from, head_crc)
                        .map(|i| i.save_as(&at, Cover::Prefix));
                    let failed = match saved {
                        Some(Ok(_)) => None,
                        Some(Err(e)) => Some(format!("{}: prefix index: {e}", at.display())),
                        None => Some(format!("{}: prefix index: no region", at.display())),
                    };
                    (copied + t.elapsed(), failed)
                });
            match spawned {
                Ok(t) => self.saving = Some((*id, whole, t)),
                Err(e) => errors.push(format!("prefix index: {e}")),
            }
            break;
        }
        errors
    }

    /// Waits for the save under way, if any; returns what failed.
    pub fn wait(&mut self) -> Option<String> {
        let (id, whole, thread) = self.saving.take()?;
        let Ok((took, failed)) = thread.join() else {
            return Some("the prefix index thread panicked".into());
        };
        self.spent += took;
        self.saved += usize::from(failed.is_none());
        if let Some(due) = self.due.get_mut(&id) {
            due.next = due.next.max(Instant::now() + took * QUIET);
            if failed.is_none() {
                // The next piece starts where this one ends; one that failed is saved
                // again, longer, as the next.
                (due.from, due.k) = (whole, due.k + 1);
            }
        }
        failed
    }

    /// Forgets file number `id`, closed, once a save of it under way has ended; returns
    /// what failed.
    pub fn closed(&mut self, id: u64) -> Option<String> {
        let failed = if self.saving.as_ref().is_some_and(|(s, _, _)| *s == id) {
            self.wait()
        } else {
            None
        };
        self.due.remove(&id);
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_wanted_once_a_query_came_and_named_in_order() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!wanted(dir.path()), "no query yet");
        want(dir.path());
        assert!(wanted(dir.path()));
        let old = std::time::SystemTime::now() - WANTED_FOR - Duration::from_secs(1);
        let marker = std::fs::File::options()
            .write(true)
            .open(dir.path().join(WANTED))
            .unwrap();
        marker.set_modified(old).unwrap();
        assert!(!wanted(dir.path()), "the last query is too old");
        // Pieces from 0 to the first missing one; removed, the last first.
        let capture = dir.path().join("f");
        for k in [0, 1, 3] {
            std::fs::write(piece_path(&capture, k), b"x").unwrap();
        }
        assert_eq!(
            pieces(&capture),
            [piece_path(&capture, 0), piece_path(&capture, 1)]
        );
        remove(&capture);
        assert!(pieces(&capture).is_empty());
    }
}
