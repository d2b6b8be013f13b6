//! End-to-end tests across the workspace crates.

mod crash;
mod listing;
mod listing_matrix;
mod power_loss;
mod sqlite_reference;
