//! pcap and pcapng encoding ([`CaptureWriter`]) and decoding ([`read_file`], [`read_bytes`]).
//!
//! Two on-disk formats are supported, because they serve different readers:
//!
//! * **pcap** (libpcap's classic format): a 24-byte global header, then one 16-byte record
//!   header plus data per packet. Every tool reads it. [`FileFormat::Pcap`] stores microsecond
//!   timestamps (magic `0xa1b2c3d4`), [`FileFormat::PcapNs`] nanoseconds (magic `0xa1b23c4d`).
//! * **pcapng**: self-describing blocks. We write a Section Header Block, one Interface
//!   Description Block (Ethernet, snaplen, `if_name`, `if_tsresol` = 9, i.e. nanoseconds), one
//!   Enhanced Packet Block per packet and, at the end, an Interface Statistics Block holding the
//!   kernel's received/dropped counters — the one thing pcap cannot carry.
//!
//! **Whole-record guarantee.** The writer buffers whole records and hands them to the output with
//! plain `write()` calls. If a write fails part-way (disk full, I/O error), it cuts the output back
//! to the last record boundary it reached (for outputs that can be cut, such as files), so the
//! file stays readable by every tool and the error says how many packets it holds. Streams such
//! as stdout cannot be cut back; there the error still says how many whole packets went out.
//!
//! The reader loads a whole file into memory, which suits tests, verification and replay; it
//! never panics on malformed input and reports how many good packets preceded a problem.
#![forbid(unsafe_code)]

pub mod direct;
pub mod read;
pub mod write;

pub use direct::{DirectFile, Tail};
pub use read::{read_bytes, read_file, CaptureFile, ReadError, RecordedPacket};
pub use write::{CaptureWriter, FileFormat, IfStats, Output, UnknownFormat, WriteError};
