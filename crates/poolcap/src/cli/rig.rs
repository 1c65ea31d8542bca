//! `poolcap bench`, `poolcap sim`, `poolcap bench-peer` and `poolcap predict --validate`: the
//! measuring rig, the simulator and their figures are the `poolcap-bench` executable
//! (installed beside poolcap by `./dev install`), so the installed poolcap carries neither
//! them nor their plotting and progress-bar crates. These commands run it in poolcap's place
//! (same process, same signals) with the words typed after them, so habits and the commands
//! in BENCHMARKS.md keep working.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use anyhow::Context;
use clap::Args;
use poolcap_measure::scratch::BENCH_EXE;

/// The words after the command, passed to `poolcap-bench` unread.
#[derive(Debug, Args)]
#[command(disable_help_flag = true)]
pub struct RigArgs {
    /// poolcap-bench's arguments (see `poolcap-bench --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// `poolcap-bench` beside this executable, if it is there.
fn bench_exe() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("cannot find this executable")?;
    let bench = me.with_file_name(BENCH_EXE);
    if bench.is_file() {
        Ok(bench)
    } else {
        anyhow::bail!(
            "{} is not installed beside {} (./dev install, or cargo build --release -p poolcap-bench)",
            bench.display(),
            me.display()
        )
    }
}

/// Replaces this process with `poolcap-bench FIRST... ARGS...`; returns only on failure.
pub fn exec(first: &[&str], args: RigArgs) -> anyhow::Result<()> {
    exec_words(first.iter().map(OsString::from).chain(args.args))
}

/// Replaces this process with `poolcap-bench WORDS...`; returns only on failure.
pub fn exec_words(words: impl IntoIterator<Item = OsString>) -> anyhow::Result<()> {
    let bench = bench_exe()?;
    let err = Command::new(&bench).args(words).exec();
    Err(anyhow::Error::new(err).context(format!("cannot run {}", bench.display())))
}
