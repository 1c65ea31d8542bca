//! The `--report` file: each period's JSON lines are written whole or not at all. A period
//! that cannot be written (a full disk) is cut back out of the file, so the file always ends
//! with a whole line, and counted; the probe goes on, as a capture goes on when its `-w`
//! file's disk fills, and a later period that fits is written again (its records say how
//! many periods are missing before it). The first failure is said at once, the count at the
//! end, where it also makes the run fail.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::ProbeError;
use crate::outfile::{self, Existing};

/// Periods whose records could not be written to the report file.
#[derive(Debug, thiserror::Error)]
#[error("{unwritten} of {periods} periods could not be written to {}: {first_error}", path.display())]
pub struct Unwritten {
    /// The report file.
    pub path: PathBuf,
    /// Periods not written.
    pub unwritten: u64,
    /// Periods reported in all.
    pub periods: u64,
    /// Why the first one failed.
    pub first_error: String,
}

/// An open report file.
pub struct ReportFile {
    path: PathBuf,
    file: File,
    /// Length of the whole periods written so far.
    whole: u64,
    periods: u64,
    unwritten: u64,
    first_error: Option<String>,
}

impl ReportFile {
    /// Creates (empties) `path`, never through a symbolic link.
    pub fn create(path: &Path) -> Result<Self, ProbeError> {
        let file = outfile::create(path, Existing::Truncate)
            .map_err(|e| ProbeError::path("cannot write", path, e))?;
        Ok(Self {
            path: path.to_owned(),
            file,
            whole: 0,
            periods: 0,
            unwritten: 0,
            first_error: None,
        })
    }

    /// Periods not written so far.
    pub fn unwritten(&self) -> u64 {
        self.unwritten
    }

    /// Appends one period's lines, or none of them.
    pub fn write_period(&mut self, lines: &[u8]) {
        self.periods += 1;
        let written = self.file.write_all(lines);
        match written {
            Ok(()) => self.whole += lines.len() as u64,
            Err(e) => {
                // Cut what part of the period did fit, so the file ends with a whole line.
                let _ = self.file.set_len(self.whole);
                let _ = self.file.seek(SeekFrom::Start(self.whole));
                self.unwritten += 1;
                if self.first_error.is_none() {
                    log::error!(
                        "poolcap: {}: {e} (the probe goes on; periods not written are counted)",
                        self.path.display()
                    );
                    self.first_error = Some(e.to_string());
                }
            }
        }
    }

    /// At the end: an error if any period was not written.
    pub fn close(self) -> Result<(), Unwritten> {
        match self.first_error {
            None => Ok(()),
            Some(first_error) => Err(Unwritten {
                path: self.path,
                unwritten: self.unwritten,
                periods: self.periods,
                first_error,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_that_does_not_fit_is_cut_back_out_and_counted() {
        // /dev/full fails every write with ENOSPC: nothing is kept, each period counted.
        let full = Path::new("/dev/full");
        if !full.exists() {
            return;
        }
        let mut r = ReportFile::create(full).expect("open /dev/full");
        r.write_period(b"{\"a\":1}\n");
        r.write_period(b"{\"a\":2}\n");
        assert_eq!(r.unwritten(), 2);
        let e = r.close().expect_err("unwritten periods");
        assert_eq!((e.unwritten, e.periods), (2, 2));
        assert!(e.to_string().contains("No space left"), "{e}");

        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("r.jsonl");
        let mut r = ReportFile::create(&path).expect("create");
        r.write_period(b"{\"a\":1}\n{\"b\":1}\n");
        assert_eq!(r.unwritten(), 0);
        r.close().expect("all written");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "{\"a\":1}\n{\"b\":1}\n"
        );
    }
}
