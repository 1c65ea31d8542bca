//! Command-line front end: one clap subcommand per tool, each in its own module with an
//! `Args` struct (what the user typed) and a `run` function. Only [`main`] turns errors into
//! exit codes: 2 for bad usage or input ([`UsageError`]), 1 for everything else.

use clap::{Parser, Subcommand};
use std::fmt;

pub mod bench;
pub mod capture;
pub mod check;
pub mod demo;
pub mod forward;
pub mod gen;
pub mod lab;
pub mod sim;

/// poolcap: lossless packet capture on commodity Linux, and the lab to prove it.
#[derive(Debug, Parser)]
#[command(name = "poolcap", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Capture packets with a ring-buffer pool per receive queue (tcpdump-like options).
    Capture(Box<capture::CaptureArgs>),
    /// Forward frames from one interface to another through the pool (an inline middlebox).
    Forward(Box<forward::ForwardArgs>),
    /// Run the self-contained demo: lab, capture, traffic, accounting, file check.
    Demo(demo::DemoArgs),
    /// Build, inspect or remove test hosts (network namespaces joined by veth pairs).
    Lab(lab::LabArgs),
    /// Send numbered UDP frames (or replay a capture) on an interface.
    Gen(gen::GenArgs),
    /// Check a capture file for loss, duplicates and reordering of generator frames.
    Check(check::CheckArgs),
    /// Benchmark poolcap against tcpdump, netsniff-ng, dumpcap and trafgen in a lab.
    Bench(bench::BenchArgs),
    /// Simulate n receive queues with the engine's policies in virtual time; sweeps to CSV+PNG.
    Sim(sim::SimArgs),
}

/// Bad usage or input: exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Shorthand: an `anyhow::Error` that maps to exit code 2.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// Runs the command line and returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if e.use_stderr() => {
            // One line, as for every other error; `--help` has the rest.
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or_default();
            eprintln!(
                "poolcap: {} (see --help)",
                first.trim_start_matches("error: ")
            );
            return 2;
        }
        Err(e) => {
            let _ = e.print();
            return 0;
        }
    };
    // Capture handles a closed `-w -` pipe as a write error (accounting still printed);
    // every other command ends quietly on a closed stdout, as C tools do.
    if !matches!(cli.command, Command::Capture(_)) {
        poolcap_sys::process::default_sigpipe();
    }
    let result = match cli.command {
        Command::Capture(a) => capture::run(*a),
        Command::Forward(a) => forward::run(*a),
        Command::Demo(a) => demo::run(a),
        Command::Lab(a) => lab::run(a),
        Command::Gen(a) => gen::run(a),
        Command::Check(a) => check::run(a),
        Command::Sim(a) => sim::run(a),
        Command::Bench(a) => bench::run(a),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("poolcap: {e:#}");
            if e.downcast_ref::<UsageError>().is_some() {
                2
            } else {
                1
            }
        }
    }
}
