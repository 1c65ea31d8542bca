//! Serves [`Metrics`] as OpenMetrics text on `GET /metrics`, from one thread (tiny_http).
//!
//! The socket is bound first ([`Listener::bind`], before the capture starts, so a port in
//! use is an error at once, and before privileges are dropped, so a port below 1024 works),
//! and served once the engine's counters exist ([`MetricsServer::start`]). tiny_http starts
//! its own threads when its server is made, so it is made only then: after the drop, so
//! those threads too run without privilege. Dropping the server unblocks and joins its
//! thread.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::metrics::Metrics;
use crate::ExportError;

/// The content type of OpenMetrics text, as prometheus-client writes it.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of the Prometheus text format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Parses `--metrics`: `PORT` or `:PORT` (loopback), or `ADDR:PORT` (`[V6]:PORT`, a name).
pub fn parse_listen(s: &str) -> Result<SocketAddr, ExportError> {
    let bad = |why: String| ExportError::Address {
        what: "--metrics",
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
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.addr)
            .finish()
    }
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
        let Listener { socket, addr } = listener;
        let server =
            tiny_http::Server::from_listener(socket, None).map_err(|e| ExportError::Listen {
                addr,
                why: e.to_string(),
            })?;
        let server = Arc::new(server);
        let s = Arc::clone(&server);
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || serve(&s, &metrics))
            .map_err(|e| ExportError::Listen {
                addr,
                why: e.to_string(),
            })?;
        Ok(Self {
            server,
            addr,
            thread: Some(thread),
        })
    }

    /// The address it listens on (with the port the kernel chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

fn serve(server: &tiny_http::Server, metrics: &Metrics) {
    // `incoming_requests` ends when the server is unblocked.
    for req in server.incoming_requests() {
        let path = req.url().split('?').next().unwrap_or_default();
        let resp = if path == "/metrics" && *req.method() == tiny_http::Method::Get {
            // OpenMetrics for scrapers that ask for it (Prometheus does), the Prometheus
            // text format for everyone else.
            let openmetrics = req.headers().iter().any(|h| {
                h.field.equiv("Accept") && h.value.as_str().contains("application/openmetrics-text")
            });
            let (body, kind) = if openmetrics {
                (metrics.encode(), OPENMETRICS)
            } else {
                (metrics.encode_prometheus_text(), PROMETHEUS_TEXT)
            };
            let r = tiny_http::Response::from_string(body);
            match tiny_http::Header::from_bytes("Content-Type", kind) {
                Ok(h) => r.with_header(h),
                Err(()) => r,
            }
        } else {
            tiny_http::Response::from_string("poolcap serves metrics on /metrics\n")
                .with_status_code(404)
        };
        // A scraper that went away is its own problem.
        let _ = req.respond(resp);
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn get(addr: SocketAddr, path: &str, accept: &str) -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.0\r\nHost: x\r\nAccept: {accept}\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
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
        let m = Arc::new(Metrics::new(
            || {
                vec![crate::metrics::QueueSample {
                    captured: 42,
                    ..Default::default()
                }]
            },
            Vec::new(),
        ));
        let listener = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let server = MetricsServer::start(listener, m).unwrap();
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
