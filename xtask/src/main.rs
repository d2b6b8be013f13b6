//! Project automation: `cargo xtask ci` and `cargo xtask bench`.
//!
//! `ci` runs, in order and stopping at the first failure: `cargo fmt --check`, clippy with
//! warnings denied, the web viewer's `node --test` suite, the whole test suite (with cargo-nextest where it is installed, then the
//! doctests; else `cargo test`), every example of the `examples`
//! package (found in `cargo metadata`, so a new `[[example]]` runs without editing this file),
//! and `cargo doc` with rustdoc warnings denied.
//!
//! The checks that are not plain cargo commands (dependency edges, file headers, banned test
//! attributes, lint inheritance, import cycles between modules) live in `tidy.rs` as ordinary
//! `#[test]`s, so `cargo test` and CI run exactly the same thing; `module_graph.rs` reads a
//! crate's module graph for the last of them.

#[cfg(test)]
mod module_graph;
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
  ci                          cargo fmt --check, clippy -D warnings, the whole test suite
                              (doctests and the tidy tests in xtask/src/tidy.rs included),
                              every example of the `examples` package, then
                              cargo doc --workspace --no-deps with rustdoc warnings denied
  bench [--list] [ARGS] [-- CRITERION_ARGS]
                              run the criterion benchmarks of the workspace; ARGS go to
                              `cargo bench` (e.g. -p session-persistence), CRITERION_ARGS to the
                              benchmark binaries (e.g. --quick, or a name filter); a
                              full run also measures the peak memory of a cold listing
                              (`cargo run --release -p e2e --bin listing_memory`) and of 8
                              concurrent history reads of a 150 MB session
                              (`cargo run --release -p e2e --bin history_memory`, against the
                              release `apiproxy` binary), and the throughput of 32 clients'
                              concurrent durable appends through that binary against an
                              emulated single lock (`--bin append_throughput`), and the web
                              viewer's paint times and JS heap in headless Chromium against
                              that binary on 100,000-session stores (`--bin viewer_speed`;
                              needs chromium and chromium-driver, PostgreSQL with SESSION_PG_URL),
                              and cold listings and inspects of one workload copied into every
                              backend, against the reference and `zstd -dc` (`--bin store_reads`)
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

/// The folder of the viewer's `node --test` tests.
const VIEWER_TESTS: &str = "crates/apiproxy/web/test/";

fn ci() -> anyhow::Result<()> {
    let started = Instant::now();
    // On CI the committed Cargo.lock must already be up to date; locally, adding a dependency
    // should not make the checks fail before they start.
    let locked: &[&str] = if on_ci() { &["--locked"] } else { &[] };
    let postgres = env::var_os(PG_URL_VAR).is_some_and(|url| !url.is_empty());
    if !postgres {
        eprintln!("{}", postgres_skip_note());
    }
    cargo_step(&["fmt", "--all", "--check"])?;
    // The web viewer's client logic: plain ES modules, tested by Node's own runner (no packages).
    program_step("node".as_ref(), "node", &["--test", VIEWER_TESTS], &[])?;
    cargo_step(&[&["clippy", "--workspace", "--all-targets"], locked, &["--", "-D", "warnings"]].concat())?;
    // cargo-nextest runs the test binaries side by side (libtest runs one binary after another,
    // so one slow binary holds up the rest); it does not run doctests, which `cargo test --doc`
    // then does. Without nextest, `cargo test` runs both.
    if nextest_installed() {
        cargo_step(&[&["nextest", "run", "--workspace"], locked].concat())?;
        cargo_step(&[&["test", "--workspace", "--doc"], locked].concat())?;
    } else {
        eprintln!("xtask ci: cargo-nextest is not installed; running the tests with `cargo test`");
        cargo_step(&[&["test", "--workspace"], locked].concat())?;
    }
    for example in examples(locked)? {
        cargo_step(&[&["run", "--package", EXAMPLES_PACKAGE, "--example", &example], locked].concat())?;
    }
    // Broken intra-doc links, bare URLs and the like fail the build, as a warning does in clippy.
    let mut rustdocflags = env::var_os("RUSTDOCFLAGS").unwrap_or_default();
    if !rustdocflags.is_empty() {
        rustdocflags.push(" ");
    }
    rustdocflags.push("-D warnings");
    cargo_step_with_env(&[&["doc", "--workspace", "--no-deps"], locked].concat(), &[("RUSTDOCFLAGS", rustdocflags)])?;
    eprintln!("xtask ci: all checks passed in {:.1?}", started.elapsed());
    if !postgres {
        eprintln!("{}", postgres_skip_note());
    }
    Ok(())
}

/// The package whose `[[example]]` targets `ci` runs.
const EXAMPLES_PACKAGE: &str = "examples";

/// The names of the example targets of [`EXAMPLES_PACKAGE`], as listed by
/// `cargo metadata`. An examples package without examples is an error: CI would then prove
/// nothing while looking green.
fn examples(locked: &[&str]) -> anyhow::Result<Vec<String>> {
    let output = Command::new(cargo())
        .args([&["metadata", "--format-version", "1", "--no-deps"], locked].concat())
        .current_dir(project_root())
        .output()
        .context("could not start `cargo metadata`")?;
    if !output.status.success() {
        bail!("`cargo metadata` failed ({}):\n{}", output.status, String::from_utf8_lossy(&output.stderr));
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("`cargo metadata` printed invalid JSON")?;
    let package = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|package| package["name"] == EXAMPLES_PACKAGE)
        .with_context(|| format!("the workspace has no package `{EXAMPLES_PACKAGE}`"))?;
    let names: Vec<String> = package["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|target| target["kind"].as_array().is_some_and(|kinds| kinds.iter().any(|kind| kind == "example")))
        .filter_map(|target| target["name"].as_str().map(str::to_owned))
        .collect();
    if names.is_empty() {
        bail!("package `{EXAMPLES_PACKAGE}` has no example targets; `cargo xtask ci` expects at least one");
    }
    Ok(names)
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
    if list {
        // The probes below are binaries, not criterion benches: list them by name too.
        for probe in PROBES {
            println!("{probe}: probe (cargo run --release -p e2e --bin {probe})");
        }
        return Ok(());
    }
    if selects_package {
        return Ok(());
    }
    // Peak memory needs a fresh process per measurement, so it is a binary, not a criterion bench.
    cargo_step(&["run", "--release", "--package", "e2e", "--bin", "listing_memory"])?;
    // The history probe measures the gateway binary itself, built with the same profile beside it.
    cargo_step(&["build", "--release", "--package", "apiproxy", "--bin", "apiproxy"])?;
    cargo_step(&["run", "--release", "--package", "e2e", "--bin", "history_memory"])?;
    // Concurrent durable appends through the same binary, against the single-lock figure of the
    // same run; `--quick` (among the criterion arguments) makes it short too.
    let quick = bench_args.iter().any(|arg| arg == "--quick");
    let mut append_throughput = vec!["run", "--release", "--package", "e2e", "--bin", "append_throughput"];
    if quick {
        append_throughput.extend(["--", "--quick"]);
    }
    cargo_step(&append_throughput)?;
    // Live across gateways on PostgreSQL (the server of SESSION_PG_URL, or the local default).
    let mut follow_latency = vec!["run", "--release", "--package", "e2e", "--bin", "follow_latency"];
    if quick {
        follow_latency.extend(["--", "--quick"]);
    }
    cargo_step(&follow_latency)?;
    // The viewer in headless Chromium against the same binary; `--quick` makes it short too.
    let mut viewer_speed = vec!["run", "--release", "--package", "e2e", "--bin", "viewer_speed"];
    if quick {
        viewer_speed.extend(["--", "--quick"]);
    }
    cargo_step(&viewer_speed)?;
    // Cold reads of one workload, copied into every backend, against the reference and the
    // decompression floor; `--quick` makes it short too.
    let mut store_reads = vec!["run", "--release", "--package", "e2e", "--bin", "store_reads"];
    if quick {
        store_reads.extend(["--", "--quick"]);
    }
    cargo_step(&store_reads)
}

/// The e2e probe binaries a full `bench` runs after the criterion benches, in order.
const PROBES: &[&str] =
    &["listing_memory", "history_memory", "append_throughput", "follow_latency", "viewer_speed", "store_reads"];

/// Runs `cargo <args>` from the workspace root with inherited stdio, printing the command and how
/// long it took; a non-zero exit becomes an error that names the step.
fn cargo_step<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> anyhow::Result<()> {
    cargo_step_with_env(args, &[])
}

/// [`cargo_step`] with extra environment variables, which are shown with the command.
fn cargo_step_with_env<S: AsRef<std::ffi::OsStr>>(args: &[S], envs: &[(&str, OsString)]) -> anyhow::Result<()> {
    program_step(&cargo(), "cargo", args, envs)
}

/// Runs `program` (shown as `name`) with `args` from the project root, failing the step when it fails.
fn program_step<S: AsRef<std::ffi::OsStr>>(
    program: &std::ffi::OsStr,
    name: &str,
    args: &[S],
    envs: &[(&str, OsString)],
) -> anyhow::Result<()> {
    let shown_envs = envs.iter().map(|(name, value)| format!("{name}={value:?} ")).collect::<String>();
    let shown = args.iter().map(|arg| arg.as_ref().to_string_lossy()).collect::<Vec<_>>().join(" ");
    let shown = format!("{shown_envs}{name} {shown}");
    eprintln!("\n$ {shown}");
    let started = Instant::now();
    let status = Command::new(program)
        .args(args)
        .envs(envs.iter().map(|(name, value)| (name, value)))
        .current_dir(project_root())
        .status()
        .with_context(|| format!("could not start `{shown}`"))?;
    let elapsed = started.elapsed();
    if !status.success() {
        bail!("step `{shown}` failed ({status}) after {elapsed:.1?}; fix the errors above and rerun");
    }
    eprintln!("ok: `{shown}` ({elapsed:.1?})");
    Ok(())
}

/// The cargo that runs this xtask, so the pinned toolchain is used throughout.
fn cargo() -> OsString {
    env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// Whether `cargo nextest` runs here.
fn nextest_installed() -> bool {
    Command::new(cargo())
        .args(["nextest", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn on_ci() -> bool {
    env::var_os("CI").is_some_and(|value| !value.is_empty() && value != "false" && value != "0")
}

/// The workspace root: the parent of this crate's directory.
fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives one level below the workspace root").to_owned()
}
