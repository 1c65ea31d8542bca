//! Prefix indexes of the files being written: the keeper saves, now and then, the index of
//! the whole regions of each open file it has been fed so far (`build::Written::prefix`,
//! as `NAME.prefix.idx`, replaced at once by a rename), so that a query during the capture
//! reads only the candidate pages of that part and the rest of the file whole, instead of
//! a live file of up to -C bytes whole.
//!
//! When: at most every [`EVERY`], once at least two regions more were fed, and no sooner
//! after a save than [`QUIET`] times what it took: a save encodes the prefix whole (its cost
//! grows with the file), and this keeps the saves to a twentieth of the keeper's time
//! whatever the file's size. The closed file's index replaces its prefix index (the keeper
//! deletes it once the index is saved); one left by a crash is used until `repair` (or
//! the next start) indexes the file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::build::Written;
use super::index::{Cover, REGION_BYTES};

/// How often a prefix index is saved at most.
pub const EVERY: Duration = Duration::from_secs(1);
/// A save is followed by at least this many times its own duration without one.
const QUIET: u32 = 20;

/// When each open file's next prefix index is due, and what the saves cost.
#[derive(Debug, Default)]
pub struct Prefixes {
    /// Per file number: when its next save may be, and the bytes fed at its last one.
    due: HashMap<u64, (Instant, u64)>,
    /// Prefix indexes saved.
    pub saved: usize,
    /// Time spent building and saving them.
    pub spent: Duration,
}

impl Prefixes {
    /// Saves the prefix index of each file of `open` (file number: path, bytes fed) that
    /// is due; returns what failed.
    pub fn save_due(&mut self, open: &HashMap<u64, (PathBuf, Written)>) -> Vec<String> {
        let now = Instant::now();
        let mut errors = Vec::new();
        for (id, (path, written)) in open {
            let (next, fed) = *self.due.entry(*id).or_insert((now + EVERY, 0));
            if now < next || written.fed() < fed + 2 * REGION_BYTES {
                continue;
            }
            let Some(prefix) = written.prefix() else {
                continue;
            };
            let saved = prefix.save_as(path, Cover::Prefix);
            let took = now.elapsed();
            self.spent += took;
            self.due.insert(*id, (now + EVERY.max(took * QUIET), written.fed()));
            match saved {
                Ok(_) => self.saved += 1,
                Err(e) => errors.push(format!("{}: prefix index: {e}", path.display())),
            }
        }
        errors
    }

    /// Forgets file number `id`, closed.
    pub fn closed(&mut self, id: u64) {
        self.due.remove(&id);
    }
}

/// Deletes `capture`'s prefix index, if any (its whole index is saved, or it is deleted).
pub fn remove(capture: &Path) {
    // Absent, mostly: a file closed within a second of its opening had none.
    let _ = std::fs::remove_file(Cover::Prefix.path(capture));
}
