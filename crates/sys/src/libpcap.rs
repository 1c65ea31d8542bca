//! What poolcap needs of libpcap that the `pcap` crate does not expose: its version string,
//! for `--version` (tcpdump prints it too, as filters are compiled by it).

use std::ffi::CStr;
use std::os::raw::c_char;

#[link(name = "pcap")]
extern "C" {
    fn pcap_lib_version() -> *const c_char;
}

/// libpcap's own description of itself, e.g. `libpcap version 1.10.3 (with TPACKET_V3)`.
pub fn version() -> String {
    // SAFETY: pcap_lib_version takes nothing and returns a pointer to a static
    // NUL-terminated string owned by libpcap, valid for the life of the process.
    let p = unsafe { pcap_lib_version() };
    if p.is_null() {
        return "libpcap (version unknown)".into();
    }
    // SAFETY: `p` is non-null and points to libpcap's static NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_libpcap_and_a_version_number() {
        let v = super::version();
        assert!(v.starts_with("libpcap version 1."), "{v}");
    }
}
