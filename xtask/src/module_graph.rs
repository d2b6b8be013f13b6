//! The module graph of a crate, read from its source text, and the import cycles in it: the
//! checker behind the tidy test `no_import_cycles_between_modules`.
//!
//! A node is a module file (inline modules such as `mod tests { .. }` belong to their file). An
//! edge `a -> b` is a path in `a` that starts with `crate::`, `super::` or `self::` (in a `use`
//! tree or anywhere else in the code, macro bodies included) and names something in `b`: the
//! path is resolved as far as module files exist, so `crate::wire::error::Issue` is an edge to
//! `wire/error.rs` and `crate::ApiProxy` one to the crate root. A parent's `mod x;` declaration
//! is not an edge, nor is a path that starts with a child's name. Comments, doc comments and
//! string literals are skipped, so an intra-doc link is no edge.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    path::{Path, PathBuf},
};

/// A crate's source files: each path relative to its `src/` directory (`lib.rs`,
/// `wire/mod.rs`), with its text.
pub(crate) type Sources = BTreeMap<PathBuf, String>;

/// A module's path below the crate root (empty for the root itself).
type ModPath = Vec<String>;

/// Where a reference was written, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reference {
    /// The referring file, relative to `src/`.
    pub(crate) file: PathBuf,
    /// Its 1-based line.
    pub(crate) line: usize,
    /// The path as written (a `use` tree's leaf, expanded).
    pub(crate) path: String,
}

/// One import cycle: the modules along it, the first repeated at the end, each step with the
/// reference that makes it; and every module of its group (the modules that all reach each other).
#[derive(Debug, Clone)]
pub(crate) struct Cycle {
    /// The steps, in order; the last names the first module again and has no reference.
    pub(crate) steps: Vec<(ModPath, Option<Reference>)>,
    /// The strongly connected group the cycle lies in, sorted.
    pub(crate) group: Vec<ModPath>,
}

/// The module files of one crate tree (a library or a binary) and the edges between them.
#[derive(Debug, Default)]
pub(crate) struct ModuleGraph {
    /// Each file module's path and its file.
    files: BTreeMap<ModPath, PathBuf>,
    /// `from -> to`, with the first reference that makes the edge.
    edges: BTreeMap<ModPath, BTreeMap<ModPath, Reference>>,
    /// Declared modules whose file is not in the sources (a `#[path]` module, say).
    pub(crate) missing: Vec<String>,
}

/// The name a module path is shown by: `crate`, `crate::wire::error`.
pub(crate) fn display(path: &[String]) -> String {
    std::iter::once("crate").chain(path.iter().map(String::as_str)).collect::<Vec<_>>().join("::")
}

impl ModuleGraph {
    /// Reads the tree whose root file is `root` (`lib.rs`, `main.rs`) from `sources`.
    pub(crate) fn build(sources: &Sources, root: &Path) -> ModuleGraph {
        let mut graph = ModuleGraph::default();
        // Module tree first, so every reference can be resolved against all the files.
        let mut queue = VecDeque::from([(Vec::new(), root.to_owned())]);
        let mut lexed = Vec::new();
        while let Some((path, file)) = queue.pop_front() {
            let Some(text) = sources.get(&file) else { continue };
            let tokens = lex(text);
            for (inline, name) in declarations(&tokens) {
                let dir = children_dir(&file, &inline);
                let candidates = [dir.join(format!("{name}.rs")), dir.join(&name).join("mod.rs")];
                let mut child = path.clone();
                child.extend(inline.iter().cloned());
                child.push(name);
                match candidates.into_iter().find(|candidate| sources.contains_key(candidate)) {
                    Some(found) => queue.push_back((child, found)),
                    None => graph.missing.push(format!("{} (declared in {})", display(&child), file.display())),
                }
            }
            graph.files.insert(path.clone(), file.clone());
            lexed.push((path, file, tokens));
        }
        for (path, file, tokens) in lexed {
            for (inline, line, written) in references(&tokens) {
                let Some(target) = graph.resolve(&path, &inline, &written) else { continue };
                if target != path {
                    let reference = Reference { file: file.clone(), line, path: written.join("::") };
                    graph.edges.entry(path.clone()).or_default().entry(target).or_insert(reference);
                }
            }
        }
        graph
    }

    /// Whether `path` is a module file of this tree.
    pub(crate) fn contains(&self, path: &[String]) -> bool {
        self.files.contains_key(path)
    }

    /// The file module a path written in module `at` (inside its inline modules `inline`) names:
    /// the longest prefix of the absolute path that is a module file.
    fn resolve(&self, at: &[String], inline: &[String], written: &[String]) -> Option<ModPath> {
        let mut absolute: ModPath = at.iter().chain(inline).cloned().collect();
        let mut segments = written.iter();
        match segments.next().map(String::as_str) {
            Some("crate") => absolute.clear(),
            Some("self") => {}
            Some("super") => {
                absolute.pop()?;
            }
            _ => return None,
        }
        let mut rest = segments.peekable();
        while rest.peek().is_some_and(|segment| *segment == "super") {
            rest.next();
            absolute.pop()?;
        }
        absolute.extend(rest.filter(|segment| *segment != "self" && *segment != "*").cloned());
        (0..=absolute.len()).rev().map(|len| absolute[..len].to_vec()).find(|prefix| self.files.contains_key(prefix))
    }

    /// Every import cycle among the modules at or below `under`: the shortest one through the
    /// first module of each strongly connected group.
    pub(crate) fn cycles(&self, under: &[String]) -> Vec<Cycle> {
        let inside = |path: &ModPath| path.starts_with(under);
        let nodes: Vec<&ModPath> = self.files.keys().filter(|path| inside(path)).collect();
        let successors = |node: &ModPath| -> Vec<&ModPath> {
            self.edges.get(node).map_or_else(Vec::new, |to| to.keys().filter(|path| inside(path)).collect())
        };
        let mut cycles = Vec::new();
        let mut seen = BTreeSet::new();
        for group in strongly_connected(&nodes, &successors) {
            if group.len() < 2 || group.iter().any(|node| seen.contains(*node)) {
                continue;
            }
            seen.extend(group.iter().copied());
            // The shortest way from the group's first module back to itself, within the group.
            let start = group[0];
            let members: BTreeSet<&ModPath> = group.iter().copied().collect();
            let mut previous: BTreeMap<&ModPath, &ModPath> = BTreeMap::new();
            let mut queue = VecDeque::from([start]);
            let mut closing = None;
            'search: while let Some(node) = queue.pop_front() {
                for next in successors(node).into_iter().filter(|next| members.contains(next)) {
                    if next == start {
                        closing = Some(node);
                        break 'search;
                    }
                    if !previous.contains_key(next) {
                        previous.insert(next, node);
                        queue.push_back(next);
                    }
                }
            }
            let Some(mut node) = closing else { continue };
            let mut path = vec![start.clone()];
            let mut back = vec![node];
            while node != start {
                node = previous[node];
                back.push(node);
            }
            path.extend(back.into_iter().rev().skip(1).cloned());
            path.push(start.clone());
            let steps = path
                .windows(2)
                .map(|pair| (pair[0].clone(), self.edges.get(&pair[0]).and_then(|to| to.get(&pair[1])).cloned()))
                .chain(std::iter::once((start.clone(), None)))
                .collect();
            cycles.push(Cycle { steps, group: group.into_iter().cloned().collect() });
        }
        cycles
    }
}

/// A cycle as its modules, then one line per step with the reference that makes it, then the
/// whole group when it holds more modules than the cycle.
pub(crate) fn describe(cycle: &Cycle) -> String {
    let names: Vec<String> = cycle.steps.iter().map(|(path, _)| display(path)).collect();
    let mut text = names.join(" -> ");
    for (idx, (path, reference)) in cycle.steps.iter().enumerate() {
        if let Some(reference) = reference {
            let to = &names[idx + 1];
            text.push_str(&format!(
                "\n      {} -> {to}: {}:{} `{}`",
                display(path),
                reference.file.display(),
                reference.line,
                reference.path
            ));
        }
    }
    if cycle.group.len() + 1 > cycle.steps.len() {
        let group: Vec<String> = cycle.group.iter().map(|path| display(path)).collect();
        text.push_str(&format!("\n      (all of these reach each other: {})", group.join(", ")));
    }
    text
}

/// Tarjan's strongly connected components, iteratively.
fn strongly_connected<'a>(
    nodes: &[&'a ModPath],
    successors: &dyn Fn(&ModPath) -> Vec<&'a ModPath>,
) -> Vec<Vec<&'a ModPath>> {
    let mut index: BTreeMap<&ModPath, usize> = BTreeMap::new();
    let mut low: BTreeMap<&ModPath, usize> = BTreeMap::new();
    let mut on_stack = BTreeSet::new();
    let mut stack = Vec::new();
    let mut groups = Vec::new();
    for &root in nodes {
        if index.contains_key(root) {
            continue;
        }
        let mut work: Vec<(&ModPath, Vec<&ModPath>)> = Vec::new();
        let visit = |node: &'a ModPath,
                     index: &mut BTreeMap<&'a ModPath, usize>,
                     low: &mut BTreeMap<&'a ModPath, usize>,
                     stack: &mut Vec<&'a ModPath>,
                     on_stack: &mut BTreeSet<&'a ModPath>| {
            let next = index.len();
            index.insert(node, next);
            low.insert(node, next);
            stack.push(node);
            on_stack.insert(node);
        };
        visit(root, &mut index, &mut low, &mut stack, &mut on_stack);
        work.push((root, successors(root)));
        while let Some((node, pending)) = work.last_mut() {
            let node = *node;
            if let Some(next) = pending.pop() {
                if !index.contains_key(next) {
                    visit(next, &mut index, &mut low, &mut stack, &mut on_stack);
                    work.push((next, successors(next)));
                } else if on_stack.contains(next) {
                    let lowest = low[node].min(index[next]);
                    low.insert(node, lowest);
                }
                continue;
            }
            work.pop();
            if let Some((parent, _)) = work.last() {
                let lowest = low[parent].min(low[node]);
                low.insert(parent, lowest);
            }
            if low[node] == index[node] {
                let mut group = Vec::new();
                while let Some(member) = stack.pop() {
                    on_stack.remove(member);
                    group.push(member);
                    if member == node {
                        break;
                    }
                }
                group.sort();
                groups.push(group);
            }
        }
    }
    groups
}

/// The directory where `file`'s child modules (inside its inline modules `inline`) live.
fn children_dir(file: &Path, inline: &[String]) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new("")).to_owned();
    let is_dir_root = file.file_name().is_some_and(|name| name == "mod.rs" || name == "lib.rs" || name == "main.rs");
    let mut dir = if is_dir_root { parent } else { parent.join(file.file_stem().expect("a module file has a name")) };
    for name in inline {
        dir.push(name);
    }
    dir
}

/// A token of Rust source, as far as the graph needs: identifiers, `::` and the punctuation of
/// paths and `use` trees; everything else is `Other`. Comments and literals produce none.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Dollar,
    Other,
}

/// The tokens of `text`, each with its 1-based line.
fn lex(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut idx = 0;
    // Skips a quoted literal whose opening quote is at `start`, returning the index after it.
    let skip_quoted = |start: usize, line: &mut usize| -> usize {
        let mut at = start + 1;
        while at < chars.len() {
            match chars[at] {
                '\\' => at += 1,
                '"' => return at + 1,
                '\n' => *line += 1,
                _ => {}
            }
            at += 1;
        }
        at
    };
    while idx < chars.len() {
        let c = chars[idx];
        let next = chars.get(idx + 1).copied();
        match c {
            '\n' => {
                line += 1;
                idx += 1;
            }
            c if c.is_whitespace() => idx += 1,
            '/' if next == Some('/') => {
                while idx < chars.len() && chars[idx] != '\n' {
                    idx += 1;
                }
            }
            '/' if next == Some('*') => {
                let mut depth = 0;
                while idx < chars.len() {
                    if chars[idx] == '/' && chars.get(idx + 1) == Some(&'*') {
                        depth += 1;
                        idx += 2;
                    } else if chars[idx] == '*' && chars.get(idx + 1) == Some(&'/') {
                        depth -= 1;
                        idx += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if chars[idx] == '\n' {
                            line += 1;
                        }
                        idx += 1;
                    }
                }
            }
            '"' => idx = skip_quoted(idx, &mut line),
            '\'' => {
                // A char literal (`'x'`, `'\n'`, `'\''`) or a lifetime (`'a`).
                if next == Some('\\') {
                    idx += 2;
                    while idx < chars.len() && chars[idx] != '\'' {
                        idx += 1;
                    }
                    idx += 1;
                } else if chars.get(idx + 2) == Some(&'\'') {
                    idx += 3;
                } else {
                    idx += 1;
                }
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = idx;
                while idx < chars.len() && (chars[idx].is_alphanumeric() || chars[idx] == '_') {
                    idx += 1;
                }
                let word: String = chars[start..idx].iter().collect();
                let after = chars.get(idx).copied();
                match (word.as_str(), after) {
                    ("r" | "br" | "cr", Some('#' | '"')) => {
                        let mut hashes = 0;
                        while chars.get(idx) == Some(&'#') {
                            hashes += 1;
                            idx += 1;
                        }
                        if chars.get(idx) == Some(&'"') {
                            // A raw string: ends at `"` and as many `#`.
                            idx += 1;
                            while idx < chars.len() {
                                if chars[idx] == '"' && (1..=hashes).all(|n| chars.get(idx + n) == Some(&'#')) {
                                    idx += 1 + hashes;
                                    break;
                                }
                                if chars[idx] == '\n' {
                                    line += 1;
                                }
                                idx += 1;
                            }
                        } else {
                            // A raw identifier, `r#type`.
                            let start = idx;
                            while idx < chars.len() && (chars[idx].is_alphanumeric() || chars[idx] == '_') {
                                idx += 1;
                            }
                            tokens.push((Token::Ident(chars[start..idx].iter().collect()), line));
                        }
                    }
                    ("b" | "c", Some('"')) => idx = skip_quoted(idx, &mut line),
                    ("b", Some('\'')) => {
                        idx += 1;
                        if chars.get(idx + 1) == Some(&'\\') {
                            idx += 2;
                        }
                        while idx < chars.len() && chars[idx] != '\'' {
                            idx += 1;
                        }
                        idx += 1;
                    }
                    _ => tokens.push((Token::Ident(word), line)),
                }
            }
            c if c.is_ascii_digit() => {
                while idx < chars.len()
                    && (chars[idx].is_alphanumeric()
                        || chars[idx] == '_'
                        || chars[idx] == '.' && chars.get(idx + 1).is_some_and(char::is_ascii_digit))
                {
                    idx += 1;
                }
            }
            ':' if next == Some(':') => {
                tokens.push((Token::PathSep, line));
                idx += 2;
            }
            _ => {
                let token = match c {
                    '{' => Token::Open,
                    '}' => Token::Close,
                    ',' => Token::Comma,
                    ';' => Token::Semi,
                    '*' => Token::Star,
                    '$' => Token::Dollar,
                    _ => Token::Other,
                };
                tokens.push((token, line));
                idx += 1;
            }
        }
    }
    tokens
}

fn ident(tokens: &[(Token, usize)], idx: usize) -> Option<&str> {
    match tokens.get(idx) {
        Some((Token::Ident(word), _)) => Some(word),
        _ => None,
    }
}

fn is(tokens: &[(Token, usize)], idx: usize, token: &Token) -> bool {
    tokens.get(idx).is_some_and(|(found, _)| found == token)
}

/// Walks `tokens`, calling `at(idx, inline)` at each token with the inline modules it is in.
fn walk(tokens: &[(Token, usize)], mut at: impl FnMut(usize, &[String])) {
    let mut depth = 0usize;
    // Each open inline module with the brace depth inside it.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut idx = 0;
    while idx < tokens.len() {
        at(idx, &names);
        match &tokens[idx].0 {
            Token::Ident(word) if word == "mod" && is(tokens, idx + 2, &Token::Open) => {
                if let Some(name) = ident(tokens, idx + 1) {
                    depth += 1;
                    inline.push((name.to_owned(), depth));
                    names.push(name.to_owned());
                    idx += 3;
                    continue;
                }
            }
            Token::Open => depth += 1,
            Token::Close => {
                if inline.last().is_some_and(|(_, inner)| *inner == depth) {
                    inline.pop();
                    names.pop();
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        idx += 1;
    }
}

/// Each `mod name;` declaration, with the inline modules it is written in.
fn declarations(tokens: &[(Token, usize)]) -> Vec<(Vec<String>, String)> {
    let mut found = Vec::new();
    walk(tokens, |idx, inline| {
        if ident(tokens, idx) == Some("mod")
            && let Some(name) = ident(tokens, idx + 1)
            && is(tokens, idx + 2, &Token::Semi)
        {
            found.push((inline.to_vec(), name.to_owned()));
        }
    });
    found
}

/// Each path that starts with `crate::`, `super::` or `self::` (a `use` tree expanded into its
/// leaves), with the inline modules it is written in and its line.
fn references(tokens: &[(Token, usize)]) -> Vec<(Vec<String>, usize, Vec<String>)> {
    let mut found = Vec::new();
    let mut skip_until = 0;
    walk(tokens, |idx, inline| {
        if idx < skip_until {
            return;
        }
        let starts = matches!(ident(tokens, idx), Some("crate" | "super" | "self"))
            && is(tokens, idx + 1, &Token::PathSep)
            && !(idx > 0 && (is(tokens, idx - 1, &Token::Dollar) || is(tokens, idx - 1, &Token::PathSep)));
        if starts {
            let line = tokens[idx].1;
            let (leaves, end) = use_tree(tokens, idx, Vec::new());
            found.extend(leaves.into_iter().map(|leaf| (inline.to_vec(), line, leaf)));
            skip_until = end;
        }
    });
    found
}

/// The leaves of the path or `use` tree at `idx`, each prefixed with `prefix`, and the index
/// after it.
fn use_tree(tokens: &[(Token, usize)], mut idx: usize, mut prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    loop {
        match tokens.get(idx) {
            Some((Token::Ident(word), _)) => {
                prefix.push(word.clone());
                idx += 1;
                if ident(tokens, idx) == Some("as") {
                    idx += 2;
                }
            }
            Some((Token::Star, _)) => return (vec![prefix], idx + 1),
            Some((Token::Open, _)) => {
                let mut leaves = Vec::new();
                idx += 1;
                while idx < tokens.len() && !is(tokens, idx, &Token::Close) {
                    let (inner, end) = use_tree(tokens, idx, prefix.clone());
                    leaves.extend(inner);
                    idx = end;
                    if is(tokens, idx, &Token::Comma) {
                        idx += 1;
                    } else if !is(tokens, idx, &Token::Close) {
                        // Not a `use` tree after all (a struct literal, say): stop here.
                        break;
                    }
                }
                return (leaves, idx + 1);
            }
            _ => return (vec![prefix], idx),
        }
        if is(tokens, idx, &Token::PathSep) {
            idx += 1;
        } else {
            return (vec![prefix], idx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(files: &[(&str, &str)]) -> Sources {
        files.iter().map(|(path, text)| (PathBuf::from(path), (*text).to_owned())).collect()
    }

    fn check(files: &[(&str, &str)], under: &[&str], expected: &[&str]) {
        let graph = ModuleGraph::build(&sources(files), Path::new("lib.rs"));
        assert!(graph.missing.is_empty(), "{:?}", graph.missing);
        let under: Vec<String> = under.iter().map(|segment| (*segment).to_owned()).collect();
        let cycles: Vec<String> = graph
            .cycles(&under)
            .iter()
            .map(|cycle| cycle.steps.iter().map(|(path, _)| display(path)).collect::<Vec<_>>().join(" -> "))
            .collect();
        assert_eq!(cycles, expected);
    }

    #[test]
    fn a_state_module_that_imports_no_importer_leaves_no_cycle() {
        let files = [
            ("lib.rs", "mod proxy;\nmod state;\nmod http;\npub use crate::proxy::ApiProxy;\n"),
            ("proxy.rs", "use crate::{state::Shared, http::router};\npub struct ApiProxy;\n"),
            (
                "state.rs",
                "//! `crate::proxy` in a comment is no edge.\npub(crate) struct Shared;\nconst S: &str = \"crate::http\";\n",
            ),
            (
                "http.rs",
                "use crate::state::Shared;\npub(crate) fn router() {}\n#[cfg(test)]\nmod tests { use super::*; }\n",
            ),
        ];
        check(&files, &[], &[]);
    }

    #[test]
    fn a_cycle_is_named_with_its_modules() {
        let files = [
            ("lib.rs", "mod proxy;\nmod http;\nmod methods;\n"),
            ("proxy.rs", "pub(crate) struct Shared;\nfn serve() { crate::http::router(); }\n"),
            ("http.rs", "use crate::{methods::{self, dispatch as run}, proxy::Shared};\n"),
            ("methods/mod.rs", "mod session;\npub(crate) fn dispatch() { session::list(); }\n"),
            ("methods/session.rs", "use super::super::proxy::Shared;\npub(crate) fn list() {}\n"),
        ];
        check(&files, &[], &["crate::http -> crate::proxy -> crate::http"]);
        // A child reaching its parent through `super::` is an edge; the parent's `mod` line and
        // its relative `session::` path are not.
        let files = [
            ("lib.rs", "mod methods;\n"),
            ("methods/mod.rs", "mod session;\npub(crate) struct Presence;\nfn f() { self::session::list(); }\n"),
            ("methods/session.rs", "use super::{Presence};\n"),
        ];
        check(&files, &[], &["crate::methods -> crate::methods::session -> crate::methods"]);
        // Only the modules under the root asked for count, and a path resolves as far as files
        // exist: `crate::a::Item` is an edge to `a.rs`, `crate::Item` one to the crate root.
        let files = [
            ("lib.rs", "mod a;\nmod b;\npub use crate::a::X;\n"),
            ("a.rs", "pub struct X;\nmod inner { fn f() { crate::b::y::Y::new(); } }\n"),
            ("b.rs", "mod y;\nfn f() { let _ = crate::X; }\n"),
            (
                "b/y.rs",
                "pub struct Y; impl Y { pub fn new() { super::f(); } }\nfn g() -> &'static str { r#\"crate::a\"# }\n",
            ),
        ];
        check(&files, &["b"], &[]);
        check(&files, &[], &["crate -> crate::a -> crate::b::y -> crate::b -> crate"]);
    }
}
