//! The crate's modules import each other in layers: no module is imported by a module it
//! imports, directly or through others.
//!
//! An edge runs from a module to each module a path in its code names: `use crate::a::b`,
//! `use crate::{a, b::c}`, `crate::a::f()`, `super::x`, `self::x`, or a path that starts at a
//! child module (`use child::f`). A path counts for the deepest module it names, so
//! `super::sibling::f` is an edge to the sibling, not to the parent; a `mod child;`
//! declaration alone is no edge. Inline modules (`mod tests { .. }`) are modules of their
//! own. Comments, strings and characters are skipped, so doc links and SQL text never count.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Modules by path (`crate`, `crate::events::append`), each with the modules it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn no_module_is_imported_by_a_module_it_imports() {
    let graph = crate_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // Guards against a reader that finds nothing and so never finds a cycle.
    assert!(
        graph["crate::storage"].contains("crate::events"),
        "the storage's import of events was not found: {graph:#?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "modules import each other in a circle: {}",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn the_cycle_finder_names_the_cycle_of_a_small_graph() {
    let circle = graph_of(&[("a", "b"), ("b", "c"), ("c", "d"), ("c", "a")]);
    let named = ["a", "b", "c", "a"].map(String::from).to_vec();
    assert_eq!(find_cycle(&circle), Some(named));
    let layers = graph_of(&[("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")]);
    assert_eq!(find_cycle(&layers), None);
}

#[test]
fn edges_come_from_use_trees_paths_and_super_but_not_from_comments_or_strings() {
    let modules: BTreeSet<String> = [
        "crate",
        "crate::a",
        "crate::b",
        "crate::c",
        "crate::d",
        "crate::m",
        "crate::m::x",
    ]
    .map(String::from)
    .into();
    let source = r##"
        //! Links to [`crate::d`] in a comment are no import.
        /* Nor is crate::d here. */
        mod x;
        use crate::{a, b::Item as Other};
        pub(crate) use x::f;
        fn g() -> &'static str { crate::c::h(); '"'; "crate::d::in_a_string" }
        const SQL: &str = r#"SELECT '…' -- "crate::d" "#;
        mod tests { use super::*; }
    "##;
    let edges: BTreeSet<(String, String)> =
        imports("crate::m", source, &modules).into_iter().collect();
    let expected = [
        ("crate::m", "crate::a"),
        ("crate::m", "crate::b"),
        ("crate::m", "crate::m::x"),
        ("crate::m", "crate::c"),
        ("crate::m::tests", "crate::m"),
    ]
    .map(|(from, to)| (from.to_owned(), to.to_owned()))
    .into();
    assert_eq!(edges, expected);
}

/// The import graph of the crate whose sources are under `src`.
fn crate_graph(src: &Path) -> Graph {
    let files: Vec<(String, String)> = rust_files(src)
        .into_iter()
        .map(|file| {
            let relative = file.strip_prefix(src).expect("under src");
            let source = fs::read_to_string(&file).expect("readable source");
            (module_of(relative), source)
        })
        .collect();
    let modules: BTreeSet<String> = files.iter().map(|(module, _)| module.clone()).collect();
    let mut graph: Graph = modules
        .iter()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for (module, source) in &files {
        for (from, to) in imports(module, source, &modules) {
            graph.entry(from).or_default().insert(to);
        }
    }
    graph
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).expect("readable directory") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

/// The module a file under `src` holds: `lib.rs` is `crate`, `a/mod.rs` and `a.rs` are
/// `crate::a`, `a/b.rs` is `crate::a::b`.
fn module_of(relative: &Path) -> String {
    let mut segments = vec!["crate".to_owned()];
    for component in relative.with_extension("").iter() {
        let name = component.to_string_lossy();
        if name != "lib" && name != "mod" {
            segments.push(name.into_owned());
        }
    }
    segments.join("::")
}

/// The edges `(importer, imported)` of the code of `module`; an edge starts at an inline
/// module when the path is written inside one. `modules` are the crate's file modules.
fn imports(module: &str, source: &str, modules: &BTreeSet<String>) -> Vec<(String, String)> {
    let tokens = tokens(source);
    let mut edges = Vec::new();
    // The inline modules the scan is inside, with the brace depth each one closes at.
    let mut scopes = vec![(module.to_owned(), 0)];
    let mut depth = 0_usize;
    let mut i = 0;
    while i < tokens.len() {
        let current = scopes.last().map_or(module, |(m, _)| m.as_str()).to_owned();
        match (&tokens[i], tokens.get(i + 1), tokens.get(i + 2)) {
            (Token::Ident(keyword), Some(Token::Ident(name)), Some(Token::Open))
                if keyword == "mod" =>
            {
                depth += 1;
                scopes.push((format!("{current}::{name}"), depth));
                i += 3;
            }
            (Token::Open, ..) => {
                depth += 1;
                i += 1;
            }
            (Token::Close, ..) => {
                if scopes.len() > 1 && scopes.last().is_some_and(|&(_, end)| end == depth) {
                    scopes.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            // The start of a path, not a segment after `<T as Trait>::`.
            (Token::Ident(_), Some(Token::PathSep), _)
                if i == 0 || tokens[i - 1] != Token::PathSep =>
            {
                let mut paths = Vec::new();
                expand(&tokens, &mut i, Vec::new(), &mut paths);
                for path in paths {
                    if let Some(imported) = resolve(&current, &path, modules) {
                        edges.push((current.clone(), imported));
                    }
                }
            }
            _ => i += 1,
        }
    }
    edges
}

/// Reads the path or use tree at `tokens[*i]` into `paths`, each prefixed by `prefix`:
/// `a::{b, c::d as e}` gives `a::b` and `a::c::d`.
fn expand(tokens: &[Token], i: &mut usize, mut prefix: Vec<String>, paths: &mut Vec<Vec<String>>) {
    while let Some(Token::Ident(segment)) = tokens.get(*i) {
        prefix.push(segment.clone());
        *i += 1;
        if tokens.get(*i) != Some(&Token::PathSep) {
            // An alias (`as e`) names nothing.
            if tokens.get(*i) == Some(&Token::Ident("as".to_owned())) {
                *i += 2;
            }
            paths.push(prefix);
            return;
        }
        *i += 1;
    }
    if tokens.get(*i) == Some(&Token::Open) {
        *i += 1;
        while !matches!(tokens.get(*i), Some(Token::Close) | None) {
            expand(tokens, i, prefix.clone(), paths);
            if tokens.get(*i) == Some(&Token::Comma) {
                *i += 1;
            }
        }
    } else {
        // `a::*` or `f::<T>`: the path ends before the token.
        paths.push(prefix);
    }
    *i += 1;
}

/// The deepest of `modules` that `path`, written in `module`, names, other than `module`;
/// `None` for a path outside the crate (another crate, a type's item, a local name).
fn resolve(module: &str, path: &[String], modules: &BTreeSet<String>) -> Option<String> {
    let mut segments: Vec<&str> = module.split("::").collect();
    let rest = match path.first().map(String::as_str) {
        Some("crate") => {
            segments.truncate(1);
            &path[1..]
        }
        Some("super") => {
            let supers = path.iter().take_while(|s| *s == "super").count();
            segments.truncate(segments.len().saturating_sub(supers).max(1));
            &path[supers..]
        }
        Some("self") => &path[1..],
        _ => path,
    };
    // A relative path (`self::x`, `x::f`) can only name a module below this one.
    let shortest = match path.first().map(String::as_str) {
        Some("crate" | "super") => 1,
        _ => segments.len() + 1,
    };
    segments.extend(rest.iter().map(String::as_str).filter(|s| *s != "self"));
    (shortest..=segments.len())
        .rev()
        .map(|length| segments[..length].join("::"))
        .find(|candidate| modules.contains(candidate))
        .filter(|found| found != module)
}

/// What the module scan needs of Rust's tokens.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Other,
}

/// The tokens of `source`, without comments, strings, characters or lifetimes.
fn tokens(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && at(i + 1) == '/') {
                i += 1;
            }
            i += 2;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == 'r' && (at(i + 1) == '"' || at(i + 1) == '#' && "#\"".contains(at(i + 2))) {
            // A raw string, `r"…"` or `r#"…"#`, ends at a quote and as many hashes.
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            let end: Vec<char> = format!("\"{}", "#".repeat(hashes)).chars().collect();
            let start = i + 2 + hashes;
            i = chars[start..]
                .windows(end.len())
                .position(|window| window == end)
                .map_or(chars.len(), |found| start + found + end.len());
        } else if c == '\'' {
            // A character (`'x'`, `'\n'`) is skipped whole; a lifetime (`'a`) only its quote.
            if at(i + 1) == '\\' {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if is_ident(c) {
            let start = i;
            while i < chars.len() && is_ident(chars[i]) {
                i += 1;
            }
            tokens.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c == ':' && at(i + 1) == ':' {
            tokens.push(Token::PathSep);
            i += 2;
        } else {
            tokens.push(match c {
                '{' => Token::Open,
                '}' => Token::Close,
                ',' => Token::Comma,
                _ => Token::Other,
            });
            i += 1;
        }
    }
    tokens
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// A cycle of `graph` as the modules along it, the first repeated at the end; `None` when
/// the graph has none.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        graph: &Graph,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|m| m == module) {
            let mut cycle = path[start..].to_vec();
            cycle.push(module.to_owned());
            return Some(cycle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for imported in graph.get(module).into_iter().flatten() {
            if let Some(cycle) = visit(imported, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|module| visit(module, graph, &mut Vec::new(), &mut done))
}

/// A graph from `(importer, imported)` pairs.
fn graph_of(edges: &[(&str, &str)]) -> Graph {
    let mut graph = Graph::new();
    for (from, to) in edges {
        graph
            .entry((*from).to_owned())
            .or_default()
            .insert((*to).to_owned());
    }
    graph
}
