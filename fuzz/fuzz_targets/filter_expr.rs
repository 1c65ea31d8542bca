//! tcpdump filter expressions through libpcap's compiler (the user-space path AF_XDP uses):
//! an expression compiles or is refused with a message, never crashes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use poolcap::capture::filter::compile_user;

fuzz_target!(|data: &[u8]| {
    if let Ok(expr) = std::str::from_utf8(data) {
        if let Err(e) = compile_user(expr, poolcap_format::LinkType::ETHERNET) {
            assert!(!e.message.is_empty());
        }
    }
});
