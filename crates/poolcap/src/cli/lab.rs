//! `poolcap lab` (placeholder, being written).

/// Arguments of `poolcap lab`.
#[derive(Debug, clap::Args)]
pub struct LabArgs {}

/// Runs `poolcap lab`.
pub fn run(_args: LabArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
