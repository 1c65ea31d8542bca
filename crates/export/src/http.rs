//! Serves [`Metrics`] on `GET /metrics` from one thread that polls nonblocking sockets:
//! OpenMetrics text to scrapers that ask for it, the Prometheus text format to others.
//!
//! One thread with `poll(2)` (rustix) over std's sockets, and httparse for the request
//! head, rather than an HTTP server library: tiny_http, used before, had no timeouts, a
//! thread per connection and unbounded header buffers, and the async servers bring a
//! runtime; here every resource a client can claim is bounded, so the endpoint survives
//! the network it is exposed to:
//! - at most [`MAX_CONNECTIONS`] connections are open; a new one beyond that closes the
//!   oldest at once, so idle connections can neither keep a scrape out nor take the
//!   capture's file descriptors;
//! - a request head longer than [`MAX_HEAD`] bytes is answered 431 and closed, one that
//!   does not parse 400;
//! - a connection lives at most [`DEADLINE`] from its accept, reading the request and
//!   writing the reply included, and replies are written without blocking: a client that
//!   is slow or never reads holds only its own buffer, never the next scrape.
//!
//! The same server can answer other paths with a stream ([`Streams`]: the packet store's
//! `GET /query`): a thread of the caller's writes the whole reply into one end of a socket
//! pair and this thread relays it from the other end as the client takes it, so a reply
//! of any length is never held in memory; a relayed reply has no deadline (it lasts as
//! long as its data), and is still closed for a new connection beyond the limit.
//!
//! One request per connection (`Connection: close`). The socket is bound first
//! ([`Listener::bind`], before the capture starts, so a port in use is an error at once,
//! and before privileges are dropped, so a port below 1024 works), and served once the
//! engine's counters exist ([`MetricsServer::start`]), after the drop, so the serving
//! thread runs without privilege. Dropping the server wakes and joins its thread.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};

use crate::metrics::Metrics;
use crate::ExportError;

/// The content type of OpenMetrics text, as prometheus-client writes it.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of the Prometheus text format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The content type of other replies.
const PLAIN: &str = "text/plain; charset=utf-8";
/// Headers parsed in a request head.
const MAX_HEADERS: usize = 32;

/// Answers a GET of `target` (path and query string) other than `/metrics`: the end of a
/// socket pair that the route's own thread writes the whole HTTP reply to (status line,
/// headers, body; the end closes after it), or `None` for a path it does not serve.
pub type Streams = Arc<dyn Fn(&str) -> Option<UnixStream> + Send + Sync>;

/// What the server answers.
struct Routes {
    metrics: Option<Arc<Metrics>>,
    streams: Option<Streams>,
}

/// What a client may claim of the endpoint.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// Connections open at once (Prometheus needs one per scrape).
    connections: usize,
    /// The longest request head (request line and headers) read.
    head: usize,
    /// How long a connection may take, from its accept to the last byte of its reply.
    deadline: Duration,
}

/// The limits `--metrics` serves with.
const LIMITS: Limits = Limits {
    connections: MAX_CONNECTIONS,
    head: MAX_HEAD,
    deadline: DEADLINE,
};
/// Connections open at once.
pub const MAX_CONNECTIONS: usize = 32;
/// The longest request head read, in bytes.
pub const MAX_HEAD: usize = 8 * 1024;
/// How long a connection may take, from its accept to the last byte of its reply.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Parses `--metrics`: `PORT` or `:PORT` (loopback), or `ADDR:PORT` (`[V6]:PORT`, a name).
pub fn parse_listen(s: &str) -> Result<SocketAddr, ExportError> {
    parse_listen_for("--metrics", s)
}

/// Parses option `what`'s address as [`parse_listen`] does.
pub fn parse_listen_for(what: &'static str, s: &str) -> Result<SocketAddr, ExportError> {
    let bad = |why: String| ExportError::Address {
        what,
        addr: s.to_string(),
        why,
    };
    let port = s.strip_prefix(':').unwrap_or(s);
    if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
        let port: u16 = port
            .parse()
            .map_err(|_| bad("the port must be 0..65535".into()))?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    s.to_socket_addrs()
        .map_err(|e| bad(format!("give PORT or ADDR:PORT ({e})")))?
        .next()
        .ok_or_else(|| bad("resolves to no address".into()))
}

/// A running `/metrics` endpoint.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    /// Dropped to stop the serving thread (its end then reads end of file).
    stop: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
}

/// A bound `/metrics` socket, not serving yet.
pub struct Listener {
    socket: std::net::TcpListener,
    addr: SocketAddr,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Listener {
    /// Binds `addr` (port 0: any free port).
    pub fn bind(addr: SocketAddr) -> Result<Self, ExportError> {
        let err = |e: std::io::Error| ExportError::Listen {
            addr,
            why: e.to_string(),
        };
        let socket = std::net::TcpListener::bind(addr).map_err(err)?;
        let addr = socket.local_addr().map_err(err)?;
        Ok(Self { socket, addr })
    }

    /// The address it listens on (with the port the kernel chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl MetricsServer {
    /// Serves `metrics` on `listener` until dropped.
    pub fn start(listener: Listener, metrics: Arc<Metrics>) -> Result<Self, ExportError> {
        Self::start_with(listener, Some(metrics), None, LIMITS)
    }

    /// Serves `streams` (and `metrics` on `/metrics`, if given) on `listener` until dropped.
    pub fn start_streams(
        listener: Listener,
        metrics: Option<Arc<Metrics>>,
        streams: Streams,
    ) -> Result<Self, ExportError> {
        Self::start_with(listener, metrics, Some(streams), LIMITS)
    }

    fn start_with(
        listener: Listener,
        metrics: Option<Arc<Metrics>>,
        streams: Option<Streams>,
        limits: Limits,
    ) -> Result<Self, ExportError> {
        let Listener { socket, addr } = listener;
        let err = |e: std::io::Error| ExportError::Listen {
            addr,
            why: e.to_string(),
        };
        socket.set_nonblocking(true).map_err(err)?;
        let (stop, stopped) = UnixStream::pair().map_err(err)?;
        let routes = Routes { metrics, streams };
        let thread = std::thread::Builder::new()
            .name("http".into())
            .spawn(move || serve(&socket, &stopped, &routes, limits))
            .map_err(err)?;
        Ok(Self {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address it listens on (with the port the kernel chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Where a connection is.
enum Stage {
    /// Reading the request head: what came so far.
    Reading(Vec<u8>),
    /// Writing the reply: all of it, and how much is written.
    Writing(Vec<u8>, usize),
    /// Relaying a streamed reply: its source, and what was read from it and how much of
    /// that is written.
    Relaying(UnixStream, Vec<u8>, usize),
}

/// A reply.
enum Reply {
    Whole(Vec<u8>),
    Stream(UnixStream),
}

/// One client's connection.
struct Connection {
    stream: TcpStream,
    accepted: Instant,
    stage: Stage,
}

impl Connection {
    /// The socket it waits on, and for what.
    fn poll_fd(&self) -> PollFd<'_> {
        match &self.stage {
            Stage::Reading(_) => PollFd::new(&self.stream, PollFlags::IN),
            Stage::Writing(..) => PollFd::new(&self.stream, PollFlags::OUT),
            Stage::Relaying(_, buf, sent) if *sent < buf.len() => {
                PollFd::new(&self.stream, PollFlags::OUT)
            }
            Stage::Relaying(source, ..) => PollFd::new(source, PollFlags::IN),
        }
    }

    /// Whether it relays a stream (which has no deadline).
    fn relaying(&self) -> bool {
        matches!(self.stage, Stage::Relaying(..))
    }

    /// Relays what the source has and the client takes now; false once done.
    fn relay(&mut self) -> bool {
        let Stage::Relaying(source, buf, sent) = &mut self.stage else {
            return false;
        };
        loop {
            while *sent < buf.len() {
                match self.stream.write(&buf[*sent..]) {
                    Ok(0) => return false,
                    Ok(n) => *sent += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return false,
                }
            }
            buf.resize(1 << 16, 0);
            *sent = 0;
            match source.read(buf) {
                Ok(0) => {
                    let _ = self.stream.shutdown(Shutdown::Write);
                    return false;
                }
                Ok(n) => buf.truncate(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    buf.clear();
                    return true;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => buf.clear(),
                Err(_) => return false,
            }
        }
    }

    /// Reads and writes what the socket takes now, without blocking; false once it is done
    /// (replied, failed, or closed by the client).
    fn advance(&mut self, routes: &Routes, max_head: usize) -> bool {
        if self.relaying() {
            return self.relay();
        }
        if let Stage::Reading(head) = &mut self.stage {
            let mut chunk = [0u8; 4096];
            let mut eof = false;
            while head.len() <= max_head {
                let room = (max_head + 1 - head.len()).min(chunk.len());
                match self.stream.read(&mut chunk[..room]) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => head.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return false,
                }
            }
            match respond(head, max_head, routes) {
                Some(Reply::Whole(reply)) => self.stage = Stage::Writing(reply, 0),
                Some(Reply::Stream(source)) => {
                    if source.set_nonblocking(true).is_err() {
                        return false;
                    }
                    self.stage = Stage::Relaying(source, Vec::new(), 0);
                    return self.relay();
                }
                None => return !eof,
            }
        }
        if let Stage::Writing(reply, sent) = &mut self.stage {
            while *sent < reply.len() {
                match self.stream.write(&reply[*sent..]) {
                    Ok(0) => return false,
                    Ok(n) => *sent += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return false,
                }
            }
            let _ = self.stream.shutdown(Shutdown::Write);
        }
        false
    }
}

/// The serving thread: polls the stop signal, the listener and the open connections until
/// the stop signal comes.
fn serve(listener: &TcpListener, stopped: &UnixStream, routes: &Routes, limits: Limits) {
    // Oldest first: the first to reach its deadline, the first closed for a new one.
    let mut open: VecDeque<Connection> = VecDeque::new();
    loop {
        let now = Instant::now();
        open.retain(|c| c.relaying() || now < c.accepted + limits.deadline);
        let timeout = open
            .iter()
            .find(|c| !c.relaying())
            .and_then(|c| Timespec::try_from((c.accepted + limits.deadline) - now).ok());
        let mut fds = Vec::with_capacity(open.len() + 2);
        fds.push(PollFd::new(stopped, PollFlags::IN));
        fds.push(PollFd::new(listener, PollFlags::IN));
        fds.extend(open.iter().map(Connection::poll_fd));
        if poll(&mut fds, timeout.as_ref()).is_err() {
            // EINTR, or ENOMEM for the moment: the deadlines are checked again above.
            continue;
        }
        let ready: Vec<PollFlags> = fds.iter().map(PollFd::revents).collect();
        drop(fds);
        if !ready[0].is_empty() {
            return;
        }
        open = open
            .into_iter()
            .zip(&ready[2..])
            .filter_map(|(mut c, r)| (r.is_empty() || c.advance(routes, limits.head)).then_some(c))
            .collect();
        if !ready[1].is_empty() {
            accept(listener, &mut open, limits.connections);
        }
    }
}

/// Takes the connections waiting (at most `max` in a row, so a flood cannot hold the
/// thread); beyond `max` open, each new one closes the oldest.
fn accept(listener: &TcpListener, open: &mut VecDeque<Connection>, max: usize) {
    for _ in 0..max {
        match listener.accept() {
            Ok((stream, _)) => {
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                if open.len() >= max {
                    open.pop_front();
                }
                open.push_back(Connection {
                    stream,
                    accepted: Instant::now(),
                    stage: Stage::Reading(Vec::new()),
                });
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::Interrupted | ErrorKind::ConnectionAborted
                ) => {}
            Err(_) => {
                // Out of file descriptors or memory: the client waits in the kernel's
                // queue; give the rest of the process a moment rather than spin on it.
                std::thread::sleep(Duration::from_millis(100));
                return;
            }
        }
    }
}

/// The reply to a request head read so far (at most `max_head` + 1 bytes), or `None`
/// while it is incomplete.
fn respond(head: &[u8], max_head: usize, routes: &Routes) -> Option<Reply> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    Some(Reply::Whole(match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => return Some(route(&req, routes)),
        Ok(httparse::Status::Partial) if head.len() <= max_head => return None,
        Ok(httparse::Status::Partial) | Err(httparse::Error::TooManyHeaders) => reply(
            "431 Request Header Fields Too Large",
            PLAIN,
            "poolcap: the request head is too large\n".into(),
        ),
        Err(e) => reply("400 Bad Request", PLAIN, format!("poolcap: {e}\n")),
    }))
}

/// The reply to a complete request.
fn route(req: &httparse::Request<'_, '_>, routes: &Routes) -> Reply {
    let target = req.path.unwrap_or_default();
    let path = target.split('?').next().unwrap_or_default();
    let metrics = match (&routes.metrics, &routes.streams) {
        (Some(m), _) if req.method == Some("GET") && path == "/metrics" => m,
        (_, Some(streams)) if req.method == Some("GET") => match streams(target) {
            Some(s) => return Reply::Stream(s),
            None => return Reply::Whole(not_found()),
        },
        _ => return Reply::Whole(not_found()),
    };
    // OpenMetrics for scrapers that ask for it (Prometheus does), the Prometheus text format
    // for everyone else.
    let openmetrics = req.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("accept")
            && String::from_utf8_lossy(h.value).contains("application/openmetrics-text")
    });
    Reply::Whole(if openmetrics {
        reply("200 OK", OPENMETRICS, metrics.encode())
    } else {
        reply("200 OK", PROMETHEUS_TEXT, metrics.encode_prometheus_text())
    })
}

fn not_found() -> Vec<u8> {
    reply(
        "404 Not Found",
        PLAIN,
        "poolcap serves metrics on /metrics (and, with a store, packets on /query)\n".into(),
    )
}

/// A whole HTTP reply; the connection closes after it.
fn reply(status: &str, kind: &str, body: String) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body.as_bytes());
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `request` on a new connection and reads the whole reply. The read timeout is
    /// a hang guard.
    fn exchange(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // The server may close before it has read all of a refused request.
        let _ = s.write_all(request);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    fn get(addr: SocketAddr, path: &str, accept: &str) -> String {
        exchange(
            addr,
            format!("GET {path} HTTP/1.0\r\nHost: x\r\nAccept: {accept}\r\n\r\n").as_bytes(),
        )
    }

    fn server(limits: Limits) -> MetricsServer {
        let m = Arc::new(Metrics::new(
            "af_packet",
            || {
                vec![crate::metrics::QueueSample {
                    captured: 42,
                    ..Default::default()
                }]
            },
            Vec::new(),
        ));
        let listener = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        MetricsServer::start_with(listener, Some(m), None, limits).unwrap()
    }

    fn status(reply: &str) -> &str {
        reply.lines().next().unwrap_or_default()
    }

    #[test]
    fn a_head_too_large_gets_431_and_a_malformed_one_400() {
        let server = server(LIMITS);
        let huge = format!(
            "GET /metrics HTTP/1.1\r\nX-Huge: {}\r\n\r\n",
            "a".repeat(1 << 20)
        );
        let r = exchange(server.addr(), huge.as_bytes());
        assert_eq!(
            status(&r),
            "HTTP/1.1 431 Request Header Fields Too Large",
            "{r}"
        );
        let r = exchange(server.addr(), b"NOT HTTP\r\n\r\n");
        assert!(status(&r).starts_with("HTTP/1.1 400 "), "{r}");
        // A head just below the limit is served.
        let fill = "a".repeat(MAX_HEAD - 100);
        let r = exchange(
            server.addr(),
            format!("GET /metrics HTTP/1.1\r\nX-Fill: {fill}\r\n\r\n").as_bytes(),
        );
        assert_eq!(status(&r), "HTTP/1.1 200 OK", "{r}");
    }

    #[test]
    fn idle_connections_beyond_the_cap_close_the_oldest_and_a_scrape_answers() {
        let server = server(LIMITS);
        let idle: Vec<TcpStream> = (0..3 * MAX_CONNECTIONS)
            .map(|_| TcpStream::connect(server.addr()).unwrap())
            .collect();
        let mut stalled = TcpStream::connect(server.addr()).unwrap();
        stalled.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let r = get(server.addr(), "/metrics", "*/*");
        assert_eq!(status(&r), "HTTP/1.1 200 OK", "{r}");
        // The oldest idle connection was closed: it reads end of file, not a timeout.
        let mut first = &idle[0];
        first
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(first.read(&mut [0; 16]).unwrap(), 0);
    }

    #[test]
    fn a_connection_is_closed_at_its_deadline() {
        let server = server(Limits {
            deadline: Duration::from_millis(300),
            ..LIMITS
        });
        let mut idle = TcpStream::connect(server.addr()).unwrap();
        idle.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
        // A hang guard well above the deadline.
        idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(idle.read(&mut [0; 16]).unwrap(), 0);
        let r = get(server.addr(), "/metrics", "*/*");
        assert_eq!(status(&r), "HTTP/1.1 200 OK", "{r}");
    }

    #[test]
    fn listen_addresses_default_to_loopback() {
        assert_eq!(
            parse_listen("9100").unwrap(),
            "127.0.0.1:9100".parse().unwrap()
        );
        assert_eq!(
            parse_listen(":9100").unwrap(),
            "127.0.0.1:9100".parse().unwrap()
        );
        assert_eq!(
            parse_listen("0.0.0.0:80").unwrap(),
            "0.0.0.0:80".parse().unwrap()
        );
        assert_eq!(
            parse_listen("[::1]:80").unwrap(),
            "[::1]:80".parse().unwrap()
        );
        for bad in ["", "99999", "host.invalid:80", "1.2.3.4"] {
            let e = parse_listen(bad).unwrap_err().to_string();
            assert!(e.starts_with("--metrics"), "{bad}: {e}");
        }
    }

    #[test]
    fn serves_metrics_and_refuses_a_port_in_use() {
        let server = server(LIMITS);
        let body = get(
            server.addr(),
            "/metrics",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        );
        assert!(body.contains("application/openmetrics-text"), "{body}");
        assert!(body.ends_with("# EOF\n"), "{body}");
        let plain = get(server.addr(), "/metrics", "*/*");
        assert!(plain.contains("text/plain; version=0.0.4"), "{plain}");
        assert!(
            plain.contains("# TYPE poolcap_packets_captured_total counter"),
            "{plain}"
        );
        assert!(
            body.contains("poolcap_packets_captured_total{queue=\"0\"} 42"),
            "{body}"
        );
        let other = get(server.addr(), "/", "*/*");
        assert!(
            other.lines().next().unwrap_or_default().contains(" 404"),
            "{other}"
        );
        let e = Listener::bind(server.addr()).unwrap_err().to_string();
        assert!(
            e.contains("cannot listen on") && e.contains(&server.addr().to_string()),
            "{e}"
        );
    }
}
