//! Decoding pcap and pcapng files into memory, for tests, verification and replay.
//!
//! The byte-level parsing is pcap-parser's; this module adds the policy: which blocks matter,
//! how each interface's timestamp units become nanoseconds, and errors that say where a file went
//! bad and how many good packets came before. Every block is cut out by its own length field
//! before it is parsed, so a block that runs past the end of the file is reported as truncation
//! and one whose contents contradict its length as malformed.

use std::io;
use std::path::{Path, PathBuf};

use pcap_parser::nom::IResult;
use pcap_parser::{
    parse_block_be, parse_block_le, parse_pcap_frame, parse_pcap_frame_be,
    parse_pcap_frame_modified, parse_pcap_header, Block, LegacyPcapBlock, PcapError, PcapNGOption,
};
use thiserror::Error;

use crate::write::{BYTE_ORDER_MAGIC, SHB_TYPE};
use crate::{FileFormat, IfStats};

const NS_PER_SEC: u64 = 1_000_000_000;
/// libpcap refuses records whose captured length exceeds both the snaplen and this.
const MAX_PCAP_CAPLEN: u32 = 262_144;
const OPT_IF_TSOFFSET: u16 = 14;
const OPT_ISB_IFRECV: u16 = 4;
const OPT_ISB_IFDROP: u16 = 5;

/// One packet as stored in a capture file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedPacket {
    /// Nanoseconds since the Unix epoch (0 for pcapng Simple Packet Blocks, which have none).
    pub ts_ns: u64,
    /// The captured bytes.
    pub data: Vec<u8>,
    /// The packet's length on the wire (larger than `data` if the snaplen cut it).
    pub orig_len: u32,
}

/// A whole capture file in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureFile {
    /// For pcapng: [`FileFormat::Pcapng`] whatever the timestamp resolution.
    pub format: FileFormat,
    /// Link type of the (first) interface; 0 if a pcapng file describes none.
    pub linktype: u32,
    /// Snapshot length of the (first) interface; 0 means unlimited or unknown.
    pub snaplen: u32,
    pub packets: Vec<RecordedPacket>,
    /// From the last pcapng Interface Statistics Block; a counter it lacks reads as 0.
    pub if_stats: Option<IfStats>,
    /// pcap records whose sub-second field is a second or more (a million microseconds or
    /// more): read as they say, the time running into the following seconds, as tcpdump
    /// and Wireshark show them; the caller warns.
    pub odd_timestamps: u64,
}

/// Why a capture file could not be read.
#[derive(Debug, Error)]
pub enum ReadError {
    #[error("cannot read {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("not a pcap or pcapng file (it starts with {magic:#010x})")]
    NotCapture { magic: u32 },
    /// The data stops inside a record: `packets` whole packets precede byte `offset`.
    #[error("capture file is truncated: it ends inside the record at byte {offset}, after {packets} whole packets")]
    Truncated { packets: u64, offset: usize },
    #[error("malformed record at byte {offset}, after {packets} good packets: {reason}")]
    Malformed {
        packets: u64,
        offset: usize,
        reason: &'static str,
    },
    #[error("unsupported capture file: {0}")]
    Unsupported(String),
    /// Reading a stream failed.
    #[error("cannot read the capture: {0}")]
    Stream(#[source] io::Error),
}

/// Read and decode the capture file at `path`.
pub fn read_file(path: &Path) -> Result<CaptureFile, ReadError> {
    let bytes = std::fs::read(path).map_err(|source| ReadError::Io {
        path: path.to_owned(),
        source,
    })?;
    read_bytes(&bytes)
}

/// Decode a whole pcap or pcapng file held in memory.
pub fn read_bytes(bytes: &[u8]) -> Result<CaptureFile, ReadError> {
    let Some((mut decoder, mut offset)) = Decoder::start(bytes)? else {
        return Err(ReadError::Truncated {
            packets: 0,
            offset: 0,
        });
    };
    let mut packets = Vec::new();
    loop {
        match decoder.next(&bytes[offset..], offset)? {
            Some((n, found)) => {
                if let Some(f) = found {
                    packets.push(RecordedPacket {
                        ts_ns: f.ts_ns,
                        data: bytes[offset..][f.data].to_vec(),
                        orig_len: f.orig_len,
                    });
                }
                offset += n;
            }
            None if offset == bytes.len() => break,
            None => return Err(decoder.at(offset).truncated()),
        }
    }
    let mut file = decoder.file;
    file.packets = packets;
    Ok(file)
}

/// Where we are in the file, for error messages.
struct Position {
    packets: u64,
    offset: usize,
}

impl Position {
    fn truncated(&self) -> ReadError {
        ReadError::Truncated {
            packets: self.packets,
            offset: self.offset,
        }
    }

    fn malformed(&self, reason: &'static str) -> ReadError {
        ReadError::Malformed {
            packets: self.packets,
            offset: self.offset,
            reason,
        }
    }
}

type FrameParser =
    for<'a> fn(&'a [u8]) -> IResult<&'a [u8], LegacyPcapBlock<'a>, PcapError<&'a [u8]>>;

/// A packet found in a window of bytes: its data as a range of the window.
#[derive(Clone)]
pub(crate) struct Found {
    pub(crate) ts_ns: u64,
    pub(crate) data: std::ops::Range<usize>,
    pub(crate) orig_len: u32,
}

/// Decodes a file one record (pcap) or block (pcapng) at a time from windows of its bytes,
/// keeping what earlier ones said (byte order, interfaces, statistics): the one decoder of
/// both [`read_bytes`] (the window is the rest of the file) and [`crate::stream`] (the
/// window is what a reused buffer holds).
pub(crate) struct Decoder {
    /// The header's facts; `packets` stays empty.
    pub(crate) file: CaptureFile,
    /// Packets decoded so far.
    packets: u64,
    kind: Kind,
}

enum Kind {
    Pcap {
        parse: FrameParser,
        record_header: usize,
        frac_ns: u64,
        max_caplen: u32,
        be: bool,
    },
    Pcapng {
        be: bool,
        interfaces: Vec<Interface>,
        first_interface_seen: bool,
    },
}

impl Decoder {
    /// The decoder of the file that starts with `bytes`, and how many bytes its file header
    /// takes; None when `bytes` is too short to tell.
    pub(crate) fn start(bytes: &[u8]) -> Result<Option<(Decoder, usize)>, ReadError> {
        let Some(magic) = u32_at(bytes, 0, false) else {
            return Ok(None);
        };
        let mut file = CaptureFile {
            format: FileFormat::Pcapng,
            linktype: 0,
            snaplen: 0,
            packets: Vec::new(),
            if_stats: None,
            odd_timestamps: 0,
        };
        if magic == SHB_TYPE {
            let kind = Kind::Pcapng {
                be: false,
                interfaces: Vec::new(),
                first_interface_seen: false,
            };
            let decoder = Decoder {
                file,
                packets: 0,
                kind,
            };
            return Ok(Some((decoder, 0)));
        }
        let header = match parse_pcap_header(bytes) {
            Ok((_, header)) => header,
            Err(pcap_parser::nom::Err::Incomplete(_)) => return Ok(None),
            Err(_) => return Err(ReadError::NotCapture { magic }),
        };
        if header.version_major != 2 {
            let (major, minor) = (header.version_major, header.version_minor);
            return Err(ReadError::Unsupported(format!(
                "pcap version {major}.{minor}"
            )));
        }
        let be = header.is_bigendian();
        let (parse, record_header): (FrameParser, usize) = match (header.is_modified_format(), be) {
            (true, _) => (parse_pcap_frame_modified, 24),
            (false, true) => (parse_pcap_frame_be, 16),
            (false, false) => (parse_pcap_frame, 16),
        };
        let frac_ns = if header.is_nanosecond_precision() {
            1
        } else {
            1000
        };
        file.format = if frac_ns == 1 {
            FileFormat::PcapNs
        } else {
            FileFormat::Pcap
        };
        (file.linktype, file.snaplen) = (header.network.0 as u32, header.snaplen);
        let kind = Kind::Pcap {
            parse,
            record_header,
            frac_ns,
            max_caplen: header.snaplen.max(MAX_PCAP_CAPLEN),
            be,
        };
        let decoder = Decoder {
            file,
            packets: 0,
            kind,
        };
        Ok(Some((decoder, header.size())))
    }

    /// Packets decoded so far.
    pub(crate) fn packets(&self) -> u64 {
        self.packets
    }

    /// Where a record at file `offset` is, for its errors.
    fn at(&self, offset: usize) -> Position {
        Position {
            packets: self.packets,
            offset,
        }
    }

    /// Decodes the record or block `window` (the file from byte `offset`) starts with: how
    /// many bytes it takes and the packet it holds, if any; None when the window ends
    /// inside it.
    pub(crate) fn next(
        &mut self,
        window: &[u8],
        offset: usize,
    ) -> Result<Option<(usize, Option<Found>)>, ReadError> {
        let at = self.at(offset);
        let step = match &mut self.kind {
            Kind::Pcap {
                parse,
                record_header,
                frac_ns,
                max_caplen,
                be,
            } => {
                let Some(caplen) = u32_at(window, 8, *be) else {
                    return Ok(None);
                };
                if caplen > *max_caplen {
                    return Err(at.malformed("captured length exceeds the snaplen"));
                }
                let record_len = *record_header + caplen as usize;
                let Some(record) = window.get(..record_len) else {
                    return Ok(None);
                };
                let (_, frame) =
                    parse(record).map_err(|_| at.malformed("unparsable packet record"))?;
                if u64::from(frame.ts_usec) * *frac_ns >= NS_PER_SEC {
                    self.file.odd_timestamps += 1;
                }
                let data = frame
                    .data
                    .get(..caplen as usize)
                    .ok_or_else(|| at.malformed("short packet record"))?;
                let found = Found {
                    ts_ns: u64::from(frame.ts_sec) * NS_PER_SEC
                        + u64::from(frame.ts_usec) * *frac_ns,
                    data: within(record, data),
                    orig_len: frame.origlen,
                };
                (record_len, Some(found))
            }
            Kind::Pcapng {
                be,
                interfaces,
                first_interface_seen,
            } => {
                let Some((len, block_be)) = block(window, *be, &at)? else {
                    return Ok(None);
                };
                let raw = &window[..len];
                let parsed = if block_be {
                    parse_block_be(raw)
                } else {
                    parse_block_le(raw)
                };
                let (_, block) =
                    parsed.map_err(|_| at.malformed("block contents do not match its length"))?;
                let found = match block {
                    Block::SectionHeader(shb) => {
                        if shb.major_version != 1 {
                            let (major, minor) = (shb.major_version, shb.minor_version);
                            return Err(ReadError::Unsupported(format!(
                                "pcapng version {major}.{minor}"
                            )));
                        }
                        *be = block_be;
                        interfaces.clear();
                        None
                    }
                    Block::InterfaceDescription(idb) => {
                        let units_per_sec = units_per_sec(idb.if_tsresol)
                            .ok_or_else(|| at.malformed("invalid if_tsresol"))?;
                        let offset_secs =
                            option_u64(&idb.options, OPT_IF_TSOFFSET, *be).unwrap_or(0) as i64;
                        if !*first_interface_seen {
                            *first_interface_seen = true;
                            (self.file.linktype, self.file.snaplen) =
                                (idb.linktype.0 as u32, idb.snaplen);
                        }
                        interfaces.push(Interface {
                            snaplen: idb.snaplen,
                            units_per_sec,
                            offset_secs,
                        });
                        None
                    }
                    Block::EnhancedPacket(epb) => {
                        let interface = interfaces.get(epb.if_id as usize);
                        let interface = interface
                            .ok_or_else(|| at.malformed("packet of an undeclared interface"))?;
                        let data = epb
                            .data
                            .get(..epb.caplen as usize)
                            .ok_or_else(|| at.malformed("short packet"))?;
                        let ts_ns = interface.ts_ns(epb.ts_high, epb.ts_low);
                        let ts_ns = ts_ns.ok_or_else(|| at.malformed("timestamp out of range"))?;
                        Some(Found {
                            ts_ns,
                            data: within(raw, data),
                            orig_len: epb.origlen,
                        })
                    }
                    Block::SimplePacket(spb) => {
                        // Captured length = min(original length, snaplen); the rest is
                        // padding.
                        let interface = interfaces
                            .first()
                            .ok_or_else(|| at.malformed("packet before any interface"))?;
                        let limit = if interface.snaplen == 0 {
                            u32::MAX
                        } else {
                            interface.snaplen
                        };
                        let caplen = spb.origlen.min(limit) as usize;
                        let data = &spb.data[..caplen.min(spb.data.len())];
                        Some(Found {
                            ts_ns: 0,
                            data: within(raw, data),
                            orig_len: spb.origlen,
                        })
                    }
                    Block::InterfaceStatistics(isb) => {
                        let received = option_u64(&isb.options, OPT_ISB_IFRECV, *be);
                        let dropped = option_u64(&isb.options, OPT_ISB_IFDROP, *be);
                        if received.is_some() || dropped.is_some() {
                            let (received, dropped) = (received.unwrap_or(0), dropped.unwrap_or(0));
                            self.file.if_stats = Some(IfStats { received, dropped });
                        }
                        None
                    }
                    _ => None,
                };
                (len, found)
            }
        };
        if step.1.is_some() {
            self.packets += 1;
        }
        Ok(Some(step))
    }
}

/// The length and byte order of the pcapng block `window` starts with, once the window
/// holds all of it: a section header says its own byte order, other blocks have the current
/// section's (`be`).
fn block(window: &[u8], be: bool, at: &Position) -> Result<Option<(usize, bool)>, ReadError> {
    let Some(block_type) = u32_at(window, 0, false) else {
        return Ok(None);
    };
    let block_be = if block_type == SHB_TYPE {
        match u32_at(window, 8, false) {
            None => return Ok(None),
            Some(BYTE_ORDER_MAGIC) => false,
            Some(m) if m == BYTE_ORDER_MAGIC.swap_bytes() => true,
            Some(_) => return Err(at.malformed("unknown byte-order magic")),
        }
    } else {
        be
    };
    let Some(len) = u32_at(window, 4, block_be) else {
        return Ok(None);
    };
    let len = len as usize;
    if len < 12 || len & 3 != 0 {
        return Err(at.malformed("invalid block length"));
    }
    Ok((len <= window.len()).then_some((len, block_be)))
}

/// Where `part`, a slice of `whole`, lies in it.
fn within(whole: &[u8], part: &[u8]) -> std::ops::Range<usize> {
    let start = part.as_ptr() as usize - whole.as_ptr() as usize;
    start..start + part.len()
}

/// What a pcapng Interface Description Block says about its packets.
struct Interface {
    snaplen: u32,
    units_per_sec: u64,
    offset_secs: i64,
}

impl Interface {
    fn ts_ns(&self, high: u32, low: u32) -> Option<u64> {
        let units = (u64::from(high) << 32) | u64::from(low);
        let ns = u128::from(units) * u128::from(NS_PER_SEC) / u128::from(self.units_per_sec);
        let ns = i128::try_from(ns).ok()? + i128::from(self.offset_secs) * i128::from(NS_PER_SEC);
        u64::try_from(ns).ok()
    }
}

/// `if_tsresol`: a power of 10, or with the high bit set a power of 2. (pcap-parser 0.17's
/// `ts_resolution` rejects every power of 2.)
fn units_per_sec(if_tsresol: u8) -> Option<u64> {
    let exponent = u32::from(if_tsresol & 0x7f);
    if if_tsresol & 0x80 == 0 {
        10u64.checked_pow(exponent)
    } else {
        1u64.checked_shl(exponent)
    }
}

/// The first 8-byte option `code`, in the section's byte order (pcap-parser's own accessors
/// assume little-endian).
fn option_u64(options: &[PcapNGOption], code: u16, be: bool) -> Option<u64> {
    let option = options.iter().find(|o| o.code.0 == code && o.len == 8)?;
    let value: [u8; 8] = option.value().get(..8)?.try_into().ok()?;
    Some(if be {
        u64::from_be_bytes(value)
    } else {
        u64::from_le_bytes(value)
    })
}

fn u32_at(bytes: &[u8], at: usize, be: bool) -> Option<u32> {
    let value: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(if be {
        u32::from_be_bytes(value)
    } else {
        u32::from_le_bytes(value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::tests::{
        as_stored, boundaries, encode, sample_packets, FORMATS, SNAPLEN, STATS,
    };
    use crate::CaptureWriter;

    const SHB_LEN: usize = 28;
    const PCAPNG_HEADER_LEN: usize = 68;
    /// Offset of the `if_tsresol` value in our pcapng header (interface "eth0").
    const TSRESOL_AT: usize = SHB_LEN + 16 + 8 + 4;

    fn ne32(bytes: &[u8], at: usize) -> usize {
        u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap()) as usize
    }

    fn ne16(bytes: &[u8], at: usize) -> usize {
        u16::from_ne_bytes(bytes[at..at + 2].try_into().unwrap()) as usize
    }

    /// Rewrite one of our pcap files in the other byte order, field by field.
    fn swap_pcap(ours: &[u8]) -> Vec<u8> {
        let mut out = ours.to_vec();
        let mut swap = |at: usize, width: usize| out[at..at + width].reverse();
        [(0, 4), (4, 2), (6, 2), (8, 4), (12, 4), (16, 4), (20, 4)]
            .into_iter()
            .for_each(|(a, w)| swap(a, w));
        let mut pos = 24;
        while pos < ours.len() {
            (0..4).for_each(|k| swap(pos + 4 * k, 4));
            pos += 16 + ne32(ours, pos + 8);
        }
        out
    }

    /// Rewrite one of our pcapng files in the other byte order, field by field.
    fn swap_pcapng(ours: &[u8]) -> Vec<u8> {
        let mut out = ours.to_vec();
        let mut swap = |at: usize, width: usize| out[at..at + width].reverse();
        let mut pos = 0;
        while pos < ours.len() {
            let (block_type, len, body) = (ne32(ours, pos), ne32(ours, pos + 4), pos + 8);
            [(pos, 4), (pos + 4, 4), (pos + len - 4, 4)]
                .into_iter()
                .for_each(|(a, w)| swap(a, w));
            let mut option = match block_type {
                0x0a0d_0d0a => {
                    [(body, 4), (body + 4, 2), (body + 6, 2), (body + 8, 8)]
                        .into_iter()
                        .for_each(|(a, w)| swap(a, w));
                    body + 16
                }
                1 => {
                    [(body, 2), (body + 2, 2), (body + 4, 4)]
                        .into_iter()
                        .for_each(|(a, w)| swap(a, w));
                    body + 8
                }
                6 => {
                    (0..5).for_each(|k| swap(body + 4 * k, 4));
                    body + 20 + ne32(ours, body + 12).next_multiple_of(4)
                }
                5 => {
                    (0..3).for_each(|k| swap(body + 4 * k, 4));
                    body + 12
                }
                other => panic!("unexpected block type {other}"),
            };
            while option < pos + len - 4 {
                let (code, option_len) = (ne16(ours, option), ne16(ours, option + 2));
                swap(option, 2);
                swap(option + 2, 2);
                match (block_type, code) {
                    // isb_starttime, isb_endtime: two 32-bit halves.
                    (5, 2 | 3) => [option + 4, option + 8]
                        .into_iter()
                        .for_each(|a| swap(a, 4)),
                    // isb_ifrecv, isb_ifdrop.
                    (5, 4 | 5) => swap(option + 4, 8),
                    _ => {}
                }
                option += 4 + option_len.next_multiple_of(4);
            }
            pos += len;
        }
        out
    }

    /// Record boundaries as a reader sees them: for pcapng the section header alone is whole.
    fn reader_boundaries(format: FileFormat) -> Vec<(usize, u64)> {
        let mut ends = boundaries(format, &sample_packets(), true);
        if format == FileFormat::Pcapng {
            ends.insert(1, (SHB_LEN, 0));
        }
        ends
    }

    #[test]
    fn cut_files_report_how_many_whole_packets_precede_the_cut() {
        let packets = sample_packets();
        for format in FORMATS {
            let full = encode(format, &packets, Some(STATS));
            let ends = reader_boundaries(format);
            for cut in 0..full.len() {
                let &(end, whole) = ends.iter().rev().find(|(end, _)| *end <= cut).unwrap();
                match read_bytes(&full[..cut]) {
                    Ok(file) if cut == end && cut > 0 => {
                        assert_eq!(file.packets, as_stored(format, &packets[..whole as usize]));
                    }
                    Err(err @ ReadError::Truncated { packets, offset })
                        if cut != end || cut == 0 =>
                    {
                        assert_eq!((packets, offset), (whole, end), "{format} cut at {cut}");
                        assert!(
                            err.to_string()
                                .contains(&format!("after {whole} whole packets")),
                            "{err}"
                        );
                    }
                    other => panic!("{format} cut at {cut} (boundary {end}): {other:?}"),
                }
            }
        }
    }

    #[test]
    fn corrupted_files_give_errors_not_panics() {
        let mut files = Vec::new();
        for format in FORMATS {
            let ours = encode(format, &sample_packets(), Some(STATS));
            let swapped = if format == FileFormat::Pcapng {
                swap_pcapng(&ours)
            } else {
                swap_pcap(&ours)
            };
            files.extend([ours, swapped]);
        }
        let (mut accepted, mut rejected) = (0, 0);
        let mut check = |bytes: &[u8]| match read_bytes(bytes) {
            Ok(file) => accepted += file.packets.len().min(1),
            Err(err) => rejected += err.to_string().len().min(1),
        };
        let interesting = [
            0,
            1,
            3,
            4,
            5,
            6,
            11,
            12,
            13,
            16,
            0x7fff_ffff,
            0x8000_0000,
            0x8000_0001,
            u32::MAX - 3,
            u32::MAX,
        ];
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng as usize
        };
        for file in &files {
            for cut in 0..file.len() {
                check(&file[..cut]);
            }
            for bit in 0..file.len() * 8 {
                let mut bad = file.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                check(&bad);
            }
            for at in (0..file.len() - 3).step_by(2) {
                for value in interesting {
                    for bytes in [value.to_le_bytes(), value.to_be_bytes()] {
                        let mut bad = file.clone();
                        bad[at..at + 4].copy_from_slice(&bytes);
                        check(&bad);
                    }
                }
            }
            for _ in 0..2000 {
                let mut bad = file.clone();
                for _ in 0..1 + next() % 4 {
                    let at = next() % bad.len();
                    bad[at] = next() as u8;
                }
                let cut = bad.len() - next() % 64;
                check(&bad[..cut]);
            }
        }
        assert!(
            accepted > 0 && rejected > 0,
            "accepted {accepted}, rejected {rejected}"
        );
    }

    #[test]
    fn other_byte_order_reads_the_same() {
        let packets = sample_packets();
        for format in FORMATS {
            let ours = encode(format, &packets, Some(STATS));
            let swapped = if format == FileFormat::Pcapng {
                swap_pcapng(&ours)
            } else {
                swap_pcap(&ours)
            };
            assert_ne!(swapped, ours);
            assert_eq!(
                read_bytes(&swapped).unwrap(),
                read_bytes(&ours).unwrap(),
                "{format}"
            );
        }
    }

    #[test]
    fn pcapng_timestamps_follow_if_tsresol() {
        let with_tsresol = |ts_ns: u64, value: u8| {
            let mut writer =
                CaptureWriter::new(Vec::new(), FileFormat::Pcapng, SNAPLEN, "eth0").unwrap();
            writer.write_packet(ts_ns, &[0; 60], 60).unwrap();
            let mut bytes = writer.finish(None).unwrap();
            assert_eq!(bytes[TSRESOL_AT], 9);
            bytes[TSRESOL_AT] = value;
            read_bytes(&bytes)
        };
        assert_eq!(
            with_tsresol(1_234_567, 9).unwrap().packets[0].ts_ns,
            1_234_567
        );
        assert_eq!(
            with_tsresol(1_234_567, 6).unwrap().packets[0].ts_ns,
            1_234_567_000
        ); // microseconds
        assert_eq!(
            with_tsresol(1_234_567, 0x83).unwrap().packets[0].ts_ns,
            1_234_567 * 125_000_000
        ); // 1/8 s
        assert_eq!(
            with_tsresol(3 << 30, 0x9e).unwrap().packets[0].ts_ns,
            3 * NS_PER_SEC
        ); // 2^-30 s
        let invalid = with_tsresol(1, 0x80 | 64);
        assert!(
            matches!(
                invalid,
                Err(ReadError::Malformed {
                    reason: "invalid if_tsresol",
                    ..
                })
            ),
            "{invalid:?}"
        );
        let too_late = with_tsresol(u64::MAX / 2, 6);
        assert!(
            matches!(
                too_late,
                Err(ReadError::Malformed {
                    reason: "timestamp out of range",
                    ..
                })
            ),
            "{too_late:?}"
        );
    }

    #[test]
    fn pcapng_simple_packet_blocks_are_cut_to_the_snaplen() {
        let mut bytes = encode(FileFormat::Pcapng, &[], None);
        for (orig_len, stored) in [(61u32, 61usize), (300, SNAPLEN as usize)] {
            let len = 16 + stored.next_multiple_of(4) as u32;
            for word in [3, len, orig_len] {
                bytes.extend_from_slice(&word.to_ne_bytes());
            }
            bytes.extend((0..stored.next_multiple_of(4)).map(|i| i as u8));
            bytes.extend_from_slice(&len.to_ne_bytes());
        }
        let file = read_bytes(&bytes).unwrap();
        let got: Vec<_> = file
            .packets
            .iter()
            .map(|p| (p.ts_ns, p.data.len(), p.orig_len))
            .collect();
        assert_eq!(got, [(0, 61, 61), (0, SNAPLEN as usize, 300)]);
    }

    #[test]
    fn packet_of_an_undeclared_interface_is_malformed() {
        let packets = sample_packets();
        let mut bytes = encode(FileFormat::Pcapng, &packets[..2], None);
        let second = PCAPNG_HEADER_LEN + 92;
        bytes[second + 8..second + 12].copy_from_slice(&1u32.to_ne_bytes());
        let err = read_bytes(&bytes).unwrap_err();
        assert!(
            matches!(err, ReadError::Malformed { packets: 1, offset, .. } if offset == second),
            "{err}"
        );
        assert!(err.to_string().contains("after 1 good packets"), "{err}");
    }

    #[test]
    fn unknown_magic_and_versions_are_rejected() {
        let err = read_bytes(b"GIF89a, certainly not a capture").unwrap_err();
        assert!(
            matches!(err, ReadError::NotCapture { magic: 0x3846_4947 }),
            "{err}"
        );
        assert!(matches!(
            read_bytes(b""),
            Err(ReadError::Truncated {
                packets: 0,
                offset: 0
            })
        ));
        let mut pcap = encode(FileFormat::Pcap, &[], None);
        pcap[4..6].copy_from_slice(&3u16.to_ne_bytes());
        assert_eq!(
            read_bytes(&pcap).unwrap_err().to_string(),
            "unsupported capture file: pcap version 3.4"
        );
        let mut pcapng = encode(FileFormat::Pcapng, &[], None);
        pcapng[12..14].copy_from_slice(&2u16.to_ne_bytes());
        assert_eq!(
            read_bytes(&pcapng).unwrap_err().to_string(),
            "unsupported capture file: pcapng version 2.0"
        );
    }

    #[test]
    fn oversized_pcap_record_is_malformed_not_truncated() {
        let mut bytes = encode(FileFormat::Pcap, &sample_packets()[..1], None);
        bytes[24 + 8..24 + 12].copy_from_slice(&1_000_000u32.to_ne_bytes());
        let err = read_bytes(&bytes).unwrap_err();
        assert!(
            matches!(
                err,
                ReadError::Malformed {
                    packets: 0,
                    offset: 24,
                    ..
                }
            ),
            "{err}"
        );
    }

    /// tcpdump and Wireshark read such a record and show the odd time; so does poolcap,
    /// counting it for a warning.
    #[test]
    fn pcap_timestamp_fraction_of_a_second_or_more_is_read_and_counted() {
        for (format, limit, unit) in [
            (FileFormat::Pcap, 1_000_000u32, 1000),
            (FileFormat::PcapNs, 1_000_000_000, 1),
        ] {
            let mut bytes = encode(format, &sample_packets()[..2], None);
            let second = 24 + 16 + ne32(&bytes, 24 + 8);
            let secs = ne32(&bytes, second) as u64;
            bytes[second + 4..second + 8].copy_from_slice(&(limit - 1).to_ne_bytes());
            let file = read_bytes(&bytes).unwrap();
            assert_eq!(
                (file.packets.len(), file.odd_timestamps),
                (2, 0),
                "{format}"
            );
            for bad in [limit, 2_000_000_000] {
                bytes[second + 4..second + 8].copy_from_slice(&bad.to_ne_bytes());
                let file = read_bytes(&bytes).unwrap();
                assert_eq!(
                    (file.packets.len(), file.odd_timestamps),
                    (2, 1),
                    "{format}"
                );
                assert_eq!(
                    file.packets[1].ts_ns,
                    secs * NS_PER_SEC + u64::from(bad) * unit,
                    "{format} fraction {bad}: the time runs on"
                );
            }
        }
    }

    #[test]
    fn read_file_names_the_path_it_cannot_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.pcap");
        let err = read_file(&path).unwrap_err();
        assert!(matches!(err, ReadError::Io { .. }), "{err}");
        assert!(err.to_string().contains("missing.pcap"), "{err}");
    }
}
