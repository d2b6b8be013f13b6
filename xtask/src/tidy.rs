//! Tidy tests: repository-wide rules checked as plain `#[test]`s, so `cargo test` enforces them.
//!
//! Each test collects every violation and fails once, naming the file or edge and saying how to
//! fix it.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

use crate::{
    cargo,
    module_graph::{ModuleGraph, Sources, describe, display},
    project_root,
};

/// The heading in `ARCHITECTURE.md` whose first fenced block lists the allowed edges.
const EDGES_HEADING: &str = "## Allowed dependency edges";

/// Directories whose `.rs` files the source rules apply to.
const SOURCE_DIRS: &[&str] = &["crates", "xtask", "tests"];

/// `from -> to`: package `from` depends on workspace package `to`.
type Edge = (String, String);

/// Each edge between workspace members with the manifest tables that declare it.
type Graph = BTreeMap<Edge, BTreeSet<&'static str>>;

#[derive(Debug)]
struct Member {
    name: String,
    /// The manifest path relative to the workspace root, for messages.
    manifest: PathBuf,
}

#[test]
fn dependency_edges_match_architecture_md() {
    let (members, actual) = workspace_graph();
    let text = read(&project_root().join("ARCHITECTURE.md"));
    let allowed = match parse_allowed_edges(&text) {
        Ok(allowed) => allowed,
        Err(message) => panic!("ARCHITECTURE.md: {message}"),
    };

    let manifest_of = |name: &str| {
        members.iter().find(|member| member.name == name).map_or_else(
            || format!("<{name} is not a workspace member>"),
            |member| member.manifest.display().to_string(),
        )
    };
    let mut problems = Vec::new();
    for ((from, to), tables) in actual.iter().filter(|(edge, _)| !allowed.contains(edge)) {
        let tables = tables.iter().copied().collect::<Vec<_>>().join(", ");
        problems.push(format!(
            "{}: `{from} -> {to}` (in {tables}) is not an allowed edge.\n    \
             Remove the dependency, or, if the new direction is intended, add the line `{from} -> {to}` to \
             the \"{EDGES_HEADING}\" block of ARCHITECTURE.md.",
            manifest_of(from)
        ));
    }
    for (from, to) in allowed.iter().filter(|edge| !actual.contains_key(edge)) {
        problems.push(format!(
            "ARCHITECTURE.md: `{from} -> {to}` is listed as allowed but {} does not depend on {to}.\n    \
             Delete the line from the \"{EDGES_HEADING}\" block (the list must equal the real graph).",
            manifest_of(from)
        ));
    }
    let names: BTreeSet<&str> = members.iter().map(|member| member.name.as_str()).collect();
    for (from, to) in &allowed {
        for name in [from, to] {
            if !names.contains(name.as_str()) {
                problems.push(format!(
                    "ARCHITECTURE.md: `{from} -> {to}` names `{name}`, which is not a workspace member.\n    \
                     List only crates that exist; describe planned crates in prose."
                ));
            }
        }
    }
    report("dependency edges between workspace crates", problems);
}

/// Test-only crates: other crates may reach them through `[dev-dependencies]` only.
const TEST_ONLY: &[&str] = &["projection-testkit", "persistence-testkit", "subagent-testkit"];

#[test]
fn test_only_crates_are_dev_dependencies_only() {
    let (members, graph) = workspace_graph();
    let mut problems = test_only_problems(&graph);
    for name in TEST_ONLY {
        if !members.iter().any(|member| member.name == *name) {
            problems.push(format!(
                "`{name}` is listed in TEST_ONLY but is not a workspace member; fix the name or drop the entry"
            ));
        }
    }
    report("test-only crates", problems);
}

#[test]
fn test_only_problems_flags_a_normal_dependency_on_a_test_only_crate() {
    let edge = |from: &str, to: &str, tables: &[&'static str]| {
        ((from.to_owned(), to.to_owned()), tables.iter().copied().collect::<BTreeSet<_>>())
    };
    let graph: Graph = [
        edge("session-projection", "projection-testkit", &["[dev-dependencies]"]),
        edge("subagent", "projection-testkit", &["[dependencies]", "[dev-dependencies]"]),
        edge("subagent", "session-core", &["[dependencies]"]),
    ]
    .into_iter()
    .collect();
    let problems = test_only_problems(&graph);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("`subagent -> projection-testkit`"), "{problems:?}");
}

/// Edges that reach a [`TEST_ONLY`] crate from anything but `[dev-dependencies]`.
fn test_only_problems(graph: &Graph) -> Vec<String> {
    graph
        .iter()
        .filter(|((_, to), tables)| {
            TEST_ONLY.contains(&to.as_str()) && tables.iter().any(|table| *table != "[dev-dependencies]")
        })
        .map(|((from, to), tables)| {
            let tables = tables.iter().copied().collect::<Vec<_>>().join(", ");
            format!(
                "`{from} -> {to}` is declared in {tables}; `{to}` is test-only, so only [dev-dependencies] may name it"
            )
        })
        .collect()
}

#[test]
fn every_rs_file_starts_with_a_module_doc_comment() {
    let mut problems = Vec::new();
    for path in rust_files() {
        let text = read(&path);
        let first_line = text.lines().next().unwrap_or("");
        if !first_line.starts_with("//!") {
            problems.push(format!(
                "{}: the first line is `{first_line}`, not a `//!` comment.\n    \
                 Start the file with a `//!` line saying what the file is for.",
                relative(&path)
            ));
        }
    }
    report("module doc comments", problems);
}

/// The longest a source file under `crates/*/src` may be: past it, a file holds more than one
/// concern and a newcomer cannot take it in. A longer file must be named in ARCHITECTURE.md with
/// the reason (none is today).
const MAX_SOURCE_LINES: usize = 800;

#[test]
fn no_library_source_file_is_over_the_line_limit() {
    let architecture = read(&project_root().join("ARCHITECTURE.md"));
    let mut problems = Vec::new();
    for path in rust_files() {
        let shown = relative(&path);
        let mut parts = shown.split('/');
        if !(parts.next() == Some("crates") && parts.next().is_some() && parts.next() == Some("src")) {
            continue;
        }
        let lines = read(&path).lines().count();
        if lines > MAX_SOURCE_LINES && !architecture.contains(&format!("`{shown}`")) {
            problems.push(format!(
                "{shown}: {lines} lines, over {MAX_SOURCE_LINES}.\n    \
                 Split it by concern, or name it in ARCHITECTURE.md with the reason it is one file."
            ));
        }
    }
    report("the source file line limit", problems);
}

#[test]
fn no_ignored_or_should_panic_tests_and_no_stubs() {
    // Built with concat! so this file does not match its own patterns.
    let banned: &[(&str, &str)] = &[
        (concat!("#[", "ignore"), "make the test run (or delete it); a slow test belongs in a benchmark"),
        (
            concat!("#[", "should_panic"),
            "call the code and assert on the returned `Err` instead (bugs panic; failures return `Err`)",
        ),
        (concat!("todo", "!("), "finish the code, or return a typed error for the unsupported case"),
        (concat!("unimplemented", "!("), "finish the code, or return a typed error for the unsupported case"),
    ];
    let mut problems = Vec::new();
    for path in rust_files() {
        let text = read(&path);
        for (line_idx, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (pattern, fix) in banned {
                if line.contains(pattern) {
                    problems.push(format!("{}:{}: contains `{pattern}`; {fix}.", relative(&path), line_idx + 1));
                }
            }
        }
    }
    report("banned test attributes and stubs", problems);
}

#[test]
fn the_hop_to_the_blocking_pool_has_one_home() {
    // Built with concat! so this file does not match its own pattern.
    let pattern = concat!("spawn_", "blocking(");
    let home = Path::new("crates/session-storage-io/src/keyed.rs");
    let mut problems = Vec::new();
    for path in rust_files().into_iter().chain(example_files()) {
        let path_text = relative(&path);
        // Library and example code only: tests and the test-only crates may drive the pool as
        // they need to.
        let library =
            path_text.starts_with("crates/") && path_text.contains("/src/") || path_text.starts_with("examples/");
        let test_only = ["crates/persistence-testkit/", "crates/projection-testkit/", "crates/subagent-testkit/"]
            .iter()
            .any(|dir| path_text.starts_with(dir));
        if !library || test_only || Path::new(&path_text) == home {
            continue;
        }
        for (line_idx, line) in read(&path).lines().enumerate() {
            if !line.trim_start().starts_with("//") && line.contains(pattern) {
                problems.push(format!(
                    "{path_text}:{}: calls `{pattern}` directly; use `session_storage_io::keyed::run_blocking` \
                     (a panic resumes in the caller, a cancellation at shutdown is a typed error)",
                    line_idx + 1
                ));
            }
        }
    }
    report("the hop to the blocking pool", problems);
}

/// The module roots whose modules must not import each other in a circle: a crate's `src/` (each
/// of its trees, the library's and the binary's) or a module below it (its folder or file).
const ACYCLIC_MODULE_ROOTS: &[&str] = &["crates/apiproxy/src", "crates/session-persistence/src/coordinator"];

#[test]
fn no_import_cycles_between_modules() {
    let mut problems = Vec::new();
    let mut enforced_crates = BTreeSet::new();
    for root in ACYCLIC_MODULE_ROOTS {
        let (src, under) = split_module_root(root);
        if under.is_empty() {
            enforced_crates.insert(src.clone());
        }
        let trees = module_trees(&project_root().join(&src));
        if !trees.iter().any(|(_, graph)| graph.contains(&under)) {
            problems.push(format!(
                "{root}: no such module in {src}'s trees.\n    Fix the path in ACYCLIC_MODULE_ROOTS (xtask/src/tidy.rs)."
            ));
        }
        for (tree, graph) in &trees {
            problems.extend(graph.missing.iter().map(|missing| format!("{src}/{tree}: no file for module {missing}")));
            for cycle in graph.cycles(&under) {
                problems.push(format!(
                    "{src}/{tree}: modules import each other in a circle: {}\n    \
                     Move what both need into a module that imports neither (a leaf), so the edges point one way.",
                    describe(&cycle)
                ));
            }
        }
    }
    // Every other library crate, reported (run with `--nocapture` to see it), not enforced.
    for src in library_sources().into_iter().filter(|src| !enforced_crates.contains(src)) {
        for (tree, graph) in module_trees(&project_root().join(&src)) {
            for cycle in graph.cycles(&[]) {
                eprintln!("note: {src}/{tree}: import cycle (not enforced): {}", describe(&cycle));
            }
        }
    }
    report("import cycles between modules", problems);
}

/// `crates/x/src/a/b` as (`crates/x/src`, the module path `a::b`).
fn split_module_root(root: &str) -> (String, Vec<String>) {
    let (src, below) = match root.split_once("/src/") {
        Some((krate, below)) => (format!("{krate}/src"), below),
        None => (root.trim_end_matches('/').to_owned(), ""),
    };
    let under = below.split('/').filter(|segment| !segment.is_empty());
    (src, under.map(|segment| segment.trim_end_matches(".rs").to_owned()).collect())
}

/// Each crate tree under a `src/` directory (`lib.rs`, `main.rs`) with its module graph.
fn module_trees(src: &Path) -> Vec<(&'static str, ModuleGraph)> {
    fn walk(dir: &Path, src: &Path, sources: &mut Sources) {
        let entries = fs::read_dir(dir).unwrap_or_else(|err| panic!("cannot read {}: {err}", dir.display()));
        for entry in entries {
            let path = entry.unwrap_or_else(|err| panic!("cannot read {}: {err}", dir.display())).path();
            if path.is_dir() {
                walk(&path, src, sources);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let relative = path.strip_prefix(src).expect("walked below src").to_owned();
                sources.insert(relative, read(&path));
            }
        }
    }
    let mut sources = Sources::new();
    walk(src, src, &mut sources);
    ["lib.rs", "main.rs"]
        .into_iter()
        .filter(|root| sources.contains_key(Path::new(root)))
        .map(|root| (root, ModuleGraph::build(&sources, Path::new(root))))
        .collect()
}

/// `crates/<name>/src` of every crate with a library, sorted.
fn library_sources() -> Vec<String> {
    let crates = project_root().join("crates");
    let mut found: Vec<String> = fs::read_dir(&crates)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", crates.display()))
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|dir| dir.join("src/lib.rs").is_file())
        .filter_map(|dir| dir.file_name().map(|name| format!("crates/{}/src", name.to_string_lossy())))
        .collect();
    found.sort();
    found
}

#[test]
fn split_module_root_reads_the_crate_and_the_module_path() {
    assert_eq!(split_module_root("crates/apiproxy/src"), ("crates/apiproxy/src".to_owned(), vec![]));
    assert_eq!(
        split_module_root("crates/session-persistence/src/coordinator"),
        ("crates/session-persistence/src".to_owned(), vec!["coordinator".to_owned()])
    );
    assert_eq!(display(&split_module_root("crates/x/src/a/b.rs").1), "crate::a::b");
}

/// The examples' `.rs` files (a package outside [`SOURCE_DIRS`]).
fn example_files() -> Vec<PathBuf> {
    let dir = project_root().join("examples");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", dir.display()))
        .map(|entry| entry.unwrap_or_else(|err| panic!("cannot read {}: {err}", dir.display())).path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_crate_inherits_workspace_lints() {
    let (members, _) = workspace_graph();
    let mut problems = Vec::new();
    for member in &members {
        let text = read(&project_root().join(&member.manifest));
        if !inherits_workspace_lints(&text) {
            problems.push(format!(
                "{}: no `[lints] workspace = true`.\n    \
                 Add a `[lints]` table with `workspace = true` so the crate gets the shared lints.",
                member.manifest.display()
            ));
        }
    }
    report("workspace lints", problems);
}

#[test]
fn parse_allowed_edges_reads_only_the_block_under_the_heading() {
    let text = "\
# Architecture
```text
ignored -> block
```
## Allowed dependency edges
Prose.
```text
# comment
b -> a

c->a
```
```text
also -> ignored
```
";
    let expected: BTreeSet<Edge> = [("b", "a"), ("c", "a")].map(|(from, to)| (from.to_owned(), to.to_owned())).into();
    assert_eq!(parse_allowed_edges(text), Ok(expected));

    let malformed = format!("{EDGES_HEADING}\n```\na => b\n```\n");
    assert!(parse_allowed_edges(&malformed).unwrap_err().contains("line 3"));
    assert!(parse_allowed_edges("# no heading\n").is_err());
    assert!(parse_allowed_edges(&format!("{EDGES_HEADING}\n```\na -> b\n")).is_err());
}

#[test]
fn inherits_workspace_lints_accepts_both_spellings() {
    assert!(inherits_workspace_lints("[package]\nname = \"a\"\n\n[lints]\nworkspace = true\n"));
    assert!(inherits_workspace_lints("[package]\nlints.workspace = true\n"));
    assert!(!inherits_workspace_lints("[lints]\n\n[dependencies]\nworkspace = true\n"));
    assert!(!inherits_workspace_lints("[package]\nname = \"a\"\n"));
}

/// Parses the first fenced block after [`EDGES_HEADING`]: one `from -> to` per line; blank lines
/// and lines starting with `#` are skipped.
fn parse_allowed_edges(text: &str) -> Result<BTreeSet<Edge>, String> {
    let mut lines = text.lines().enumerate().skip_while(|(_, line)| line.trim_end() != EDGES_HEADING);
    if lines.next().is_none() {
        return Err(format!("no `{EDGES_HEADING}` heading; add it, followed by a fenced block of `from -> to` lines"));
    }
    let mut lines = lines.skip_while(|(_, line)| !line.starts_with("```"));
    if lines.next().is_none() {
        return Err(format!("no fenced block after `{EDGES_HEADING}`"));
    }
    let mut edges = BTreeSet::new();
    for (line_idx, line) in lines {
        let line = line.trim();
        if line.starts_with("```") {
            return Ok(edges);
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_once("->") {
            Some((from, to)) if is_package_name(from.trim()) && is_package_name(to.trim()) => {
                edges.insert((from.trim().to_owned(), to.trim().to_owned()));
            }
            _ => {
                return Err(format!(
                    "line {}: `{line}` is not an edge; write `from-crate -> to-crate`, one per line",
                    line_idx + 1
                ));
            }
        }
    }
    Err(format!("the fenced block after `{EDGES_HEADING}` is not closed"))
}

fn is_package_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// True if the manifest has `workspace = true` in its `[lints]` table (or `lints.workspace = true`).
fn inherits_workspace_lints(manifest: &str) -> bool {
    let mut table = "";
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            table = line;
            continue;
        }
        let key_value: String = line.chars().filter(|c| !c.is_whitespace()).collect();
        let inherits = (table == "[lints]" && key_value == "workspace=true")
            || (table != "[lints]" && key_value == "lints.workspace=true");
        if inherits {
            return true;
        }
    }
    false
}

/// The workspace members and the edges between them, from `cargo metadata --no-deps`.
/// An edge is any normal, dev or build dependency whose path is another member's directory.
fn workspace_graph() -> (Vec<Member>, Graph) {
    let root = project_root();
    let output = Command::new(cargo())
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(&root)
        .output()
        .expect("could not run `cargo metadata`");
    assert!(
        output.status.success(),
        "`cargo metadata` failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("`cargo metadata` printed invalid JSON");

    let workspace_ids: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .expect("no workspace_members")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let packages: Vec<&Value> = metadata["packages"]
        .as_array()
        .expect("no packages")
        .iter()
        .filter(|package| package["id"].as_str().is_some_and(|id| workspace_ids.contains(id)))
        .collect();

    let manifest_path = |package: &Value| PathBuf::from(package["manifest_path"].as_str().expect("no manifest_path"));
    let members: Vec<Member> = packages
        .iter()
        .map(|package| {
            let manifest = manifest_path(package);
            Member {
                name: package["name"].as_str().expect("no package name").to_owned(),
                manifest: manifest.strip_prefix(&root).unwrap_or(&manifest).to_owned(),
            }
        })
        .collect();

    let mut edges = Graph::new();
    for package in &packages {
        let from = package["name"].as_str().expect("no package name");
        for dependency in package["dependencies"].as_array().expect("no dependencies") {
            let Some(dep_dir) = dependency["path"].as_str() else { continue };
            let target = packages.iter().find(|other| manifest_path(other).parent() == Some(Path::new(dep_dir)));
            let Some(target) = target else { continue };
            let table = match dependency["kind"].as_str() {
                Some("dev") => "[dev-dependencies]",
                Some("build") => "[build-dependencies]",
                _ => "[dependencies]",
            };
            let to = target["name"].as_str().expect("no package name");
            edges.entry((from.to_owned(), to.to_owned())).or_default().insert(table);
        }
    }
    (members, edges)
}

/// Every `.rs` file under [`SOURCE_DIRS`], skipping `target` directories, sorted.
fn rust_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        let entries = fs::read_dir(dir).unwrap_or_else(|err| panic!("cannot read {}: {err}", dir.display()));
        for entry in entries {
            let path = entry.unwrap_or_else(|err| panic!("cannot read {}: {err}", dir.display())).path();
            if path.is_dir() {
                if path.file_name().is_some_and(|name| name != "target") {
                    walk(&path, files);
                }
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        walk(&project_root().join(dir), &mut files);
    }
    files.sort();
    files
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

fn relative(path: &Path) -> String {
    path.strip_prefix(project_root()).unwrap_or(path).display().to_string()
}

#[track_caller]
fn report(rule: &str, problems: Vec<String>) {
    assert!(problems.is_empty(), "tidy: {} problem(s) with {rule}:\n\n{}\n", problems.len(), problems.join("\n\n"));
}
