//! Rules by method and path for an opened host: which requests the proxy
//! lets through once it reads them. A host with rules allows a request when
//! one rule matches it, and refuses every other one (403, with the reason
//! naming the host's rules).
//!
//! A rule names methods, a path pattern, or both; what it leaves out
//! matches anything. In a pattern `*` stands for any run of characters
//! within one path segment (never a `/`) and `**`, a whole segment of its
//! own, for any number of segments. Paths are compared as the origin would
//! read them, so a path the origin could read two ways (dot segments,
//! encoded slashes or backslashes, bytes outside printable ASCII) is
//! refused before any rule is looked at.

use serde::{Deserialize, Serialize};

/// One allow rule, as the owner writes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RuleText {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// Why a rule cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("method {0:?} is not an HTTP method token (letters, upper case)")]
    Method(String),
    #[error("a rule's method list is empty: leave `method` out to match any")]
    NoMethods,
    #[error("path pattern {0:?} must start with `/`")]
    Relative(String),
    #[error("path pattern {0:?}: `**` must be a whole segment")]
    DoubleStar(String),
    #[error("path pattern {0:?} holds `?`, `#`, `%`, `\\`, a dot segment or a byte outside printable ASCII")]
    Character(String),
}

/// A checked rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    methods: Option<Vec<String>>,
    path: Option<Vec<Segment>>,
    /// As the owner wrote it, for refusals and status.
    pub written: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// `**`: any number of segments.
    Any,
    /// A segment's pattern, `*` standing for any run within it.
    Glob(String),
}

impl Rule {
    pub fn parse(text: &RuleText) -> Result<Rule, RuleError> {
        let methods = text.method.as_ref().map(|m| methods(m)).transpose()?;
        let path = text.path.as_deref().map(pattern).transpose()?;
        let written = match (&text.method, &text.path) {
            (Some(m), Some(p)) => format!("{} {p}", m.join(",")),
            (Some(m), None) => m.join(","),
            (None, Some(p)) => p.clone(),
            (None, None) => "any request".to_string(),
        };
        Ok(Rule {
            methods,
            path,
            written,
        })
    }

    /// Whether this rule lets `method` on `path` through (`path` already
    /// checked by `request_path`).
    pub fn allows(&self, method: &str, path: &[&str]) -> bool {
        let method_ok = self
            .methods
            .as_ref()
            .is_none_or(|list| list.iter().any(|m| m == method));
        let path_ok = self
            .path
            .as_ref()
            .is_none_or(|pattern| segments_match(pattern, path));
        method_ok && path_ok
    }
}

fn methods(list: &[String]) -> Result<Vec<String>, RuleError> {
    if list.is_empty() {
        return Err(RuleError::NoMethods);
    }
    list.iter()
        .map(
            |m| match !m.is_empty() && m.bytes().all(|b| b.is_ascii_uppercase()) {
                true => Ok(m.clone()),
                false => Err(RuleError::Method(m.clone())),
            },
        )
        .collect()
}

fn pattern(text: &str) -> Result<Vec<Segment>, RuleError> {
    let Some(rest) = text.strip_prefix('/') else {
        return Err(RuleError::Relative(text.to_string()));
    };
    let plain = |b: u8| b.is_ascii_graphic() && !matches!(b, b'?' | b'#' | b'%' | b'\\');
    if !text.bytes().all(plain) {
        return Err(RuleError::Character(text.to_string()));
    }
    rest.split('/')
        .map(|segment| match segment {
            "**" => Ok(Segment::Any),
            "." | ".." => Err(RuleError::Character(text.to_string())),
            s if s.contains("**") => Err(RuleError::DoubleStar(text.to_string())),
            s => Ok(Segment::Glob(s.to_string())),
        })
        .collect()
}

/// The rules' verdict on a request (`target` in origin form): None lets
/// it through, else why not, naming the rules.
pub fn refusal(rules: &[Rule], method: &str, target: &str) -> Option<String> {
    let path = target.split('?').next().unwrap_or("");
    let segments = match request_path(target) {
        Ok(segments) => segments,
        Err(e) => return Some(format!("{method} {path}: {e}")),
    };
    if rules.iter().any(|r| r.allows(method, &segments)) {
        return None;
    }
    let written: Vec<&str> = rules.iter().map(|r| r.written.as_str()).collect();
    Some(format!(
        "{method} {path} is not allowed by the host's rules ({})",
        written.join("; ")
    ))
}

/// Why a request's path is refused before any rule is looked at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the path does not start with `/`")]
    Relative,
    #[error("the path holds a dot segment, an encoded `/`, `\\` or `.`, a `\\`, or a byte outside printable ASCII: an origin may read it otherwise")]
    Ambiguous,
}

/// The segments of a request target's path (its query and fragment cut),
/// or why the path is too ambiguous to judge.
pub fn request_path(target: &str) -> Result<Vec<&str>, PathError> {
    let path = target.split(['?', '#']).next().unwrap_or("");
    let Some(rest) = path.strip_prefix('/') else {
        return Err(PathError::Relative);
    };
    if !path.bytes().all(|b| b.is_ascii_graphic() && b != b'\\') {
        return Err(PathError::Ambiguous);
    }
    let lower = path.to_ascii_lowercase();
    if ["%2f", "%5c", "%2e", "%00"]
        .iter()
        .any(|e| lower.contains(e))
    {
        return Err(PathError::Ambiguous);
    }
    let segments: Vec<&str> = rest.split('/').collect();
    if segments.iter().any(|s| *s == "." || *s == "..") {
        return Err(PathError::Ambiguous);
    }
    Ok(segments)
}

fn segments_match(pattern: &[Segment], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((Segment::Any, rest)) => {
            (0..=path.len()).any(|skip| segments_match(rest, &path[skip..]))
        }
        Some((Segment::Glob(glob), rest)) => path.split_first().is_some_and(|(first, tail)| {
            glob_match(glob.as_bytes(), first.as_bytes()) && segments_match(rest, tail)
        }),
    }
}

/// `*` for any run of bytes within one segment; every other byte itself.
fn glob_match(glob: &[u8], text: &[u8]) -> bool {
    match glob.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|skip| glob_match(rest, &text[skip..])),
        Some((c, rest)) => text
            .split_first()
            .is_some_and(|(t, tail)| t == c && glob_match(rest, tail)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rule's methods and path pattern, as a table writes them.
    type Written<'a> = (Option<&'a [&'a str]>, Option<&'a str>);

    fn rule(method: Option<&[&str]>, path: Option<&str>) -> Result<Rule, RuleError> {
        Rule::parse(&RuleText {
            method: method.map(|m| m.iter().map(|s| s.to_string()).collect()),
            path: path.map(str::to_string),
        })
    }

    #[test]
    fn rules_match_as_written() {
        let upload = Some("/*/*.git/git-upload-pack");
        let cases: &[(Written, &str, &str, bool)] = &[
            (
                (Some(&["GET", "HEAD"]), None),
                "GET",
                "/a/b/info/refs?service=x",
                true,
            ),
            ((Some(&["GET", "HEAD"]), None), "POST", "/a", false),
            (
                (Some(&["POST"]), upload),
                "POST",
                "/owner/repo.git/git-upload-pack",
                true,
            ),
            (
                (Some(&["POST"]), upload),
                "POST",
                "/owner/repo.git/git-receive-pack",
                false,
            ),
            (
                (Some(&["POST"]), upload),
                "POST",
                "/owner/sub/repo.git/git-upload-pack",
                false,
            ),
            (
                (Some(&["POST"]), upload),
                "POST",
                "/owner/repo/git-upload-pack",
                false,
            ),
            ((None, Some("/api/**")), "DELETE", "/api/v1/x/y", true),
            ((None, Some("/api/**")), "GET", "/api", true),
            ((None, Some("/api/**")), "GET", "/apiv2/x", false),
            ((None, Some("/**/raw")), "GET", "/a/b/c/raw", true),
            ((None, Some("/**/raw")), "GET", "/raw", true),
            ((None, Some("/**/raw")), "GET", "/a/raw/x", false),
            ((None, Some("/")), "GET", "/", true),
            ((None, Some("/")), "GET", "/x", false),
            ((None, None), "PATCH", "/anything", true),
        ];
        for ((methods, path), method, target, want) in cases {
            let r = rule(*methods, *path).unwrap();
            let segments = request_path(target).unwrap();
            assert_eq!(
                r.allows(method, &segments),
                *want,
                "{methods:?} {path:?} / {method} {target}"
            );
        }
    }

    #[test]
    fn bad_rules_are_refused_with_their_reason() {
        let cases: &[(Written, RuleError)] = &[
            ((Some(&["get"]), None), RuleError::Method("get".into())),
            ((Some(&[]), None), RuleError::NoMethods),
            ((None, Some("api/x")), RuleError::Relative("api/x".into())),
            (
                (None, Some("/a**/b")),
                RuleError::DoubleStar("/a**/b".into()),
            ),
            (
                (None, Some("/a/../b")),
                RuleError::Character("/a/../b".into()),
            ),
            (
                (None, Some("/a%2fb")),
                RuleError::Character("/a%2fb".into()),
            ),
            ((None, Some("/a b")), RuleError::Character("/a b".into())),
        ];
        for ((methods, path), want) in cases {
            assert_eq!(rule(*methods, *path).unwrap_err(), *want);
        }
    }

    #[test]
    fn ambiguous_paths_are_refused_before_any_rule() {
        let cases = [
            ("/a/../b", Err(PathError::Ambiguous)),
            ("/a/./b", Err(PathError::Ambiguous)),
            ("/a%2Fb", Err(PathError::Ambiguous)),
            ("/a%2e%2e/b", Err(PathError::Ambiguous)),
            ("/a\\b", Err(PathError::Ambiguous)),
            ("/a\u{e9}", Err(PathError::Ambiguous)),
            ("http://x/a", Err(PathError::Relative)),
            ("*", Err(PathError::Relative)),
            ("/a/b?x=../..", Ok(vec!["a", "b"])),
            ("/a%20b", Ok(vec!["a%20b"])),
        ];
        for (target, want) in cases {
            assert_eq!(request_path(target), want, "{target}");
        }
    }
}
