//! Tests of `registries`.

use super::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;

fn write(root: &Path, rel: &str, content: &[u8]) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, content).expect("write");
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn pairs(found: &[Found]) -> Vec<(&str, &str)> {
    found
        .iter()
        .map(|f| (f.host.as_str(), f.source.as_str()))
        .collect()
}

#[test]
fn url_host_table() {
    let rows: &[(&str, Option<&str>)] = &[
        (
            "https://mirror.example.org/debian",
            Some("mirror.example.org"),
        ),
        (
            "http://mirror.example.org:8080/debian",
            Some("mirror.example.org"),
        ),
        ("HTTPS://Mirror.Example.ORG./x", Some("mirror.example.org")),
        (
            "  https://pypi.internal.example/simple  ",
            Some("pypi.internal.example"),
        ),
        ("https://npm.example.com", Some("npm.example.com")),
        ("https://npm.example.com?x=1", Some("npm.example.com")),
        ("https://npm.example.com#frag", Some("npm.example.com")),
        (
            "sparse+https://crates.example.net/index/",
            Some("crates.example.net"),
        ),
        (
            "registry+https://crates.example.net/git/index",
            Some("crates.example.net"),
        ),
        (
            "git+https://git.example.com/index.git",
            Some("git.example.com"),
        ),
        (
            "mirror+http://mirror.example.org/mirrors.txt",
            Some("mirror.example.org"),
        ),
        (
            "tor+http://mirror.example.org/debian",
            Some("mirror.example.org"),
        ),
        ("http://user:pass@npm.example.com/", Some("npm.example.com")),
        (
            "https://user:p@ss@npm.example.com:4873/",
            Some("npm.example.com"),
        ),
        (
            "https://under_score.example.test/",
            Some("under_score.example.test"),
        ),
        ("mirror+file:/etc/apt/mirrors.txt", None),
        ("file:///srv/repo", None),
        ("cdrom:[Debian GNU/Linux 12]/", None),
        ("copy:/srv/repo", None),
        ("ftp://ftp.example.org/pub", None),
        ("ssh://git@git.example.com/index", None),
        ("git@github.com:owner/repo.git", None),
        ("+https://npm.example.com/", None),
        ("../relative/path", None),
        ("/srv/wheels", None),
        ("", None),
        ("https://", None),
        ("https:///path", None),
        ("https://[2001:db8::1]:8443/simple", None),
        ("http://192.0.2.10/simple", None),
        ("https://npm.example.com:abc/", None),
        ("https://exa mple.com/", None),
        ("https://${REGISTRY_HOST}/", None),
        ("https://a..b/", None),
        ("https://.example.com/", None),
        ("https://ex\u{e4}mple.com/", None),
    ];
    for (url, want) in rows {
        assert_eq!(url_host(url).as_deref(), *want, "{url:?}");
    }
}

#[test]
fn apt_one_line_and_deb822() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(
        root,
        "etc/apt/sources.list",
        b"# deb http://commented.example.org/debian bookworm main\n\
          deb http://mirror.example.org/debian bookworm main contrib\n\
          deb-src [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] http://src.example.org/debian bookworm main\n\
          deb [ arch=amd64 trusted=yes ] https://user:secret@private.example.com:8443/apt stable main # note\n\
          deb cdrom:[Debian GNU/Linux 12 _Bookworm_]/ bookworm main\n\
          deb file:/srv/local-repo ./\n\
          this is garbage\n\
          deb\n\
          deb [unclosed http://unclosed.example.org/ x\n\
          debian http://notdeb.example.org/ x y\n",
    );
    write(
        root,
        "etc/apt/sources.list.d/debian.sources",
        b"Types: deb deb-src\n\
          URIs: http://mirror.example.org/debian http://second.example.org/debian\n\
          Suites: bookworm bookworm-updates\n\
          Components: main\n\
          Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n URIs: http://inkey.example.org/\n -----END PGP PUBLIC KEY BLOCK-----\n\
          \n\
          # a disabled stanza\n\
          Types: deb\n\
          URIs: http://disabled.example.org/debian\n\
          Enabled: no\n\
          Suites: stable\n\
          \n\n\
          Types: deb\n\
          URIs:\n https://continued.example.org/debian\n\thttps://continued2.example.org/debian\n\
          Suites: stable\n\
          Enabled: yes\n\
          garbage without colon\n",
    );
    write(
        root,
        "etc/apt/sources.list.d/extra.list",
        b"deb mirror+http://mirrors.example.org/mirrors.txt stable main\n",
    );
    write(
        root,
        "etc/apt/sources.list.d/old.list.save",
        b"deb http://ignored.example.org/ x y\n",
    );
    write(
        root,
        "etc/apt/apt.conf.d/01proxy",
        b"Acquire::http::Proxy \"http://proxy.example.org:3128\";\n",
    );
    write(
        root,
        "etc/apt/apt.conf",
        b"Acquire::https::Proxy \"http://proxy2.example.org:3128\";\n",
    );
    let list = "apt: /etc/apt/sources.list";
    let deb822 = "apt: /etc/apt/sources.list.d/debian.sources";
    assert_eq!(
        pairs(&from_configuration(root, &[])),
        [
            ("mirror.example.org", list),
            ("src.example.org", list),
            ("private.example.com", list),
            ("second.example.org", deb822),
            ("continued.example.org", deb822),
            ("continued2.example.org", deb822),
            (
                "mirrors.example.org",
                "apt: /etc/apt/sources.list.d/extra.list"
            ),
        ]
    );
}

#[test]
fn npm_files_and_env() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(root, "etc/npmrc", b"registry=https://npm.example.com/\n");
    write(
        root,
        "root/.npmrc",
        b"; registry=https://commented.example.com/\n\
          # registry=https://commented2.example.com/\n\
          @corp:registry = \"https://npm.corp.example.com/\"\n\
          //npm.corp.example.com/:_authToken=secret\n\
          registry=https://npm.example.com/ ; inline comment\n\
          garbage line without equals\n\
          =\n\
          registry=\n\
          proxy=http://proxy.example.org:3128\n",
    );
    write(
        root,
        "usr/local/etc/npmrc",
        b"  registry = http://local.example.net:4873  # why\n",
    );
    write(
        root,
        "home/alice/.npmrc",
        b"registry='https://alice.example.org/npm/'\n",
    );
    write(
        root,
        "home/bob/.npmrc",
        &[0xff, 0xfe, 0, 1, b'=', 0x80, b'\n'],
    );
    let env = env(&[
        ("PATH", "/usr/bin"),
        ("npm_config_registry", "https://env.example.com/"),
        ("NPM_CONFIG_REGISTRY", "http://ENV2.example.com:4873"),
        ("npm_config_@corp:registry", "https://scoped.example.com/"),
        ("NPM_CONFIG_PROXY", "http://proxy.example.org/"),
    ]);
    assert_eq!(
        pairs(&from_configuration(root, &env)),
        [
            ("npm.example.com", "npm: /etc/npmrc"),
            ("local.example.net", "npm: /usr/local/etc/npmrc"),
            ("npm.corp.example.com", "npm: /root/.npmrc"),
            ("alice.example.org", "npm: /home/alice/.npmrc"),
            ("env.example.com", "env: npm_config_registry"),
            ("env2.example.com", "env: NPM_CONFIG_REGISTRY"),
            ("scoped.example.com", "env: npm_config_@corp:registry"),
        ]
    );
}

#[test]
fn pip_files_and_env() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(
        root,
        "etc/pip.conf",
        b"[global]\n\
          index-url = https://pypi.internal.example/simple\n\
          extra-index-url =\n\
          \x20   https://extra1.example.com/simple\n\
          \n\
          \x20   https://extra2.example.com/simple https://extra3.example.com/simple\n\
          # index-url = https://commented.example.com/simple\n\
          ; index-url = https://commented2.example.com/simple\n\
          trusted-host = pypi.internal.example\n\
          \x20 trusted.example.net:8080\n\
          find-links = /srv/wheels\n\
          \x20   https://wheels.example.org/links/\n\
          timeout: 60\n\
          proxy = http://proxy.example.org:3128\n\
          not a pair\n\
          [install]\n\
          index_url: \"https://install.example.org/simple\"\n",
    );
    write(
        root,
        "home/dev/.config/pip/pip.conf",
        b"[global]\nindex-url = file:///srv/simple\n",
    );
    write(root, "home/dev/.pip/pip.conf", b"\x00\x01[[[=\n  =:=\n");
    write(
        root,
        "root/.pip/pip.conf",
        b"[global]\nextra-index-url = https://root.example.test/simple\n",
    );
    let env = env(&[
        ("PIP_INDEX_URL", "https://env.example.org/simple"),
        (
            "PIP_EXTRA_INDEX_URL",
            "https://e1.example.org/simple https://e2.example.org/simple",
        ),
        ("PIP_TRUSTED_HOST", "host.example.test"),
        ("PIP_TIMEOUT", "60"),
    ]);
    let etc = "pip: /etc/pip.conf";
    assert_eq!(
        pairs(&from_configuration(root, &env)),
        [
            ("pypi.internal.example", etc),
            ("extra1.example.com", etc),
            ("extra2.example.com", etc),
            ("extra3.example.com", etc),
            ("trusted.example.net", etc),
            ("wheels.example.org", etc),
            ("install.example.org", etc),
            ("root.example.test", "pip: /root/.pip/pip.conf"),
            ("env.example.org", "env: PIP_INDEX_URL"),
            ("e1.example.org", "env: PIP_EXTRA_INDEX_URL"),
            ("e2.example.org", "env: PIP_EXTRA_INDEX_URL"),
            ("host.example.test", "env: PIP_TRUSTED_HOST"),
        ]
    );
}

/// A cargo configuration with every shape of registry, source and noise.
const USR_CARGO_CONFIG: &[u8] = b"# The mirror replaces the default registry.\n\
    # [source.x] registry = \"https://commented.example.net/\"\n\
    [source.upstream]\n\
    replace-with = \"mirror\"\n\
    \n\
    [source.mirror]\n\
    registry = \"sparse+https://crates.example.net/index/\"   # trailing comment\n\
    \n\
    [source.\"vendored.dir\"]\n\
    directory = \"vendor\"\n\
    \n\
    [ registries.corp ]\n\
    index = \"https://git.corp.example.com/index.git\"\n\
    token = \"secret\"\n\
    \n\
    [registries]\n\
    other = { index = \"sparse+https://other.example.com/\", token = \"x\" }\n\
    dotted.index = 'https://dotted.example.org/index'\n\
    \n\
    [http]\n\
    proxy = \"http://proxy.example.org:3128\"\n\
    \n\
    [net]\n\
    index = \"https://not-a-registry.example.org/\"\n\
    \n\
    [[bin]]\n\
    index = \"https://array.example.org/\"\n\
    garbage ] [ = = \"\n\
    {{{{{{ = {{{{ = {\n";

/// Registry index caches, and folders there that are not.
const CARGO_INDEX_FOLDERS: &[&str] = &[
    "usr/local/cargo/registry/index/index.example.net-1949cf8c6b5b557f",
    "usr/local/cargo/registry/index/crates.example.net-0123456789abcdef",
    "usr/local/cargo/registry/index/not-a-cache",
    "usr/local/cargo/registry/index/short.example.net-1234",
    "usr/local/cargo/registry/index/bad!host-0123456789abcdef",
    "opt/cargo/registry/index/opt-index.example.org-aaaaaaaaaaaaaaaa",
];

/// The cargo files and index folders the test reads from.
fn write_cargo_tree(root: &Path) {
    write(root, "usr/local/cargo/config.toml", USR_CARGO_CONFIG);
    write(
        root,
        "root/.cargo/config",
        b"[registry]\nindex = \"https://legacy.example.org/index\"\n",
    );
    write(
        root,
        "home/dev/.cargo/config.toml",
        b"[registries.dev]\nindex = \"sparse+https://dev.example.test/\"\n",
    );
    write(
        root,
        "opt/cargo/config.toml",
        b"[source.mirror2]\nregistry = \"https://opt.example.org/\"\n",
    );
    for folder in CARGO_INDEX_FOLDERS {
        fs::create_dir_all(root.join(folder)).expect("mkdir");
    }
}

#[test]
fn cargo_configs_index_folders_and_env() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write_cargo_tree(root);
    let env = env(&[
        ("CARGO_HOME", "/opt/cargo"),
        (
            "CARGO_REGISTRIES_CORP2_INDEX",
            "https://env.example.net/index",
        ),
        ("CARGO_REGISTRIES__INDEX", "https://empty-name.example.net/"),
        ("CARGO_HTTP_PROXY", "http://proxy.example.org/"),
    ]);
    let usr = "cargo: /usr/local/cargo/config.toml";
    assert_eq!(
        pairs(&from_configuration(root, &env)),
        [
            ("crates.example.net", usr),
            ("git.corp.example.com", usr),
            ("other.example.com", usr),
            ("dotted.example.org", usr),
            ("legacy.example.org", "cargo: /root/.cargo/config"),
            ("dev.example.test", "cargo: /home/dev/.cargo/config.toml"),
            ("opt.example.org", "cargo: /opt/cargo/config.toml"),
            (
                "index.example.net",
                "cargo: /usr/local/cargo/registry/index/index.example.net-1949cf8c6b5b557f"
            ),
            (
                "opt-index.example.org",
                "cargo: /opt/cargo/registry/index/opt-index.example.org-aaaaaaaaaaaaaaaa"
            ),
            ("env.example.net", "env: CARGO_REGISTRIES_CORP2_INDEX"),
        ]
    );
}

#[test]
fn cargo_home_must_be_absolute_and_stay_under_root() {
    assert_eq!(
        cargo_home(&env(&[("CARGO_HOME", "/opt/cargo/")])).as_deref(),
        Some("opt/cargo")
    );
    assert_eq!(
        cargo_home(&env(&[("CARGO_HOME", "/")])).as_deref(),
        Some("")
    );
    assert_eq!(cargo_home(&env(&[("CARGO_HOME", "relative/cargo")])), None);
    assert_eq!(cargo_home(&env(&[("CARGO_HOME", "/opt/../../etc")])), None);
    assert_eq!(cargo_home(&[]), None);
}

#[test]
fn across_tools_first_source_wins_and_empty_root_is_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    assert_eq!(from_configuration(root, &[]), []);
    assert_eq!(from_configuration(&root.join("missing"), &[]), []);
    write(
        root,
        "etc/apt/sources.list",
        b"deb https://Shared.Example.COM/debian x y\n",
    );
    write(
        root,
        "etc/pip.conf",
        b"[global]\nindex-url = https://shared.example.com/simple\n",
    );
    assert_eq!(
        from_configuration(root, &[]),
        [Found {
            host: "shared.example.com".into(),
            source: "apt: /etc/apt/sources.list".into()
        }]
    );
}

#[test]
fn special_files_are_not_opened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let fifo: PathBuf = root.join("home/evil/.npmrc");
    fs::create_dir_all(root.join("home/evil")).expect("mkdir");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    fs::create_dir_all(root.join("etc")).expect("mkdir");
    std::os::unix::fs::symlink("/dev/zero", root.join("etc/pip.conf")).expect("symlink");
    fs::create_dir_all(root.join("etc/npmrc")).expect("mkdir");
    // Would hang on the FIFO, or read /dev/zero forever, if opened.
    assert_eq!(from_configuration(root, &[]), []);
}

#[test]
fn big_files_are_read_only_in_part() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let mut text = b"registry=https://npm.example.com/\n".to_vec();
    text.resize(MAX_FILE as usize + 10, b'#');
    text.extend_from_slice(b"\n@late:registry=https://late.example.com/\n");
    write(root, "etc/npmrc", &text);
    assert_eq!(
        pairs(&from_configuration(root, &[])),
        [("npm.example.com", "npm: /etc/npmrc")]
    );
}

/// A fake runner: canned outputs by command line, and a log of what was asked.
fn fake(outputs: &[(&str, &str)]) -> (HashMap<String, String>, RefCell<Vec<String>>) {
    let map = outputs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (map, RefCell::new(Vec::new()))
}

fn run_tools(outputs: &[(&str, &str)]) -> (Vec<Found>, Vec<String>) {
    let (map, asked) = fake(outputs);
    let mut ask = |argv: &[&str]| {
        let line = argv.join(" ");
        asked.borrow_mut().push(line.clone());
        map.get(&line).cloned()
    };
    let found = from_tools(&mut ask);
    (found, asked.into_inner())
}

const HELP_ONE_LINE: &str = "\nUsage:\n  pip download [options] <requirement specifier> ...\n\n\
    Package Index Options:\n\
    \x20 -i, --index-url <url>       Base URL of the Python Package Index (default https://pkgs.example.org/simple). This should\n\
    \x20                             point to a repository compliant with PEP 503.\n\
    \x20 --extra-index-url <url>     Extra URLs of package indexes to use in addition\n\
    \x20                             to --index-url. Should follow the same rules as\n\
    \x20                             --index-url.\n";

#[test]
fn from_tools_asks_npm_and_pip_then_pip_help() {
    let (found, asked) = run_tools(&[
        ("npm config get registry", "https://npm.example.com/\n"),
        (
            "pip3 config list",
            "global.extra-index-url='https://extra.example.org/simple\\nhttps://extra2.example.org/simple'\n\
             install.trusted-host='trusted.example.org'\n\
             global.timeout='60'\n\
             garbage\n",
        ),
        ("pip3 install --help", HELP_ONE_LINE),
    ]);
    assert_eq!(
        pairs(&found),
        [
            ("npm.example.com", "npm config get registry"),
            ("extra.example.org", "pip3 config list"),
            ("extra2.example.org", "pip3 config list"),
            ("trusted.example.org", "pip3 config list"),
            ("pkgs.example.org", "pip3 install --help"),
        ]
    );
    assert_eq!(
        asked,
        [
            "npm config get registry",
            "pip3 config list",
            "pip3 download --help",
            "pip3 install --help"
        ]
    );
}

#[test]
fn from_tools_skips_pip_help_when_an_index_is_configured() {
    let (found, asked) = run_tools(&[
        ("npm config get registry", "undefined\n"),
        (
            "pip3 config list",
            "global.index-url=\"https://pypi.internal.example/simple\"\n",
        ),
        ("pip3 download --help", HELP_ONE_LINE),
    ]);
    assert_eq!(
        pairs(&found),
        [("pypi.internal.example", "pip3 config list")]
    );
    assert_eq!(asked, ["npm config get registry", "pip3 config list"]);
}

#[test]
fn from_tools_with_no_tools_finds_nothing() {
    let (found, asked) = run_tools(&[]);
    assert_eq!(found, []);
    assert_eq!(asked.len(), 4);
    let (found, _) = run_tools(&[("pip3 download --help", "garbage\n--index-url\n(default")]);
    assert_eq!(found, []);
}

#[test]
fn help_default_index_reads_a_wrapped_description_only() {
    let wrapped = "  -i, --index-url <url>       Base URL of the Python Package Index (default\n\
        \x20                             https://pkgs.example.org/simple). This should\n\
        \x20                             point to a repository.\n";
    assert_eq!(
        help_default_index(wrapped).as_deref(),
        Some("pkgs.example.org")
    );
    assert_eq!(
        help_default_index(HELP_ONE_LINE).as_deref(),
        Some("pkgs.example.org")
    );
    // A "(default …)" of another option is not the index's.
    let other = "  -i, --index-url <url>       Base URL of the index.\n\
        \x20 --timeout <sec>             Timeout (default https://wrong.example.org/).\n";
    assert_eq!(help_default_index(other), None);
    assert_eq!(
        help_default_index("no options here (default https://x.example.org/)"),
        None
    );
}
