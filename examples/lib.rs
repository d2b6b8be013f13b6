//! Runnable examples of embedding the session crates in a host; each is a `cargo run -p examples
//! --example <name>` target, and `cargo xtask ci` runs them all. This library is empty: the
//! examples are the point.
