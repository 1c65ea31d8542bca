//! The disk measurement of `poolcap calibrate` (`--disk-dir`): how fast the disk a capture
//! writes to takes a long write, past the page cache and through it
//! ([`poolcap_doctor::profile::Disk`]).
//!
//! Why both: poolcap writes its files with `O_DIRECT`, at the device's pace, while tcpdump,
//! dumpcap and `capture --buffered` write through the page cache, which takes the bytes at
//! memory speed until its dirty pages reach the kernel's limit and then holds the writer to
//! write-back's pace: on the development VM 783 MB/s over 12 GiB where the device took
//! 1.0-3.4 GB/s direct. A buffered write shorter than the dirty limit measures memory, not
//! the disk, so the buffered rate counts only from a write longer than the limit; each rate
//! is timed to the end of the file's `fsync`. The files are removed after each write.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use poolcap_doctor::profile::Disk;

/// Bytes of each write: the batch of poolcap's direct writer (the device's pace grows with
/// the write's size: `dd oflag=direct` here 1 MiB 1.0 GB/s, 4 MiB 1.8 GB/s).
const WRITE_BYTES: usize = 2 << 20;

/// Alignment of a direct write's memory, offset and length: the page size.
const ALIGN: usize = 4096;

/// What to measure.
#[derive(Debug, Clone)]
pub struct DiskOptions {
    /// The directory to write in (the file system capture files go to).
    pub dir: PathBuf,
    /// Bytes of each write (`None`: twice the dirty limit, at least 1 GiB).
    pub bytes: Option<u64>,
    /// The page cache's dirty limit, bytes ([`dirty_limit_bytes`]; `None`: not known).
    pub dirty_limit: Option<f64>,
    /// Each write stops after this long, whatever it has written.
    pub time_limit: Duration,
}

impl DiskOptions {
    /// The bytes each write makes.
    pub fn bytes(&self) -> u64 {
        self.bytes.unwrap_or_else(|| {
            let twice = self.dirty_limit.map_or(0.0, |l| 2.0 * l) as u64;
            twice.max(1 << 30)
        })
    }
}

/// Checks at once that `dir` takes a file (before minutes of measuring elsewhere).
pub fn check_dir(dir: &Path) -> anyhow::Result<()> {
    let path = scratch_file(dir);
    File::create(&path).with_context(|| format!("--disk-dir {}: cannot write", dir.display()))?;
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// Measures the disk under `opts.dir`; a rate that could not be measured is `None` and said
/// so on stderr.
pub fn measure(opts: &DiskOptions, stop: &AtomicBool) -> anyhow::Result<Disk> {
    let bytes = opts.bytes();
    let path = scratch_file(&opts.dir);
    let direct = match OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
    {
        Ok(f) => Some(timed(f, &path, bytes, opts.time_limit, stop)?),
        Err(e) => {
            log::info!(
                "calibrate: {} refuses direct I/O ({e}): no direct rate",
                opts.dir.display()
            );
            None
        }
    };
    let file = File::create(&path).with_context(|| format!("cannot write {}", path.display()))?;
    let buffered = timed(file, &path, bytes, opts.time_limit, stop)?;
    let past_limit = opts
        .dirty_limit
        .is_some_and(|limit| buffered.bytes as f64 > limit);
    if !past_limit {
        log::info!(
            "calibrate: the buffered write of {} MB did not pass the page cache's dirty limit \
             ({}): its rate is the cache's, not the disk's, and is not kept",
            buffered.bytes / 1_000_000,
            opts.dirty_limit
                .map_or("not known".to_owned(), |l| format!("{:.0} MB", l / 1e6))
        );
    }
    for (what, w) in [("direct", direct), ("buffered", Some(buffered))] {
        if let Some(w) = w {
            log::info!(
                "calibrate: disk {what}: {} MB in {:.2} s with fsync, {:.0} MB/s",
                w.bytes / 1_000_000,
                w.seconds,
                w.rate() / 1e6
            );
        }
    }
    Ok(Disk {
        dir: opts.dir.display().to_string(),
        direct_bytes_per_s: direct.map(|w| w.rate()),
        buffered_bytes_per_s: past_limit.then(|| buffered.rate()),
        dirty_limit_bytes: opts.dirty_limit,
    })
}

/// One timed write.
#[derive(Debug, Clone, Copy)]
struct Written {
    bytes: u64,
    seconds: f64,
}

impl Written {
    fn rate(self) -> f64 {
        self.bytes as f64 / self.seconds.max(1e-9)
    }
}

/// Writes `bytes` (whole writes of [`WRITE_BYTES`]) to `file`, at `path`, from memory
/// aligned for direct I/O, or for `limit` if that comes first, then syncs it and removes it.
fn timed(
    mut file: File,
    path: &Path,
    bytes: u64,
    limit: Duration,
    stop: &AtomicBool,
) -> anyhow::Result<Written> {
    let mut mem = vec![0u8; WRITE_BYTES + ALIGN];
    let at = mem.as_ptr().align_offset(ALIGN);
    let buf = &mut mem[at..at + WRITE_BYTES];
    // Bytes no file system stores as holes or compresses away.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in buf.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let start = Instant::now();
    let mut written = 0u64;
    let result = (|| {
        while written < bytes && start.elapsed() < limit {
            if stop.load(Ordering::Relaxed) {
                bail!("interrupted");
            }
            file.write_all(buf)?;
            written += WRITE_BYTES as u64;
        }
        file.sync_all()?;
        Ok(())
    })();
    let seconds = start.elapsed().as_secs_f64();
    drop(file);
    let _ = std::fs::remove_file(path);
    result.with_context(|| format!("cannot write {}", path.display()))?;
    Ok(Written {
        bytes: written,
        seconds,
    })
}

/// The file a measurement writes in `dir`.
fn scratch_file(dir: &Path) -> PathBuf {
    dir.join(format!("poolcap-calibrate-disk.{}", std::process::id()))
}

/// The dirty bytes at which the kernel begins to throttle a writer: midway between the
/// background limit (`vm.dirty_background_bytes`, else `vm.dirty_background_ratio`) and the
/// hard one (`vm.dirty_bytes`, else `vm.dirty_ratio`), the ratios of the memory it counts
/// as dirtyable, the free pages and those holding files (`MemFree`, `Active(file)`,
/// `Inactive(file)` of `/proc/meminfo`). `balance_dirty_pages` lets a writer run free below
/// that point and holds it to write-back's pace above it: poolcap writing 1514 B frames at
/// 229k pps through the page cache here (2026-11-27) had 2.2 GB dirty after 9 s and there
/// it stayed, with the limits at 1.5 and 3.0 GB.
pub fn dirty_limit_bytes() -> Option<f64> {
    let read = |p: &str| -> Option<f64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    let vm = |what: &str| {
        Some(Limit {
            bytes: read(&format!("/proc/sys/vm/{what}_bytes"))?,
            ratio: read(&format!("/proc/sys/vm/{what}_ratio"))?,
        })
    };
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    dirty_limit_of(vm("dirty_background")?, vm("dirty")?, &meminfo)
}

/// A dirty limit as the kernel takes it: bytes when set, else a percentage of the
/// dirtyable memory.
#[derive(Debug, Clone, Copy)]
struct Limit {
    bytes: f64,
    ratio: f64,
}

/// [`dirty_limit_bytes`] from the background and hard limits and `/proc/meminfo`'s text.
fn dirty_limit_of(background: Limit, hard: Limit, meminfo: &str) -> Option<f64> {
    let kib = |key: &str| -> Option<f64> {
        let line = meminfo.lines().find(|l| l.starts_with(key))?;
        line[key.len()..].split_whitespace().next()?.parse().ok()
    };
    let dirtyable = kib("MemFree:")? + kib("Active(file):")? + kib("Inactive(file):")?;
    let bytes = |l: Limit| {
        if l.bytes > 0.0 {
            l.bytes
        } else {
            dirtyable * 1024.0 * l.ratio / 100.0
        }
    };
    Some((bytes(background) + bytes(hard)) / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dirty_limit_is_midway_between_the_background_and_the_hard_one() {
        let meminfo = "MemTotal:       24684096 kB\nMemFree:          713368 kB\n\
                       Active(file):    8000000 kB\nInactive(file):  9286632 kB\n";
        let ratio = |ratio| Limit { bytes: 0.0, ratio };
        // 10% and 20% of 18M KiB dirtyable: midway, 15%.
        let got = dirty_limit_of(ratio(10.0), ratio(20.0), meminfo).unwrap();
        assert!((got - 18_000_000.0 * 1024.0 * 0.15).abs() < 1.0, "{got}");
        // Bytes, when set, stand for the ratio.
        let gib = Limit {
            bytes: 1073741824.0,
            ratio: 20.0,
        };
        let got = dirty_limit_of(ratio(10.0), gib, meminfo).unwrap();
        assert!((got - (18e6 * 1024.0 * 0.1 + 1073741824.0) / 2.0).abs() < 1.0);
        assert_eq!(dirty_limit_of(ratio(10.0), gib, "MemFree: 1 kB\n"), None);
        assert!(dirty_limit_bytes().is_some_and(|l| l > 0.0));
    }

    #[test]
    fn a_small_measurement_lands_and_a_write_within_the_dirty_limit_is_not_kept() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let opts = |limit: f64| DiskOptions {
            dir: dir.path().to_owned(),
            bytes: Some(16 << 20),
            dirty_limit: Some(limit),
            time_limit: Duration::from_secs(60),
        };
        let stop = AtomicBool::new(false);
        // A limit of 1 MiB: 16 MiB pass it, and both rates are kept.
        let d = measure(&opts(1048576.0), &stop).unwrap();
        assert!(d.direct_bytes_per_s.is_some_and(|r| r > 0.0), "{d:?}");
        assert!(d.buffered_bytes_per_s.is_some_and(|r| r > 0.0), "{d:?}");
        assert_eq!(d.dirty_limit_bytes, Some(1048576.0));
        assert_eq!(d.dir, dir.path().display().to_string());
        // A limit of 1 GiB: 16 MiB measured the page cache, not the disk.
        let d = measure(&opts(1073741824.0), &stop).unwrap();
        assert_eq!(d.buffered_bytes_per_s, None, "{d:?}");
        // Nothing left behind; an interrupted one stops with an error.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let stopped = AtomicBool::new(true);
        assert!(measure(&opts(1.0), &stopped).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // Twice the dirty limit by default, at least 1 GiB.
        assert_eq!(
            DiskOptions {
                bytes: None,
                ..opts(4e9)
            }
            .bytes(),
            8_000_000_000
        );
        assert_eq!(
            DiskOptions {
                bytes: None,
                ..opts(1e6)
            }
            .bytes(),
            1 << 30
        );
    }
}
