//! Prefix indexes of the files being written: the keeper saves, now and then, the index of
//! the whole regions of each open file it has been fed so far (`build::Written::prefix`,
//! as `NAME.prefix.idx`, replaced at once by a rename), so that a query during the capture
//! reads only the candidate pages of that part and the rest of the file whole, instead of
//! a live file of up to -C bytes whole.
//!
//! When: at most every [`EVERY`], once at least two regions more were fed, and no sooner
//! after a save than `QUIET` times what it took: a save encodes the prefix whole (its cost
//! grows with the file: 250-350 ms for 100 MB of imix over 100k flows on a loaded machine),
//! and this keeps the saves to a twentieth of a core whatever the file's size. The keeper
//! only copies the builder (`Written::snapshot`); a thread of its own builds and saves the
//! prefix index, one at a time, so that the keeper goes on taking the writer's writes (a
//! save on the keeper's thread held it long enough for the writer to stop lending, and
//! the file was read back at its close). The closed file's index replaces its prefix index
//! (the keeper waits for a save under way, then deletes it once the index is saved); one
//! left by a crash is used until `repair` (or the next start) indexes the file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::build::Written;
use super::index::{Cover, REGION_BYTES};

/// How often a prefix index is saved at most.
pub const EVERY: Duration = Duration::from_secs(1);
/// A save is followed by at least this many times its own duration without one.
const QUIET: u32 = 20;

/// A save under way: its file's number, and the thread's outcome (its time, and what
/// failed).
type Saving = (u64, JoinHandle<(Duration, Option<String>)>);

/// When each open file's next prefix index is due, and what the saves cost.
#[derive(Debug, Default)]
pub struct Prefixes {
    /// Per file number: when its next save may be, and the bytes fed at its last one.
    due: HashMap<u64, (Instant, u64)>,
    saving: Option<Saving>,
    /// Prefix indexes saved.
    pub saved: usize,
    /// Time spent copying builders, building and saving them.
    pub spent: Duration,
}

impl Prefixes {
    /// Starts saving the prefix index of a file of `open` (file number: path, bytes fed)
    /// that is due, unless a save is under way; returns what failed.
    pub fn save_due(&mut self, open: &HashMap<u64, (PathBuf, Written)>) -> Vec<String> {
        let mut errors = Vec::new();
        if self.saving.as_ref().is_some_and(|(_, t)| !t.is_finished()) {
            return errors;
        }
        errors.extend(self.wait());
        let now = Instant::now();
        for (id, (path, written)) in open {
            let (next, fed) = *self.due.entry(*id).or_insert((now + EVERY, 0));
            if now < next || written.fed() < fed + 2 * REGION_BYTES {
                continue;
            }
            let Some((builder, head_crc)) = written.snapshot() else {
                continue;
            };
            let copied = now.elapsed();
            self.due.insert(*id, (now + EVERY, written.fed()));
            let path = path.clone();
            let spawned = std::thread::Builder::new()
                .name("store-prefix".into())
                .spawn(move || {
                    let t = Instant::now();
                    let saved = builder
                        .prefix(head_crc)
                        .map(|i| i.save_as(&path, Cover::Prefix));
                    let failed = match saved {
                        Some(Err(e)) => Some(format!("{}: prefix index: {e}", path.display())),
                        _ => None,
                    };
                    (copied + t.elapsed(), failed)
                });
            match spawned {
                Ok(t) => self.saving = Some((*id, t)),
                Err(e) => errors.push(format!("prefix index: {e}")),
            }
            break;
        }
        errors
    }

    /// Waits for the save under way, if any; returns what failed.
    pub fn wait(&mut self) -> Option<String> {
        let (id, thread) = self.saving.take()?;
        let Ok((took, failed)) = thread.join() else {
            return Some("the prefix index thread panicked".into());
        };
        self.spent += took;
        if failed.is_none() {
            self.saved += 1;
        }
        if let Some((next, _)) = self.due.get_mut(&id) {
            *next = (*next).max(Instant::now() + took * QUIET);
        }
        failed
    }

    /// Forgets file number `id`, closed, once a save of it under way has ended; returns
    /// what failed.
    pub fn closed(&mut self, id: u64) -> Option<String> {
        let failed = if self.saving.as_ref().is_some_and(|(s, _)| *s == id) {
            self.wait()
        } else {
            None
        };
        self.due.remove(&id);
        failed
    }
}

/// Deletes `capture`'s prefix index, if any (its whole index is saved, or it is deleted).
pub fn remove(capture: &Path) {
    // Absent, mostly: a file closed within a second of its opening had none.
    let _ = std::fs::remove_file(Cover::Prefix.path(capture));
}
