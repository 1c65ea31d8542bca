//! The scratch directory of a measuring process: capture files and stats go there (not
//! tmpfs), and so does a copy of the poolcap executable under test. Children run the copy, so
//! a rebuild during a long run (others build on this machine too) neither breaks nor changes
//! what is measured.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;

/// Where every measuring process keeps its scratch directory.
const SCRATCH_ROOT: &str = "/var/tmp/poolcap-bench";

/// The rig's own executable, which `poolcap bench-peer` runs from beside poolcap.
pub const BENCH_EXE: &str = "poolcap-bench";

/// Creates this process's scratch directory with a copy of `poolcap` in it, and returns both
/// paths. A `poolcap-bench` beside `poolcap` is copied too, so the copy's `poolcap bench-peer`
/// finds it. The caller removes the directory ([`remove_scratch`]).
pub fn scratch_with(poolcap: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let scratch = Path::new(SCRATCH_ROOT).join(std::process::id().to_string());
    std::fs::create_dir_all(&scratch)
        .with_context(|| format!("cannot create {}", scratch.display()))?;
    let exe = scratch.join("poolcap");
    std::fs::copy(poolcap, &exe)
        .with_context(|| format!("cannot copy the poolcap executable {}", poolcap.display()))?;
    if let Some(bench) = poolcap.parent().map(|d| d.join(BENCH_EXE)) {
        if bench.is_file() {
            std::fs::copy(&bench, scratch.join(BENCH_EXE))
                .with_context(|| format!("cannot copy {}", bench.display()))?;
        }
    }
    Ok((scratch, exe))
}

/// [`scratch_with`] this executable (`poolcap calibrate`).
pub fn scratch_with_exe() -> anyhow::Result<(PathBuf, PathBuf)> {
    scratch_with(&std::env::current_exe().context("cannot find the poolcap executable")?)
}

/// Removes a scratch directory of [`scratch_with`], and the directory above it once no
/// other measuring process has one there.
pub fn remove_scratch(scratch: &Path) {
    let _ = std::fs::remove_dir_all(scratch);
    let _ = std::fs::remove_dir(SCRATCH_ROOT);
}

/// UTC date and time as `YYYYMMDD-HHMMSS`.
pub fn timestamp(unix_secs: u64) -> String {
    let (days, secs) = (unix_secs / 86_400, unix_secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
