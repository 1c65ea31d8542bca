//! Which closed capture files the keeper deletes, by the packets' time and the size budget.
//!
//! A file's age is its last packet's time, read from its index's head (kept once read: a
//! closed file's index does not change), not the time in its name: a name is the wall clock
//! at its run's start, which says nothing of the packets of a recorded file replayed with
//! `capture -r` (days old under a name of today) and is hours early for a late file of a long
//! run. The age limit is counted back from the newest packet the store holds (the latest
//! last packet of any indexed file), so a store of recorded traffic keeps the last DURATION
//! of that traffic and a recording of older traffic loaded into a store of newer goes at
//! once. A file without a sound index (its index failed, or another run is writing it) goes
//! by the later of the start in its name and the time it was last written, so it errs
//! towards keeping it.
//!
//! Only files named up to the file just closed are candidates (this run's file being
//! written sorts after it), oldest first by that age (ties by name), so the size budget
//! deletes in the same order.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use super::index::index_path;
use super::keeper::{KeeperReport, Retention};
use super::{name_time, IndexState, Store, StoreError};

/// A capture file as retention sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The capture file.
    pub path: PathBuf,
    /// Bytes of it and its index.
    pub bytes: u64,
    /// Its last packet's time (ns), from its index; None without a sound index.
    pub last: Option<u64>,
    /// When it was last written (ns, its modification time).
    pub written: Option<u64>,
}

impl Held {
    /// The time the file's age is counted from (see the module docs); None if unknown.
    pub fn time(&self) -> Option<u64> {
        self.last
            .or_else(|| name_time(&self.path).max(self.written))
    }
}

/// The indexes of `held` to delete, in order: every candidate (named up to `closed`) whose
/// time is more than `retention.keep` before the newest last packet held, and, oldest
/// first, candidates while all of `held` is over `retention.size`.
pub fn doomed(held: &[Held], closed: &Path, retention: Retention) -> Vec<usize> {
    let mut total: u64 = held.iter().map(|h| h.bytes).sum();
    let newest = held.iter().filter_map(|h| h.last).max();
    let limit = retention
        .keep
        .zip(newest)
        .map(|(keep, newest)| newest.saturating_sub(keep.as_nanos() as u64));
    let mut order: Vec<usize> = (0..held.len())
        .filter(|&i| held[i].path.as_path() <= closed)
        .collect();
    order.sort_by_key(|&i| (held[i].time(), &held[i].path));
    let mut out = Vec::new();
    for i in order {
        let over = retention.size.is_some_and(|s| total > s);
        let old = limit.zip(held[i].time()).is_some_and(|(l, t)| t < l);
        if over || old {
            total = total.saturating_sub(held[i].bytes);
            out.push(i);
        }
    }
    out
}

/// Last packet times read from indexes, by capture file.
#[derive(Debug, Default)]
pub struct Ages(HashMap<PathBuf, u64>);

impl Ages {
    /// `files` as retention sees them (a file gone since it was listed is left out).
    fn held(&mut self, files: Vec<PathBuf>) -> Vec<Held> {
        let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        let listed: HashSet<&Path> = files.iter().map(PathBuf::as_path).collect();
        self.0.retain(|p, _| listed.contains(p.as_path()));
        files
            .into_iter()
            .filter_map(|path| {
                let meta = std::fs::metadata(&path).ok()?;
                let last = match self.0.get(&path) {
                    Some(&t) => Some(t),
                    None => match IndexState::of(&path) {
                        IndexState::Sound(i) if i.packets() > 0 => {
                            self.0.insert(path.clone(), i.span().1);
                            Some(i.span().1)
                        }
                        _ => None,
                    },
                };
                let written = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map(|d| d.as_nanos() as u64);
                Some(Held {
                    bytes: meta.len() + size(&index_path(&path)),
                    path,
                    last,
                    written,
                })
            })
            .collect()
    }
}

/// Deletes, with their indexes, the files of `store` that [`doomed`] names now that
/// `closed` is closed and indexed.
pub fn prune(
    store: &Store,
    retention: Retention,
    closed: &Path,
    ages: &mut Ages,
    report: &mut KeeperReport,
) -> Result<(), StoreError> {
    if retention == Retention::default() {
        return Ok(());
    }
    let held = ages.held(store.files()?);
    for i in doomed(&held, closed, retention) {
        let f = &held[i].path;
        std::fs::remove_file(f).map_err(|source| StoreError::Io {
            what: f.display().to_string(),
            source,
        })?;
        let _ = std::fs::remove_file(index_path(f));
        super::prefix::remove(f);
        report.deleted += 1;
        report.deleted_bytes += held[i].bytes;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const DAY: u64 = 86_400_000_000_000;
    /// 2026-11-27T16:00:00Z, as a name says it.
    const NAMED: u64 = 1_795_795_200 * 1_000_000_000;

    fn held(name: &str, bytes: u64, last: Option<u64>) -> Held {
        Held {
            path: PathBuf::from(format!("/s/{name}")),
            bytes,
            last,
            written: None,
        }
    }

    fn names(held: &[Held], closed: &str, retention: Retention) -> Vec<String> {
        doomed(held, Path::new(&format!("/s/{closed}")), retention)
            .into_iter()
            .map(|i| {
                held[i]
                    .path
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    }

    fn keep(days: u64) -> Retention {
        Retention {
            size: None,
            keep: Some(Duration::from_nanos(days * DAY)),
        }
    }

    #[test]
    fn a_file_goes_once_its_last_packet_is_older_than_keep_before_the_newest_held() {
        // A recorded file of days-old traffic, its names of today: by the packets' time.
        let run = "20261127T160000Z-1-";
        let files: Vec<Held> = (0..5)
            .map(|n| held(&format!("{run}{n:09}"), 10, Some((n + 1) * DAY)))
            .collect();
        let closed = format!("{run}000000003");
        // Newest held: day 4 (file 3); a file goes if its last packet is before day 2.
        assert_eq!(
            names(&files[..4], &closed, keep(2)),
            [format!("{run}000000000")]
        );
        // The newest packet held, not the file just closed, sets the limit: with file 4
        // indexed (day 5), files 0 and 1 are old; file 4, named after the file just
        // closed, is never a candidate.
        assert_eq!(names(&files, &closed, keep(2)).len(), 2);
        assert_eq!(names(&files, &closed, keep(1)).len(), 3);
        assert!(names(&files, &closed, keep(5)).is_empty());
    }

    #[test]
    fn older_traffic_named_later_goes_and_newer_traffic_named_earlier_stays() {
        // A store of today's traffic, then a recording of last week loaded into it.
        let today = held("20261127T160000Z-1-000000000", 10, Some(NAMED + DAY / 2));
        let old_a = held("20261128T090000Z-2-000000000", 10, Some(NAMED - 7 * DAY));
        let old_b = held("20261128T090000Z-2-000000001", 10, Some(NAMED - 6 * DAY));
        let files = [today, old_a, old_b];
        assert_eq!(
            names(&files, "20261128T090000Z-2-000000001", keep(1)),
            [
                "20261128T090000Z-2-000000000",
                "20261128T090000Z-2-000000001"
            ]
        );
        // The size budget deletes by the same order: the oldest traffic first, whatever
        // the names say.
        let budget = Retention {
            size: Some(20),
            keep: None,
        };
        assert_eq!(
            names(&files, "20261128T090000Z-2-000000001", budget),
            ["20261128T090000Z-2-000000000"]
        );
    }

    #[test]
    fn a_file_without_an_index_goes_by_its_name_or_when_it_was_written() {
        let indexed = held("20261127T160000Z-1-000000001", 10, Some(NAMED + 3 * DAY));
        // Named two days before the newest packet held, no index, write time unknown.
        let mut bare = held("20261127T160000Z-1-000000000", 10, None);
        assert_eq!(bare.time(), Some(NAMED));
        let files = [bare.clone(), indexed.clone()];
        assert_eq!(
            names(&files, "20261127T160000Z-1-000000001", keep(2)).len(),
            1
        );
        assert!(names(&files, "20261127T160000Z-1-000000001", keep(4)).is_empty());
        // Written later than its name says (a long run): the later time counts.
        bare.written = Some(NAMED + 2 * DAY);
        let files = [bare, indexed];
        assert!(names(&files, "20261127T160000Z-1-000000001", keep(2)).is_empty());
        // A name that is not a store's and no index: never old, only the budget deletes it.
        let foreign = held("notes", 10, None);
        assert_eq!(foreign.time(), None);
        let files = [foreign, held("x", 10, Some(NAMED))];
        assert!(names(&files, "x", keep(0)).is_empty());
    }

    #[test]
    fn the_file_being_written_is_never_deleted() {
        let run = "20261127T160000Z-1-";
        let files: Vec<Held> = (0..3)
            .map(|n| held(&format!("{run}{n:09}"), 100, Some(n * DAY)))
            .collect();
        let everything = Retention {
            size: Some(0),
            keep: Some(Duration::ZERO),
        };
        // File 2 is being written (file 1 was just closed).
        assert_eq!(
            names(&files, &format!("{run}000000001"), everything),
            [format!("{run}000000000"), format!("{run}000000001")]
        );
    }
}
