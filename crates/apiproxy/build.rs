//! Rebuilds the crate when a file of the web viewer changes: `include_dir!` compiles
//! `web/static/` into the binary, and a proc macro cannot tell cargo what it read.

fn main() {
    println!("cargo:rerun-if-changed=web/static");
}
