//! pcap and pcapng writers and readers (being written).
#![forbid(unsafe_code)]
