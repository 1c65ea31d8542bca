//! Helpers shared by the root tests.
