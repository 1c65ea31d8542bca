//! Telling the kernel which parts of a file are about to be read (`posix_fadvise(2)`
//! `POSIX_FADV_WILLNEED`), so that it queues their reads at once and the device works on
//! many of them together, where reading them one after the other waits for each in turn.
//! A hint: a failure changes no answer, only the speed.

use std::fs::File;
use std::os::fd::AsRawFd;

use crate::error::{enter, Result, SysError};

/// Starts reading `len` bytes of `file` from `offset` into the page cache, without waiting.
pub fn will_need(file: &File, offset: u64, len: u64) -> Result<()> {
    let what = || format!("{len} bytes at {offset}");
    enter("posix_fadvise(WILLNEED)", what)?;
    let (Ok(off), Ok(n)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Ok(());
    };
    // SAFETY: plain system call on an open descriptor `file` keeps alive; no memory passed.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), off, n, libc::POSIX_FADV_WILLNEED) };
    if rc != 0 {
        return Err(SysError {
            call: "posix_fadvise(WILLNEED)",
            what: what(),
            source: std::io::Error::from_raw_os_error(rc),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_on_a_file_is_taken_and_a_pipe_is_refused() {
        let exe = File::open(std::env::current_exe().unwrap()).unwrap();
        will_need(&exe, 4096, 8192).unwrap();
        let (r, _w) = std::io::pipe().unwrap();
        let pipe = File::from(std::os::fd::OwnedFd::from(r));
        let err = will_need(&pipe, 0, 1).unwrap_err();
        assert_eq!(err.errno(), Some(libc::ESPIPE), "{err}");
    }
}
