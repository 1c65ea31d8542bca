//! `poolcap store DIR status|repair`: what a packet store holds, and rebuilding the
//! indexes it lacks (see `poolcap_engine::store`).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::cli::usage;
use crate::store::{show_time, Store};

/// What to do with the store.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Action {
    /// Time range held, files, bytes, index bytes, packets, files without a sound index.
    Status,
    /// Build the index of every file that has none, or a damaged or mismatched one.
    Repair,
}

/// Arguments of `poolcap store`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  poolcap store /var/lib/poolcap status
  poolcap store /var/lib/poolcap repair")]
pub struct StoreArgs {
    /// The store directory (`poolcap capture --store DIR`).
    dir: PathBuf,
    /// status or repair.
    #[arg(value_enum)]
    action: Action,
}

/// Runs `poolcap store`.
pub fn run(a: StoreArgs) -> anyhow::Result<()> {
    let store = Store::open(&a.dir).map_err(|e| usage(e.to_string()))?;
    match a.action {
        Action::Status => {
            let s = store.status()?;
            match s.held {
                Some((first, last)) => {
                    println!("held: {} to {}", show_time(first), show_time(last))
                }
                None => println!("held: no packets"),
            }
            println!("files: {}", s.files);
            println!("bytes: {}", s.bytes);
            println!("index bytes: {}", s.index_bytes);
            println!("packets: {}", s.packets);
            println!("unindexed: {}", s.unindexed.len());
            for (f, why) in &s.unindexed {
                println!("  {}: {why}", f.display());
            }
        }
        Action::Repair => {
            let done = store.repair()?;
            for (f, why) in &done {
                println!("indexed {} ({why})", f.display());
            }
            println!("{} indexes rebuilt", done.len());
        }
    }
    Ok(())
}
