//! Integration tests of `session-projection`: the reference registry matrix, cold folds, fault
//! containment and the live/cold/checkpoint laws, one module per area.

mod faults;
mod properties;
mod registry;
mod restore;
mod support;
