//! poolcap's sans-IO core: what a capture thread decides ([`decide`]), where a sealed chunk
//! is processed ([`policy`]), and the shape of a receive queue's pool ([`geometry`]).
//!
//! Why a crate of its own: these are the heart of the WireCAP design (basic and advanced
//! modes, Ksensor's congestion control) and they must be the same code in the engine, in
//! `poolcap sim` and in their unit tests. Here they cannot reach a clock, a socket or a
//! thread (the crate depends on nothing and forbids `unsafe_code`), so every decision is
//! a function of what it is told, as quinn-proto is for QUIC. The engine's capture thread
//! (`poolcap_engine::capture::queue`) is the shell that observes, asks and performs.

#![forbid(unsafe_code)]

pub mod decide;
pub mod geometry;
pub mod policy;
pub mod wait;
