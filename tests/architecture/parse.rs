//! The parser of the layout test: pure, from a file's text to the paths it
//! names (`use` trees, paths in code, resolved against the module), with
//! its tables.

/// A path a file names, on a line: crate-relative once resolved (`crate`,
/// `super` and `self` taken away), else as written (`relative`: a `use`
/// path that starts with a name, which may be a child module).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub line: usize,
    pub path: Vec<String>,
    pub relative: bool,
    /// As the source spells it.
    pub written: String,
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
pub fn named_paths(module: &[&str], src: &str) -> Vec<Named> {
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

#[cfg(test)]
mod tables {
    use super::*;

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
            let want: Vec<(usize, String)> =
                want.iter().map(|(l, p)| (*l, p.to_string())).collect();
            assert_eq!(got, want, "{src}");
        }
    }
}
