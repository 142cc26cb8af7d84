//! The layout's boundaries, which the compiler cannot check
//! (docs/architecture.md): what each part of src/ may import, no cycle
//! between the modules under the parts, and the doc's lists true to the
//! tree. It reads every file the library declares, from src/lib.rs down,
//! and every path it names: `use` trees and paths in code that start at
//! `crate`, `super` or `self` (resolved against the file's module), and
//! relative `use` paths into the module's own children.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What each part may import (itself included): the table of
/// docs/architecture.md, which `the_doc_lists_the_tree_and_this_table`
/// holds to this one.
const MAY_IMPORT: &[(&str, &[&str])] = &[
    ("wire", &["wire"]),
    ("shared", &["wire", "shared"]),
    ("guest", &["wire", "shared", "guest"]),
    ("host", &["wire", "shared", "host"]),
];

/// The folder of src/ that is no part of the library: the `warden`
/// binary's own modules (src/main.rs declares them), which may use all
/// of it.
const BINARY_FOLDER: &str = "main";

// ---------------------------------------------------------------------
// The parser: pure, from a file's text to the paths it names.

/// A path a file names, on a line: crate-relative once resolved (`crate`,
/// `super` and `self` taken away), else as written (`relative`: a `use`
/// path that starts with a name, which may be a child module).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Named {
    line: usize,
    path: Vec<String>,
    relative: bool,
    /// As the source spells it.
    written: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Sym(char),
}

/// The tokens of Rust source that matter to paths, with their lines:
/// comments, strings, characters, lifetimes and numbers left out.
fn tokens(src: &str) -> Vec<(usize, Tok)> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let ident_char = |ch: char| ch.is_alphanumeric() || ch == '_';
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            }
        } else if let Some(end) = string_end(&c, i) {
            line += c[i..end].iter().filter(|ch| **ch == '\n').count();
            i = end;
        } else if ch == '\'' || (ch == 'b' && at(i + 1) == '\'') {
            // A character ('a', '\n', '\''), a byte (b'a'), or a lifetime ('a).
            let q = if ch == 'b' { i + 1 } else { i };
            if at(q + 1) == '\\' {
                i = q + 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(q + 2) == '\'' {
                i = q + 3;
            } else {
                i = q + 1;
                while i < c.len() && ident_char(c[i]) {
                    i += 1;
                }
            }
        } else if ch == ':' && at(i + 1) == ':' {
            out.push((line, Tok::Sep));
            i += 2;
        } else if ch.is_ascii_digit() {
            while i < c.len() && ident_char(c[i]) {
                i += 1;
            }
        } else if ch.is_alphabetic() || ch == '_' {
            // A raw identifier (r#type) is its name.
            if ch == 'r' && at(i + 1) == '#' {
                i += 2;
            }
            let from = i;
            while i < c.len() && ident_char(c[i]) {
                i += 1;
            }
            out.push((line, Tok::Ident(c[from..i].iter().collect())));
        } else {
            out.push((line, Tok::Sym(ch)));
            i += 1;
        }
    }
    out
}

/// Where a string literal that starts at `i` ends (just past it): "...",
/// b"...", r"...", r#"..."#, br#"..."#. None when none starts there.
fn string_end(c: &[char], i: usize) -> Option<usize> {
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut j = i;
    if at(j) == 'b' {
        j += 1;
    }
    if at(j) == 'r' && (at(j + 1) == '"' || at(j + 1) == '#') {
        j += 1;
        let hashes = (j..c.len()).take_while(|&k| c[k] == '#').count();
        j += hashes;
        if at(j) != '"' {
            return None;
        }
        j += 1;
        while j < c.len() {
            if c[j] == '"' && (1..=hashes).all(|k| at(j + k) == '#') {
                return Some(j + 1 + hashes);
            }
            j += 1;
        }
        return Some(c.len());
    }
    if at(j) != '"' {
        return None;
    }
    j += 1;
    while j < c.len() && c[j] != '"' {
        j += if c[j] == '\\' { 2 } else { 1 };
    }
    Some(j + 1)
}

/// Every path the source of module `module` names, resolved where it
/// starts at `crate`, `super` or `self`. Inline modules (`mod tests {`)
/// are taken into account for `super`.
fn named_paths(module: &[&str], src: &str) -> Vec<Named> {
    let toks = tokens(src);
    let mut out = Vec::new();
    // The inline modules open around here, each with the depth of braces
    // it opened at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let here = |inline: &[(String, usize)]| -> Vec<String> {
        let mut m: Vec<String> = module.iter().map(|s| s.to_string()).collect();
        m.extend(inline.iter().map(|(n, _)| n.clone()));
        m
    };
    let mut i = 0;
    while i < toks.len() {
        let (line, tok) = &toks[i];
        match tok {
            Tok::Sym('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Sym('}') => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                i += 1;
            }
            Tok::Ident(word) if word == "mod" => {
                if let (Some((_, Tok::Ident(name))), Some((_, Tok::Sym('{')))) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    inline.push((name.clone(), depth));
                    depth += 1;
                    i += 3;
                } else {
                    i += 1;
                }
            }
            Tok::Ident(word) if word == "use" => {
                let me = here(&inline);
                let mut j = i + 1;
                let mut found = Vec::new();
                use_tree(&toks, &mut j, Vec::new(), &mut found);
                for written in found {
                    if let Some(named) = resolve(&me, &written, *line) {
                        out.push(named);
                    }
                }
                i = j;
            }
            Tok::Ident(word)
                if matches!(word.as_str(), "crate" | "super" | "self")
                    && matches!(toks.get(i + 1), Some((_, Tok::Sep)))
                    && !matches!(i.checked_sub(1).map(|k| &toks[k].1), Some(Tok::Sep)) =>
            {
                let mut written = vec![word.clone()];
                let mut j = i + 1;
                while let (Some((_, Tok::Sep)), Some((_, Tok::Ident(next)))) =
                    (toks.get(j), toks.get(j + 1))
                {
                    written.push(next.clone());
                    j += 2;
                }
                if let Some(named) = resolve(&here(&inline), &written, *line) {
                    out.push(named);
                }
                i = j;
            }
            _ => i += 1,
        }
    }
    out
}

/// Reads one use tree from `toks[*j]` on (to its `;` or the `,` or `}`
/// that ends it), adding every leaf path, `prefix` first, to `found`.
fn use_tree(
    toks: &[(usize, Tok)],
    j: &mut usize,
    prefix: Vec<String>,
    found: &mut Vec<Vec<String>>,
) {
    let mut path = prefix;
    loop {
        match toks.get(*j).map(|(_, t)| t) {
            Some(Tok::Sep) => *j += 1,
            Some(Tok::Ident(word)) if word == "as" => {
                // `x as y`: the path is x's; skip the new name.
                *j += 2;
            }
            Some(Tok::Ident(word)) => {
                if word == "self" && !path.is_empty() {
                    // `{self, ...}`: the prefix itself.
                } else {
                    path.push(word.clone());
                }
                *j += 1;
            }
            Some(Tok::Sym('*')) => *j += 1,
            Some(Tok::Sym('$')) => *j += 1,
            Some(Tok::Sym('{')) => {
                *j += 1;
                loop {
                    match toks.get(*j).map(|(_, t)| t) {
                        Some(Tok::Sym('}')) => {
                            *j += 1;
                            break;
                        }
                        Some(Tok::Sym(',')) => *j += 1,
                        None => return,
                        _ => use_tree(toks, j, path.clone(), found),
                    }
                }
                // The group's leaves are the tree's; nothing of its own.
                return finish(toks, j, None, found);
            }
            _ => return finish(toks, j, Some(path), found),
        }
    }
}

/// Ends a use tree at its `;`, `,` or `}` (left for the caller to read,
/// but for `;`), keeping `path` when there is one.
fn finish(
    toks: &[(usize, Tok)],
    j: &mut usize,
    path: Option<Vec<String>>,
    found: &mut Vec<Vec<String>>,
) {
    if let Some(path) = path.filter(|p| !p.is_empty()) {
        found.push(path);
    }
    if let Some((_, Tok::Sym(';'))) = toks.get(*j) {
        *j += 1;
    }
}

/// `written` (as the source spells it, in module `me`) as a crate path.
fn resolve(me: &[String], written: &[String], line: usize) -> Option<Named> {
    let (first, rest) = written.split_first()?;
    let path = match first.as_str() {
        "crate" => rest.to_vec(),
        "self" => me.iter().chain(rest).cloned().collect(),
        "super" => {
            let ups = 1 + rest.iter().take_while(|s| *s == "super").count();
            let base = &me[..me.len().checked_sub(ups)?];
            base.iter().chain(&rest[ups - 1..]).cloned().collect()
        }
        _ => {
            return Some(Named {
                line,
                path: written.to_vec(),
                relative: true,
                written: written.join("::"),
            })
        }
    };
    Some(Named {
        line,
        path,
        relative: false,
        written: written.join("::"),
    })
}

// ---------------------------------------------------------------------
// The tree: which file is which module, from src/lib.rs down.

struct Tree {
    /// Every module and the file that holds it (an inline one's parent's).
    files: BTreeMap<Vec<String>, PathBuf>,
    /// `#[macro_export]` macros, named at the crate's root, and their module.
    macros: BTreeMap<String, Vec<String>>,
}

/// The `mod NAME;` declarations of a file (with their `#[path]`, if any).
fn declared(src: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut path = None;
    for line in src.lines() {
        let t = line.trim();
        if let Some(p) = t
            .strip_prefix("#[path = \"")
            .and_then(|r| r.strip_suffix("\"]"))
        {
            path = Some(p.to_string());
            continue;
        }
        let t = t
            .strip_prefix("pub ")
            .or_else(|| t.strip_prefix("pub(crate) "))
            .unwrap_or(t);
        if let Some(name) = t.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            out.push((name.to_string(), path.take()));
        } else if !t.starts_with("#[") {
            path = None;
        }
    }
    out
}

fn walk(tree: &mut Tree, module: Vec<String>, file: &Path) {
    let src = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut lines = src.lines().map(str::trim);
    while let Some(l) = lines.next() {
        if l == "#[macro_export]" {
            if let Some(name) = lines
                .next()
                .and_then(|n| n.strip_prefix("macro_rules! "))
                .and_then(|n| n.strip_suffix(" {"))
            {
                tree.macros.insert(name.to_string(), module.clone());
            }
        }
    }
    let dir = file.parent().unwrap();
    // A file that is not mod.rs or lib.rs holds its children in a folder
    // of its name.
    let own = match file.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs") => dir.to_path_buf(),
        _ => dir.join(file.file_stem().unwrap()),
    };
    tree.files.insert(module.clone(), file.to_path_buf());
    for (name, path) in declared(&src) {
        let child = match path {
            Some(p) => dir.join(p),
            None if own.join(format!("{name}.rs")).exists() => own.join(format!("{name}.rs")),
            None => own.join(&name).join("mod.rs"),
        };
        let mut m = module.clone();
        m.push(name);
        walk(tree, m, &child);
    }
}

fn tree() -> Tree {
    let mut tree = Tree {
        files: BTreeMap::new(),
        macros: BTreeMap::new(),
    };
    walk(&mut tree, Vec::new(), &src().join("lib.rs"));
    tree
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// A reference from one module to another, where it is written.
#[derive(Debug, Clone)]
struct Reference {
    from: Vec<String>,
    to: Vec<String>,
    file: String,
    line: usize,
    written: String,
}

/// Every reference of every file to a module of the crate: the longest
/// module a path names a prefix of. A path that names no module of the
/// crate (a macro at the root aside) is an error.
fn references(tree: &Tree) -> (Vec<Reference>, Vec<String>) {
    let modules: BTreeSet<&Vec<String>> = tree.files.keys().collect();
    let (mut out, mut unknown) = (Vec::new(), Vec::new());
    let mut files: BTreeMap<&PathBuf, &Vec<String>> = BTreeMap::new();
    for (m, f) in &tree.files {
        // A file's module is the shortest that it holds (inline ones are
        // found by the parser).
        files.entry(f).or_insert(m);
    }
    for (file, module) in files {
        let src = std::fs::read_to_string(file).unwrap();
        let me: Vec<&str> = module.iter().map(String::as_str).collect();
        let shown = file
            .strip_prefix(self::src().parent().unwrap())
            .unwrap()
            .display()
            .to_string();
        for named in named_paths(&me, &src) {
            let mut path = named.path.clone();
            if named.relative {
                // Only a child of this module is ours; anything else is
                // another crate's or an item in scope.
                let mut child = module.clone();
                child.push(path[0].clone());
                if !modules.contains(&child) {
                    continue;
                }
                path = module.iter().chain(&path).cloned().collect();
            } else if let Some(at) = path.first().and_then(|first| tree.macros.get(first)) {
                path = at.clone();
            }
            let to = (1..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| modules.contains(p));
            match to {
                Some(to) => out.push(Reference {
                    from: module.clone(),
                    to,
                    file: shown.clone(),
                    line: named.line,
                    written: named.written.clone(),
                }),
                None if path.is_empty() => {}
                None => unknown.push(format!(
                    "{shown}:{}: {} names no module",
                    named.line,
                    path.join("::")
                )),
            }
        }
    }
    (out, unknown)
}

/// The module at the first two levels that `module` is in: a part
/// (`guest`) or a folder or file right under it (`guest::net`).
fn node(module: &[String]) -> String {
    module
        .iter()
        .take(2)
        .cloned()
        .collect::<Vec<_>>()
        .join("::")
}

/// Every cycle between the nodes of `edges`: its strongly connected
/// components of more than one node, each as one cycle in it (from its
/// first node back to it) and the whole component.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<(Vec<String>, Vec<String>)> {
    struct Tarjan<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on: BTreeSet<String>,
        found: Vec<Vec<String>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: &str) {
            let n = self.index.len();
            self.index.insert(v.into(), n);
            self.low.insert(v.into(), n);
            self.stack.push(v.into());
            self.on.insert(v.into());
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on.remove(&w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.found
        .into_iter()
        .map(|component| {
            // A path from the first node back to itself, inside the component.
            let inside: BTreeSet<&String> = component.iter().collect();
            let start = &component[0];
            let mut seen = BTreeSet::new();
            let mut path = vec![start.clone()];
            fn back(
                at: &str,
                start: &str,
                edges: &BTreeMap<String, BTreeSet<String>>,
                inside: &BTreeSet<&String>,
                seen: &mut BTreeSet<String>,
                path: &mut Vec<String>,
            ) -> bool {
                for w in edges.get(at).into_iter().flatten() {
                    if w == start {
                        path.push(w.clone());
                        return true;
                    }
                    if inside.contains(w) && seen.insert(w.clone()) {
                        path.push(w.clone());
                        if back(w, start, edges, inside, seen, path) {
                            return true;
                        }
                        path.pop();
                    }
                }
                false
            }
            back(start, start, edges, &inside, &mut seen, &mut path);
            (path, component)
        })
        .collect()
}

fn may_import(part: &str) -> Option<&'static [&'static str]> {
    MAY_IMPORT
        .iter()
        .find(|(p, _)| *p == part)
        .map(|(_, may)| *may)
}

// ---------------------------------------------------------------------
// The checks.

#[test]
fn no_part_imports_what_it_may_not() {
    let tree = tree();
    let (refs, unknown) = references(&tree);
    assert!(
        unknown.is_empty(),
        "paths that name no module:\n{}",
        unknown.join("\n")
    );
    let mut wrong = Vec::new();
    for r in &refs {
        let (from, to) = (&r.from[0], &r.to[0]);
        let Some(may) = may_import(from) else {
            wrong.push(format!(
                "{}:{}: {from} is no part of docs/architecture.md's table",
                r.file, r.line
            ));
            continue;
        };
        if !may.contains(&to.as_str()) {
            wrong.push(format!(
                "{}:{}: {from} may not import {to} ({})",
                r.file, r.line, r.written
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "imports across the parts' boundaries (docs/architecture.md):\n{}",
        wrong.join("\n")
    );
    // The walk found every part, and the parts are all there is.
    let parts: BTreeSet<&str> = tree
        .files
        .keys()
        .filter(|m| m.len() == 1)
        .map(|m| m[0].as_str())
        .collect();
    let table: BTreeSet<&str> = MAY_IMPORT.iter().map(|(p, _)| *p).collect();
    assert_eq!(parts, table, "src/lib.rs declares these parts");
}

#[test]
fn no_cycle_between_modules() {
    let tree = tree();
    let (refs, _) = references(&tree);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut example: BTreeMap<(String, String), String> = BTreeMap::new();
    for r in &refs {
        let (a, b) = (node(&r.from), node(&r.to));
        if a != b {
            edges.entry(a.clone()).or_default().insert(b.clone());
            example
                .entry((a, b))
                .or_insert_with(|| format!("{}:{} {}", r.file, r.line, r.written));
        }
    }
    let found = cycles(&edges);
    let shown: Vec<String> = found
        .iter()
        .map(|(cycle, component)| {
            let steps: Vec<String> = cycle
                .windows(2)
                .map(|w| {
                    format!(
                        "    {} -> {}  ({})",
                        w[0],
                        w[1],
                        example
                            .get(&(w[0].clone(), w[1].clone()))
                            .map_or("", String::as_str)
                    )
                })
                .collect();
            let all = match component.len() + 1 > cycle.len() {
                true => format!(
                    "\n    (all of {} depend on each other)",
                    component.join(", ")
                ),
                false => String::new(),
            };
            format!("{}\n{}{all}", cycle.join(" -> "), steps.join("\n"))
        })
        .collect();
    assert!(
        shown.is_empty(),
        "cycles between modules:\n{}",
        shown.join("\n")
    );
}

/// docs/architecture.md's table of parts (folder, what lives there, what
/// it may import) and its list of what is in each part.
#[test]
fn the_doc_lists_the_tree_and_this_table() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
            .unwrap();
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(String::from)
            .collect()
    };
    // The table: `| `src/PART/` | ... | `a`, `b` |`.
    let mut table: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in doc.lines().filter(|l| l.starts_with("| `src/")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
        let folder = ticked(cells[0]).concat();
        let part = folder
            .trim_start_matches("src/")
            .trim_end_matches('/')
            .to_string();
        let mut may = ticked(cells[cells.len() - 1]);
        may.sort();
        table.insert(part, may);
    }
    let mut want: BTreeMap<String, Vec<String>> = MAY_IMPORT
        .iter()
        .map(|(p, may)| {
            let mut may: Vec<String> = may.iter().map(|s| s.to_string()).collect();
            may.sort();
            (p.to_string(), may)
        })
        .collect();
    want.insert(BINARY_FOLDER.into(), Vec::new());
    assert_eq!(
        table, want,
        "docs/architecture.md's table, against this test's"
    );
    // Its folders are src/'s.
    let on_disk: BTreeSet<String> = std::fs::read_dir(src())
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        table.keys().cloned().collect::<BTreeSet<_>>(),
        on_disk,
        "the folders of src/"
    );
    // Every folder and file right under a part is listed (a bullet
    // `- `part/x/`, `part/y.rs`: ...`), and nothing else.
    let listed: BTreeSet<String> = doc
        .lines()
        .filter(|l| l.starts_with("- `"))
        // A bullet names its entries before its first ": ".
        .flat_map(|l| ticked(l.split(": ").next().unwrap_or("")))
        .filter(|l| {
            MAY_IMPORT
                .iter()
                .any(|(p, _)| l.starts_with(&format!("{p}/")))
        })
        .collect();
    let mut under = BTreeSet::new();
    for (part, _) in MAY_IMPORT {
        for e in std::fs::read_dir(src().join(part)).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            match e.path().is_dir() {
                true => under.insert(format!("{part}/{name}/")),
                false if name != "mod.rs" => under.insert(format!("{part}/{name}")),
                false => false,
            };
        }
    }
    let missing: Vec<&String> = under.difference(&listed).collect();
    let stale: Vec<&String> = listed.difference(&under).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/architecture.md lists what is not there: {stale:?}; leaves out: {missing:?}"
    );
}

// ---------------------------------------------------------------------
// The parser's tables.

fn paths(module: &[&str], src: &str) -> Vec<(usize, String, bool)> {
    named_paths(module, src)
        .into_iter()
        .map(|n| (n.line, n.path.join("::"), n.relative))
        .collect()
}

#[test]
fn use_trees_table() {
    let m = ["guest", "net", "proxy"];
    type Case<'a> = (&'a str, &'a [(usize, &'a str, bool)]);
    let cases: &[Case] = &[
        ("use crate::wire::Event;", &[(1, "wire::Event", false)]),
        (
            "use crate::wire::{Event, Kind};",
            &[(1, "wire::Event", false), (1, "wire::Kind", false)],
        ),
        (
            "use crate::{wire::Event, shared::egress::{hosts::HostList, Kind}};",
            &[
                (1, "wire::Event", false),
                (1, "shared::egress::hosts::HostList", false),
                (1, "shared::egress::Kind", false),
            ],
        ),
        (
            "use crate::shared::egress::link::{self, Ask};",
            &[
                (1, "shared::egress::link", false),
                (1, "shared::egress::link::Ask", false),
            ],
        ),
        (
            "use super::rules::Rules;",
            &[(1, "guest::net::rules::Rules", false)],
        ),
        (
            "use super::super::firewall;",
            &[(1, "guest::firewall", false)],
        ),
        ("use super::*;", &[(1, "guest::net", false)]),
        (
            "use self::http::Plain;",
            &[(1, "guest::net::proxy::http::Plain", false)],
        ),
        (
            "use crate::shared::egress::reach as upstream;",
            &[(1, "shared::egress::reach", false)],
        ),
        (
            "use std::sync::Arc;\nuse http::Head;",
            &[(1, "std::sync::Arc", true), (2, "http::Head", true)],
        ),
        (
            "pub use rules::{decide, Rules};",
            &[(1, "rules::decide", true), (1, "rules::Rules", true)],
        ),
        (
            "use crate::wire::{\n    Event,\n    Kind,\n};",
            &[(1, "wire::Event", false), (1, "wire::Kind", false)],
        ),
    ];
    for (src, want) in cases {
        let want: Vec<(usize, String, bool)> = want
            .iter()
            .map(|(l, p, r)| (*l, p.to_string(), *r))
            .collect();
        assert_eq!(paths(&m, src), want, "{src}");
    }
}

#[test]
fn paths_in_code_table() {
    let m = ["host", "vm", "egress"];
    let cases: &[(&str, &[(usize, &str)])] = &[
        ("let k = crate::shared::machine_key::Key::load(p);", &[(1, "shared::machine_key::Key::load")]),
        ("fn f() -> super::relay::Log { todo!() }", &[(1, "host::vm::relay::Log")]),
        ("crate::say!(\"x {}\", 1);", &[(1, "say")]),
        ("$crate::shared::diag::say(x)", &[(1, "shared::diag::say")]),
        // Not paths of the crate: other crates, `Self`, `pub(super)`, a
        // path's middle, strings, characters, comments.
        ("let x = std::mem::take(&mut y);", &[]),
        ("Self::new()", &[]),
        ("pub(super) fn f() {}", &[]),
        ("let s = \"crate::guest::x\";", &[]),
        ("let s = r#\"crate::guest::x \" still\"#;", &[]),
        ("let c = '\"'; let d = crate::wire::Kind::Stdout;", &[(1, "wire::Kind::Stdout")]),
        ("fn f<'a>(x: &'a str) -> &'a str { x }", &[]),
        ("// crate::guest::x\n/* crate::guest::y */\nlet a = 1;", &[]),
        ("/// see `crate::guest::x`\nfn f() {}", &[]),
        ("let b = b'\\''; let p = crate::wire::Limits::default();", &[(1, "wire::Limits::default")]),
        (
            "let s = \"a\nb\";\nlet p = crate::wire::Event::Noted;",
            &[(3, "wire::Event::Noted")],
        ),
        // An inline module changes what `super` is.
        (
            "mod tests {\n    use super::*;\n    fn f() { super::super::x::y(); }\n}\nfn g() { super::z(); }",
            &[(2, "host::vm::egress"), (3, "host::vm::x::y"), (5, "host::vm::z")],
        ),
    ];
    for (src, want) in cases {
        let got: Vec<(usize, String)> = paths(&m, src)
            .into_iter()
            .filter(|(_, _, relative)| !relative)
            .map(|(l, p, _)| (l, p))
            .collect();
        let want: Vec<(usize, String)> = want.iter().map(|(l, p)| (*l, p.to_string())).collect();
        assert_eq!(got, want, "{src}");
    }
}

#[test]
fn declarations_table() {
    let src = "pub mod a;\nmod b;\n#[cfg(test)]\n#[path = \"c_tests.rs\"]\nmod tests;\npub(crate) mod d;\nmod e {\n}\n";
    assert_eq!(
        declared(src),
        vec![
            ("a".to_string(), None),
            ("b".to_string(), None),
            ("tests".to_string(), Some("c_tests.rs".to_string())),
            ("d".to_string(), None),
        ]
    );
}

#[test]
fn cycles_table() {
    let edges = |pairs: &[(&str, &str)]| {
        let mut e: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in pairs {
            e.entry(a.to_string()).or_default().insert(b.to_string());
        }
        e
    };
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a [&'a str]]);
    let cases: &[Case] = &[
        (&[("a", "b"), ("b", "c")], &[]),
        (&[("a", "b"), ("b", "a")], &[&["a", "b", "a"]]),
        (
            &[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")],
            &[&["a", "b", "c", "a"]],
        ),
        (
            &[("a", "b"), ("b", "a"), ("x", "y"), ("y", "x")],
            &[&["a", "b", "a"], &["x", "y", "x"]],
        ),
    ];
    for (pairs, want) in cases {
        let mut got: Vec<Vec<String>> = cycles(&edges(pairs)).into_iter().map(|(c, _)| c).collect();
        got.sort();
        let want: Vec<Vec<String>> = want
            .iter()
            .map(|c| c.iter().map(|s| s.to_string()).collect())
            .collect();
        assert_eq!(got, want, "{pairs:?}");
    }
    // A component larger than the cycle shown is named whole.
    let (cycle, component) =
        cycles(&edges(&[("a", "b"), ("b", "a"), ("b", "c"), ("c", "a")])).remove(0);
    assert_eq!(
        (cycle, component),
        (
            vec!["a".into(), "b".into(), "a".into()],
            vec!["a".into(), "b".into(), "c".into()]
        )
    );
}
