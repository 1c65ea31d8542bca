//! Creating the files a capture writes (packets, statistics) so that a symbolic link planted
//! in a shared directory such as /tmp cannot turn a root capture into a write to another file
//! (`capture.pcapng -> /etc/shadow`). The last path component is opened with `O_NOFOLLOW`;
//! a link there is refused with its own message rather than the kernel's "too many levels of
//! symbolic links".

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// How to treat what is already in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Empty it now.
    Truncate,
    /// Keep it until the caller truncates (a file written only at the end).
    Keep,
}

/// Opens `path` for writing, creating it (mode 0644 before umask), never through a symbolic
/// link.
pub fn create(path: &Path, existing: Existing) -> io::Result<File> {
    create_with(path, existing, 0)
}

/// [`create`] with more open flags (`O_DIRECT`).
pub fn create_with(path: &Path, existing: Existing, flags: i32) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(existing == Existing::Truncate)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | flags)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "it is a symbolic link; poolcap does not write through links (remove it or \
                     name the target)",
                )
            } else {
                e
            }
        })
}

/// Writes `bytes` as the whole of `path` ([`create`], so never through a link).
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    create(path, Existing::Truncate)?.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn refuses_a_symbolic_link_and_leaves_its_target_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep me").expect("victim");
        let link = dir.path().join("link.pcapng");
        std::os::unix::fs::symlink(&victim, &link).expect("symlink");
        let e = create(&link, Existing::Truncate).expect_err("a link must be refused");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&victim).expect("victim"), b"keep me");
        let e = write(&link, b"report").expect_err("a link must be refused");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&victim).expect("victim"), b"keep me");
    }

    #[test]
    fn keep_leaves_the_contents_until_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("stats.json");
        std::fs::write(&p, b"old").expect("old");
        drop(create(&p, Existing::Keep).expect("open"));
        assert_eq!(std::fs::read(&p).expect("read"), b"old");
        let mut f = create(&p, Existing::Truncate).expect("open");
        f.write_all(b"new").expect("write");
        assert_eq!(std::fs::read(&p).expect("read"), b"new");
    }
}
