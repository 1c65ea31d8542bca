//! `poolcap gen` (being written).

/// Arguments of `poolcap gen`.
#[derive(Debug, clap::Args)]
pub struct GenArgs {}

/// Runs `poolcap gen`.
pub fn run(_args: GenArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
