//! Readiness for a service manager: under systemd's `Type=notify` (`$NOTIFY_SOCKET` set)
//! a capture, probe or forward says `READY=1` once every socket, ring and file is open and
//! its threads run, so units ordered after it start only when packets are being captured.
//!
//! The protocol (sd_notify(3)) is one datagram on a Unix socket; the socket is connected at
//! start, before privileges go, so the dropped user needs no access to its path.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The service manager's notification socket, if the process runs under one.
pub(super) struct Readiness(Option<UnixDatagram>);

impl Readiness {
    /// Connects to `$NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace); nothing
    /// to do without it.
    pub(super) fn connect() -> anyhow::Result<Self> {
        let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
            return Ok(Self(None));
        };
        let connect = || {
            let addr = match target.as_encoded_bytes().strip_prefix(b"@") {
                Some(name) => SocketAddr::from_abstract_name(name)?,
                None => SocketAddr::from_pathname(&target)?,
            };
            let socket = UnixDatagram::unbound()?;
            socket.connect_addr(&addr)?;
            Ok::<_, std::io::Error>(socket)
        };
        connect()
            .map(|s| Self(Some(s)))
            .map_err(|e| anyhow::anyhow!("NOTIFY_SOCKET {}: {e}", target.to_string_lossy()))
    }

    /// Tells the service manager the process is ready; a failure is only warned about (the
    /// capture itself runs).
    pub(super) fn ready(&self) {
        if let Some(socket) = &self.0 {
            if let Err(e) = socket.send(b"READY=1\n") {
                log::warn!("warning: cannot notify the service manager: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_is_one_datagram_on_the_connected_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).expect("bind");
        let socket = UnixDatagram::unbound().expect("socket");
        socket.connect(&path).expect("connect");
        Readiness(Some(socket)).ready();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"READY=1\n");
    }
}
