//! Integration tests of `session-projection`: the reference registry matrix, cold folds, fault
//! containment, the live/cold/checkpoint laws and the public law check, one module per area.

mod faults;
mod laws;
mod properties;
mod registry;
mod restore;
mod support;
