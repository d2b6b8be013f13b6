//! Golden tests of the wire shapes.
