//! Local time formatting with the C library's `strftime(3)`, so that file names made from a
//! pattern (`-w 'dump-%H%M%S.pcap' -G 60`) come out exactly as tcpdump makes them, locale
//! and time zone included.

use std::ffi::{CStr, CString};

/// `format` expanded by `strftime(3)` for `secs` seconds since the Unix epoch in local time,
/// or None if the pattern holds a NUL byte, the time has no local representation, or the
/// result is empty or longer than 4095 bytes (as tcpdump, which treats 0 as failure).
pub fn strftime_local(format: &str, secs: i64) -> Option<String> {
    let format = CString::new(format).ok()?;
    let t: libc::time_t = secs;
    // SAFETY: `tm` is plain data; all-zero is a valid value that localtime_r overwrites.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r is the thread-safe variant.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return None;
    }
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` has `buf.len()` writable bytes, `format` is NUL-terminated, `tm` was
    // filled by localtime_r; strftime writes at most `buf.len()` bytes including the NUL.
    let n = unsafe { libc::strftime(buf.as_mut_ptr().cast(), buf.len(), format.as_ptr(), &tm) };
    if n == 0 {
        return None;
    }
    let s = CStr::from_bytes_until_nul(&buf).ok()?;
    Some(s.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_fields_and_passes_plain_text_through() {
        // 2001-09-09 01:46:40 UTC; the year is the same in every time zone.
        let s = strftime_local("cap-%Y.pcap", 1_000_000_000).unwrap();
        assert_eq!(s, "cap-2001.pcap");
        assert_eq!(strftime_local("plain", 0).unwrap(), "plain");
        assert_eq!(strftime_local("100%%", 0).unwrap(), "100%");
        assert_eq!(strftime_local("", 0), None);
        assert_eq!(strftime_local("a\0b", 0), None);
    }
}
