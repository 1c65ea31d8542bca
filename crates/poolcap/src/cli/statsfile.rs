//! The `--stats-json` file of `capture` and `forward`: opened (not emptied) before the engine
//! starts, so a bad path fails at once, before anything is captured, and the file is still
//! writable at the end, after privileges are dropped (`-Z`; it is handed to that user).

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use crate::cli::usage;
use crate::outfile::{self, Existing};

/// An open `--stats-json` file.
#[derive(Debug)]
pub struct StatsFile {
    path: PathBuf,
    file: File,
    created: bool,
}

impl StatsFile {
    /// Opens (creates if missing) `path` without following a symbolic link.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let created = std::fs::symlink_metadata(path).is_err();
        let file = outfile::create(path, Existing::Keep).map_err(|e| {
            usage(format!(
                "--stats-json: cannot write {}: {e}",
                path.display()
            ))
        })?;
        Ok(Self {
            path: path.to_owned(),
            file,
            created,
        })
    }

    /// The file's name.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file's contents with `report` as pretty JSON.
    pub fn write(mut self, report: &impl Serialize) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(report)? + "\n";
        self.file
            .set_len(0)
            .and_then(|()| self.file.write_all(text.as_bytes()))
            .with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// The engine never started: remove the file if this run created it.
    pub fn abandon(self) {
        if self.created {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
