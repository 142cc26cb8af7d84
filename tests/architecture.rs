//! The layout's boundaries, which the compiler cannot check
//! (docs/architecture.md): what each part of src/ may import, no cycle
//! between the modules under the parts, and the doc's lists true to the
//! tree. It reads every file the library declares, from src/lib.rs down,
//! and every path it names: `use` trees and paths in code that start at
//! `crate`, `super` or `self` (resolved against the file's module), and
//! relative `use` paths into the module's own children.

#[path = "architecture/parse.rs"]
mod parse;

use parse::named_paths;
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
