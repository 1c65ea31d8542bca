//! Reading a capture file packet by packet from any reader (a file, a pipe, a
//! decompressor), with one buffer reused for the whole file: large sequential reads, no
//! allocation per packet, memory bounded by the largest record. The decoding is
//! [`crate::read`]'s, so a stream and a file read whole agree on every packet and every
//! error, which comes when the reader reaches it (after the packets before it).
//!
//! [`PacketReader::peek`] decodes the next packet without taking it, for a reader that
//! must see a packet's time before it takes it (pacing a replay, cutting periods by time).

use std::io::{self, Read};

use crate::read::{Decoder, Found, ReadError};
use crate::{FileFormat, IfStats};

/// Bytes read at a time; the buffer grows beyond it only for a record that does not fit.
const READ_BYTES: usize = 1 << 20;

/// A record longer than this is not a packet a reader should buffer.
const MAX_RECORD: usize = 64 << 20;

/// One packet, its data borrowed from the reader's buffer until the next call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// The captured bytes.
    pub data: &'a [u8],
    /// The packet's length on the wire.
    pub orig_len: u32,
}

/// See the module docs.
pub struct PacketReader<R> {
    src: R,
    buf: Vec<u8>,
    /// The unread bytes are `buf[pos..end]`.
    pos: usize,
    end: usize,
    /// File offset of `buf[0]`.
    base: usize,
    decoder: Decoder,
    /// The packet [`PacketReader::peek`] decoded and nobody took yet: where its record
    /// starts in `buf` (before `pos`; nothing moves `buf` until it is taken).
    peeked: Option<(usize, Found)>,
}

impl<R> std::fmt::Debug for PacketReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketReader")
            .field("offset", &(self.base + self.pos))
            .finish()
    }
}

impl<R: Read> PacketReader<R> {
    /// Reads the file header from `src`, and on to the first packet (in pcapng the interface
    /// block before it gives the link type): an error there comes here.
    pub fn new(mut src: R) -> Result<Self, ReadError> {
        let mut buf = vec![0; READ_BYTES];
        let mut end = 0;
        loop {
            if let Some((decoder, header)) = Decoder::start(&buf[..end])? {
                let mut reader = Self {
                    src,
                    buf,
                    pos: header,
                    end,
                    base: 0,
                    decoder,
                    peeked: None,
                };
                // Up to the first packet: in pcapng the interface block before it gives
                // the link type.
                reader.peek()?;
                return Ok(reader);
            }
            let n = read_some(&mut src, &mut buf[end..])?;
            if n == 0 {
                return Err(ReadError::Truncated {
                    packets: 0,
                    offset: 0,
                });
            }
            end += n;
        }
    }

    /// The next packet; None at the end of the file.
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, ReadError> {
        let next = match self.peeked.take() {
            Some(p) => Some(p),
            None => self.decode()?,
        };
        Ok(next.map(|(at, found)| self.packet(at, found)))
    }

    /// The packet [`next_packet`](Self::next_packet) returns next, without taking it; None
    /// at the end of the file. An error is the one `next_packet` would return.
    pub fn peek(&mut self) -> Result<Option<Packet<'_>>, ReadError> {
        if self.peeked.is_none() {
            self.peeked = self.decode()?;
        }
        Ok(self
            .peeked
            .clone()
            .map(|(at, found)| self.packet(at, found)))
    }

    fn packet(&self, at: usize, found: Found) -> Packet<'_> {
        Packet {
            ts_ns: found.ts_ns,
            data: &self.buf[at..][found.data],
            orig_len: found.orig_len,
        }
    }

    /// Decodes up to the next packet and moves past it; returns where its record starts in
    /// `buf` and what it holds.
    fn decode(&mut self) -> Result<Option<(usize, Found)>, ReadError> {
        loop {
            let offset = self.base + self.pos;
            match self.decoder.next(&self.buf[self.pos..self.end], offset)? {
                Some((n, Some(found))) => {
                    let at = self.pos;
                    self.pos += n;
                    return Ok(Some((at, found)));
                }
                Some((n, None)) => self.pos += n,
                None => {
                    if !self.fill()? {
                        return match self.pos == self.end {
                            true => Ok(None),
                            false => Err(ReadError::Truncated {
                                packets: self.packets(),
                                offset,
                            }),
                        };
                    }
                }
            }
        }
    }

    /// Moves the unread bytes to the front and reads more after them (growing the buffer
    /// when a record fills it); false at the end of the file.
    fn fill(&mut self) -> Result<bool, ReadError> {
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos;
        (self.pos, self.end) = (0, self.end - self.pos);
        if self.end == self.buf.len() {
            if self.buf.len() >= MAX_RECORD {
                return Err(ReadError::Malformed {
                    packets: self.packets(),
                    offset: self.base,
                    reason: "a record of more than 64 MiB",
                });
            }
            self.buf.resize(self.buf.len() * 2, 0);
        }
        let n = read_some(&mut self.src, &mut self.buf[self.end..])?;
        self.end += n;
        Ok(n > 0)
    }

    fn packets(&self) -> u64 {
        self.decoder.packets()
    }

    /// pcap, pcap-ns or pcapng.
    pub fn format(&self) -> FileFormat {
        self.decoder.file.format
    }

    /// The link type of the (first) interface; 0 while a pcapng file has described none.
    pub fn linktype(&self) -> u32 {
        self.decoder.file.linktype
    }

    /// pcap records read so far whose sub-second field is a second or more (see
    /// [`crate::CaptureFile::odd_timestamps`]).
    pub fn odd_timestamps(&self) -> u64 {
        self.decoder.file.odd_timestamps
    }

    /// The last pcapng statistics block read so far.
    pub fn if_stats(&self) -> Option<IfStats> {
        self.decoder.file.if_stats
    }
}

/// One `read` into `buf`, retried when interrupted; Ok(0) at the end.
fn read_some(src: &mut impl Read, buf: &mut [u8]) -> Result<usize, ReadError> {
    loop {
        match src.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r.map_err(ReadError::Stream),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read_bytes;
    use crate::write::tests::{encode, sample_packets, FORMATS, STATS};

    /// A reader that hands out at most `step` bytes per read.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.bytes.len());
            buf[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    fn all(bytes: &[u8], step: usize) -> Result<Vec<(u64, Vec<u8>, u32)>, ReadError> {
        let mut r = PacketReader::new(Trickle { bytes, step })?;
        let mut out = Vec::new();
        while let Some(p) = r.next_packet()? {
            out.push((p.ts_ns, p.data.to_vec(), p.orig_len));
        }
        Ok(out)
    }

    /// Every byte of each format's file set to a few values in turn: the stream (in 7-byte
    /// reads) and the whole-file reader give the same packets, or the same error.
    #[test]
    fn a_stream_and_the_whole_file_reader_agree_on_corrupted_files() {
        for format in FORMATS {
            let good = encode(format, &sample_packets()[..4], Some(STATS));
            for at in 0..good.len() {
                for value in [0x00, 0x01, 0x7f, 0xff] {
                    let mut bytes = good.clone();
                    bytes[at] = value;
                    let whole = read_bytes(&bytes).map(|f| {
                        f.packets
                            .into_iter()
                            .map(|p| (p.ts_ns, p.data, p.orig_len))
                            .collect::<Vec<_>>()
                    });
                    let streamed = all(&bytes, 7);
                    assert_eq!(
                        streamed.map_err(|e| e.to_string()),
                        whole.map_err(|e| e.to_string()),
                        "{format}: byte {at} set to {value:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_stream_reads_what_the_whole_file_reader_reads_whatever_the_read_sizes() {
        for format in FORMATS {
            let bytes = encode(format, &sample_packets(), Some(STATS));
            let whole: Vec<_> = read_bytes(&bytes)
                .unwrap()
                .packets
                .into_iter()
                .map(|p| (p.ts_ns, p.data, p.orig_len))
                .collect();
            for step in [1, 3, 7, 64, 1 << 20] {
                assert_eq!(all(&bytes, step).unwrap(), whole, "{format} step {step}");
            }
            let r = PacketReader::new(&bytes[..]).unwrap();
            assert_eq!(r.format(), format);
            assert_eq!(r.linktype(), 1);
        }
    }

    #[test]
    fn a_cut_stream_gives_the_whole_packets_then_the_file_reader_s_error() {
        for format in FORMATS {
            let bytes = encode(format, &sample_packets(), None);
            for cut in [bytes.len() - 1, bytes.len() - 20, 30] {
                let want = read_bytes(&bytes[..cut]).unwrap_err().to_string();
                let mut r = match PacketReader::new(Trickle {
                    bytes: &bytes[..cut],
                    step: 5,
                }) {
                    Ok(r) => r,
                    Err(e) => {
                        assert_eq!(e.to_string(), want, "{format} cut {cut}");
                        continue;
                    }
                };
                let got = loop {
                    match r.next_packet() {
                        Ok(Some(_)) => {}
                        Ok(None) => panic!("{format} cut {cut}: no error"),
                        Err(e) => break e.to_string(),
                    }
                };
                assert_eq!(got, want, "{format} cut {cut}");
            }
        }
    }

    #[test]
    fn peek_shows_the_next_packet_and_leaves_it_to_next_packet() {
        for format in FORMATS {
            let bytes = encode(format, &sample_packets(), Some(STATS));
            let whole = all(&bytes, 1 << 20).unwrap();
            let mut r = PacketReader::new(Trickle {
                bytes: &bytes,
                step: 7,
            })
            .unwrap();
            let mut got = Vec::new();
            loop {
                let peeked = r
                    .peek()
                    .unwrap()
                    .map(|p| (p.ts_ns, p.data.to_vec(), p.orig_len));
                assert_eq!(
                    r.peek()
                        .unwrap()
                        .map(|p| (p.ts_ns, p.data.to_vec(), p.orig_len)),
                    peeked,
                    "{format}: a second peek"
                );
                let next = r
                    .next_packet()
                    .unwrap()
                    .map(|p| (p.ts_ns, p.data.to_vec(), p.orig_len));
                assert_eq!(next, peeked, "{format}");
                match next {
                    Some(p) => got.push(p),
                    None => break,
                }
            }
            assert_eq!(got, whole, "{format}");
        }
    }

    #[test]
    fn a_record_larger_than_the_buffer_grows_it() {
        let mut w = crate::CaptureWriter::new(Vec::new(), FileFormat::Pcapng, 0, "x").unwrap();
        let data = vec![7; READ_BYTES + 5];
        w.write_packet(1, &data, data.len() as u32).unwrap();
        let bytes = w.finish(None).unwrap();
        let got = all(&bytes, 1 << 16).unwrap();
        assert_eq!(got[0].1.len(), READ_BYTES + 5);
    }
}
