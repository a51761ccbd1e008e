//! The measuring harness behind `cargo xtask tune` (filled in below).
