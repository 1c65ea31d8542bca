//! `poolcap ctl SOCKET COMMAND...`: sends one command to a running probe and prints its
//! reply; an `error` reply exits non-zero.

use std::path::PathBuf;

use clap::Args;

/// Arguments of `poolcap ctl`.
#[derive(Debug, Args)]
#[command(
    after_help = "Commands: rule enable NAME, rule disable NAME, period DURATION, reload, status."
)]
pub struct CtlArgs {
    /// The probe's control socket (its --ctl).
    socket: PathBuf,
    /// Give up when the probe has not answered within this long.
    #[arg(long, default_value = "20s", value_parser = crate::units::parse_duration)]
    timeout: std::time::Duration,
    /// The command, e.g. `rule disable web`.
    #[arg(required = true, trailing_var_arg = true)]
    command: Vec<String>,
}

/// Runs `poolcap ctl`.
pub fn run(args: CtlArgs) -> anyhow::Result<()> {
    let reply = crate::probe::control::send(&args.socket, &args.command.join(" "), args.timeout)?;
    match reply.strip_prefix("error: ") {
        Some(e) => anyhow::bail!("{e}"),
        None => {
            println!("{reply}");
            Ok(())
        }
    }
}
