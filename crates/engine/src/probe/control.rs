//! The control socket of a running probe and its client, `poolcap ctl`.
//!
//! A Unix stream socket; each connection carries one command line and gets one reply line,
//! starting `ok` or `error`. The socket is bound in a new private directory, given mode
//! 0600 and only then renamed into place, so no other user can ever connect to it or swap
//! it for a link. A socket left
//! at the path by a probe that could not remove it (killed, or running as `-Z`'s user in a
//! directory only root may change) is replaced once a connection shows nothing listens.
//!
//! Clients are served off the thread that ends periods: an accept thread hands each
//! connection to a thread of its own (at most [`MAX_CLIENTS`] at once, the rest wait in the
//! listen backlog), which reads the command line within `CLIENT_TIMEOUT` and only then
//! passes it to the manager as a [`Request`]. A client that connects and says nothing
//! therefore delays no period, report or stop.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::ProbeError;

/// How long a client may take to send its command, and to take its reply.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// Clients served at once; more wait in the listen backlog until one is done.
pub const MAX_CLIENTS: usize = 64;

/// The longest command line read.
const MAX_LINE: u64 = 4096;

/// How often the accept thread looks for a connection and for the stop.
const ACCEPT_TICK: Duration = Duration::from_millis(10);

/// How long a client thread waits for the manager's reply (a change waits for every
/// worker's tally, bounded by the reporter's own timeout).
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// A bound control socket (removed on drop).
pub struct ControlSocket {
    path: PathBuf,
    listener: UnixListener,
}

impl ControlSocket {
    /// Creates the socket at `path` with mode 0600. A socket already there is replaced if
    /// nothing listens on it; a live one, or any other kind of file, is refused.
    pub fn bind(path: &Path) -> Result<Self, ProbeError> {
        clear_stale(path)?;
        // Bound and made 0600 in a directory of our own (mode 0700, made new: never an
        // existing one or a link), so no one can swap the socket for a link between the
        // bind and the chmod; then renamed into place.
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let private = parent.join(format!(".poolcap-ctl.{}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&private)
            .map_err(|e| ProbeError::path("cannot create", &private, e))?;
        let tmp = private.join("ctl.sock");
        let bound = UnixListener::bind(&tmp).and_then(|listener| {
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
            std::fs::rename(&tmp, path)?;
            Ok(listener)
        });
        let _ = std::fs::remove_file(&tmp);
        let _ = std::fs::remove_dir(&private);
        let listener =
            bound.map_err(|e| ProbeError::path("cannot create control socket", path, e))?;
        listener.set_nonblocking(true)?;
        Ok(Self {
            path: path.to_owned(),
            listener,
        })
    }

    /// Starts serving clients on threads of their own; their commands arrive at the
    /// returned server's [`pending`](ControlServer::pending).
    pub fn serve(self) -> std::io::Result<ControlServer> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("probe-ctl".into())
            .spawn(move || self.accept_until(&stopping, &tx))?;
        Ok(ControlServer {
            requests: rx,
            stop,
            thread: Some(thread),
        })
    }

    fn accept_until(self, stop: &AtomicBool, requests: &Sender<Request>) {
        let busy = Arc::new(AtomicUsize::new(0));
        while !stop.load(Ordering::Relaxed) {
            if busy.load(Ordering::Acquire) >= MAX_CLIENTS {
                std::thread::sleep(ACCEPT_TICK);
                continue;
            }
            let Ok((stream, _)) = self.listener.accept() else {
                std::thread::sleep(ACCEPT_TICK);
                continue;
            };
            busy.fetch_add(1, Ordering::AcqRel);
            let (done, requests) = (Arc::clone(&busy), requests.clone());
            let spawned = std::thread::Builder::new()
                .name("probe-ctl-client".into())
                .spawn(move || {
                    let _ = serve_one(stream, &requests);
                    done.fetch_sub(1, Ordering::AcqRel);
                });
            if spawned.is_err() {
                // No thread for it: the client sees its connection close.
                busy.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// Removes a socket at `path` that nothing listens on; refuses a live one or another file.
fn clear_stale(path: &Path) -> Result<(), ProbeError> {
    let Ok(meta) = path.symlink_metadata() else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(ProbeError::Control(format!(
            "--ctl {}: the file exists and is not a socket (remove it or choose another path)",
            path.display()
        )));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(ProbeError::Control(format!(
            "--ctl {}: another probe is listening on it (stop it or choose another path)",
            path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => std::fs::remove_file(path)
            .map_err(|e| ProbeError::path("cannot remove stale control socket", path, e)),
        Err(e) => Err(ProbeError::Control(format!(
            "--ctl {}: cannot tell whether the socket there is in use: {e}",
            path.display()
        ))),
    }
}

/// One client's command, waiting for the manager's reply.
pub struct Request {
    /// The command line, trimmed.
    pub line: String,
    reply: SyncSender<String>,
}

impl Request {
    /// Sends `reply` to the client (dropped if it has gone).
    pub fn answer(self, reply: String) {
        let _ = self.reply.send(reply);
    }
}

/// The clients' commands; stops accepting and removes the socket on drop.
pub struct ControlServer {
    requests: Receiver<Request>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// The commands that arrived since the last call, without waiting.
    pub fn pending(&self) -> impl Iterator<Item = Request> + '_ {
        self.requests.try_iter()
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve_one(stream: UnixStream, requests: &Sender<Request>) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut line = String::new();
    BufReader::new((&stream).take(MAX_LINE)).read_line(&mut line)?;
    if line.is_empty() {
        // Closed without a word (also a probe testing whether this one is alive).
        return Ok(());
    }
    let (tx, rx) = mpsc::sync_channel(1);
    let reply = match requests.send(Request {
        line: line.trim().to_string(),
        reply: tx,
    }) {
        Ok(()) => rx
            .recv_timeout(REPLY_TIMEOUT)
            .unwrap_or_else(|_| "error: the probe is stopping".into()),
        Err(_) => "error: the probe is stopping".into(),
    };
    (&stream).write_all(format!("{reply}\n").as_bytes())
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Sends one command to the probe at `socket` and returns its reply line; gives up after
/// `timeout` (a probe that is stopped, or stuck, answers nothing).
pub fn send(socket: &Path, command: &str, timeout: Duration) -> Result<String, ProbeError> {
    let (tx, rx) = mpsc::channel();
    let (path, line) = (socket.to_owned(), format!("{command}\n"));
    // connect(2) on a Unix socket whose backlog is full waits without a timeout, so the
    // whole exchange runs on a thread of its own.
    std::thread::Builder::new()
        .name("ctl".into())
        .spawn(move || {
            let _ = tx.send(exchange(&path, &line, timeout));
        })?;
    rx.recv_timeout(timeout).unwrap_or_else(|_| {
        Err(ProbeError::Control(format!(
            "no reply from {} within {timeout:?} (is the probe running?)",
            socket.display(),
        )))
    })
}

fn exchange(socket: &Path, line: &str, timeout: Duration) -> Result<String, ProbeError> {
    let stream = UnixStream::connect(socket)
        .map_err(|e| ProbeError::path("cannot connect to", socket, e))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    (&stream).write_all(line.as_bytes())?;
    let mut reply = String::new();
    BufReader::new(&stream)
        .read_line(&mut reply)
        .map_err(|e| ProbeError::path("no reply from", socket, e))?;
    if reply.is_empty() {
        return Err(ProbeError::Control(format!(
            "{} closed the connection without a reply",
            socket.display()
        )));
    }
    Ok(reply.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_socket_is_replaced_a_live_one_and_other_files_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ctl.sock");
        // A socket nobody listens on: what a killed probe leaves.
        drop(UnixListener::bind(&path).expect("bind"));
        assert!(path.exists());
        let live = ControlSocket::bind(&path).expect("a dead socket is replaced");
        let mode = std::fs::symlink_metadata(&path)
            .expect("socket")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").collect();
        assert_eq!(left.len(), 1, "only the socket: {left:?}");
        let e = ControlSocket::bind(&path)
            .err()
            .expect("a live socket is refused");
        assert!(e.to_string().contains("listening"), "{e}");
        drop(live);
        std::fs::write(&path, b"data").expect("file");
        let e = ControlSocket::bind(&path).err().expect("a file is refused");
        assert!(e.to_string().contains("not a socket"), "{e}");
        assert_eq!(std::fs::read(&path).expect("file"), b"data");
        std::fs::remove_file(&path).expect("rm");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &path).expect("link");
        let e = ControlSocket::bind(&path).err().expect("a link is refused");
        assert!(e.to_string().contains("not a socket"), "{e}");
    }

    #[test]
    fn idle_clients_do_not_hold_up_commands() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ctl.sock");
        let server = ControlSocket::bind(&path)
            .expect("bind")
            .serve()
            .expect("serve");
        let idle: Vec<UnixStream> = (0..20)
            .map(|_| UnixStream::connect(&path).expect("idle client"))
            .collect();
        let answering = std::thread::spawn(move || {
            // The manager's side: answer each command as it comes.
            loop {
                let request = server.pending().next();
                if let Some(r) = request {
                    let reply = format!("ok {}", r.line);
                    r.answer(reply);
                    return server;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        // Hang guard: twenty idle clients served in turn would hold the command for
        // 20 x CLIENT_TIMEOUT = 40 s.
        let reply = send(&path, "status", Duration::from_secs(10)).expect("reply");
        assert_eq!(reply, "ok status");
        drop(answering.join().expect("manager"));
        assert!(!path.exists(), "the socket is removed with the server");
        drop(idle);
    }

    #[test]
    fn the_client_gives_up_on_a_silent_probe() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ctl.sock");
        // Bound and listening, but nobody accepts or answers.
        let _listener = UnixListener::bind(&path).expect("bind");
        let e = send(&path, "status", Duration::from_millis(300)).expect_err("no reply");
        assert!(e.to_string().contains("no reply"), "{e}");
    }
}
