//! Test hosts in network namespaces (being written).
#![forbid(unsafe_code)]
