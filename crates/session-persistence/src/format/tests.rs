//! Unit tests of the format module.
