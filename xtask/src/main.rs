//! Project automation: `cargo xtask ci` and `cargo xtask bench`.
//!
//! The checks that are not plain cargo commands (dependency edges, file headers, banned test
//! attributes, lint inheritance) live in `tidy.rs` as ordinary `#[test]`s, so `cargo test` and CI
//! run exactly the same thing.

#[cfg(test)]
mod tidy;

use std::{
    env,
    ffi::OsString,
    path::{Path, PathBuf},
    process::{Command, ExitCode},
    time::Instant,
};

use anyhow::{Context, bail};

const HELP: &str = "\
Usage: cargo xtask <command>

Commands:
  ci                          cargo fmt --check, clippy -D warnings, then the whole test suite
                              (which includes the tidy tests in xtask/src/tidy.rs)
  bench [--list] [ARGS] [-- CRITERION_ARGS]
                              run the criterion benchmarks of the workspace; ARGS go to
                              `cargo bench` (e.g. -p session-persistence), CRITERION_ARGS to the
                              benchmark binaries (e.g. --quick, or a name filter); a
                              full run also measures the peak memory of a cold listing
                              (`cargo run --release -p e2e --bin listing_memory`)
  help                        print this message
";

fn main() -> ExitCode {
    match run(env::args_os().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Vec<OsString>) -> anyhow::Result<()> {
    let Some((command, rest)) = args.split_first() else {
        print!("{HELP}");
        return Ok(());
    };
    match command.to_str() {
        Some("ci") => {
            if !rest.is_empty() {
                bail!("`ci` takes no arguments, got {rest:?}");
            }
            ci()
        }
        Some("bench") => bench(rest),
        Some("help" | "--help" | "-h") => {
            print!("{HELP}");
            Ok(())
        }
        _ => bail!("unknown command {command:?}\n\n{HELP}"),
    }
}

fn ci() -> anyhow::Result<()> {
    let started = Instant::now();
    // On CI the committed Cargo.lock must already be up to date; locally, adding a dependency
    // should not make the checks fail before they start.
    let locked: &[&str] = if on_ci() { &["--locked"] } else { &[] };
    let steps: [&[&str]; 3] = [
        &["fmt", "--all", "--check"],
        &[&["clippy", "--workspace", "--all-targets"], locked, &["--", "-D", "warnings"]].concat(),
        &[&["test", "--workspace"], locked].concat(),
    ];
    let postgres = env::var_os(PG_URL_VAR).is_some_and(|url| !url.is_empty());
    if !postgres {
        eprintln!("{}", postgres_skip_note());
    }
    for step in steps {
        cargo_step(step)?;
    }
    eprintln!("xtask ci: all checks passed in {:.1?}", started.elapsed());
    if !postgres {
        eprintln!("{}", postgres_skip_note());
    }
    Ok(())
}

/// The variable that points the PostgreSQL tests (and benchmarks) at a server.
const PG_URL_VAR: &str = "SESSION_PG_URL";

fn postgres_skip_note() -> String {
    if on_ci() {
        format!("xtask ci: {PG_URL_VAR} is not set: the PostgreSQL tests will FAIL under CI (.ci/run sets it)")
    } else {
        format!(
            "xtask ci: NOTE: {PG_URL_VAR} is not set, so the PostgreSQL tests were SKIPPED (each passes without \
             running); to run them: {PG_URL_VAR}=postgres://postgres@127.0.0.1:5432/test cargo xtask ci"
        )
    }
}

fn bench(args: &[OsString]) -> anyhow::Result<()> {
    let (cargo_args, bench_args) = match args.iter().position(|arg| arg == "--") {
        Some(idx) => (&args[..idx], &args[idx + 1..]),
        None => (args, &[][..]),
    };
    let mut list = false;
    let mut cmd: Vec<OsString> = vec!["bench".into()];
    for arg in cargo_args {
        if arg == "--list" {
            list = true;
        } else {
            cmd.push(arg.clone());
        }
    }
    let selects_package = cargo_args
        .iter()
        .any(|arg| arg == "-p" || arg == "--package" || arg.to_str().is_some_and(|arg| arg.starts_with("--package=")));
    if !selects_package {
        cmd.push("--workspace".into());
    }
    // Only `[[bench]]` targets: libtest harnesses (lib and test targets) reject criterion flags
    // such as `--quick`.
    cmd.push("--benches".into());
    cmd.push("--".into());
    if list {
        cmd.push("--list".into());
    }
    cmd.extend(bench_args.iter().cloned());
    cargo_step(&cmd)?;
    if list || selects_package {
        return Ok(());
    }
    // Peak memory needs a fresh process per measurement, so it is a binary, not a criterion bench.
    cargo_step(&["run", "--release", "--package", "e2e", "--bin", "listing_memory"])
}

/// Runs `cargo <args>` from the workspace root with inherited stdio, printing the command and how
/// long it took; a non-zero exit becomes an error that names the step.
fn cargo_step<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> anyhow::Result<()> {
    let shown = args.iter().map(|arg| arg.as_ref().to_string_lossy()).collect::<Vec<_>>().join(" ");
    eprintln!("\n$ cargo {shown}");
    let started = Instant::now();
    let status = Command::new(cargo())
        .args(args)
        .current_dir(project_root())
        .status()
        .with_context(|| format!("could not start `cargo {shown}`"))?;
    let elapsed = started.elapsed();
    if !status.success() {
        bail!("step `cargo {shown}` failed ({status}) after {elapsed:.1?}; fix the errors above and rerun");
    }
    eprintln!("ok: `cargo {shown}` ({elapsed:.1?})");
    Ok(())
}

/// The cargo that runs this xtask, so the pinned toolchain is used throughout.
fn cargo() -> OsString {
    env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

fn on_ci() -> bool {
    env::var_os("CI").is_some_and(|value| !value.is_empty() && value != "false" && value != "0")
}

/// The workspace root: the parent of this crate's directory.
fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives one level below the workspace root").to_owned()
}
