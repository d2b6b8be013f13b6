//! End-to-end tests across the workspace crates.

mod crash;
mod listing;
mod listing_matrix;
mod sqlite_reference;
