//! Encoding packets as pcap or pcapng, with the whole-record guarantee on write errors.
//!
//! Why a hand-made buffer rather than `BufWriter`: when the disk fills up in the middle of a
//! flush we must know how many bytes the output accepted, to cut it back to a record boundary.
//! `BufWriter` hides that. Here the buffer only ever holds whole records and is handed over with
//! a plain `write()` loop; on failure the record boundaries are found again by walking the record
//! headers in the buffer, so the hot path does no bookkeeping beyond one `memcpy` per packet.
//!
//! A caller that already holds its packets in memory of its own can skip that `memcpy`: it
//! leaves [`FileFormat::record_head`] bytes before each packet and room for the trailer after
//! it, has [`CaptureWriter::frame_record`] fill both in place, and hands the records over
//! with [`CaptureWriter::write_records`] (one vectored `write()` for many records). The same
//! walk over record headers keeps the whole-record guarantee there.
//!
//! Multi-byte fields are written in native byte order, as libpcap does; readers detect the order
//! from the magic number (pcap) or byte-order magic (pcapng).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IoSlice, Write};
use std::str::FromStr;
use std::{fmt, time::SystemTime};

use thiserror::Error;

use crate::link::LinkType;

const DEFAULT_BUFFER: usize = 64 << 10;
const NS_PER_SEC: u64 = 1_000_000_000;

const PCAP_MAGIC_US: u32 = 0xa1b2_c3d4;
const PCAP_MAGIC_NS: u32 = 0xa1b2_3c4d;
const PCAP_RECORD_HEADER: usize = 16;

pub(crate) const SHB_TYPE: u32 = 0x0a0d_0d0a;
pub(crate) const BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;
const IDB_TYPE: u32 = 1;
const ISB_TYPE: u32 = 5;
const EPB_TYPE: u32 = 6;
/// Type, length, and trailing length of every pcapng block.
const BLOCK_FRAME: usize = 12;
const EPB_FIXED: usize = BLOCK_FRAME + 20;
const OPT_SHB_OS: u16 = 3;
const OPT_SHB_USERAPPL: u16 = 4;
const OPT_IF_NAME: u16 = 2;
const OPT_IF_TSRESOL: u16 = 9;
const OPT_IF_FILTER: u16 = 11;
const OPT_ISB_STARTTIME: u16 = 2;
const OPT_ISB_ENDTIME: u16 = 3;
const OPT_ISB_IFRECV: u16 = 4;
const OPT_ISB_IFDROP: u16 = 5;

/// Which file format to write (and which one a read file turned out to be).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum FileFormat {
    /// Classic pcap with microsecond timestamps (magic `0xa1b2c3d4`): every tool reads it.
    Pcap,
    /// Classic pcap with nanosecond timestamps (magic `0xa1b23c4d`).
    PcapNs,
    /// pcapng: nanosecond timestamps, interface name, and capture statistics at the end.
    Pcapng,
}

impl FileFormat {
    /// The name accepted by [`FromStr`]: `pcap`, `pcap-ns` or `pcapng`.
    pub fn name(self) -> &'static str {
        match self {
            FileFormat::Pcap => "pcap",
            FileFormat::PcapNs => "pcap-ns",
            FileFormat::Pcapng => "pcapng",
        }
    }

    /// Bytes of a packet record before the packet's captured bytes.
    pub fn record_head(self) -> usize {
        match self {
            FileFormat::Pcap | FileFormat::PcapNs => PCAP_RECORD_HEADER,
            FileFormat::Pcapng => EPB_FIXED - 4,
        }
    }

    /// Bytes of the whole record of a packet with `caplen` captured bytes.
    pub fn record_len(self, caplen: usize) -> usize {
        match self {
            FileFormat::Pcap | FileFormat::PcapNs => PCAP_RECORD_HEADER + caplen,
            FileFormat::Pcapng => EPB_FIXED + padded_len(caplen),
        }
    }

    /// The most bytes a record adds to a packet (header, padding and trailer).
    pub fn record_overhead(self) -> usize {
        match self {
            FileFormat::Pcap | FileFormat::PcapNs => PCAP_RECORD_HEADER,
            FileFormat::Pcapng => EPB_FIXED + 3,
        }
    }
}

impl fmt::Display for FileFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A format name that is none of `pcap`, `pcap-ns`, `pcapng`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown capture file format {0:?} (expected pcap, pcap-ns or pcapng)")]
pub struct UnknownFormat(pub String);

impl FromStr for FileFormat {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [FileFormat::Pcap, FileFormat::PcapNs, FileFormat::Pcapng]
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| UnknownFormat(s.to_owned()))
    }
}

/// Interface counters stored in the pcapng Interface Statistics Block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IfStats {
    /// Packets the interface/kernel received (`isb_ifrecv`).
    pub received: u64,
    /// Packets dropped before reaching us (`isb_ifdrop`).
    pub dropped: u64,
}

/// What a file says of its packets before the first one: the link type and snaplen, and in
/// pcapng what wrote it and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileHeader {
    /// What each packet starts with.
    pub linktype: LinkType,
    /// Bytes kept per packet at most (0: no limit).
    pub snaplen: u32,
    /// pcapng `if_name` (left out when empty).
    pub if_name: String,
    /// pcapng `if_filter`: the capture's filter expression.
    pub if_filter: Option<String>,
    /// pcapng `shb_os` (left out when empty).
    pub os: String,
    /// pcapng `shb_userappl` (left out when empty).
    pub application: String,
}

impl FileHeader {
    /// A header for `linktype` packets from `if_name`, with no filter, OS or application.
    pub fn new(linktype: LinkType, snaplen: u32, if_name: &str) -> Self {
        FileHeader {
            linktype,
            snaplen,
            if_name: if_name.to_string(),
            if_filter: None,
            os: String::new(),
            application: String::new(),
        }
    }
}

/// Where the bytes go. Files can be cut back to a whole-record boundary after a failed write;
/// streams cannot.
///
/// The writer hands records over in batches of whole records and ends each batch with
/// [`end_batch`](Output::end_batch). An output that can only be cut back at batch ends (a
/// compressed stream, whose frames end there) says so with
/// [`partial_batch_kept`](Output::partial_batch_kept).
pub trait Output: Write {
    /// Cut the output back to its first `len` bytes (counted from the first byte this writer
    /// wrote). The default does nothing, which is all a stream can do.
    fn truncate_to(&mut self, _len: u64) -> io::Result<()> {
        Ok(())
    }

    /// Ends a batch of whole records: after a later failure the output can be cut back to
    /// here. A compressor ends its frame and writes it out. The default does nothing.
    fn end_batch(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// Of the first `accepted` bytes of a batch the output took before it failed, how many
    /// it can keep: all (the default; a file can be cut anywhere), or 0 when only whole
    /// batches survive.
    fn partial_batch_kept(&self, accepted: usize) -> usize {
        accepted
    }

    /// Makes what was handed over durable (`fdatasync` for a file). The default does nothing.
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// Ends the output after the last record (a compressor writes its final frame). The
    /// default flushes.
    fn close(&mut self) -> io::Result<()> {
        self.flush()
    }

    /// Of the bytes handed over in ended batches, counted from the first, where the last
    /// batch known to be in the output ends: an output that writes in the background
    /// (a direct-I/O file) loses the batches still on their way when a write fails, and
    /// says here, after the failure, where it can be cut back to (a batch end). None (the
    /// default): every ended batch is in the output.
    fn landed(&self) -> Option<u64> {
        None
    }
}

/// The file must be empty and positioned at its start when handed to [`CaptureWriter::new`].
impl Output for File {
    fn truncate_to(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.sync_data()
    }
}

impl Output for io::Stdout {}

impl Output for Vec<u8> {
    fn truncate_to(&mut self, len: u64) -> io::Result<()> {
        self.truncate(usize::try_from(len).unwrap_or(usize::MAX));
        Ok(())
    }
}

/// An output reached through a reference or a box is that output.
macro_rules! output_through {
    ($($outer:ty),+) => {$(
        impl<T: Output + ?Sized> Output for $outer {
            fn truncate_to(&mut self, len: u64) -> io::Result<()> {
                (**self).truncate_to(len)
            }

            fn end_batch(&mut self) -> io::Result<()> {
                (**self).end_batch()
            }

            fn partial_batch_kept(&self, accepted: usize) -> usize {
                (**self).partial_batch_kept(accepted)
            }

            fn sync(&mut self) -> io::Result<()> {
                (**self).sync()
            }

            fn close(&mut self) -> io::Result<()> {
                (**self).close()
            }

            fn landed(&self) -> Option<u64> {
                (**self).landed()
            }
        }
    )+};
}

output_through!(&mut T, Box<T>);

/// Why writing a capture failed.
#[derive(Debug, Error)]
pub enum WriteError {
    /// The output refused bytes. It was cut back to whole records and holds `packets` packets
    /// (a stream that cannot be cut holds those packets followed by a partial record).
    #[error("capture write failed ({source}); the output holds {packets} whole packets")]
    Io {
        #[source]
        source: io::Error,
        packets: u64,
    },
    /// The output refused bytes and cutting it back failed too: it ends in a partial record.
    #[error(
        "capture write failed ({source}), and cutting the output back to its {packets} whole \
         packets also failed ({truncate}); the output ends with a partial record"
    )]
    Torn {
        #[source]
        source: io::Error,
        truncate: io::Error,
        packets: u64,
    },
    /// A packet's lengths are inconsistent; it was not written and the writer stays usable.
    #[error(
        "packet with {caplen} captured bytes rejected: snaplen is {snaplen}, \
         original length {orig_len}"
    )]
    BadLength {
        caplen: usize,
        orig_len: u32,
        snaplen: u32,
    },
    /// Classic pcap stores seconds in 32 bits (until 2106); the packet was not written.
    #[error("timestamp {ts_ns} ns does not fit the 32-bit seconds field of pcap")]
    Timestamp { ts_ns: u64 },
    /// A header option (interface name, filter) does not fit a pcapng option (65535 bytes).
    #[error("pcapng header option {code} of {len} bytes is too long (at most 65535)")]
    Option { code: u16, len: usize },
}

impl WriteError {
    /// True when the output itself failed and the writer takes no more packets; false for
    /// a rejected packet (the writer stays usable).
    pub fn is_fatal(&self) -> bool {
        matches!(self, WriteError::Io { .. } | WriteError::Torn { .. })
    }

    /// Whole packets the output holds after a fatal error.
    pub fn packets_kept(&self) -> Option<u64> {
        match self {
            WriteError::Io { packets, .. } | WriteError::Torn { packets, .. } => Some(*packets),
            _ => None,
        }
    }
}

/// A failure remembered so every later call reports it again.
#[derive(Debug)]
struct Failure {
    source: io::Error,
    truncate: Option<io::Error>,
    packets: u64,
}

impl Failure {
    /// A copy of the error: `io::Error` is not `Clone`, so the OS error code (or kind and
    /// message) is carried over.
    fn to_error(&self) -> WriteError {
        let (source, packets) = (clone_io(&self.source), self.packets);
        match &self.truncate {
            None => WriteError::Io { source, packets },
            Some(t) => WriteError::Torn {
                source,
                truncate: clone_io(t),
                packets,
            },
        }
    }
}

pub(crate) fn clone_io(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

/// Buffered pcap/pcapng writer; see the module docs for the failure guarantee.
///
/// Call [`finish`](Self::finish): records still in the buffer are lost if the writer is dropped.
#[derive(Debug)]
pub struct CaptureWriter<O: Output> {
    out: O,
    format: FileFormat,
    snaplen: u32,
    /// Whole records not yet handed to `out`.
    buf: Vec<u8>,
    buf_limit: usize,
    /// Bytes `out` has accepted; always a record boundary.
    flushed: u64,
    /// Length of the file header (pcap global header, or pcapng SHB + IDB): the smallest
    /// non-empty prefix worth keeping.
    header_len: usize,
    packets: u64,
    packets_flushed: u64,
    /// Batch ends (bytes, packets) from the last one the output says landed on; see
    /// [`Output::landed`].
    batch_ends: VecDeque<(u64, u64)>,
    failed: Option<Failure>,
    /// When the file was begun: the statistics block's `isb_starttime`.
    opened_ns: u64,
}

impl<O: Output> CaptureWriter<O> {
    /// A writer of Ethernet packets from interface `if_name` ([`FileHeader::new`]); see
    /// [`CaptureWriter::with_header`].
    pub fn new(
        out: O,
        format: FileFormat,
        snaplen: u32,
        if_name: &str,
    ) -> Result<Self, WriteError> {
        Self::with_header(
            out,
            format,
            &FileHeader::new(LinkType::ETHERNET, snaplen, if_name),
        )
    }

    /// Writes the file header to `out` right away, so an unwritable output shows up before
    /// the capture starts: the link type and snaplen (0 = no limit), and in pcapng the
    /// section's application and OS, and the interface's name, filter and time resolution.
    pub fn with_header(
        out: O,
        format: FileFormat,
        header: &FileHeader,
    ) -> Result<Self, WriteError> {
        let mut buf = Vec::with_capacity(DEFAULT_BUFFER);
        let snaplen = header.snaplen;
        match format {
            FileFormat::Pcap | FileFormat::PcapNs => {
                let magic = if format == FileFormat::Pcap {
                    PCAP_MAGIC_US
                } else {
                    PCAP_MAGIC_NS
                };
                put32(&mut buf, &[magic]);
                put16(&mut buf, &[2, 4]); // version 2.4
                put32(&mut buf, &[0, 0, snaplen, header.linktype.0.into()]); // thiszone, sigfigs
            }
            FileFormat::Pcapng => {
                // Section Header Block: byte-order magic, version 1.0, section length unknown.
                let shb_opts = options(&[
                    (OPT_SHB_OS, header.os.as_bytes()),
                    (OPT_SHB_USERAPPL, header.application.as_bytes()),
                ])?;
                let shb_len = block_len(BLOCK_FRAME + 16 + shb_opts.len());
                put32(&mut buf, &[SHB_TYPE, shb_len, BYTE_ORDER_MAGIC]);
                put16(&mut buf, &[1, 0]);
                buf.extend_from_slice(&(-1i64).to_ne_bytes());
                buf.extend_from_slice(&shb_opts);
                put32(&mut buf, &[shb_len]);
                // Interface Description Block. if_filter's first byte says the filter is
                // a libpcap expression.
                let filter = header
                    .if_filter
                    .as_ref()
                    .map(|f| [&[0u8][..], f.as_bytes()].concat());
                let idb_opts = options(&[
                    (OPT_IF_NAME, header.if_name.as_bytes()),
                    (OPT_IF_FILTER, filter.as_deref().unwrap_or_default()),
                    (OPT_IF_TSRESOL, &[9]),
                ])?;
                let idb_len = block_len(BLOCK_FRAME + 8 + idb_opts.len());
                put32(&mut buf, &[IDB_TYPE, idb_len]);
                put16(&mut buf, &[header.linktype.0, 0]);
                put32(&mut buf, &[snaplen]);
                buf.extend_from_slice(&idb_opts);
                put32(&mut buf, &[idb_len]);
            }
        }
        let mut writer = CaptureWriter {
            out,
            format,
            snaplen,
            header_len: buf.len(),
            buf,
            buf_limit: DEFAULT_BUFFER,
            flushed: 0,
            packets: 0,
            packets_flushed: 0,
            batch_ends: VecDeque::from([(0, 0)]),
            failed: None,
            opened_ns: now_ns(),
        };
        writer.flush_buf()?;
        Ok(writer)
    }

    /// Hand records to the output once `bytes` are buffered (default 64 KiB: small enough
    /// to stay in the CPU cache for the kernel's copy). A record larger than the buffer is
    /// written on its own.
    pub fn with_buffer_size(mut self, bytes: usize) -> Self {
        self.buf_limit = bytes;
        if self.buf.is_empty() {
            self.buf = Vec::with_capacity(bytes);
        }
        self
    }

    /// The format written.
    pub fn format(&self) -> FileFormat {
        self.format
    }

    /// Append one packet: `data` is the captured bytes (at most snaplen), `orig_len` its length
    /// on the wire, `ts_ns` nanoseconds since the Unix epoch. A rejected packet
    /// ([`WriteError::BadLength`], [`WriteError::Timestamp`]) leaves the writer usable; after an
    /// I/O error every call returns that error again.
    pub fn write_packet(
        &mut self,
        ts_ns: u64,
        data: &[u8],
        orig_len: u32,
    ) -> Result<(), WriteError> {
        let record_len = self.check_record(ts_ns, data.len(), orig_len)?;
        if !self.buf.is_empty() && self.buf.len() + record_len > self.buf_limit {
            self.flush_buf()?;
        }
        append(
            self.format,
            &mut self.buf,
            record_len,
            ts_ns,
            data,
            orig_len,
        );
        self.packets += 1;
        Ok(())
    }

    /// Appends the record of a packet to `records`, a buffer of whole records for
    /// [`write_records`](Self::write_records), as [`write_packet`](Self::write_packet)
    /// would buffer it and rejecting what it rejects. For small packets that lie where a
    /// framed record would have to be written into memory someone else owns (a capture
    /// ring): the header is made here, and only the packet's bytes are read there.
    pub fn append_record(
        &self,
        records: &mut Vec<u8>,
        ts_ns: u64,
        data: &[u8],
        orig_len: u32,
    ) -> Result<(), WriteError> {
        let record_len = self.check_record(ts_ns, data.len(), orig_len)?;
        append(self.format, records, record_len, ts_ns, data, orig_len);
        Ok(())
    }

    /// Appends the records of `packets` (time, captured bytes, wire length), in order, to
    /// `records`, as [`append_record`](Self::append_record) would one by one, up to the first
    /// it rejects. Returns how many were appended, and the rejection that stopped it (the
    /// rejected packet is not appended): one check of the writer's state for the run, and
    /// one pass over the packets, for runs of small records.
    pub fn append_records<'a>(
        &self,
        records: &mut Vec<u8>,
        packets: impl IntoIterator<Item = (u64, &'a [u8], u32)>,
    ) -> (usize, Option<WriteError>) {
        if let Err(e) = self.check_usable() {
            return (0, Some(e));
        }
        let mut n = 0;
        for (ts_ns, data, orig_len) in packets {
            match self.check_packet(ts_ns, data.len(), orig_len) {
                Ok(len) => append(self.format, records, len, ts_ns, data, orig_len),
                Err(e) => return (n, Some(e)),
            }
            n += 1;
        }
        (n, None)
    }

    /// Turns `record` into the record of a packet whose `caplen` captured bytes already sit
    /// at `record[format.record_head()..]`: fills in the header before them and the padding
    /// and trailer after them. `record` must be exactly [`FileFormat::record_len`]`(caplen)`
    /// bytes. Nothing is written: hand the record to [`write_records`](Self::write_records).
    /// Rejects what [`write_packet`](Self::write_packet) rejects, leaving `record` as it was.
    pub fn frame_record(
        &self,
        record: &mut [u8],
        ts_ns: u64,
        caplen: usize,
        orig_len: u32,
    ) -> Result<(), WriteError> {
        if record.len() != self.check_record(ts_ns, caplen, orig_len)? {
            return Err(WriteError::BadLength {
                caplen,
                orig_len,
                snaplen: self.snaplen,
            });
        }
        frame(self.format, record, ts_ns, caplen, orig_len);
        Ok(())
    }

    /// Hands over `records`, each slice whole records made by
    /// [`frame_record`](Self::frame_record), holding `packets` packets in all, after whatever
    /// [`write_packet`](Self::write_packet) buffered: one vectored `write()` for all of them
    /// when the output takes it. On failure the output is cut back to whole records, as for
    /// buffered ones.
    pub fn write_records(
        &mut self,
        records: &[IoSlice<'_>],
        packets: u64,
    ) -> Result<(), WriteError> {
        self.check_usable()?;
        if !self.buf.is_empty() {
            self.flush_buf()?;
        }
        self.packets += packets;
        self.hand_over(records)
    }

    /// The length of the record of a packet, or why it cannot be written (an earlier I/O
    /// error first).
    fn check_record(&self, ts_ns: u64, caplen: usize, orig_len: u32) -> Result<usize, WriteError> {
        self.check_usable()?;
        self.check_packet(ts_ns, caplen, orig_len)
    }

    /// The length of the record of a packet, or why this format cannot hold it.
    #[inline]
    fn check_packet(&self, ts_ns: u64, caplen: usize, orig_len: u32) -> Result<usize, WriteError> {
        let bad_length = || WriteError::BadLength {
            caplen,
            orig_len,
            snaplen: self.snaplen,
        };
        let caplen32 = u32::try_from(caplen).map_err(|_| bad_length())?;
        if (self.snaplen != 0 && caplen32 > self.snaplen) || caplen32 > orig_len {
            return Err(bad_length());
        }
        let record_len = self.format.record_len(caplen);
        u32::try_from(record_len).map_err(|_| bad_length())?;
        let pcap = self.format != FileFormat::Pcapng;
        if pcap && u32::try_from(ts_ns / NS_PER_SEC).is_err() {
            return Err(WriteError::Timestamp { ts_ns });
        }
        Ok(record_len)
    }

    /// Write what is buffered, plus (pcapng only; pcap has no place for it) an Interface
    /// Statistics Block with `stats` and the times the file was begun and ended
    /// (`isb_starttime`, `isb_endtime`, as dumpcap writes them), flush the output, and
    /// return it.
    pub fn finish(mut self, stats: Option<IfStats>) -> Result<O, WriteError> {
        self.check_usable()?;
        if let (FileFormat::Pcapng, Some(stats)) = (self.format, stats) {
            let now = now_ns();
            let (high, low) = split_ts(now);
            let ts = |t: u64| {
                let (h, l) = split_ts(t);
                [h.to_ne_bytes(), l.to_ne_bytes()].concat()
            };
            let isb_len = block_len(BLOCK_FRAME + 12 + 4 * 12 + 4);
            put32(&mut self.buf, &[ISB_TYPE, isb_len, 0, high, low]);
            put_option(&mut self.buf, OPT_ISB_STARTTIME, &ts(self.opened_ns));
            put_option(&mut self.buf, OPT_ISB_ENDTIME, &ts(now));
            put_option(&mut self.buf, OPT_ISB_IFRECV, &stats.received.to_ne_bytes());
            put_option(&mut self.buf, OPT_ISB_IFDROP, &stats.dropped.to_ne_bytes());
            put32(&mut self.buf, &[0, isb_len]);
        }
        self.flush_buf()?;
        match self.out.close() {
            Ok(()) => Ok(self.out),
            Err(source) => Err(self.remember(source)),
        }
    }

    /// Hands what is buffered to the output and flushes it (a stream's own buffer too): for
    /// packet-buffered output. A failure is fatal, like a failed write.
    pub fn flush(&mut self) -> Result<(), WriteError> {
        self.check_usable()?;
        if !self.buf.is_empty() {
            self.flush_buf()?;
        }
        self.out.flush().map_err(|source| self.remember(source))
    }

    /// Remembers a failure of the output after whole records (a flush, a sync, the close):
    /// every later call reports it again. An output that lost batches it had taken is cut
    /// back to the last one that landed.
    fn remember(&mut self, source: io::Error) -> WriteError {
        let (len, packets) = self.surviving(self.flushed, self.packets);
        let mut truncate = None;
        if len < self.flushed {
            truncate = self.out.truncate_to(len).err();
            (self.flushed, self.packets, self.packets_flushed) = (len, packets, packets);
        }
        let failure = Failure {
            source,
            truncate,
            packets: self.packets,
        };
        let error = failure.to_error();
        self.failed = Some(failure);
        error
    }

    /// Hands what is buffered to the output and makes everything durable
    /// ([`Output::sync`]). A failure is fatal, like a failed write; the output keeps what
    /// it holds.
    pub fn sync(&mut self) -> Result<(), WriteError> {
        self.check_usable()?;
        self.flush_buf()?;
        self.out.sync().map_err(|source| self.remember(source))
    }

    /// Packets accepted so far (buffered ones included). After an I/O error: the whole packets
    /// left in the output.
    pub fn packets_written(&self) -> u64 {
        self.packets
    }

    /// Bytes of file produced so far, headers and buffered records included. After an I/O error:
    /// the length the output was cut back to.
    pub fn bytes_written(&self) -> u64 {
        self.flushed + self.buf.len() as u64
    }

    fn check_usable(&self) -> Result<(), WriteError> {
        self.failed.as_ref().map_or(Ok(()), |f| Err(f.to_error()))
    }

    /// Hand the whole buffer to the output.
    fn flush_buf(&mut self) -> Result<(), WriteError> {
        let buf = std::mem::take(&mut self.buf);
        let handed = self.hand_over(&[IoSlice::new(&buf)]);
        self.buf = buf;
        self.buf.clear();
        handed
    }

    /// Writes `parts` (whole records; the file header too while nothing was handed over)
    /// whose packets are already counted, retrying short and interrupted writes.
    fn hand_over(&mut self, parts: &[IoSlice<'_>]) -> Result<(), WriteError> {
        // Where the next byte to write is: part `i`, `off` bytes in.
        let (mut i, mut off, mut done) = (0, 0, 0);
        loop {
            while i < parts.len() && off == parts[i].len() {
                (i, off) = (i + 1, 0);
            }
            if i == parts.len() {
                break;
            }
            let wrote = if off == 0 {
                self.out.write_vectored(&parts[i..])
            } else {
                self.out.write(&parts[i][off..])
            };
            match wrote {
                Ok(0) => return Err(self.fail(io::ErrorKind::WriteZero.into(), parts, done)),
                Ok(mut n) => {
                    done += n;
                    while n > 0 {
                        let step = n.min(parts[i].len() - off);
                        (off, n) = (off + step, n - step);
                        if off == parts[i].len() {
                            (i, off) = (i + 1, 0);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(e, parts, done)),
            }
        }
        if let Err(e) = self.out.end_batch() {
            return Err(self.fail(e, parts, done));
        }
        self.flushed += done as u64;
        self.packets_flushed = self.packets;
        self.batch_ends
            .push_back((self.flushed, self.packets_flushed));
        let landed = self.out.landed().unwrap_or(u64::MAX);
        while self.batch_ends.len() > 1 && self.batch_ends[1].0 <= landed {
            self.batch_ends.pop_front();
        }
        Ok(())
    }

    /// Where the output can be cut back to after a failure, at most `len` bytes holding
    /// `packets`: there, unless the output lost batches it had taken (see
    /// [`Output::landed`]); then the last batch end that landed.
    fn surviving(&self, len: u64, packets: u64) -> (u64, u64) {
        match self.out.landed() {
            Some(landed) if landed < len => self
                .batch_ends
                .iter()
                .rev()
                .find(|(bytes, _)| *bytes <= landed)
                .copied()
                .unwrap_or((0, 0)),
            _ => (len, packets),
        }
    }

    /// The output accepted the first `accepted` bytes of `parts` and then failed: cut it back
    /// to the last whole record and remember the failure.
    fn fail(&mut self, source: io::Error, parts: &[IoSlice<'_>], accepted: usize) -> WriteError {
        let skip = if self.flushed == 0 {
            self.header_len
        } else {
            0
        };
        let kept = self.out.partial_batch_kept(accepted);
        let (keep, packets_kept) = whole_prefix(self.format, parts, skip, kept);
        let (len, packets) = self.surviving(
            self.flushed + keep as u64,
            self.packets_flushed + packets_kept,
        );
        let truncate = if len < self.flushed + accepted as u64 {
            self.out.truncate_to(len).err()
        } else {
            None
        };
        self.buf.clear();
        self.flushed = len;
        self.packets = packets;
        self.packets_flushed = packets;
        let failure = Failure {
            source,
            truncate,
            packets,
        };
        let error = failure.to_error();
        self.failed = Some(failure);
        error
    }
}

/// The header of the `record_len`-byte record of a packet, in words before its bytes (the
/// lengths and time were checked: `check_packet`): the pcap record header, or the pcapng
/// Enhanced Packet Block's fixed part. `record_head` bytes.
fn head_words(
    format: FileFormat,
    record_len: usize,
    ts_ns: u64,
    caplen: usize,
    orig_len: u32,
) -> ([u32; 7], usize) {
    let caplen32 = caplen as u32;
    match format {
        FileFormat::Pcap | FileFormat::PcapNs => {
            let secs = (ts_ns / NS_PER_SEC) as u32;
            let ns = (ts_ns % NS_PER_SEC) as u32; // < 10^9
            let frac = if format == FileFormat::Pcap {
                ns / 1000
            } else {
                ns
            };
            ([secs, frac, caplen32, orig_len, 0, 0, 0], 4)
        }
        FileFormat::Pcapng => {
            let (high, low) = split_ts(ts_ns);
            let len = record_len as u32;
            ([EPB_TYPE, len, 0, high, low, caplen32, orig_len], 7)
        }
    }
}

/// Fills in the record of a packet whose `caplen` bytes sit at `record[format.record_head()..]`:
/// the header before them, padding and trailer after them. The lengths and time were checked
/// (`check_record`: `record` is `format.record_len(caplen)` bytes, each fits its field). Made
/// once per packet, in place.
fn frame(format: FileFormat, record: &mut [u8], ts_ns: u64, caplen: usize, orig_len: u32) {
    let n = record.len();
    let (words, k) = head_words(format, n, ts_ns, caplen, orig_len);
    let head = put_words(record, &words[..k]);
    if format == FileFormat::Pcapng {
        record[head + caplen..n - 4].fill(0);
        record[n - 4..].copy_from_slice(&(n as u32).to_ne_bytes());
    }
}

/// Appends the `record_len`-byte record of `data` to `buf` (the lengths and time were
/// checked, as for [`frame`]): header, bytes and (pcapng) padding and trailer, each written
/// once, none of them zeroed first.
fn append(
    format: FileFormat,
    buf: &mut Vec<u8>,
    record_len: usize,
    ts_ns: u64,
    data: &[u8],
    orig_len: u32,
) {
    let (words, _) = head_words(format, record_len, ts_ns, data.len(), orig_len);
    buf.reserve(record_len);
    // Each header is a copy of a constant length, made without a call: small records are
    // mostly header (64-byte frames to /dev/null spent a sixth of their time in copies).
    match format {
        FileFormat::Pcap | FileFormat::PcapNs => {
            let mut head = [0u8; PCAP_RECORD_HEADER];
            put_words(&mut head, &words[..4]);
            buf.extend_from_slice(&head);
            buf.extend_from_slice(data);
        }
        FileFormat::Pcapng => {
            let mut head = [0u8; EPB_FIXED - 4];
            put_words(&mut head, &words);
            buf.extend_from_slice(&head);
            buf.extend_from_slice(data);
            let pad = record_len - head.len() - data.len() - 4;
            buf.extend_from_slice(&[0; 3][..pad]);
            buf.extend_from_slice(&(record_len as u32).to_ne_bytes());
        }
    }
}

/// Nanoseconds since the Unix epoch, now.
fn now_ns() -> u64 {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(now.as_nanos()).unwrap_or(u64::MAX)
}

/// The options of a pcapng header block, each `(code, value)` left out when its value is
/// empty, and the end of options (none at all when every value is empty).
fn options(opts: &[(u16, &[u8])]) -> Result<Vec<u8>, WriteError> {
    let mut buf = Vec::new();
    for &(code, value) in opts.iter().filter(|o| !o.1.is_empty()) {
        if u16::try_from(value.len()).is_err() {
            return Err(WriteError::Option {
                code,
                len: value.len(),
            });
        }
        put_option(&mut buf, code, value);
    }
    if !buf.is_empty() {
        put32(&mut buf, &[0]);
    }
    Ok(buf)
}

/// Writes `words` at the start of `out` (which must hold them); returns the bytes written.
fn put_words(out: &mut [u8], words: &[u32]) -> usize {
    for (w, at) in words.iter().zip(out.chunks_exact_mut(4)) {
        at.copy_from_slice(&w.to_ne_bytes());
    }
    4 * words.len()
}

/// Length of the longest run of whole records within the first `limit` bytes of `parts`, and
/// how many of them are packets. Each part holds whole records, the first after `skip` bytes
/// of file header. Only records this crate encoded get here, so their length fields can be
/// trusted.
fn whole_prefix(
    format: FileFormat,
    parts: &[IoSlice<'_>],
    skip: usize,
    limit: usize,
) -> (usize, u64) {
    if skip > limit {
        return (0, 0);
    }
    // Where a record's length field sits, and what it leaves out.
    let (len_at, len_extra) = match format {
        FileFormat::Pcapng => (4, 0),
        _ => (8, PCAP_RECORD_HEADER),
    };
    let (mut base, mut pos, mut packets) = (0, skip, 0);
    for part in parts {
        while let Some(len) = ne32(part, pos + len_at) {
            let end = pos + len as usize + len_extra;
            if len == 0 || base + end > limit {
                return (base + pos, packets);
            }
            if format != FileFormat::Pcapng || ne32(part, pos) == Some(EPB_TYPE) {
                packets += 1;
            }
            pos = end;
        }
        if pos < part.len() {
            break;
        }
        (base, pos) = (base + part.len(), 0);
    }
    (base + pos, packets)
}

fn put32(buf: &mut Vec<u8>, words: &[u32]) {
    let at = buf.len();
    buf.resize(at + 4 * words.len(), 0);
    put_words(&mut buf[at..], words);
}

fn put16(buf: &mut Vec<u8>, halves: &[u16]) {
    halves
        .iter()
        .for_each(|h| buf.extend_from_slice(&h.to_ne_bytes()));
}

/// A pcapng option: code, length, value padded to 4 bytes. `value` is at most 65535 bytes.
fn put_option(buf: &mut Vec<u8>, code: u16, value: &[u8]) {
    put16(buf, &[code, value.len() as u16]);
    buf.extend_from_slice(value);
    buf.resize(buf.len() + padded_len(value.len()) - value.len(), 0);
}

fn padded_len(len: usize) -> usize {
    len.next_multiple_of(4)
}

/// Header blocks are small (bounded by the 16-bit if_name length), so the length fits in u32.
fn block_len(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

fn split_ts(ts: u64) -> (u32, u32) {
    ((ts >> 32) as u32, ts as u32)
}

fn ne32(buf: &[u8], at: usize) -> Option<u32> {
    let bytes = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::Path;
    use std::process::Command;

    use super::*;
    use crate::{read_bytes, read_file, RecordedPacket};

    pub(crate) const FORMATS: [FileFormat; 3] =
        [FileFormat::Pcap, FileFormat::PcapNs, FileFormat::Pcapng];
    pub(crate) const SNAPLEN: u32 = 256;
    pub(crate) const STATS: IfStats = IfStats {
        received: 123_456_789_012,
        dropped: 42,
    };
    const T0: u64 = 1_700_000_000_123_456_789;

    /// Ethernet frames covering every padding remainder, a minimal frame, and frames cut by the
    /// snaplen (orig_len > captured length), with nanosecond-precise timestamps.
    pub(crate) fn sample_packets() -> Vec<RecordedPacket> {
        let lengths: [(usize, u32); 9] = [
            (60, 60),
            (61, 61),
            (62, 62),
            (63, 63),
            (14, 14),
            (256, 1514),
            (256, 9000),
            (100, 100),
            (255, 300),
        ];
        let mut ts_ns = T0;
        lengths
            .iter()
            .enumerate()
            .map(|(i, &(caplen, orig_len))| {
                let mut data: Vec<u8> = (0..caplen).map(|b| (b * 7 + i) as u8).collect();
                data[..14].copy_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x88, 0xb5]);
                ts_ns += 1_000_001_001 * i as u64 + 1;
                RecordedPacket {
                    ts_ns,
                    data,
                    orig_len,
                }
            })
            .collect()
    }

    /// What `format` keeps of `packets`: microsecond pcap rounds timestamps down.
    pub(crate) fn as_stored(format: FileFormat, packets: &[RecordedPacket]) -> Vec<RecordedPacket> {
        let mut stored = packets.to_vec();
        if format == FileFormat::Pcap {
            stored.iter_mut().for_each(|p| p.ts_ns -= p.ts_ns % 1000);
        }
        stored
    }

    pub(crate) fn encode(
        format: FileFormat,
        packets: &[RecordedPacket],
        stats: Option<IfStats>,
    ) -> Vec<u8> {
        let mut writer = CaptureWriter::new(Vec::new(), format, SNAPLEN, "eth0").unwrap();
        for p in packets {
            writer.write_packet(p.ts_ns, &p.data, p.orig_len).unwrap();
        }
        writer.finish(stats).unwrap()
    }

    /// (end offset, packets before it) of every record boundary of `encode(format, packets, stats)`.
    pub(crate) fn boundaries(
        format: FileFormat,
        packets: &[RecordedPacket],
        stats: bool,
    ) -> Vec<(usize, u64)> {
        let header = if format == FileFormat::Pcapng {
            28 + 40
        } else {
            24
        };
        let mut ends = vec![(0, 0), (header, 0)];
        for (i, p) in packets.iter().enumerate() {
            let record = if format == FileFormat::Pcapng {
                32 + p.data.len().next_multiple_of(4)
            } else {
                16 + p.data.len()
            };
            ends.push((ends[ends.len() - 1].0 + record, i as u64 + 1));
        }
        if stats && format == FileFormat::Pcapng {
            ends.push((ends[ends.len() - 1].0 + 76, packets.len() as u64));
        }
        ends
    }

    /// Accepts `budget` bytes in all, then fails like a full disk (optionally also refusing to
    /// be cut back).
    struct FullDisk<O> {
        inner: O,
        budget: usize,
        refuse_truncate: bool,
    }

    impl<O: Output> Write for FullDisk<O> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.budget == 0 {
                return Err(io::Error::from_raw_os_error(28));
            }
            let n = buf.len().min(self.budget);
            self.budget -= n;
            self.inner.write_all(&buf[..n]).map(|()| n)
        }

        /// Like writev(2): takes from several slices in one call.
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            let mut n = 0;
            for b in bufs {
                match self.write(b) {
                    Ok(k) => n += k,
                    Err(e) if n == 0 => return Err(e),
                    Err(_) => break,
                }
                if self.budget == 0 {
                    break;
                }
            }
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            self.inner.flush()
        }
    }

    impl<O: Output> Output for FullDisk<O> {
        fn truncate_to(&mut self, len: u64) -> io::Result<()> {
            if self.refuse_truncate {
                return Err(io::Error::from_raw_os_error(5));
            }
            self.inner.truncate_to(len)
        }
    }

    /// How a test hands packets to the writer.
    #[derive(Debug, Clone, Copy)]
    enum Feed {
        /// `write_packet`, with this buffer size.
        Buffered(usize),
        /// Records made in place, this many per `write_records` call, two per slice.
        InPlace(usize),
        /// As `InPlace`, the records made by `append_record`.
        Appended(usize),
    }

    /// `packets` as records made in place by `writer` (or appended, with `append`): one
    /// buffer, records back to back, and where each record ends.
    fn records_in_place<O: Output>(
        writer: &CaptureWriter<O>,
        packets: &[RecordedPacket],
        append: bool,
    ) -> Result<(Vec<u8>, Vec<usize>), WriteError> {
        let format = writer.format;
        let (mut bytes, mut ends) = (Vec::new(), Vec::new());
        for p in packets {
            if append {
                writer.append_record(&mut bytes, p.ts_ns, &p.data, p.orig_len)?;
            } else {
                let start = bytes.len();
                bytes.resize(start + format.record_len(p.data.len()), 0xee);
                let at = start + format.record_head();
                bytes[at..at + p.data.len()].copy_from_slice(&p.data);
                writer.frame_record(&mut bytes[start..], p.ts_ns, p.data.len(), p.orig_len)?;
            }
            ends.push(bytes.len());
        }
        Ok((bytes, ends))
    }

    /// Feeds one step (a packet, or a group of records) to `writer`.
    fn feed<O: Output>(
        writer: &mut CaptureWriter<O>,
        feed: Feed,
        packets: &[RecordedPacket],
    ) -> Result<(), WriteError> {
        match feed {
            Feed::Buffered(_) => packets
                .iter()
                .try_for_each(|p| writer.write_packet(p.ts_ns, &p.data, p.orig_len)),
            Feed::InPlace(_) | Feed::Appended(_) => {
                let append = matches!(feed, Feed::Appended(_));
                let (bytes, ends) = records_in_place(writer, packets, append)?;
                let mut slices = Vec::new();
                let mut start = 0;
                for pair in ends.chunks(2) {
                    let end = pair[pair.len() - 1];
                    slices.push(IoSlice::new(&bytes[start..end]));
                    start = end;
                }
                writer.write_records(&slices, packets.len() as u64)
            }
        }
    }

    /// Writes `packets` (then finishes) until the first error; returns it with the writer's
    /// counters at that point (None if `new` itself failed).
    fn write_until_error<O: Output>(
        out: O,
        format: FileFormat,
        how: Feed,
        packets: &[RecordedPacket],
    ) -> Option<(WriteError, Option<(u64, u64)>)> {
        let mut writer = match CaptureWriter::new(out, format, SNAPLEN, "eth0") {
            Ok(w) => w,
            Err(e) => return Some((e, None)),
        };
        let step = match how {
            Feed::Buffered(buffer) => {
                writer = writer.with_buffer_size(buffer);
                1
            }
            Feed::InPlace(group) | Feed::Appended(group) => group,
        };
        for group in packets.chunks(step) {
            if let Err(e) = feed(&mut writer, how, group) {
                let again = feed(&mut writer, how, group).unwrap_err();
                assert_eq!(
                    again.to_string(),
                    e.to_string(),
                    "a failed writer repeats its error"
                );
                let counters = (writer.packets_written(), writer.bytes_written());
                let finished = writer.finish(Some(STATS)).err().map(|e| e.to_string());
                assert_eq!(finished, Some(e.to_string()));
                return Some((e, Some(counters)));
            }
        }
        writer.finish(Some(STATS)).err().map(|e| (e, None))
    }

    #[test]
    fn records_made_in_place_or_appended_are_the_bytes_write_packet_makes() {
        let packets = sample_packets();
        for format in FORMATS {
            let expected = encode(format, &packets, None);
            for group in [1, 2, 5, packets.len()] {
                let mut writer = CaptureWriter::new(Vec::new(), format, SNAPLEN, "eth0").unwrap();
                // Buffered and in-place packets mix, and keep their order.
                let p0 = &packets[0];
                writer
                    .write_packet(p0.ts_ns, &p0.data, p0.orig_len)
                    .unwrap();
                for (i, g) in packets[1..].chunks(group).enumerate() {
                    let how = if i % 2 == 0 {
                        Feed::InPlace(group)
                    } else {
                        Feed::Appended(group)
                    };
                    feed(&mut writer, how, g).unwrap();
                }
                assert_eq!(writer.packets_written(), packets.len() as u64);
                assert_eq!(writer.bytes_written(), expected.len() as u64);
                assert_eq!(
                    writer.finish(None).unwrap(),
                    expected,
                    "{format}, {group} records per call"
                );
            }
        }
    }

    #[test]
    fn records_appended_as_a_run_are_the_bytes_of_records_appended_one_by_one() {
        let packets = sample_packets();
        let run = |p: &[RecordedPacket]| -> Vec<(u64, Vec<u8>, u32)> {
            p.iter()
                .map(|p| (p.ts_ns, p.data.clone(), p.orig_len))
                .collect()
        };
        for format in FORMATS {
            let writer = CaptureWriter::new(Vec::new(), format, SNAPLEN, "eth0").unwrap();
            let (one_by_one, _) = records_in_place(&writer, &packets, true).unwrap();
            let mut records = vec![9u8; 5];
            let all = run(&packets);
            let (n, rejected) =
                writer.append_records(&mut records, all.iter().map(|(t, d, o)| (*t, &d[..], *o)));
            assert_eq!((n, rejected.is_none()), (packets.len(), true), "{format}");
            assert_eq!(
                records[..5],
                [9; 5],
                "{format}: appended after what was there"
            );
            assert_eq!(records[5..], one_by_one[..], "{format}");
            // A rejected packet stops the run: those before it are appended, it is not.
            let mut bad = run(&packets);
            bad[3].2 = 10;
            let mut records = Vec::new();
            let (n, rejected) =
                writer.append_records(&mut records, bad.iter().map(|(t, d, o)| (*t, &d[..], *o)));
            assert_eq!(n, 3, "{format}");
            assert!(matches!(rejected, Some(WriteError::BadLength { .. })));
            let (first_three, _) = records_in_place(&writer, &packets[..3], true).unwrap();
            assert_eq!(records, first_three, "{format}");
        }
    }

    #[test]
    fn framing_in_place_or_appending_rejects_what_write_packet_rejects() {
        let p = &sample_packets()[0];
        for format in FORMATS {
            let writer = CaptureWriter::new(Vec::new(), format, SNAPLEN, "eth0").unwrap();
            let len = format.record_len(p.data.len());
            assert!(len - p.data.len() <= format.record_overhead());
            let mut record = vec![7u8; len + 1];
            let wrong_room = writer.frame_record(&mut record, p.ts_ns, p.data.len(), p.orig_len);
            assert!(matches!(wrong_room, Err(WriteError::BadLength { .. })));
            let too_long = writer.frame_record(&mut record[..len], p.ts_ns, p.data.len(), 10);
            assert!(matches!(too_long, Err(WriteError::BadLength { .. })));
            assert!(
                record.iter().all(|&b| b == 7),
                "a rejected record is left alone"
            );
            let mut records = vec![7u8; 3];
            let too_long = writer.append_record(&mut records, p.ts_ns, &p.data, 10);
            assert!(matches!(too_long, Err(WriteError::BadLength { .. })));
            assert_eq!(records, [7; 3], "a rejected record is not appended");
        }
    }

    #[test]
    fn format_names_parse_and_display() {
        for format in FORMATS {
            assert_eq!(format.to_string().parse::<FileFormat>().unwrap(), format);
        }
        assert_eq!("pcap-ns".parse::<FileFormat>().unwrap(), FileFormat::PcapNs);
        let err = "pcap-ng".parse::<FileFormat>().unwrap_err();
        assert!(err.to_string().contains("\"pcap-ng\""), "{err}");
    }

    #[test]
    fn every_format_round_trips_timestamps_lengths_and_snaplen_cut_records() {
        let packets = sample_packets();
        for format in FORMATS {
            let file = read_bytes(&encode(format, &packets, None)).unwrap();
            assert_eq!(file.format, format);
            assert_eq!((file.linktype, file.snaplen), (1, SNAPLEN));
            assert_eq!(file.packets, as_stored(format, &packets), "{format}");
            assert_eq!(file.if_stats, None);
        }
    }

    #[test]
    fn pcap_magic_numbers_select_the_timestamp_unit() {
        let packets = sample_packets();
        let magic = |f| u32::from_ne_bytes(encode(f, &packets, None)[..4].try_into().unwrap());
        assert_eq!(magic(FileFormat::Pcap), 0xa1b2_c3d4);
        assert_eq!(magic(FileFormat::PcapNs), 0xa1b2_3c4d);
        assert_eq!(magic(FileFormat::Pcapng), 0x0a0d_0d0a);
    }

    #[test]
    fn pcapng_interface_carries_snaplen_name_and_nanosecond_resolution() {
        let bytes = encode(FileFormat::Pcapng, &[], None);
        assert_eq!(bytes.len(), 28 + 40);
        let (rest, shb) = pcap_parser::parse_sectionheaderblock(&bytes).unwrap();
        assert_eq!(
            (shb.major_version, shb.minor_version, shb.section_len),
            (1, 0, -1)
        );
        let (rest, block) = pcap_parser::parse_block_le(rest).unwrap();
        assert!(rest.is_empty());
        let pcap_parser::Block::InterfaceDescription(idb) = block else {
            panic!("expected an IDB, got {block:?}")
        };
        assert_eq!((idb.linktype.0, idb.snaplen), (1, SNAPLEN));
        assert_eq!(idb.if_tsresol().unwrap().unwrap(), 9);
        assert_eq!(idb.if_name().unwrap().unwrap(), "eth0");
    }

    #[test]
    fn pcapng_statistics_block_reads_back_and_pcap_ignores_stats() {
        let packets = sample_packets();
        let file = read_bytes(&encode(FileFormat::Pcapng, &packets, Some(STATS))).unwrap();
        assert_eq!(file.if_stats, Some(STATS));
        assert_eq!(file.packets, packets);
        for format in [FileFormat::Pcap, FileFormat::PcapNs] {
            assert_eq!(
                encode(format, &packets, Some(STATS)),
                encode(format, &packets, None)
            );
        }
    }

    #[test]
    fn buffer_size_changes_only_when_bytes_are_handed_over() {
        let packets = sample_packets();
        for format in FORMATS {
            let expected = encode(format, &packets, None);
            for buffer in [0, 1, 100, 4096] {
                let mut writer = CaptureWriter::new(Vec::new(), format, SNAPLEN, "eth0")
                    .unwrap()
                    .with_buffer_size(buffer);
                for (i, p) in packets.iter().enumerate() {
                    writer.write_packet(p.ts_ns, &p.data, p.orig_len).unwrap();
                    assert_eq!(writer.packets_written(), i as u64 + 1);
                }
                assert_eq!(writer.bytes_written(), expected.len() as u64);
                assert_eq!(
                    writer.finish(None).unwrap(),
                    expected,
                    "{format} with a {buffer}-byte buffer"
                );
            }
        }
    }

    #[test]
    fn short_and_interrupted_writes_are_retried() {
        struct Trickle(Vec<u8>, usize);
        impl Write for Trickle {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.1 += 1;
                if self.1 & 1 == 0 {
                    return Err(io::ErrorKind::Interrupted.into());
                }
                let n = buf.len().min(7);
                self.0.extend_from_slice(&buf[..n]);
                Ok(n)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        impl Output for Trickle {}
        let packets = sample_packets();
        for how in [Feed::Buffered(DEFAULT_BUFFER), Feed::InPlace(4)] {
            let mut writer =
                CaptureWriter::new(Trickle(Vec::new(), 0), FileFormat::Pcapng, SNAPLEN, "eth0")
                    .unwrap();
            feed(&mut writer, how, &packets).unwrap();
            assert_eq!(
                writer.finish(None).unwrap().0,
                encode(FileFormat::Pcapng, &packets, None),
                "{how:?}"
            );
        }
    }

    #[test]
    fn inconsistent_packets_are_rejected_and_the_writer_stays_usable() {
        let ok = &sample_packets()[0];
        for format in FORMATS {
            let mut writer = CaptureWriter::new(Vec::new(), format, SNAPLEN, "eth0").unwrap();
            let too_long = vec![0; SNAPLEN as usize + 1];
            let err = writer.write_packet(T0, &too_long, 2000).unwrap_err();
            assert!(
                matches!(
                    err,
                    WriteError::BadLength {
                        caplen: 257,
                        orig_len: 2000,
                        snaplen: SNAPLEN
                    }
                ),
                "{err}"
            );
            let err = writer
                .write_packet(T0, &ok.data, ok.data.len() as u32 - 1)
                .unwrap_err();
            assert!(matches!(err, WriteError::BadLength { .. }), "{err}");
            let after_2106 = (u64::from(u32::MAX) + 1) * NS_PER_SEC;
            let result = writer.write_packet(after_2106, &ok.data, ok.orig_len);
            if format == FileFormat::Pcapng {
                result.unwrap();
            } else {
                assert!(
                    matches!(result, Err(WriteError::Timestamp { ts_ns }) if ts_ns == after_2106)
                );
            }
            writer
                .write_packet(ok.ts_ns, &ok.data, ok.orig_len)
                .unwrap();
            let file = read_bytes(&writer.finish(None).unwrap()).unwrap();
            assert_eq!(
                file.packets.last(),
                as_stored(format, std::slice::from_ref(ok)).last()
            );
        }
        let long_name = "x".repeat(70_000);
        let err =
            CaptureWriter::new(Vec::new(), FileFormat::Pcapng, SNAPLEN, &long_name).unwrap_err();
        assert!(
            matches!(
                err,
                WriteError::Option {
                    code: 2,
                    len: 70_000
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn disk_full_leaves_exactly_the_whole_records_that_fit() {
        let packets = sample_packets();
        for format in FORMATS {
            let ends = boundaries(format, &packets, true);
            let total = ends[ends.len() - 1].0;
            let feeds = [
                Feed::Buffered(0),
                Feed::Buffered(100),
                Feed::Buffered(DEFAULT_BUFFER),
                Feed::InPlace(1),
                Feed::InPlace(4),
                Feed::Appended(3),
            ];
            for how in feeds {
                for budget in 0..=total {
                    let mut sink = Vec::new();
                    let disk = FullDisk {
                        inner: &mut sink,
                        budget,
                        refuse_truncate: false,
                    };
                    let outcome = write_until_error(disk, format, how, &packets);
                    let &(kept, whole) = ends.iter().rev().find(|(end, _)| *end <= budget).unwrap();
                    let context = format!("{format}, {how:?}, disk full after {budget} bytes");
                    assert_eq!(sink.len(), kept, "{context}");
                    if budget == total {
                        assert!(outcome.is_none(), "{context}");
                        let stats = (format == FileFormat::Pcapng).then_some(STATS);
                        assert_eq!(read_bytes(&sink).unwrap().if_stats, stats, "{context}");
                        continue;
                    }
                    let (err, counters) = outcome.expect(&context);
                    let WriteError::Io {
                        source,
                        packets: reported,
                    } = &err
                    else {
                        panic!("{context}: {err}")
                    };
                    assert_eq!(
                        (source.raw_os_error(), *reported),
                        (Some(28), whole),
                        "{context}"
                    );
                    assert!(
                        err.to_string()
                            .contains(&format!("holds {whole} whole packets")),
                        "{err}"
                    );
                    if let Some(counters) = counters {
                        assert_eq!(counters, (whole, kept as u64), "{context}");
                    }
                    if kept > 0 {
                        let file = read_bytes(&sink).unwrap();
                        assert_eq!(
                            file.packets,
                            as_stored(format, &packets[..whole as usize]),
                            "{context}"
                        );
                    }
                }
            }
        }
    }

    /// Takes each batch at once but lands it only once `lag` later batches have ended (as
    /// a direct-I/O file's thread does); after `budget` batches have landed, the next fails
    /// like a full disk, and the batches behind it are lost.
    struct Behind<'a> {
        bytes: &'a mut Vec<u8>,
        pending: VecDeque<u64>,
        landed: u64,
        lag: usize,
        budget: usize,
        failed: bool,
    }

    impl Behind<'_> {
        fn land(&mut self, lag: usize) -> io::Result<()> {
            while self.pending.len() > lag {
                if self.failed || self.budget == 0 {
                    self.failed = true;
                    return Err(io::Error::from_raw_os_error(28));
                }
                self.budget -= 1;
                self.landed = self.pending.pop_front().unwrap_or_default();
            }
            Ok(())
        }
    }

    impl Write for Behind<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.bytes.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Output for Behind<'_> {
        fn end_batch(&mut self) -> io::Result<()> {
            self.pending.push_back(self.bytes.len() as u64);
            self.land(self.lag)
        }

        fn partial_batch_kept(&self, _accepted: usize) -> usize {
            0
        }

        fn landed(&self) -> Option<u64> {
            Some(self.landed)
        }

        fn truncate_to(&mut self, len: u64) -> io::Result<()> {
            assert_eq!(len, self.landed, "cut back to the last batch that landed");
            self.bytes.truncate(len as usize);
            Ok(())
        }

        fn close(&mut self) -> io::Result<()> {
            self.land(0)
        }
    }

    #[test]
    fn an_output_that_loses_batches_on_their_way_keeps_and_reports_those_that_landed() {
        let packets = sample_packets();
        for format in FORMATS {
            for how in [Feed::Buffered(100), Feed::InPlace(3)] {
                for lag in [0, 1, 3] {
                    for budget in 0..40 {
                        let mut sink = Vec::new();
                        let out = Behind {
                            bytes: &mut sink,
                            pending: VecDeque::new(),
                            landed: 0,
                            lag,
                            budget,
                            failed: false,
                        };
                        let outcome = write_until_error(out, format, how, &packets);
                        let context = format!("{format}, {how:?}, lag {lag}, budget {budget}");
                        let Some((err, _)) = outcome else {
                            let file = read_bytes(&sink).unwrap();
                            assert_eq!(file.packets.len(), packets.len(), "{context}");
                            continue;
                        };
                        let reported = err.packets_kept().expect("an I/O error");
                        let kept = match read_bytes(&sink) {
                            Ok(file) => file.packets,
                            Err(_) if sink.is_empty() || reported == 0 => Vec::new(),
                            Err(e) => panic!("{context}: {e}"),
                        };
                        assert_eq!(kept.len() as u64, reported, "{context}: {err}");
                        assert_eq!(kept, as_stored(format, &packets[..kept.len()]), "{context}");
                    }
                }
            }
        }
    }

    #[test]
    fn failing_to_cut_back_reports_a_torn_output() {
        let packets = sample_packets();
        let mut sink = Vec::new();
        let disk = FullDisk {
            inner: &mut sink,
            budget: 24 + 16 + 60 + 5,
            refuse_truncate: true,
        };
        let (err, _) =
            write_until_error(disk, FileFormat::Pcap, Feed::Buffered(0), &packets).unwrap();
        assert!(matches!(err, WriteError::Torn { packets: 1, .. }), "{err}");
        assert!(err.to_string().contains("partial record"), "{err}");
        assert!(matches!(
            read_bytes(&sink),
            Err(crate::ReadError::Truncated {
                packets: 1,
                offset: 100
            })
        ));
    }

    #[test]
    fn full_disk_on_a_real_file_keeps_it_readable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("full.pcapng");
        let packets = sample_packets();
        let budget = 68 + 3 * 92 + 10; // header, three 60..62-byte packets, part of the fourth
        let disk = FullDisk {
            inner: File::create(&path).unwrap(),
            budget,
            refuse_truncate: false,
        };
        let (err, _) =
            write_until_error(disk, FileFormat::Pcapng, Feed::Buffered(100), &packets).unwrap();
        assert!(matches!(err, WriteError::Io { packets: 3, .. }), "{err}");
        assert_eq!(read_file(&path).unwrap().packets, packets[..3]);
    }

    /// The first of `paths` that exists (the caller fails naming the tool when none does).
    fn tool(paths: &[&'static str]) -> Option<&'static str> {
        paths.iter().copied().find(|p| Path::new(p).exists())
    }

    fn run(tool: &str, args: &[&str]) -> String {
        let out = Command::new(tool).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{tool} {args:?} failed: {stderr}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn tcpdump_reads_the_same_packets_and_timestamps() {
        // ./dev deps installs tcpdump: without it the test fails, it never passes unread.
        let tcpdump = tool(&["/usr/bin/tcpdump", "/usr/sbin/tcpdump"])
            .expect("tcpdump is not installed (./dev deps installs it)");
        let dir = tempfile::tempdir().unwrap();
        let packets = sample_packets();
        for format in FORMATS {
            let path = dir.path().join(format!("sample.{format}"));
            std::fs::write(&path, encode(format, &packets, Some(STATS))).unwrap();
            let path = path.to_str().unwrap();
            let out = run(
                tcpdump,
                &["-r", path, "-nn", "-tt", "--time-stamp-precision=nano"],
            );
            // One line per packet; unknown ethertypes add indented hex-dump lines.
            let times: Vec<&str> = out
                .lines()
                .filter(|l| !l.starts_with('\t'))
                .filter_map(|l| l.split(' ').next())
                .collect();
            let expected: Vec<String> = as_stored(format, &packets)
                .iter()
                .map(|p| format!("{}.{:09}", p.ts_ns / NS_PER_SEC, p.ts_ns % NS_PER_SEC))
                .collect();
            assert_eq!(times, expected, "{format}: tcpdump printed\n{out}");
        }
    }

    #[test]
    fn tshark_reads_pcapng_nanosecond_times_and_lengths() {
        // ./dev deps installs tshark: without it the test fails, it never passes unread.
        let tshark =
            tool(&["/usr/bin/tshark"]).expect("tshark is not installed (./dev deps installs it)");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sample.pcapng");
        let packets = sample_packets();
        std::fs::write(&path, encode(FileFormat::Pcapng, &packets, Some(STATS))).unwrap();
        let fields = [
            "-T",
            "fields",
            "-e",
            "frame.time_epoch",
            "-e",
            "frame.len",
            "-e",
            "frame.cap_len",
        ];
        let out = run(
            tshark,
            &[&["-r", path.to_str().unwrap()][..], &fields].concat(),
        );
        let expected: String = packets
            .iter()
            .map(|p| {
                format!(
                    "{}.{:09}\t{}\t{}\n",
                    p.ts_ns / NS_PER_SEC,
                    p.ts_ns % NS_PER_SEC,
                    p.orig_len,
                    p.data.len()
                )
            })
            .collect();
        assert_eq!(out, expected);
    }
}
