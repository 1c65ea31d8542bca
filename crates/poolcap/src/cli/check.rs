//! `poolcap check` (being written).

/// Arguments of `poolcap check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {}

/// Runs `poolcap check`.
pub fn run(_args: CheckArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
