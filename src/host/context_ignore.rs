//! Which files of a build context the engine leaves out
//! (`.containerignore` or `.dockerignore`), so that the image's inputs
//! digest counts only what a build can see: a log written beside the
//! Dockerfile, or the definition itself, does not rebuild the image.
//!
//! Read the safe way: where this reading could differ from the engine's
//! (an exception `!`, a character class, an escape), nothing is left out
//! and every file counts, as before: a needless rebuild, never a stale
//! image.

/// The ignore file's patterns, as far as they can be read safely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignore {
    /// Each pattern's segments; `**` stands for any number of them.
    patterns: Vec<Vec<String>>,
}

impl Ignore {
    /// Parses the ignore file's text; None when some line cannot be read
    /// the way the engine reads it (then every file counts).
    pub fn parse(text: &str) -> Option<Ignore> {
        let mut patterns = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line.starts_with('!') || line.contains(['[', '\\']) {
                return None;
            }
            let cleaned = line.trim_start_matches("./").trim_matches('/');
            let segments: Vec<String> = cleaned
                .split('/')
                .filter(|s| !s.is_empty() && *s != ".")
                .map(String::from)
                .collect();
            if segments.iter().any(|s| s == "..") {
                return None;
            }
            if !segments.is_empty() {
                patterns.push(segments);
            }
        }
        Some(Ignore { patterns })
    }

    /// Whether `relative` (a path in the context, `/`-separated) is left
    /// out: a pattern matches it or a folder above it.
    pub fn leaves_out(&self, relative: &str) -> bool {
        let segments: Vec<&str> = relative.split('/').filter(|s| !s.is_empty()).collect();
        (1..=segments.len()).any(|n| self.patterns.iter().any(|p| matches(p, &segments[..n])))
    }
}

fn matches(pattern: &[String], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((first, rest)) if first == "**" => {
            (0..=path.len()).any(|skip| matches(rest, &path[skip..]))
        }
        Some((first, rest)) => path.split_first().is_some_and(|(segment, tail)| {
            glob(first.as_bytes(), segment.as_bytes()) && matches(rest, tail)
        }),
    }
}

/// `*` any run within a segment, `?` one byte; every other byte itself.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|skip| glob(rest, &text[skip..])),
        Some((b'?', rest)) => text.split_first().is_some_and(|(_, tail)| glob(rest, tail)),
        Some((c, rest)) => text
            .split_first()
            .is_some_and(|(t, tail)| t == c && glob(rest, tail)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_left_out() {
        let ignore =
            Ignore::parse("# logs\n*.log\n/build/\nnode_modules\n**/*.tmp\ndocs/?.md\n").unwrap();
        let cases = [
            ("up.log", true),
            ("sub/up.log", false),
            ("build", true),
            ("build/out/a.o", true),
            ("node_modules/x/index.js", true),
            ("src/node_modules/x", false),
            ("a.tmp", true),
            ("deep/er/a.tmp", true),
            ("docs/a.md", true),
            ("docs/ab.md", false),
            ("Dockerfile", false),
            ("src/main.rs", false),
        ];
        for (path, want) in cases {
            assert_eq!(ignore.leaves_out(path), want, "{path}");
        }
    }

    #[test]
    fn what_could_be_read_otherwise_leaves_nothing_out() {
        for text in ["*.log\n!keep.log\n", "[ab].txt\n", "a\\*b\n", "../x\n"] {
            assert_eq!(Ignore::parse(text), None, "{text:?}");
        }
        assert!(!Ignore::parse("").unwrap().leaves_out("a"));
    }
}
