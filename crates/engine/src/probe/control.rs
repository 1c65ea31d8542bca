//! The control socket of a running probe and its client, `poolcap ctl`.
//!
//! A Unix stream socket; each connection carries one command line and gets one reply line,
//! starting `ok` or `error`. The socket is bound under a temporary name, given mode 0600
//! and only then renamed into place, so no other user can ever connect to it.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

/// How long a client may take to send its command.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// A bound control socket (removed on drop).
pub struct ControlSocket {
    path: PathBuf,
    listener: UnixListener,
}

impl ControlSocket {
    /// Creates the socket at `path` with mode 0600. Refuses to replace an existing file.
    pub fn bind(path: &Path) -> anyhow::Result<Self> {
        if path.symlink_metadata().is_ok() {
            anyhow::bail!(
                "--ctl {}: the file exists (another probe running? remove it if not)",
                path.display()
            );
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let listener = UnixListener::bind(&tmp)
            .with_context(|| format!("cannot create control socket {}", tmp.display()))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
            .and_then(|()| std::fs::rename(&tmp, path))
            .with_context(|| format!("cannot create control socket {}", path.display()))?;
        listener.set_nonblocking(true)?;
        Ok(Self {
            path: path.to_owned(),
            listener,
        })
    }

    /// Answers every client waiting now: `answer` maps a command line to the reply.
    pub fn serve_pending(&self, mut answer: impl FnMut(&str) -> String) {
        while let Ok((stream, _)) = self.listener.accept() {
            let _ = serve_one(stream, &mut answer);
        }
    }
}

fn serve_one(stream: UnixStream, answer: &mut impl FnMut(&str) -> String) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    let reply = answer(line.trim());
    (&stream).write_all(format!("{reply}\n").as_bytes())
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Sends one command to the probe at `socket` and returns its reply line.
pub fn send(socket: &Path, command: &str) -> anyhow::Result<String> {
    let stream = UnixStream::connect(socket)
        .with_context(|| format!("cannot connect to {}", socket.display()))?;
    stream.set_read_timeout(Some(Duration::from_secs(40)))?;
    (&stream).write_all(format!("{command}\n").as_bytes())?;
    let mut reply = String::new();
    BufReader::new(&stream)
        .read_line(&mut reply)
        .with_context(|| format!("no reply from {}", socket.display()))?;
    Ok(reply.trim_end().to_string())
}
