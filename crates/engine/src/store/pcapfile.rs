//! Reading a store's capture files record by record with each record's byte offset, which
//! the index points at and queries seek to. Store files are classic pcap (microsecond or
//! nanosecond, either byte order) as the capture writes them; a record cut short at the end
//! (a file still being written, or one cut by a crash) ends the file there.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// Bytes of the file header.
pub const FILE_HEADER: u64 = 24;
/// Bytes of a record header.
pub const RECORD_HEADER: usize = 16;

/// What a capture file's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The 24 bytes, copied to a query's output so its records keep their meaning.
    pub raw: [u8; 24],
    /// Fields are big-endian.
    big: bool,
    /// Sub-second field in nanoseconds.
    nanos: bool,
    /// The link type.
    pub linktype: u32,
}

impl Header {
    /// The header whose bytes are `raw`; `None` if they are not a pcap file header.
    pub fn parse(raw: [u8; 24]) -> Option<Header> {
        let magic = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
        let (big, nanos) = match magic {
            0xa1b2_c3d4 => (false, false),
            0xa1b2_3c4d => (false, true),
            0xd4c3_b2a1 => (true, false),
            0x4d3c_b2a1 => (true, true),
            _ => return None,
        };
        let mut h = Header {
            raw,
            big,
            nanos,
            linktype: 0,
        };
        h.linktype = h.u32_at(&raw, 20) & 0x0fff_ffff;
        Some(h)
    }

    /// A record header's time (ns) and captured length.
    #[inline(always)]
    pub fn record(&self, head: &[u8]) -> (u64, u32) {
        let (sec, frac) = (self.u32_at(head, 0), self.u32_at(head, 4));
        let frac_ns = if self.nanos {
            u64::from(frac)
        } else {
            u64::from(frac) * 1000
        };
        (
            u64::from(sec) * 1_000_000_000 + frac_ns,
            self.u32_at(head, 8),
        )
    }

    /// Calls `each` with the offset in `b`, the time (ns) and the captured bytes of each
    /// whole record from the start of `b` on; returns the bytes those records take.
    #[inline]
    pub fn records(&self, b: &[u8], mut each: impl FnMut(usize, u64, &[u8])) -> usize {
        let mut at = 0;
        while b.len() - at >= RECORD_HEADER {
            let (ts, caplen) = self.record(&b[at..]);
            let len = RECORD_HEADER + caplen as usize;
            if b.len() - at < len {
                break;
            }
            each(at, ts, &b[at + RECORD_HEADER..at + len]);
            at += len;
        }
        at
    }

    #[inline(always)]
    fn u32_at(&self, b: &[u8], at: usize) -> u32 {
        let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if self.big {
            u32::from_be_bytes(v)
        } else {
            u32::from_le_bytes(v)
        }
    }
}

/// One record: where it starts, its time, its bytes and its length on the wire.
#[derive(Debug)]
pub struct Record<'a> {
    /// Byte offset of its record header in the file.
    pub offset: u64,
    /// Nanoseconds since the epoch.
    pub ts_ns: u64,
    /// The bytes captured.
    pub data: &'a [u8],
    /// The record header and the bytes, as they lie in the file.
    pub raw: &'a [u8],
    /// Length on the wire.
    pub wire_len: u32,
}

/// Bytes of a large range hinted to the kernel ahead of the reads (`readahead`), so the
/// device reads on while the records already read are filtered.
const AHEAD: u64 = 32 << 20;

/// A file whose reads stop at `end`: the buffer in front of it then never reads past the
/// range a query asked for (a 256 KiB buffer in front of a 64 KiB region read four regions
/// from the disk, three of them for nothing). Up to [`AHEAD`] bytes of the range beyond the
/// reads are asked of the kernel in advance: the kernel's own readahead of a sequential
/// read is a few hundred KiB, which leaves the device idle whenever the reader is busy.
struct Bounded {
    file: File,
    pos: u64,
    end: u64,
    /// The range is hinted up to here.
    hinted: u64,
}

impl Read for Bounded {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = usize::try_from(self.end.saturating_sub(self.pos)).unwrap_or(usize::MAX);
        let n = buf.len().min(left);
        if n == 0 {
            return Ok(0);
        }
        if self.hinted < self.pos + AHEAD / 2 && self.hinted < self.end {
            let from = self.hinted.max(self.pos);
            let to = (self.pos + AHEAD).min(self.end);
            // A hint: if it fails, the reads are only slower.
            let _ = poolcap_sys::readahead::will_need(&self.file, from, to - from);
            self.hinted = to;
        }
        let got = self.file.read(&mut buf[..n])?;
        self.pos += got as u64;
        Ok(got)
    }
}

impl Seek for Bounded {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = self.file.seek(to)?;
        self.hinted = self.pos;
        Ok(self.pos)
    }
}

/// A capture file read from an offset up to a limit.
pub struct Records {
    header: Header,
    input: BufReader<Bounded>,
    offset: u64,
    end: u64,
    buf: Vec<u8>,
}

/// Opens `path` and reads its header; `None` for a file that is not pcap.
pub fn open(path: &Path) -> std::io::Result<Option<(Header, File)>> {
    let mut file = File::open(path)?;
    let mut raw = [0u8; 24];
    match file.read_exact(&mut raw) {
        Ok(()) => Ok(Header::parse(raw).map(|h| (h, file))),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

/// The time of `file`'s first whole record, if it has one (`header` read from it).
pub fn first_time(header: Header, file: &File) -> std::io::Result<Option<u64>> {
    let mut records = Records::new(header, file.try_clone()?, FILE_HEADER, u64::MAX)?;
    Ok(records.next_record()?.map(|r| r.ts_ns))
}

impl Records {
    /// Reads `file` (whose header is `header`) from byte `from` (a record's start) up to
    /// byte `end` (a record's start, or past the file's end).
    pub fn new(header: Header, mut file: File, from: u64, end: u64) -> std::io::Result<Self> {
        file.seek(SeekFrom::Start(from))?;
        Ok(Records {
            header,
            input: BufReader::with_capacity(
                1 << 18,
                Bounded {
                    file,
                    pos: from,
                    end,
                    hinted: from,
                },
            ),
            offset: from,
            end,
            buf: Vec::with_capacity(RECORD_HEADER + 65_536),
        })
    }

    /// Moves to byte `from` (a record's start), reading up to `end`.
    pub fn seek(&mut self, from: u64, end: u64) -> std::io::Result<()> {
        if from != self.offset {
            self.input.seek(SeekFrom::Start(from))?;
            self.offset = from;
        }
        self.end = end;
        self.input.get_mut().end = end;
        Ok(())
    }

    /// The next record, or `None` at the limit or at the end of the file (a record cut
    /// short there included).
    pub fn next_record(&mut self) -> std::io::Result<Option<Record<'_>>> {
        if self.offset >= self.end {
            return Ok(None);
        }
        self.buf.resize(RECORD_HEADER, 0);
        if !read_whole(&mut self.input, &mut self.buf)? {
            return Ok(None);
        }
        let (ts_ns, caplen) = self.header.record(&self.buf);
        let wire_len = self.header.u32_at(&self.buf, 12);
        self.buf.resize(RECORD_HEADER + caplen as usize, 0);
        if !read_whole(&mut self.input, &mut self.buf[RECORD_HEADER..])? {
            return Ok(None);
        }
        let offset = self.offset;
        self.offset += self.buf.len() as u64;
        Ok(Some(Record {
            offset,
            ts_ns,
            data: &self.buf[RECORD_HEADER..],
            raw: &self.buf,
            wire_len,
        }))
    }
}

/// Fills `buf`; false if the input ends first.
fn read_whole(input: &mut impl Read, buf: &mut [u8]) -> std::io::Result<bool> {
    match input.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_read_from_the_disk_no_further_than_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut bytes = vec![0u8; 24];
        bytes[..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        bytes[20] = 1;
        for i in 0..1000u32 {
            let mut rec = [0u8; 16];
            rec[..4].copy_from_slice(&i.to_le_bytes());
            rec[8..12].copy_from_slice(&1000u32.to_le_bytes());
            rec[12..16].copy_from_slice(&1000u32.to_le_bytes());
            bytes.extend_from_slice(&rec);
            bytes.extend_from_slice(&[7u8; 1000]);
        }
        std::fs::write(&path, &bytes).unwrap();
        let (header, file) = open(&path).unwrap().unwrap();
        let mut r = Records::new(header, file, FILE_HEADER, 0).unwrap();
        // Records 10 and 11 only: 2032 bytes from record 10's start.
        let from = FILE_HEADER + 10 * 1016;
        r.seek(from, from + 2 * 1016).unwrap();
        let mut seen = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            seen.push(rec.offset);
        }
        assert_eq!(seen, [from, from + 1016]);
        let at = r.input.get_mut().file.stream_position().unwrap();
        assert_eq!(at, from + 2 * 1016, "read past the range");
        // The next range goes on from there, and a range to the end reads the rest.
        r.seek(from + 2 * 1016, u64::MAX).unwrap();
        let mut rest = 0;
        while r.next_record().unwrap().is_some() {
            rest += 1;
        }
        assert_eq!(rest, 988);
    }
}
