//! Command-line front end: one clap subcommand per tool, each in its own module with an
//! `Args` struct (what the user typed) and a `run` function. Only [`main`] turns errors into
//! exit codes: 2 for bad usage or input ([`UsageError`]), 1 for everything else.

use clap::{Parser, Subcommand};
use std::fmt;

pub mod calibrate;
pub mod capture;
pub mod check;
mod config_file;
pub mod ctl;
pub mod demo;
pub mod doctor;
pub mod export;
pub mod forward;
pub mod gen;
mod ifaces;
pub mod lab;
mod launch;
pub mod logging;
pub mod manual;
pub mod predict;
mod print;
pub mod privdrop;
pub mod probe;
pub mod query;
mod readiness;
pub mod rig;
pub mod statsfile;
pub mod store;

/// poolcap: lossless packet capture on commodity Linux, and the lab to prove it.
#[derive(Debug, Parser)]
#[command(name = "poolcap", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    log: logging::LogArgs,
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
    /// Benchmark poolcap against tcpdump, netsniff-ng, dumpcap and trafgen in a lab
    /// (runs poolcap-bench; `poolcap bench --help`).
    Bench(rig::RigArgs),
    /// Run probe rules (counts, flows, sizes, alerts) on live traffic or a file, per period.
    Probe(Box<probe::ProbeArgs>),
    /// Packets of a store (`capture --store`) matching a filter in a time window, as pcap.
    Query(query::QueryArgs),
    /// A packet store's status (time range, files, bytes, packets), or repair its indexes.
    Store(store::StoreArgs),
    /// Send a command to a running probe's control socket.
    Ctl(ctl::CtlArgs),
    /// Simulate n receive queues with the engine's policies in virtual time; sweeps to CSV+PNG
    /// (runs `poolcap-bench sim`).
    Sim(rig::RigArgs),
    /// Read (never change) the settings that decide capture loss; each finding with its fix.
    Doctor(doctor::DoctorArgs),
    /// Predict kernel and application loss of a capture from a calibrated profile.
    Predict(Box<predict::PredictArgs>),
    /// Measure this machine's per-stage capture costs (a lab, or -i IF) and save a profile.
    Calibrate(calibrate::CalibrateArgs),
    /// Print a manual page (roff) generated from these commands and options.
    Man(manual::ManArgs),
    /// Print a shell completion script (bash, zsh, fish, ...).
    Completions(manual::CompletionsArgs),
    /// Helpers `poolcap bench` runs as subjects (not a user feature).
    #[command(hide = true)]
    BenchPeer(rig::RigArgs),
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

/// A failure already reported on stderr when it happened: exit code 1, nothing more printed.
#[derive(Debug)]
pub struct Reported;

impl fmt::Display for Reported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("failure reported above")
    }
}

impl std::error::Error for Reported {}

/// A flag that becomes true when any of `signals` arrives (SIGINT and SIGTERM end a run,
/// SIGHUP reloads the probe's rules); the run polls it.
pub fn flag_on(signals: &[i32]) -> anyhow::Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for &sig in signals {
        signal_hook::flag::register(sig, std::sync::Arc::clone(&flag))?;
    }
    Ok(flag)
}

/// Makes `signals` wake `engine`'s supervisor (after their flags are raised: signal-hook
/// runs a signal's actions in the order they were registered). Should that fail, the
/// supervisor still sees the flags at its next look, so the run goes on.
pub fn ring_on(signals: &[i32], engine: &crate::capture::Engine) {
    for &sig in signals {
        let registered = engine
            .ringer()
            .and_then(|r| signal_hook::low_level::pipe::register(sig, r));
        if let Err(e) = registered {
            log::warn!("warning: signal {sig} is seen only at the next look ({e})");
        }
    }
}

/// Shorthand: an `anyhow::Error` that maps to exit code 2.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// Runs the command line and returns the process exit code.
pub fn main() -> i32 {
    let cli = match parse() {
        Ok(c) => c,
        Err(e) => return parse_exit_code("poolcap", &e),
    };
    logging::install(&cli.log);
    // Capture handles a closed `-w -` pipe as a write error (accounting still printed);
    // every other command ends quietly on a closed stdout, as C tools do.
    if !matches!(cli.command, Command::Capture(_) | Command::Probe(_)) {
        poolcap_sys::process::default_sigpipe();
    }
    let result = match cli.command {
        Command::Capture(a) => capture::run(*a),
        Command::Forward(a) => forward::run(*a),
        Command::Demo(a) => demo::run(a),
        Command::Lab(a) => lab::run(a),
        Command::Gen(a) => gen::run(a),
        Command::Check(a) => check::run(a),
        Command::Sim(a) => rig::exec(&["sim"], a),
        Command::Bench(a) => rig::exec(&[], a),
        Command::Probe(a) => probe::run(*a),
        Command::Ctl(a) => ctl::run(a),
        Command::Query(a) => query::run(a),
        Command::Store(a) => store::run(a),
        Command::Doctor(a) => doctor::run(a),
        Command::Predict(a) => predict::run(*a),
        Command::Calibrate(a) => calibrate::run(a),
        Command::Man(a) => manual::run_man(a),
        Command::Completions(a) => manual::run_completions(a),
        Command::BenchPeer(a) => rig::exec(&["peer"], a),
    };
    exit_code("poolcap", result)
}

/// The exit code of a command's `result`; an error is said on one line as `PROGRAM: ...`
/// (unless already [`Reported`]).
pub fn exit_code(program: &str, result: anyhow::Result<()>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(e) if e.downcast_ref::<Reported>().is_some() => 1,
        Err(e) => {
            log::error!("{program}: {}", one_line(&e));
            if let Some(Interrupted(sig)) = e.downcast_ref::<Interrupted>() {
                128 + sig
            } else if e.downcast_ref::<UsageError>().is_some() {
                2
            } else {
                1
            }
        }
    }
}

/// The command line, with `--version` naming libpcap's version too (it compiles every
/// filter), as tcpdump's does, and `capture --config FILE`'s settings under it.
fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let version = format!(
        "{}\n{}",
        env!("CARGO_PKG_VERSION"),
        poolcap_sys::libpcap::version()
    );
    let version: &'static str = Box::leak(version.into_boxed_str());
    let command = Cli::command().version(version);
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut matches = command.clone().try_get_matches_from(&argv)?;
    if let Some(("capture", given)) = matches.subcommand() {
        if let Some(path) = given.get_one::<std::path::PathBuf>("config") {
            let file_error = |msg: String| {
                clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("{msg}\n"))
            };
            let text = std::fs::read_to_string(path)
                .map_err(|e| file_error(format!("--config {}: {e}", path.display())))?;
            let capture = command
                .find_subcommand("capture")
                .expect("capture is a subcommand");
            let words = config_file::words(path, &text, capture, given).map_err(file_error)?;
            // The file's options go right after `capture`, its filter after the command
            // line's words (a capture takes the filter last).
            let at = argv
                .iter()
                .position(|a| a == "capture")
                .map_or(argv.len(), |i| i + 1);
            let mut merged = argv[..at].to_vec();
            merged.extend(words.options);
            merged.extend(argv[at..].iter().cloned());
            merged.extend(words.filter);
            matches = command.try_get_matches_from(merged)?;
        }
    }
    Cli::from_arg_matches(&matches)
}

/// A command ended early because it was asked to by signal N: exit code 128 + N, as a shell
/// reports a process the signal ended.
#[derive(Debug)]
pub struct Interrupted(pub i32);

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "interrupted by signal {}", self.0)
    }
}

impl std::error::Error for Interrupted {}

/// An error and its causes on one line, each cause once: many errors already print their
/// source in their own message (`call: No such device (os error 19)`), and printing the chain
/// as well would repeat it.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// The exit code of a command line clap did not accept: 2 for an error, said on one line as
/// `PROGRAM: ...`; 0 for `--help` and `--version`, printed.
pub fn parse_exit_code(program: &str, e: &clap::Error) -> i32 {
    if e.use_stderr() {
        crate::say!(
            "{program}: {} (see --help)",
            clap_message(&e.render().to_string())
        );
        2
    } else {
        let _ = e.print();
        0
    }
}

/// clap's error without the usage and help hints, on one line: its first paragraph, which
/// names what is wrong (the list of missing arguments included).
fn clap_message(rendered: &str) -> String {
    rendered
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
        .trim_start_matches("error: ")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_os_error_is_printed_once() {
        let os = std::io::Error::from_raw_os_error(libc::ENODEV);
        let e = anyhow::Error::new(poolcap_sys::SysError {
            call: "bind",
            what: "prb9".into(),
            source: os,
        })
        .context("cannot capture");
        assert_eq!(
            one_line(&e),
            "cannot capture: bind (prb9): No such device (os error 19)"
        );
    }

    #[test]
    fn a_missing_argument_is_named() {
        let e = Cli::try_parse_from(["poolcap", "capture"]).expect_err("no -i");
        let msg = clap_message(&e.render().to_string());
        assert!(
            msg.starts_with("the following required arguments were not provided:")
                && msg.contains("--interface"),
            "{msg}"
        );
    }
}
