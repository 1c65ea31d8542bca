//! pcap and pcapng encoding ([`CaptureWriter`]) and decoding ([`read_file`], [`read_bytes`]).
//!
//! Two on-disk formats are supported, because they serve different readers:
//!
//! * **pcap** (libpcap's classic format): a 24-byte global header, then one 16-byte record
//!   header plus data per packet. Every tool reads it. [`FileFormat::Pcap`] stores microsecond
//!   timestamps (magic `0xa1b2c3d4`), [`FileFormat::PcapNs`] nanoseconds (magic `0xa1b23c4d`).
//! * **pcapng**: self-describing blocks. We write a Section Header Block, one Interface
//!   Description Block (link type, snaplen, `if_name`, `if_filter`, `if_tsresol` = 9, i.e.
//!   nanoseconds), one Enhanced Packet Block per packet and, at the end, an Interface
//!   Statistics Block holding the file's start and end times and the kernel's received and
//!   dropped counters — what pcap cannot carry. The section header names the OS and the
//!   application, as dumpcap's do.
//!
//! **Whole-record guarantee.** The writer buffers whole records and hands them to the output with
//! plain `write()` calls. If a write fails part-way (disk full, I/O error), it cuts the output back
//! to the last record boundary it reached (for outputs that can be cut, such as files), so the
//! file stays readable by every tool and the error says how many packets it holds. Streams such
//! as stdout cannot be cut back; there the error still says how many whole packets went out.
//!
//! The reader loads a whole file into memory, which suits tests, verification and replay; it
//! never panics on malformed input and reports how many good packets preceded a problem.
//! [`PacketReader`] reads the same files packet by packet from any reader, with one buffer;
//! [`decompressed`] undoes a zstd or gzip compression on the way.
#![forbid(unsafe_code)]

pub mod decompress;
pub mod direct;
pub mod link;
pub mod memory;
pub mod read;
pub mod stream;
pub mod write;

pub use decompress::decompressed;
pub use direct::{Buffers, DirectFile, Feed, Landed, Notes, Padding, Tail, DEPTH};
pub use link::{LinkType, UnsupportedLinkType};
pub use read::{read_bytes, read_file, CaptureFile, ReadError, RecordedPacket};
pub use stream::{Packet, PacketReader};
pub use write::{
    CaptureWriter, FileFormat, FileHeader, IfStats, Output, UnknownFormat, WriteError,
};
