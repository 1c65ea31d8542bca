//! `poolcap query`: the packets of a store that match a tcpdump filter in a time window,
//! as one pcap stream (see `poolcap_engine::store::query`).

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use poolcap_export::http::{Listener, MetricsServer, Streams};

use crate::cli::usage;
use crate::store::query::{Query, QueryError};
use crate::store::Store;

/// Arguments of `poolcap query`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  poolcap query /var/lib/poolcap 'host 10.1.2.3 and tcp port 443' --since -5m -w flow.pcap
  poolcap query /var/lib/poolcap --since '2026-11-27 14:02:00' --until '2026-11-27 14:05:00' | tcpdump -r -
  poolcap query /var/lib/poolcap udp port 53 --count")]
pub struct QueryArgs {
    /// The store directory (`poolcap capture --store DIR`).
    dir: PathBuf,
    /// Packets at or after T: RFC 3339 (`2026-11-27T14:02:00Z`, `...+02:00`),
    /// `YYYY-MM-DD HH:MM:SS[.frac]` (UTC), or relative to now (`-5m`, `-2h`).
    #[arg(long, value_name = "T", allow_hyphen_values = true, value_parser = parse_time)]
    since: Option<u64>,
    /// Packets before T (same forms as --since).
    #[arg(long, value_name = "T", allow_hyphen_values = true, value_parser = parse_time)]
    until: Option<u64>,
    /// Write the pcap stream to FILE (`-`: standard output, the default unless it is a
    /// terminal).
    #[arg(short = 'w', value_name = "FILE")]
    write: Option<PathBuf>,
    /// Print the number of matching packets instead of the packets.
    #[arg(long, conflicts_with = "write")]
    count: bool,
    /// Filter expression (tcpdump syntax), after the options.
    #[arg(trailing_var_arg = true)]
    filter: Vec<String>,
}

/// A time as nanoseconds since the epoch (see `--since`).
pub fn parse_time(s: &str) -> Result<u64, String> {
    let bad = || {
        format!("`{s}`: give RFC 3339 (2026-11-27T14:02:00Z), `YYYY-MM-DD HH:MM:SS` (UTC) or -DURATION (-5m)")
    };
    let t = if let Some(ago) = s.strip_prefix('-') {
        let d = humantime::parse_duration(ago).map_err(|_| bad())?;
        SystemTime::now().checked_sub(d).ok_or_else(bad)?
    } else {
        // An offset from UTC at the end (`+02:00`, `-05:00`) is taken off by hand:
        // humantime reads UTC only.
        let (base, offset) = split_offset(s);
        let t = humantime::parse_rfc3339_weak(base).map_err(|_| bad())?;
        match offset {
            Some(secs) if secs >= 0 => t.checked_sub(Duration::from_secs(secs as u64)),
            Some(secs) => t.checked_add(Duration::from_secs(secs.unsigned_abs())),
            None => Some(t),
        }
        .ok_or_else(bad)?
    };
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .map_err(|_| bad())
}

/// `2026-11-27T14:02:00+02:00` -> (`2026-11-27T14:02:00`, Some(7200)).
fn split_offset(s: &str) -> (&str, Option<i64>) {
    let s = s.trim();
    if s.len() > 6 {
        let (base, tail) = s.split_at(s.len() - 6);
        let b = tail.as_bytes();
        if (b[0] == b'+' || b[0] == b'-') && b[3] == b':' && base.len() >= 19 {
            if let (Ok(h), Ok(m)) = (tail[1..3].parse::<i64>(), tail[4..6].parse::<i64>()) {
                let secs = h * 3600 + m * 60;
                return (base, Some(if b[0] == b'-' { -secs } else { secs }));
            }
        }
    }
    (s, None)
}

/// `capture --store DIR --query-listen ADDR`: serves `GET /query?filter=F&since=T&until=T`
/// on `listener` (the metrics endpoint's server), each answer the pcap stream `poolcap query
/// DIR F --since T --until T -w -` writes (`application/vnd.tcpdump.pcap`), made by a
/// thread of its own and relayed as the client reads it; a bad filter, time or parameter
/// is `400` and one line.
pub fn serve(listener: Listener, dir: &Path) -> anyhow::Result<MetricsServer> {
    let store = Store::open(dir).map_err(|e| usage(e.to_string()))?;
    let route: Streams = Arc::new(move |target: &str| {
        let (path, params) = target.split_once('?').unwrap_or((target, ""));
        if path != "/query" {
            return None;
        }
        let (ours, theirs) = UnixStream::pair().ok()?;
        let (store, params) = (store.clone(), params.to_owned());
        std::thread::Builder::new()
            .name("query".into())
            .spawn(move || answer(&store, &params, ours))
            .ok()?;
        Some(theirs)
    });
    Ok(MetricsServer::start_streams(listener, None, route)?)
}

/// Writes the HTTP answer to `params` into `out`.
fn answer(store: &Store, params: &str, out: UnixStream) {
    let mut out = HttpPcap {
        out: std::io::BufWriter::with_capacity(1 << 16, out),
        started: false,
    };
    let result =
        http_query(params).and_then(|q| q.run(store, Some(&mut out)).map_err(|e| e.to_string()));
    if out.started {
        // An error after the first bytes (the client went away) ends the stream.
        let _ = out.out.flush();
        return;
    }
    let _ = match result {
        Ok(_) => out.start().and_then(|()| out.out.flush()),
        Err(e) => {
            let body = format!("poolcap: {e}\n");
            write!(
                out.out,
                "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .and_then(|()| out.out.flush())
        }
    };
}

/// A pcap stream behind a `200` head written before its first byte.
struct HttpPcap {
    out: std::io::BufWriter<UnixStream>,
    started: bool,
}

impl HttpPcap {
    fn start(&mut self) -> std::io::Result<()> {
        self.started = true;
        self.out.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.tcpdump.pcap\r\n\
              Connection: close\r\n\r\n",
        )
    }
}

impl Write for HttpPcap {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !self.started {
            self.start()?;
        }
        self.out.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// The query of `filter=F&since=T&until=T` (URL-encoded).
fn http_query(params: &str) -> Result<Query, String> {
    let mut q = Query::default();
    for pair in params.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = url_decode(value).ok_or_else(|| format!("{key}: bad URL encoding"))?;
        match key {
            "filter" => q.filter = (!value.trim().is_empty()).then_some(value),
            "since" => q.since = Some(parse_time(&value).map_err(|e| format!("since: {e}"))?),
            "until" => q.until = Some(parse_time(&value).map_err(|e| format!("until: {e}"))?),
            _ => {
                return Err(format!(
                    "unknown parameter `{key}`: give filter, since, until"
                ))
            }
        }
    }
    Ok(q)
}

/// `a+b%20c` -> `a b c`; None for a bad escape or bytes that are not UTF-8.
fn url_decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        out.push(match b {
            b'+' => b' ',
            b'%' => {
                let hex = [bytes.next()?, bytes.next()?];
                u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?
            }
            b => b,
        });
    }
    String::from_utf8(out).ok()
}

/// Runs `poolcap query`.
pub fn run(a: QueryArgs) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let store = Store::open(&a.dir).map_err(|e| usage(e.to_string()))?;
    if a.write.is_none() && !a.count && std::io::stdout().is_terminal() {
        return Err(usage(
            "query writes pcap: give -w FILE, -w - (to a pipe) or --count",
        ));
    }
    let query = Query {
        filter: (!a.filter.is_empty()).then(|| a.filter.join(" ")),
        since: a.since,
        until: a.until,
    };
    let mut file;
    let mut stdout;
    let out: Option<&mut dyn std::io::Write> = match &a.write {
        _ if a.count => None,
        Some(p) if p.as_os_str() != "-" => {
            file = std::io::BufWriter::new(
                std::fs::File::create(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?,
            );
            Some(&mut file)
        }
        _ => {
            stdout = std::io::BufWriter::new(std::io::stdout().lock());
            Some(&mut stdout)
        }
    };
    let outcome = query.run(&store, out).map_err(|e| match e {
        QueryError::Io { .. } => anyhow::Error::new(e),
        e => usage(e.to_string()),
    })?;
    for (path, why) in &outcome.refused {
        log::warn!(
            "warning: {}: index refused ({why}); read the whole file. `poolcap store {} repair` rebuilds it",
            path.display(),
            a.dir.display()
        );
    }
    if a.count {
        println!("{}", outcome.packets);
    }
    crate::say!(
        "{} packets matched; read {} of {} bytes in {} files and {} bytes of indexes",
        outcome.packets,
        outcome.bytes_read,
        outcome.bytes_held,
        outcome.files_read,
        outcome.index_bytes_read
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_times_in_utc_or_with_an_offset_and_relative_ones_parse() {
        let t = 1_764_259_200_000_000_000u64; // 2025-11-27T16:00:00Z
        assert_eq!(parse_time("2025-11-27T16:00:00Z"), Ok(t));
        assert_eq!(parse_time("2025-11-27 16:00:00"), Ok(t));
        assert_eq!(parse_time("2025-11-27T18:00:00+02:00"), Ok(t));
        assert_eq!(parse_time("2025-11-27 16:00:00.5"), Ok(t + 500_000_000));
        let ago = parse_time("-5m").unwrap();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(now - ago >= 300_000_000_000 && now - ago < 360_000_000_000);
        assert!(parse_time("yesterday").is_err());
    }

    #[test]
    fn http_parameters_are_url_decoded_and_checked() {
        let q = http_query("filter=host+10.0.0.1%20and%20port%2053&since=2025-11-27T16%3A00%3A00Z")
            .unwrap();
        assert_eq!(q.filter.as_deref(), Some("host 10.0.0.1 and port 53"));
        assert_eq!(q.since, Some(1_764_259_200_000_000_000));
        assert!(http_query("until=soon")
            .unwrap_err()
            .starts_with("until: `soon`"));
        assert!(http_query("filter=%zz").is_err());
        assert!(http_query("limit=5")
            .unwrap_err()
            .contains("unknown parameter `limit`"));
    }
}
