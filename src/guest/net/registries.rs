//! The package registries this machine's own tools are configured to use
//! (apt, npm, pip, cargo), read from the tools' configuration, so that the
//! egress proxy's default host list follows a mirror or a private registry
//! without anyone editing a list. No registry is named in this file: even
//! the default ones are learnt from the machine (a configuration file, a
//! tool's own answer, or the name of cargo's index cache folder).
//!
//! Everything read here is untrusted text, and files under the users'
//! homes are theirs to write: only regular files are opened, only their
//! first MiB is read, and garbage is skipped, never fatal.

use serde::Serialize;
use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// GitHub's hosts, which a coding agent needs.
pub const GITHUB: [&str; 5] = [
    "github.com",
    "api.github.com",
    "codeload.github.com",
    "objects.githubusercontent.com",
    "raw.githubusercontent.com",
];

/// Where one derived host came from, for the boot audit line
/// ("apt: /etc/apt/sources.list.d/debian.sources").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Found {
    pub host: String,
    pub source: String,
}

/// Configuration files are small; a bigger one is garbage or hostile.
const MAX_FILE: u64 = 1 << 20;

const NPM_FILES: [&str; 4] = [
    "etc/npmrc",
    "usr/etc/npmrc",
    "usr/local/etc/npmrc",
    "root/.npmrc",
];
const PIP_FILES: [&str; 4] = [
    "etc/pip.conf",
    "etc/xdg/pip/pip.conf",
    "root/.config/pip/pip.conf",
    "root/.pip/pip.conf",
];
const PIP_HOME_FILES: [&str; 2] = [".config/pip/pip.conf", ".pip/pip.conf"];
const CARGO_FILES: [&str; 4] = [
    "usr/local/cargo/config.toml",
    "usr/local/cargo/config",
    "root/.cargo/config.toml",
    "root/.cargo/config",
];
const CARGO_INDEX_DIRS: [&str; 2] = [
    "usr/local/cargo/registry/index",
    "root/.cargo/registry/index",
];

/// Reads the tools' configuration files under `root` (normally "/"; tests
/// pass a temp dir) and the given environment (name, value pairs: the
/// machine's own environment), and returns every registry host found,
/// deduplicated (the first source wins), in a stable order: apt, npm, pip,
/// cargo; files in a fixed order, directories sorted by name, then env.
pub fn from_configuration(root: &Path, env: &[(String, String)]) -> Vec<Found> {
    let mut found = Vec::new();
    apt(root, &mut found);
    npm(root, env, &mut found);
    pip(root, env, &mut found);
    cargo(root, env, &mut found);
    dedup(found)
}

/// Asks tools for their registries where the configuration files say
/// nothing. `ask(argv)` runs a command and returns its stdout (None when
/// the tool is absent, fails or times out). Cargo has no query command.
pub fn from_tools(ask: &mut dyn FnMut(&[&str]) -> Option<String>) -> Vec<Found> {
    let mut found = Vec::new();
    npm_tool(ask, &mut found);
    pip_tool(ask, &mut found);
    dedup(found)
}

/// The host of a registry URL: http(s), possibly behind a transport
/// prefix ("sparse+https", "mirror+http", "git+https"). Lowercased, without
/// userinfo, port or trailing dot. None for any other scheme, a relative
/// path, an IP literal (the list holds names) or a malformed host.
pub fn url_host(url: &str) -> Option<String> {
    let (scheme, rest) = url.trim().split_once("://")?;
    if !http_based(scheme) {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    // The last '@' ends the userinfo: a password may itself hold an '@'.
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    authority_host(host_port)
}

/// "https", "http", or either after '+'-joined transport prefixes.
fn http_based(scheme: &str) -> bool {
    let scheme = scheme.to_ascii_lowercase();
    let mut parts = scheme.rsplit('+');
    let last_is_http = matches!(parts.next(), Some("http" | "https"));
    last_is_http
        && parts.all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
}

/// The name in "host[:port]"; IPv6 literals ("[…]") are not names.
fn authority_host(host_port: &str) -> Option<String> {
    if host_port.starts_with('[') {
        return None;
    }
    let (host, port) = host_port.split_once(':').unwrap_or((host_port, ""));
    if !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    host_name(host)
}

/// A DNS name, lowercased, without its trailing dot.
fn host_name(host: &str) -> Option<String> {
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    // No top-level domain is all digits: such a "name" is an IPv4 literal.
    let last_numeric = host
        .rsplit('.')
        .next()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()));
    let ok = host.len() <= 253 && host.split('.').all(label_ok) && !last_numeric;
    ok.then_some(host)
}

// ---- apt ----

/// sources.list and sources.list.d/*.list (one-line format) and
/// sources.list.d/*.sources (deb822); apt ignores other names there.
fn apt(root: &Path, found: &mut Vec<Found>) {
    let mut files = vec!["etc/apt/sources.list".to_string()];
    files.extend(list(root, "etc/apt/sources.list.d"));
    for rel in files {
        let uris = if rel.ends_with(".sources") {
            read(root, &rel).map(|t| deb822_uris(&t))
        } else if rel.ends_with(".list") {
            read(root, &rel).map(|t| {
                t.lines()
                    .filter_map(one_line_uri)
                    .map(String::from)
                    .collect()
            })
        } else {
            None
        };
        add_urls(found, &source("apt", &rel), uris.unwrap_or_default());
    }
}

/// The URI of `deb [options] URI suite [components]` (or `deb-src`).
fn one_line_uri(line: &str) -> Option<&str> {
    // apt treats everything after '#' as a comment, even mid-line.
    let line = line.split('#').next().unwrap_or_default().trim();
    let rest = line
        .strip_prefix("deb-src")
        .or_else(|| line.strip_prefix("deb"))?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let rest = rest.trim_start();
    // Options are bracketed and may hold spaces.
    let rest = match rest.strip_prefix('[') {
        Some(options) => options.split_once(']')?.1,
        None => rest,
    };
    rest.split_whitespace().next()
}

/// The URIs of every enabled stanza of a deb822 .sources file.
fn deb822_uris(text: &str) -> Vec<String> {
    let mut uris = Vec::new();
    for stanza in deb822_stanzas(text) {
        let field = |name: &str| {
            stanza
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        // apt's false words for a boolean.
        let disabled = field("Enabled").is_some_and(|v| {
            let v = v.trim().to_ascii_lowercase();
            ["no", "false", "off", "without", "disable"].contains(&v.as_str())
        });
        if !disabled {
            uris.extend(
                field("URIs")
                    .unwrap_or_default()
                    .split_whitespace()
                    .map(String::from),
            );
        }
    }
    uris
}

/// Stanzas as (field, value) lists; a continuation line (leading space or
/// tab) extends the field before it.
fn deb822_stanzas(text: &str) -> Vec<Vec<(String, String)>> {
    let mut stanzas: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for line in text.lines() {
        let Some(stanza) = stanzas.last_mut() else {
            break;
        };
        if line.trim().is_empty() {
            if !stanza.is_empty() {
                stanzas.push(Vec::new());
            }
        } else if line.starts_with('#') {
            continue;
        } else if line.starts_with([' ', '\t']) {
            if let Some((_, value)) = stanza.last_mut() {
                value.push(' ');
                value.push_str(line.trim());
            }
        } else if let Some((name, value)) = line.split_once(':') {
            stanza.push((name.trim().to_string(), value.trim().to_string()));
        }
    }
    stanzas
}

// ---- npm ----

fn npm(root: &Path, env: &[(String, String)], found: &mut Vec<Found>) {
    for rel in with_homes(root, &NPM_FILES, &[".npmrc"]) {
        if let Some(text) = read(root, &rel) {
            add_urls(found, &source("npm", &rel), npmrc_registries(&text));
        }
    }
    for (name, value) in env.iter().filter(|(n, _)| npm_env_registry(n)) {
        add_urls(found, &format!("env: {name}"), [value]);
    }
}

/// npm reads `npm_config_*` case-insensitively; a scope has its own key.
fn npm_env_registry(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.strip_prefix("npm_config_").is_some_and(|key| {
        key == "registry" || (key.starts_with('@') && key.ends_with(":registry"))
    })
}

/// The values of `registry=` and `@scope:registry=` in an .npmrc.
fn npmrc_registries(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with([';', '#']))
        .filter_map(|l| l.split_once('='))
        .filter(|(key, _)| {
            let key = key.trim().to_ascii_lowercase();
            key == "registry" || (key.starts_with('@') && key.ends_with(":registry"))
        })
        .map(|(_, value)| npm_value(value.trim()).to_string())
        .collect()
}

/// As npm's ini reader: a quoted value is taken whole; an unquoted one
/// ends at an inline comment.
fn npm_value(value: &str) -> &str {
    unquote(value).unwrap_or_else(|| value.split([';', '#']).next().unwrap_or_default().trim())
}

// ---- pip ----

fn pip(root: &Path, env: &[(String, String)], found: &mut Vec<Found>) {
    for rel in with_homes(root, &PIP_FILES, &PIP_HOME_FILES) {
        if let Some(text) = read(root, &rel) {
            let source = source("pip", &rel);
            for (key, value) in ini_entries(&text) {
                pip_value(&key, &value, &source, found);
            }
        }
    }
    for (name, value) in env {
        // pip maps PIP_INDEX_URL to the option index-url, and so on.
        if let Some(option) = name.strip_prefix("PIP_") {
            pip_value(&pip_key(option), value, &format!("env: {name}"), found);
        }
    }
}

/// pip's spelling of an option name: lowercase, '-' for '_'.
fn pip_key(key: &str) -> String {
    key.trim().to_ascii_lowercase().replace('_', "-")
}

/// The hosts of one pip option; its value may list several, separated by
/// whitespace or newlines.
fn pip_value(key: &str, value: &str, source: &str, found: &mut Vec<Found>) {
    let value = value.trim();
    let value = unquote(value).unwrap_or(value);
    let tokens = value.split_whitespace().map(|t| unquote(t).unwrap_or(t));
    match key {
        "index-url" | "extra-index-url" | "find-links" => add_urls(found, source, tokens),
        "trusted-host" => {
            for token in tokens {
                // A host, possibly with a port; some write a URL instead.
                if let Some(host) = url_host(token).or_else(|| authority_host(token)) {
                    push(found, host, source);
                }
            }
        }
        _ => {}
    }
}

/// configparser's shape, which pip uses: `key = value` or `key: value`,
/// an indented line continues the value, `#` and `;` lines are comments.
/// Sections do not matter here: every section's index counts.
fn ini_entries(text: &str) -> Vec<(String, String)> {
    let mut entries: Vec<(String, String)> = Vec::new();
    let mut open = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with(['#', ';']) {
            continue;
        }
        if open && line.starts_with([' ', '\t']) {
            if let Some((_, value)) = entries.last_mut() {
                value.push('\n');
                value.push_str(trimmed);
            }
            continue;
        }
        open = false;
        if trimmed.starts_with('[') {
            continue;
        }
        // The first delimiter wins: a URL's ':' comes after '='.
        if let Some(at) = trimmed.find(['=', ':']) {
            entries.push((
                pip_key(&trimmed[..at]),
                trimmed[at + 1..].trim().to_string(),
            ));
            open = true;
        }
    }
    entries
}

// ---- cargo ----

fn cargo(root: &Path, env: &[(String, String)], found: &mut Vec<Found>) {
    let mut files = with_homes(root, &CARGO_FILES, &[".cargo/config.toml"]);
    let mut index_dirs: Vec<String> = CARGO_INDEX_DIRS.iter().map(|d| d.to_string()).collect();
    if let Some(home) = cargo_home(env) {
        files.push(join(&home, "config.toml"));
        files.push(join(&home, "config"));
        index_dirs.push(join(&home, "registry/index"));
    }
    for rel in unique(files) {
        if let Some(text) = read(root, &rel) {
            add_urls(found, &source("cargo", &rel), cargo_urls(&text));
        }
    }
    for rel in unique(index_dirs).iter().flat_map(|d| list(root, d)) {
        let name = rel.rsplit('/').next().unwrap_or_default();
        if let Some(host) = index_folder_host(name) {
            push(found, host, &source("cargo", &rel));
        }
    }
    for (name, value) in env.iter().filter(|(n, _)| cargo_env_index(n)) {
        add_urls(found, &format!("env: {name}"), [value]);
    }
}

/// $CARGO_HOME relative to the root; only an absolute path that stays
/// under the root is meaningful.
fn cargo_home(env: &[(String, String)]) -> Option<String> {
    let (_, value) = env.iter().find(|(n, _)| n == "CARGO_HOME")?;
    let rel = value.strip_prefix('/')?.trim_matches('/');
    (!rel.split('/').any(|c| c == "..")).then(|| rel.to_string())
}

/// `CARGO_REGISTRIES_<NAME>_INDEX`, and the old `CARGO_REGISTRY_INDEX`.
fn cargo_env_index(name: &str) -> bool {
    name == "CARGO_REGISTRY_INDEX"
        || name
            .strip_prefix("CARGO_REGISTRIES_")
            .and_then(|n| n.strip_suffix("_INDEX"))
            .is_some_and(|n| !n.is_empty())
}

/// Cargo names each index cache folder `<host>-<16 hex digits>`.
fn index_folder_host(name: &str) -> Option<String> {
    let (host, hash) = name.rsplit_once('-')?;
    let hashed = hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit());
    hashed.then(|| host_name(host)).flatten()
}

/// Registry URLs of a cargo config, by a line-wise reading of the TOML
/// that is enough for it: `[table]` headers, `key = "string"`, dotted
/// keys, and one level of inline table.
fn cargo_urls(text: &str) -> Vec<String> {
    let mut table: Vec<String> = Vec::new();
    let mut urls = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') {
            continue;
        }
        if line.starts_with("[[") {
            // An array of tables: cargo keeps no registry in one.
            table = vec!["[[".to_string()];
        } else if let Some(header) = line.strip_prefix('[') {
            table = key_parts(header.split(']').next().unwrap_or_default());
        } else if let Some((key, value)) = line.split_once('=') {
            let path = [table.clone(), key_parts(key)].concat();
            cargo_value(&path, value.trim(), &mut urls);
        }
    }
    urls
}

fn cargo_value(path: &[String], value: &str, urls: &mut Vec<String>) {
    let Some(inner) = value.strip_prefix('{') else {
        urls.extend(registry_string(path, value));
        return;
    };
    let inner = inner.rsplit_once('}').map_or(inner, |(i, _)| i);
    // Not recursive, so that nested garbage cannot exhaust the stack.
    for (key, value) in inner.split(',').filter_map(|p| p.split_once('=')) {
        let path = [path.to_vec(), key_parts(key)].concat();
        urls.extend(registry_string(&path, value.trim()));
    }
}

/// The string value, when the key path names a registry's location.
fn registry_string(path: &[String], value: &str) -> Option<String> {
    let names_registry = match path {
        [table, _, key] if table == "source" => {
            ["registry", "index", "git"].contains(&key.as_str())
        }
        [table, _, key] if table == "registries" => ["index", "registry"].contains(&key.as_str()),
        // The old way of replacing the default registry.
        [table, key] => table == "registry" && key == "index",
        _ => false,
    };
    names_registry
        .then(|| toml_string(value))
        .flatten()
        .map(String::from)
}

/// A one-line basic or literal TOML string's content.
fn toml_string(value: &str) -> Option<&str> {
    let quote = value.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    value.strip_prefix(quote)?.split_once(quote).map(|(s, _)| s)
}

/// A dotted TOML key's parts; dots inside quotes do not split.
fn key_parts(key: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut quote = None;
    for c in key.chars() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '.') => parts.push(String::new()),
            (None, _) if c.is_whitespace() => {}
            _ => parts.last_mut().into_iter().for_each(|p| p.push(c)),
        }
    }
    parts
}

// ---- asking the tools ----

fn npm_tool(ask: &mut dyn FnMut(&[&str]) -> Option<String>, found: &mut Vec<Found>) {
    const ARGV: [&str; 4] = ["npm", "config", "get", "registry"];
    // npm prints "undefined" or nothing when it has no answer.
    if let Some(out) = ask(&ARGV) {
        add_urls(found, &ARGV.join(" "), out.split_whitespace());
    }
}

fn pip_tool(ask: &mut dyn FnMut(&[&str]) -> Option<String>, found: &mut Vec<Found>) {
    const LIST: [&str; 3] = ["pip3", "config", "list"];
    let mut has_index = false;
    if let Some(out) = ask(&LIST) {
        // Lines like `global.index-url='https://…'`, values in repr form.
        for (key, value) in out.lines().filter_map(|l| l.split_once('=')) {
            let option = pip_key(key.rsplit('.').next().unwrap_or_default());
            has_index |= option == "index-url";
            pip_value(&option, &value.replace("\\n", "\n"), &LIST.join(" "), found);
        }
    }
    if has_index {
        return;
    }
    // Without an index-url pip uses its default, which its help shows.
    for argv in [
        ["pip3", "download", "--help"],
        ["pip3", "install", "--help"],
    ] {
        if let Some(host) = ask(&argv).and_then(|help| help_default_index(&help)) {
            push(found, host, &argv.join(" "));
            return;
        }
    }
}

/// The host of "(default <url>)" in the help of the --index-url option,
/// whose description may wrap over several lines.
fn help_default_index(help: &str) -> Option<String> {
    let is_option = |l: &&str| {
        l.trim_start().starts_with('-') && l.split([',', ' ', '=']).any(|t| t == "--index-url")
    };
    let mut lines = help.lines().skip_while(|l| !is_option(l));
    let first = lines.next()?;
    let description = lines.take_while(|l| {
        let l = l.trim_start();
        !l.is_empty() && !l.starts_with('-')
    });
    let text = std::iter::once(first)
        .chain(description)
        .collect::<Vec<_>>()
        .join(" ");
    let (_, after) = text.split_once("(default")?;
    let url = after
        .split(|c: char| c == ')' || c.is_whitespace())
        .find(|t| !t.is_empty())?;
    url_host(url)
}

// ---- shared ----

/// A file's text, if it is a regular file. A FIFO would block the boot,
/// and a device could act on open (a terminal would become warden's
/// controlling one), so neither is opened.
fn read(root: &Path, rel: &str) -> Option<String> {
    let path = root.join(rel);
    if !fs::metadata(&path).ok()?.is_file() {
        return None;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&path)
        .ok()?;
    // The path may have been swapped since: what was opened is what counts.
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The entries of a directory under the root, as relative paths sorted by
/// name, so that the result's order is stable.
fn list(root: &Path, dir: &str) -> Vec<String> {
    let Ok(entries) = fs::read_dir(root.join(dir)) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names.into_iter().map(|n| join(dir, &n)).collect()
}

/// The fixed files, then each file of `in_home` in every home/* folder.
fn with_homes(root: &Path, fixed: &[&str], in_home: &[&str]) -> Vec<String> {
    let mut files: Vec<String> = fixed.iter().map(|f| f.to_string()).collect();
    for home in list(root, "home") {
        files.extend(in_home.iter().map(|f| join(&home, f)));
    }
    files
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

fn unique(items: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    items
        .into_iter()
        .filter(|i| seen.insert(i.clone()))
        .collect()
}

/// The source as the machine sees it: "apt: /etc/apt/sources.list".
fn source(tool: &str, rel: &str) -> String {
    format!("{tool}: /{rel}")
}

fn unquote(value: &str) -> Option<&str> {
    ['"', '\'']
        .iter()
        .find_map(|q| value.strip_prefix(*q)?.strip_suffix(*q))
}

fn push(found: &mut Vec<Found>, host: String, source: &str) {
    found.push(Found {
        host,
        source: source.to_string(),
    });
}

fn add_urls<I>(found: &mut Vec<Found>, source: &str, urls: I)
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    for url in urls {
        if let Some(host) = url_host(url.as_ref()) {
            push(found, host, source);
        }
    }
}

/// One entry per host; the first source found wins.
fn dedup(found: Vec<Found>) -> Vec<Found> {
    let mut seen = HashSet::new();
    found
        .into_iter()
        .filter(|f| seen.insert(f.host.clone()))
        .collect()
}

#[cfg(test)]
#[path = "registries_tests.rs"]
mod tests;
