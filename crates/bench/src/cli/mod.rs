//! `poolcap-bench`'s command line: a suite (or `all`, `report`, `export`) by default, and
//! the subcommands `sim`, `validate` and `peer`. Errors and exit codes as poolcap's
//! ([`poolcap::cli::exit_code`]): 2 for bad usage, 1 for everything else.

use clap::{Parser, Subcommand};

mod peer;
mod run;
mod sim;
mod validate;

/// poolcap-bench: poolcap's measuring rig, simulator and figures.
#[derive(Debug, Parser)]
#[command(
    name = "poolcap-bench",
    version,
    about,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    suite: run::BenchArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Simulate n receive queues with the engine's policies in virtual time; sweeps to CSV+PNG.
    Sim(Box<sim::SimArgs>),
    /// Predict every point of a bench result directory and compare with its measured loss.
    Validate(validate::ValidateArgs),
    /// Helpers the bench runs as subjects (not a user feature).
    #[command(hide = true)]
    Peer(peer::BenchPeerArgs),
}

/// Runs the command line and returns the process exit code.
pub(crate) fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return poolcap::cli::parse_exit_code("poolcap-bench", &e),
    };
    poolcap_sys::process::default_sigpipe();
    // The rig's messages (and the measuring crate's) go through the same logger as
    // poolcap's, at its default level.
    poolcap::cli::logging::install(&Default::default());
    let result = match cli.command {
        None => run::run(cli.suite),
        Some(Command::Sim(a)) => sim::run(*a),
        Some(Command::Validate(a)) => validate::run(a),
        Some(Command::Peer(a)) => peer::run(a),
    };
    poolcap::cli::exit_code("poolcap-bench", result)
}
