//! End-to-end tests across the workspace crates.

mod crash;
mod listing;
mod power_loss;
mod listing_matrix;
mod sqlite_reference;
