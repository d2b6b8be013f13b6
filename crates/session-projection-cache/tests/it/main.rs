//! Integration tests of `session-projection-cache`: the reference cache matrix, the disk store,
//! fault containment and the cross-crate laws, one module per area.

mod backfill;
mod disk;
mod faults;
mod matrix;
mod properties;
mod support;
