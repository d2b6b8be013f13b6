//! Integration tests of `session-projection-cache`: the reference cache matrix, the test kit's
//! checkpoint-store contract on the built-in stores, the disk store, fault containment and the
//! cross-crate laws, one module per area.

mod backfill;
mod contract;
mod disk;
mod faults;
mod matrix;
mod properties;
mod support;
