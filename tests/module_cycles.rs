//! Import circles between sibling modules of each crate, read from the sources.
//!
//! A module `a` depends on a sibling `b` when any file under `a` names a path under `b`
//! (`use crate::b::…`, `super::b::…`, or an inline `crate::b::x`). Test modules
//! (`#[cfg(test)] mod …`, inline or in a file of their own) are not library code and are not read. A parent and its own children
//! may use each other (that is how Rust re-exports); siblings may not: a circle among them means
//! neither can be read, tested or moved without the other. No crate of the workspace has one, and
//! this test keeps it so.
//!
//! `TUNEPLANE_CYCLES_ROOT=<checkout>` reads another checkout (to compare before and after a change);
//! `--nocapture` prints every crate's circles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path inside one crate (`["admission", "order"]`); the crate root is empty.
type ModPath = Vec<String>;

/// The crates read: name and source folder.
const CRATES: &[(&str, &str)] = &[
    ("tuneplane-core", "core/src"),
    ("tuneplane-functions", "functions/src"),
    ("tuneplane-stores", "stores/src"),
    ("tuneplane-reconciler", "reconciler/src"),
    ("tuneplane-kubesim", "kubesim/src"),
    ("tuneplane (CLI)", "src"),
];

fn root() -> PathBuf {
    std::env::var_os("TUNEPLANE_CYCLES_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            // Binaries under src/bin are crates of their own.
            if path.file_name().is_some_and(|n| n != "bin") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file is: `a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` and `main.rs` the root.
fn module_of(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: ModPath = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The source without comments (line and block) and without string literals' contents.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let next = chars.get(i + 1).copied();
        match (chars[i], next) {
            ('/', Some('/')) => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ('/', Some('*')) => {
                i += 2;
                while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                    i += 1;
                }
                i += 2;
            }
            ('r', Some('#')) if i == 0 || !is_ident(chars[i - 1]) => {
                // r#"…"#: ends at the first quote followed by as many hashes.
                let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
                let close: String = std::iter::once('"')
                    .chain("#".repeat(hashes).chars())
                    .collect();
                let rest: String = chars[i..].iter().collect();
                let skip = rest
                    .find('"')
                    .and_then(|open| {
                        rest[open + 1..]
                            .find(&close)
                            .map(|e| open + 1 + e + close.len())
                    })
                    .unwrap_or(rest.len());
                i += rest[..skip].chars().count();
                out.push_str("\"\"");
            }
            ('\'', Some('\\')) => {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            }
            ('\'', Some(_)) if chars.get(i + 2) == Some(&'\'') => i += 3,
            ('"', _) => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The code without its `#[cfg(test)] mod` blocks, and the names of test modules kept in files of
/// their own (`#[cfg(test)] mod tests;`).
fn without_tests(code: &str) -> (String, Vec<String>) {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(code.len());
    let mut file_modules = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let after = rest[at + MARK.len()..].trim_start();
        let Some(item) = after
            .strip_prefix("pub(crate) mod ")
            .or_else(|| after.strip_prefix("mod "))
        else {
            out.push_str(MARK);
            rest = &rest[at + MARK.len()..];
            continue;
        };
        let name_len = item.find(|c: char| !is_ident(c)).unwrap_or(item.len());
        let tail = item[name_len..].trim_start();
        if let Some(tail) = tail.strip_prefix(';') {
            file_modules.push(item[..name_len].to_string());
            rest = tail;
        } else if let Some(body) = tail.strip_prefix('{') {
            let mut depth = 1;
            let end = body
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(body.len(), |(i, _)| i + 1);
            rest = &body[end..];
        } else {
            rest = tail;
        }
    }
    out.push_str(rest);
    (out, file_modules)
}

/// Expands a use tree (`a::{b, c::{d, e}}`) after `prefix` into whole paths.
fn expand(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    let (head, rest) = match tree.find('{') {
        Some(at) => (
            &tree[..at],
            Some(&tree[at + 1..tree.rfind('}').unwrap_or(tree.len())]),
        ),
        None => (tree, None),
    };
    let mut path = prefix.to_vec();
    path.extend(
        head.split("::")
            .map(|s| s.split_whitespace().next().unwrap_or_default())
            .filter(|s| !s.is_empty() && *s != "*")
            .map(str::to_string),
    );
    let Some(inner) = rest else {
        out.push(path);
        return;
    };
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand(&inner[start..i], &path, out);
                start = i + 1;
            }
            _ => {}
        }
    }
    expand(&inner[start..], &path, out);
}

/// Every crate-relative path a file names: its use trees and inline `crate::`/`super::` paths.
fn named_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let text: String = bytes.iter().collect();
    let mut at = 0;
    while let Some(found) = text[at..].find("use ") {
        let start = at + found;
        at = start + 4;
        let before = text[..start].chars().next_back();
        if before.is_some_and(is_ident) {
            continue;
        }
        let Some(end) = text[at..].find(';') else {
            break;
        };
        expand(&text[at..at + end], &[], &mut out);
    }
    for word in ["crate::", "super::", "self::"] {
        let mut at = 0;
        while let Some(found) = text[at..].find(word) {
            let start = at + found;
            at = start + word.len();
            if text[..start].chars().next_back().is_some_and(is_ident) {
                continue;
            }
            let mut path = vec![word.trim_end_matches("::").to_string()];
            let mut rest = &text[at..];
            loop {
                let len = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
                if len == 0 {
                    break;
                }
                path.push(rest[..len].to_string());
                match rest[len..].strip_prefix("::") {
                    Some(r) => rest = r,
                    None => break,
                }
            }
            out.push(path);
        }
    }
    out
}

/// Names a module re-exports (`pub use a::X;` in `m` makes `m::X` name module `a`), so a path
/// through a re-export counts against the module that defines the item.
type Reexports = BTreeMap<(ModPath, String), ModPath>;

/// The paths of a module's `pub use` (and `pub(crate) use`) trees.
fn pub_uses(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for mark in ["pub use ", "pub(crate) use "] {
        let mut at = 0;
        while let Some(found) = code[at..].find(mark) {
            let start = at + found + mark.len();
            at = start;
            let Some(end) = code[start..].find(';') else {
                break;
            };
            expand(&code[start..start + end], &[], &mut out);
        }
    }
    out
}

/// The module a path names: the longest known module it starts with, relative to `from`, then
/// through one re-export when the next name is re-exported there.
fn resolve(
    path: &[String],
    from: &ModPath,
    modules: &BTreeSet<ModPath>,
    reexports: &Reexports,
) -> Option<ModPath> {
    let (base, next) = resolve_modules(path, from, modules)?;
    let through = next.and_then(|name| reexports.get(&(base.clone(), name.clone())));
    Some(through.cloned().unwrap_or(base))
}

/// The longest known module a path starts with, relative to `from`, and the name after it.
fn resolve_modules<'p>(
    path: &'p [String],
    from: &ModPath,
    modules: &BTreeSet<ModPath>,
) -> Option<(ModPath, Option<&'p String>)> {
    let (mut base, rest) = match path.first().map(String::as_str) {
        Some("crate") => (Vec::new(), &path[1..]),
        Some("self") => (from.clone(), &path[1..]),
        Some("super") => {
            let mut base = from.clone();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            (base, rest)
        }
        _ => return None,
    };
    for seg in rest {
        base.push(seg.clone());
        if !modules.contains(&base) {
            base.pop();
            return Some((base, Some(seg)));
        }
    }
    Some((base, None))
}

/// Sibling edges: for `a` naming `b`, the children of their closest common module that hold
/// each (nothing when one holds the other).
fn sibling_edges(src: &Path) -> BTreeMap<ModPath, BTreeSet<(String, String)>> {
    sibling_edges_with_witness(src)
        .into_iter()
        .map(|(parent, edges)| (parent, edges.into_keys().collect()))
        .collect()
}

/// [`sibling_edges`], each with the first file and path that made it.
fn sibling_edges_with_witness(src: &Path) -> BTreeMap<ModPath, BTreeMap<(String, String), String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut modules: BTreeSet<ModPath> = files.iter().map(|f| module_of(src, f)).collect();
    let mut code_of = BTreeMap::new();
    for file in &files {
        let from = module_of(src, file);
        let (code, test_modules) = without_tests(&code_only(
            &std::fs::read_to_string(file).unwrap_or_default(),
        ));
        for name in test_modules {
            let mut child = from.clone();
            child.push(name);
            modules.remove(&child);
        }
        code_of.insert(from, code);
    }
    let mut reexports = Reexports::new();
    for (module, code) in &code_of {
        for path in pub_uses(code) {
            let Some(name) = path.last().filter(|n| n.as_str() != "self") else {
                continue;
            };
            // `pub use child::X` is relative to the module itself.
            let path = if matches!(path[0].as_str(), "crate" | "self" | "super") {
                path.clone()
            } else {
                std::iter::once("self".to_string())
                    .chain(path.iter().cloned())
                    .collect()
            };
            if let Some((target, _)) = resolve_modules(&path, module, &modules) {
                reexports.insert((module.clone(), name.clone()), target);
            }
        }
    }
    let mut groups: BTreeMap<ModPath, BTreeMap<(String, String), String>> = BTreeMap::new();
    for file in &files {
        let from = module_of(src, file);
        // Test modules in files of their own are left out with their files.
        if !modules.contains(&from) {
            continue;
        }
        for path in named_paths(&code_of[&from]) {
            let Some(to) = resolve(&path, &from, &modules, &reexports) else {
                continue;
            };
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue;
            }
            groups
                .entry(from[..common].to_vec())
                .or_default()
                .entry((from[common].clone(), to[common].clone()))
                .or_insert_with(|| {
                    let file = file.strip_prefix(src).unwrap_or(file).display();
                    format!("{file}: {}", path.join("::"))
                });
        }
    }
    groups
}

/// Strongly connected groups of more than one module (Tarjan's algorithm).
fn circles(edges: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        next: &'a BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            for &w in self.next.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    self.low.entry(v).and_modify(|l| *l = (*l).min(lw));
                } else if self.stack.contains(&w) {
                    let iw = self.index[w];
                    self.low.entry(v).and_modify(|l| *l = (*l).min(iw));
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    group.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.found.push(group);
                }
            }
        }
    }
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().push(b);
        next.entry(b).or_default();
    }
    let mut walk = Walk {
        next: &next,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in next.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

/// Every circle of a crate, named `parent::{a, b, c}`.
fn crate_circles(src: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (parent, edges) in sibling_edges(src) {
        for group in circles(&edges) {
            let parent = if parent.is_empty() {
                "crate".to_string()
            } else {
                parent.join("::")
            };
            out.push(format!("{parent}::{{{}}}", group.join(", ")));
        }
    }
    out
}

#[test]
fn no_crate_has_an_import_circle() {
    let root = root();
    let mut over = Vec::new();
    for &(name, src) in CRATES {
        let found = crate_circles(&root.join(src));
        println!("{name}: {} circle(s)", found.len());
        for c in &found {
            println!("  {c}");
        }
        if std::env::var_os("TUNEPLANE_CYCLES_EDGES").is_some() {
            for (parent, edges) in sibling_edges_with_witness(&root.join(src)) {
                let groups = circles(&edges.keys().cloned().collect());
                for ((a, b), witness) in &edges {
                    if groups.iter().any(|g| g.contains(a) && g.contains(b)) {
                        println!("    {}: {a} -> {b} ({witness})", parent.join("::"));
                    }
                }
            }
        }
        if !found.is_empty() {
            over.push(format!("{name}: {found:?}"));
        }
    }
    assert!(over.is_empty(), "import circles: {over:#?}");
}

#[test]
fn the_reader_finds_a_circle_it_is_shown_and_ignores_parent_child_use() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path();
    std::fs::create_dir_all(src.join("a")).expect("mkdir");
    let write = |p: &str, s: &str| std::fs::write(src.join(p), s).expect("write");
    write("lib.rs", "mod a; mod b; mod c; pub use c::g;");
    write("a/mod.rs", "mod inner; use crate::b::Y; pub use inner::Z;");
    // A child naming its parent and the parent naming the child is not a circle.
    write(
        "a/inner.rs",
        "use super::super::a::X; // crate::c::Nope in a comment\n",
    );
    write(
        "b.rs",
        "pub fn f() { crate::c::g(\"crate::a::in_a_string\") }",
    );
    write(
        "c.rs",
        "use crate::{a::{self, inner::Z}, b as _};\n#[cfg(test)]\nmod t { use crate::b; }",
    );
    assert_eq!(crate_circles(src), vec!["crate::{a, b, c}".to_string()]);
    // Test code may name anything: neither inline test modules nor test files make a circle.
    write(
        "c.rs",
        "pub fn g() {}\n#[cfg(test)]\nmod tests { use crate::a::X; }",
    );
    std::fs::create_dir_all(src.join("b")).expect("mkdir");
    std::fs::rename(src.join("b.rs"), src.join("b/mod.rs")).expect("mv");
    write("b/tests.rs", "use crate::c::g; use crate::a::X;");
    let b = std::fs::read_to_string(src.join("b/mod.rs")).expect("read");
    write("b/mod.rs", &format!("{b}\n#[cfg(test)]\nmod tests;"));
    write("a/inner.rs", "use crate::b::f;");
    assert_eq!(crate_circles(src), Vec::<String>::new());
}
