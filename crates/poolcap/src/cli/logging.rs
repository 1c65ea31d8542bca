//! Messages about a run go through the `log` facade to one logger, installed by
//! [`install`] once the command line is parsed: the start-up lines, warnings and errors of
//! every crate of the workspace, and the records of the libraries it uses (librdkafka's, by
//! the Kafka exporter's client context). `-v`/`-q` choose how much is said, `--log-format`
//! how: `text`, each message on a line as a terminal has always shown it (a library's
//! prefixed with its name), or `json`, one object per line with the time, the level, the
//! source and the message, for a service's journal or a log collector.
//!
//! What is not a message about the run stays outside the logger: the status line and the
//! final accounting ([`say!`](crate::say)), printed as they are at any level and in any
//! format, and a command's results on standard output.
//!
//! The logger writes to stderr and drops a message it cannot write (a closed pipe), as
//! `say!` does: a lost message costs nothing, a lost capture costs its packets.

use std::io::Write;

use clap::{ArgAction, Args, ValueEnum};
use env_logger::fmt::Formatter;
use log::{LevelFilter, Record};

/// How log records are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One message per line, as on a terminal.
    #[default]
    Text,
    /// One JSON object per line: `time` (RFC 3339, UTC), `level`, `target`, `message`.
    Json,
}

/// `-v`, `-q` and `--log-format`, before the subcommand (`poolcap -q probe ...`); the
/// default says what a terminal has always shown, as text.
#[derive(Debug, Clone, Default, Args)]
pub struct LogArgs {
    /// Say more: -v adds debug messages, -vv trace messages.
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count, conflicts_with = "quiet")]
    verbose: u8,
    /// Say less: -q only warnings and errors, -qq only errors (the status line and the final
    /// accounting are still printed; a subcommand's own -q hides those).
    #[arg(short = 'q', long = "quiet", action = ArgAction::Count)]
    quiet: u8,
    /// How messages are written on stderr: text (as on a terminal) or json (one object per
    /// line with time, level, target and message, for services).
    #[arg(long, value_enum, default_value_t, global = true)]
    log_format: LogFormat,
}

impl LogArgs {
    /// The most detailed level let through.
    fn level(&self) -> LevelFilter {
        match (self.verbose, self.quiet) {
            (0, 0) => LevelFilter::Info,
            (1, _) => LevelFilter::Debug,
            (_, 0) => LevelFilter::Trace,
            (_, 1) => LevelFilter::Warn,
            _ => LevelFilter::Error,
        }
    }
}

/// Installs the process's logger (once; a second call changes nothing).
pub fn install(args: &LogArgs) {
    let mut builder = env_logger::Builder::new();
    builder
        .filter_level(args.level())
        .target(env_logger::Target::Stderr)
        .write_style(env_logger::WriteStyle::Never);
    match args.log_format {
        LogFormat::Text => builder.format(text),
        LogFormat::Json => builder.format(json),
    };
    let _ = builder.try_init();
}

/// A record as a terminal shows it: the message, after its library's name if it is not
/// poolcap's own.
fn text(buf: &mut Formatter, record: &Record<'_>) -> std::io::Result<()> {
    match source(record.target()) {
        None => writeln!(buf, "{}", record.args()),
        Some(library) => writeln!(buf, "{library}: {}", record.args()),
    }
}

/// A record as one JSON object on a line.
fn json(buf: &mut Formatter, record: &Record<'_>) -> std::io::Result<()> {
    let line = serde_json::json!({
        "time": buf.timestamp_millis().to_string(),
        "level": record.level().as_str().to_ascii_lowercase(),
        "target": record.target(),
        "message": record.args().to_string(),
    });
    writeln!(buf, "{line}")
}

/// The library a record comes from, None for poolcap's own crates.
fn source(target: &str) -> Option<&str> {
    let root = target.split("::").next().unwrap_or(target);
    (root != "poolcap" && !root.starts_with("poolcap_")).then_some(root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        log: LogArgs,
    }

    fn level(argv: &[&str]) -> LevelFilter {
        Cli::try_parse_from(std::iter::once("poolcap").chain(argv.iter().copied()))
            .expect("parses")
            .log
            .level()
    }

    #[test]
    fn v_and_q_move_the_level_from_info() {
        assert_eq!(level(&[]), LevelFilter::Info);
        assert_eq!(level(&["-v"]), LevelFilter::Debug);
        assert_eq!(level(&["-vv"]), LevelFilter::Trace);
        assert_eq!(level(&["-q"]), LevelFilter::Warn);
        assert_eq!(level(&["-qq"]), LevelFilter::Error);
        assert!(Cli::try_parse_from(["poolcap", "-v", "-q"]).is_err());
    }

    #[test]
    fn only_libraries_are_named_in_text() {
        assert_eq!(source("poolcap::cli::capture"), None);
        assert_eq!(source("poolcap_engine::capture"), None);
        assert_eq!(source("librdkafka"), Some("librdkafka"));
        assert_eq!(source("rdkafka::client"), Some("rdkafka"));
    }
}
