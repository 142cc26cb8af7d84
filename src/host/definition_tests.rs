//! Tests of `definition`.

use super::*;

#[path = "definition_cases.rs"]
mod cases;
use cases::*;

const FILE: &str = "/defs/demo.json";

const EXAMPLE: &str = r#"{
  "id": "demo",
  "image": "localhost/warden-machine:latest",
  "dockerfile": null,
  "lend": [{"host": "/home/me/src", "at": "/lent/src", "mode": "read"}],
  "env": {"EDITOR": "vi"},
  "keys": ["ANTHROPIC_API_KEY"],
  "hosts": null,
  "setup": "setup.sh",
  "workspace": "volume",
  "limits": {"timeout_ms": 600000}
}"#;

fn parse(text: &str) -> Result<Definition, DefinitionError> {
    Definition::parse(Path::new(FILE), text)
}

/// The smallest definition with `fields` laid over it.
fn with(fields: &str) -> String {
    let mut base: Map<String, Value> =
        serde_json::from_str(r#"{"id": "demo", "image": "localhost/m:1"}"#).unwrap();
    let over: Map<String, Value> = serde_json::from_str(fields).unwrap();
    base.extend(over);
    Value::Object(base).to_string()
}

fn lend(at: &str) -> String {
    format!(r#"{{"host": "/h", "at": "{at}", "mode": "read"}}"#)
}

#[test]
fn the_example_parses() {
    let d = parse(EXAMPLE).unwrap();
    assert_eq!(
        d,
        Definition {
            id: "demo".into(),
            source: Source::Image("localhost/warden-machine:latest".into()),
            lend: vec![Lend {
                host: "/home/me/src".into(),
                at: "/lent/src".into(),
                mode: LendMode::Read,
            }],
            env: BTreeMap::from([("EDITOR".into(), "vi".into())]),
            keys: vec!["ANTHROPIC_API_KEY".into()],
            hosts: None,
            runtime_hosts: None,
            setup: Some("/defs/setup.sh".into()),
            workspace: Workspace::Volume,
            limits: Limits {
                timeout_ms: Some(600_000),
                ..Limits::default()
            },
            network: Network::None,
            keep_id: KeepId::Off,
            command: None,
            restart: Restart::No,
            ports: vec![],
            requires: vec![],
            idle_stop_minutes: None,
            size: Default::default(),
            firewall: None,
            dns: vec![],
            allow_addresses: vec![],
            opened: Default::default(),
            kind: Kind::Container,
            ready: Default::default(),
            sleep: Default::default(),
        }
    );
    assert_eq!(d.container("warden"), "warden-demo");
    assert_eq!(d.data_volume("warden"), "warden-demo-data");
    assert_eq!(d.work_volume("warden"), "warden-demo-work");
}

#[test]
fn defaults() {
    let d = parse(r#"{"id": "a", "image": "x"}"#).unwrap();
    assert_eq!(d.source, Source::Image("x".into()));
    assert!(d.lend.is_empty() && d.env.is_empty() && d.keys.is_empty());
    assert_eq!((d.hosts, d.setup), (None, None));
    assert_eq!(d.workspace, Workspace::Volume);
    assert_eq!(d.limits, Limits::default());
    assert_eq!((d.network, d.keep_id), (Network::None, KeepId::Off));
    assert_eq!((d.firewall, d.dns), (None, vec![]));
}

#[test]
fn paths_resolve_against_the_definitions_folder() {
    let cases = [
        (FILE, "Dockerfile", Ok("/defs/Dockerfile")),
        (FILE, "./build/Dockerfile", Ok("/defs/build/Dockerfile")),
        (FILE, "../Dockerfile", Ok("/defs/../Dockerfile")),
        (FILE, "/srv//x/./Dockerfile", Ok("/srv/x/Dockerfile")),
        ("/demo.json", "Dockerfile", Ok("/Dockerfile")),
        ("demo.json", "/abs/Dockerfile", Ok("/abs/Dockerfile")),
        (
            "demo.json",
            "Dockerfile",
            Err("is not absolute to resolve it"),
        ),
        (
            "sub/demo.json",
            "Dockerfile",
            Err("is not absolute to resolve it"),
        ),
        ("/", "Dockerfile", Err("is not absolute to resolve it")),
    ];
    for (file, written, want) in cases {
        let text = format!(r#"{{"id": "a", "dockerfile": "{written}", "setup": "{written}"}}"#);
        match (Definition::parse(Path::new(file), &text), want) {
            (Ok(d), Ok(want)) => {
                assert_eq!(
                    d.source,
                    Source::Dockerfile(want.into()),
                    "{file} {written}"
                );
                assert_eq!(d.setup, Some(want.into()), "{file} {written}");
            }
            (Err(e), Err(want)) => {
                let e = e.to_string();
                assert!(e.contains("dockerfile: ") && e.contains(want), "{e}");
            }
            (got, want) => panic!("{file} {written}: {got:?}, wanted {want:?}"),
        }
    }
}

#[test]
fn definitions_table() {
    // (text, None for accepted or Some("<field>: <problem>") for refused)
    let cases: Vec<(String, Option<&str>)> = [
        file_id_and_image_cases(),
        lend_cases(),
        agent_cases(),
        readiness_and_resource_cases(),
        lend_path_cases(),
        lend_overlap_cases(),
        lend_field_cases(),
        env_and_keys_cases(),
        hosts_setup_and_workspace_cases(),
        network_cases(),
        firewall_dns_and_limits_cases(),
    ]
    .concat();
    assert!(cases.len() >= 25);
    for (text, want) in &cases {
        match (parse(text), want) {
            (Ok(_), None) => {}
            (Err(e), Some(want)) => {
                let e = e.to_string();
                assert!(e.starts_with(&format!("{FILE}: ")), "{text}: {e}");
                assert!(e.contains(want), "{text}: {e}\nwanted: {want}");
            }
            (got, want) => panic!("{text}: {got:?}, wanted {want:?}"),
        }
    }
}

#[test]
fn the_size_is_checked_before_the_text_is_read() {
    let mut text = with(r#"{"env": {"A": ""}}"#);
    let pad = MAX_BYTES - text.len();
    text.insert_str(text.len() - 1, &" ".repeat(pad));
    assert_eq!(text.len(), MAX_BYTES);
    assert!(parse(&text).is_ok());
    text.push(' ');
    let e = parse(&text).unwrap_err().to_string();
    assert!(
        e.starts_with(FILE) && e.contains("larger than 1048576 bytes"),
        "{e}"
    );
    // Too large and not JSON: the size is what is reported.
    let e = parse(&"[".repeat(MAX_BYTES + 1)).unwrap_err().to_string();
    assert!(e.contains("larger than"), "{e}");
}

#[test]
fn many_lends_are_checked_in_good_time() {
    let lends: Vec<String> = (0..20_000)
        .map(|i| lend(&format!("/lent/{}/{i}", i % 97)))
        .collect();
    let text = with(&format!(r#"{{"lend": [{}]}}"#, lends.join(",")));
    assert!(text.len() < MAX_BYTES);
    let started = std::time::Instant::now();
    assert_eq!(parse(&text).unwrap().lend.len(), 20_000);
    let mut nested = lends;
    nested.push(lend("/lent/5"));
    let text = with(&format!(r#"{{"lend": [{}]}}"#, nested.join(",")));
    let e = parse(&text).unwrap_err().to_string();
    assert!(
        e.contains("lend[20000].at: /lent/5 holds lend[") && e.contains("].at /lent/5/"),
        "{e}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let text = with(r#"{"env": {"A": "x"}}"#).replace(r#""x""#, &"[".repeat(10_000));
    let e = parse(&text).unwrap_err().to_string();
    assert!(e.contains("JSON: recursion limit"), "{e}");
}

#[test]
fn load_reads_the_file_and_resolves_against_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.json");
    std::fs::write(&path, r#"{"id": "a", "dockerfile": "Dockerfile"}"#).unwrap();
    let d = Definition::load(&path).unwrap();
    assert_eq!(d.source, Source::Dockerfile(dir.path().join("Dockerfile")));

    std::fs::write(&path, " ".repeat(MAX_BYTES + 10)).unwrap();
    let e = Definition::load(&path).unwrap_err().to_string();
    assert!(e.contains("larger than"), "{e}");
    // Too large, and the limit falls inside a character.
    std::fs::write(&path, "é".repeat(MAX_BYTES)).unwrap();
    let e = Definition::load(&path).unwrap_err().to_string();
    assert!(e.contains("larger than"), "{e}");

    std::fs::write(&path, b"{\"id\": \"a\xff\"}").unwrap();
    let e = Definition::load(&path).unwrap_err().to_string();
    assert!(e.contains("utf-8"), "{e}");

    let missing = dir.path().join("missing.json");
    let e = Definition::load(&missing).unwrap_err().to_string();
    assert!(e.starts_with(&missing.display().to_string()), "{e}");
}

#[test]
fn the_docs_examples_parse() {
    let docs = include_str!("../../docs/machine-definition.md");
    let examples: Vec<&str> = docs
        .split("```json\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .collect();
    assert!(examples.len() >= 3, "the example and the two setups");
    for example in examples {
        let d = Definition::parse(Path::new("/home/me/machines/demo.json"), example)
            .unwrap_or_else(|e| panic!("{example}: {e}"));
        assert!(!d.id.is_empty());
    }
}

#[test]
fn the_schema_names_the_same_fields() {
    let schema: Value =
        serde_json::from_str(include_str!("../../machine/definition.schema.json")).unwrap();
    let mut names: Vec<&str> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut fields = FIELDS.to_vec();
    names.sort_unstable();
    fields.sort_unstable();
    assert_eq!(names, fields);
    assert_eq!(schema["additionalProperties"], Value::Bool(false));
    let lend = schema["$defs"]["lend"]["properties"].as_object().unwrap();
    assert_eq!(lend.len(), LEND_FIELDS.len());
}
