//! Capture engine tests in a lab.

use libtest_mimic::Trial;

pub fn trials() -> Vec<Trial> {
    vec![]
}
