//! poolcap's exporters: what the engine and the probe count, handed to the
//! systems people already run, without ever slowing the capture.
//!
//! - [`metrics`]: the engine's per-queue counters, the probe's rule counters and the
//!   exporters' own counters as Prometheus metrics (prometheus-client), read from the live
//!   atomics at scrape time, so the capture path does no extra work at all;
//! - `process`: the standard process metrics (CPU, memory, files, start time) from `/proc`;
//! - [`http`]: serves them on `/metrics` (one polling thread, httparse; bounded connections,
//!   request heads and time per connection);
//! - [`ipfix`]: the RFC 7011 wire format (templates, data records, messages), pure;
//! - [`flowcache`]: turns the probe's per-period flow tables into IPFIX flow records with
//!   active and idle timeouts and flow end reasons, pure (time is a parameter);
//! - [`exporter`]: the IPFIX exporting process: a thread fed through a bounded channel
//!   (a full channel drops the period and counts its flows), over UDP (templates re-sent
//!   periodically) or TCP (templates once per connection, reconnects with back-off);
//! - [`kafka`]: each period's reports, flow records and alerts as JSON messages on a Kafka
//!   topic (librdkafka), through the same kind of bounded, counted hand-off.
#![forbid(unsafe_code)]

pub mod exporter;
pub mod flowcache;
pub mod http;
pub mod ipfix;
pub mod kafka;
pub mod metrics;
mod process;

/// Why an exporter could not start.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// An address that does not parse or resolve.
    #[error("{what} `{addr}`: {why}")]
    Address {
        /// Which option (`--metrics`, `--ipfix`).
        what: &'static str,
        /// What was given.
        addr: String,
        /// Why it is unusable.
        why: String,
    },
    /// The metrics listener could not bind (port in use, no permission).
    #[error("--metrics: cannot listen on {addr}: {why}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        why: String,
    },
    /// The collector could not be reached at start.
    #[error("--ipfix: cannot reach the collector {addr}: {source}")]
    Connect {
        /// The collector.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}
