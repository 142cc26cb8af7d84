//! The definitions table's cases, by theme: each a definition's fields
//! and the error it must give (None: it parses).

use super::{lend, with};
use crate::host::definition::MAX_KEYS;

pub(super) fn file_id_and_image_cases() -> Vec<(String, Option<&'static str>)> {
    vec![
        // The file as a whole.
        ("{".into(), Some("JSON: EOF")),
        ("[]".into(), Some("JSON: must be an object")),
        (
            r#"{"id": "a", "id": "b", "image": "x"}"#.into(),
            Some(r#"JSON: the key "id" is given twice"#),
        ),
        (
            with(r#"{"env": {}}"#).replace("{}", r#"{"A": "1", "A": "2"}"#),
            Some(r#"JSON: the key "A" is given twice"#),
        ),
        (with(r#"{"name": "x"}"#), Some(r#""name": unknown field"#)),
        // id
        (r#"{"image": "x"}"#.into(), Some("id: missing")),
        (with(r#"{"id": 7}"#), Some("id: invalid type: integer")),
        (with(r#"{"id": "Demo"}"#), Some("id: \"Demo\" must match")),
        (with(r#"{"id": "-demo"}"#), Some("id: \"-demo\" must match")),
        (with(r#"{"id": ""}"#), Some("id: \"\" must match")),
        (with(&format!(r#"{{"id": "{}"}}"#, "a".repeat(31))), None),
        (
            with(&format!(r#"{{"id": "{}"}}"#, "a".repeat(32))),
            Some("id: \"aaaa"),
        ),
        (with(r#"{"id": "0-a-"}"#), None),
        (with(r#"{"id": "a_b"}"#), Some("id: \"a_b\" must match")),
        // image and dockerfile
        (
            with(r#"{"image": null}"#),
            Some("image: missing; give image or dockerfile"),
        ),
        (
            with(r#"{"dockerfile": "Dockerfile"}"#),
            Some("image and dockerfile: give one of them, not both"),
        ),
        (with(r#"{"image": null, "dockerfile": "D"}"#), None),
        (with(r#"{"image": ""}"#), Some("image: \"\": empty")),
        (
            with(r#"{"image": "a b"}"#),
            Some("image: \"a b\": holds whitespace"),
        ),
        (
            with(r#"{"image": "a\nb"}"#),
            Some("image: \"a\\nb\": holds whitespace or a control character"),
        ),
        (
            with(r#"{"image": "--privileged"}"#),
            Some("must not begin with '-'"),
        ),
        (
            with(r#"{"image": null, "dockerfile": ""}"#),
            Some("dockerfile: empty path"),
        ),
    ]
}

pub(super) fn lend_cases() -> Vec<(String, Option<&'static str>)> {
    vec![
        // lend
        (
            with(&format!(
                r#"{{"lend": [{}, {}]}}"#,
                lend("/lent/a"),
                lend("/opt/b")
            )),
            None,
        ),
        (
            with(r#"{"lend": [{"host": "/h", "at": "/srv/x", "mode": "write"}]}"#),
            None,
        ),
        (
            with(&format!(
                r#"{{"lend": [{}, {}]}}"#,
                lend("/lent/a"),
                lend("/etc/x")
            )),
            Some("lend[1].at: /etc/x shadows a system path (/etc)"),
        ),
        (
            with(&format!(r#"{{"lend": [{}]}}"#, lend("/"))),
            Some("lend[0].at: / shadows a system path (/)"),
        ),
        (
            with(&format!(r#"{{"lend": [{}]}}"#, lend("/home"))),
            Some("lend[0].at: /home overlaps a user's home (/home/runtime); only /home/runtime/workspace/routines may be lent there"),
        ),
        (with(&format!(r#"{{"lend": [{}]}}"#, lend("/home/me/project"))), None),
        (
            with(&format!(r#"{{"lend": [{}]}}"#, lend("/home/runtime/workspace/routines"))),
            None,
        ),
        (
            with(&format!(r#"{{"lend": [{}]}}"#, lend("/home/runtime/.ssh"))),
            Some("lend[0].at: /home/runtime/.ssh overlaps a user's home (/home/runtime); only /home/runtime/workspace/routines may be lent there"),
        ),
        (
            with(&format!(r#"{{"lend": [{}]}}"#, lend("/home/shell"))),
            Some("lend[0].at: /home/shell overlaps a user's home (/home/shell); only /home/runtime/workspace/routines may be lent there"),
        ),
    ]
}

pub(super) fn agent_cases() -> Vec<(String, Option<&'static str>)> {
    vec![
        // the agent's fields
        (with(r#"{"command": ["node", "server.js"], "restart": "on-failure"}"#), None),
        (with(r#"{"command": []}"#), Some("command: empty")),
        (with(r#"{"command": "node server.js"}"#), Some("command: invalid type: string")),
        (with(r#"{"restart": "sometimes"}"#), Some("restart: unknown variant `sometimes`")),
        (
            with(r#"{"network": "private", "ports": [{"port": 3000, "host": "auto", "from": 3100}]}"#),
            None,
        ),
        (
            with(r#"{"ports": [{"port": 3000, "host": 3100}]}"#),
            Some("ports: published from the engine's private network: needs \"network\": \"private\""),
        ),
        (
            with(r#"{"network": "private", "ports": [{"port": 3000}]}"#),
            Some("ports[0].host: missing"),
        ),
        (with(r#"{"requires": ["python3", "git"]}"#), None),
        (with(r#"{"requires": ["/usr/bin/python3"]}"#), Some("requires[0]: \"/usr/bin/python3\" is not a command's name")),
        (with(r#"{"idle_stop_minutes": 0.1}"#), None),
        (with(r#"{"idle_stop_minutes": 0}"#), Some("idle_stop_minutes: 0 is not between")),
        (
            with(r#"{"idle_stop_minutes": 5, "restart": "always"}"#),
            Some("idle_stop_minutes: with \"restart\": \"always\""),
        ),
        // sleep and wake
        (
            with(r#"{"network": "private", "ports": [{"port": 3000, "host": "auto"}], "serve": true, "idle": "pause", "idle_stop_minutes": 5}"#),
            None,
        ),
        (with(r#"{"serve": true}"#), Some("serve: fronts published ports: the definition has no \"ports\"")),
        (with(r#"{"idle": "pause", "idle_stop_minutes": 5}"#), Some("idle: \"pause\" is done by `warden machine serve`")),
        (
            with(r#"{"network": "private", "ports": [{"port": 3000, "host": "auto"}], "serve": true, "idle": "pause"}"#),
            Some("idle: \"pause\" after how long?"),
        ),
        (with(r#"{"idle": "sleep"}"#), Some("idle: unknown variant `sleep`")),
        (
            with(r#"{"kind": "vm", "serve": true, "idle": "pause", "idle_stop_minutes": 5}"#),
            None,
        ),
        (
            with(r#"{"kind": "vm", "serve": true, "idle_stop_minutes": 5}"#),
            Some("serve: a VM's ports are its relay's; serve freezes a VM"),
        ),
    ]
}

pub(super) fn readiness_and_resource_cases() -> Vec<(String, Option<&'static str>)> {
    vec![
        // readiness
        (with(r#"{"ready": "runtime", "ready_timeout_s": 30}"#), None),
        (with(r#"{"ready_port": 3000}"#), None),
        (
            with(r#"{"ready": "port"}"#),
            Some("ready: \"port\" is not \"runtime\" (for a port, give \"ready_port\")"),
        ),
        (
            with(r#"{"ready": "runtime", "ready_port": 3000}"#),
            Some("ready: either the runtime says it"),
        ),
        (
            with(r#"{"ready_port": 0}"#),
            Some("ready_port: 0 is no port"),
        ),
        (with(r#"{"ready_port": 70000}"#), Some("ready_port: ")),
        (
            with(r#"{"ready_timeout_s": 30}"#),
            Some("ready_timeout_s: given without"),
        ),
        (
            with(r#"{"ready_port": 80, "ready_timeout_s": 0}"#),
            Some("ready_timeout_s: 0 is not between 1 and 3600"),
        ),
        (with(r#"{"keep_id": "runtime"}"#), None),
        (
            with(r#"{"cpus": 1.5, "memory": "512m", "pids": 256}"#),
            None,
        ),
        (with(r#"{"memory": 1073741824}"#), None),
        (
            with(r#"{"memory": "lots"}"#),
            Some("memory: \"lots\": a size"),
        ),
        (
            with(r#"{"memory": "16m"}"#),
            Some("memory: \"16m\" is less than the least, 64m"),
        ),
        (with(r#"{"cpus": 0}"#), Some("cpus: 0 is not between")),
        (
            with(r#"{"pids": 3}"#),
            Some("pids: 3 is less than the least, 16"),
        ),
        (
            with(r#"{"keep_id": "root"}"#),
            Some("keep_id: \"root\" is none of"),
        ),
        (
            with(
                r#"{"keep_id": "shell", "lend": [{"host": "/h", "at": "/home/runtime/workspace/routines", "mode": "write"}]}"#,
            ),
            Some("keep_id: \"shell\" would make the owner's routines lent for writing shell's"),
        ),
    ]
}

pub(super) fn lend_path_cases() -> Vec<(String, Option<&'static str>)> {
    vec![
        (
            with(&format!(r#"{{"lend": [{}]}}"#, lend("/usr/local/src"))),
            Some("lend[0].at: /usr/local/src shadows a system path (/usr)"),
        ),
        (with(&format!(r#"{{"lend": [{}]}}"#, lend("/usrx"))), None),
        (
            with(&format!(r#"{{"lend": [{}]}}"#, lend("lent/a"))),
            Some("lend[0].at: \"lent/a\" is not an absolute path"),
        ),
        (
            with(&format!(r#"{{"lend": [{}]}}"#, lend("/lent/../etc"))),
            Some("lend[0].at: /lent/../etc is not normalized"),
        ),
        (
            with(&format!(r#"{{"lend": [{}]}}"#, lend("/lent/./a"))),
            Some("lend[0].at: /lent/./a is not normalized"),
        ),
        (
            with(&format!(r#"{{"lend": [{}]}}"#, lend("/lent//a"))),
            Some("lend[0].at: /lent//a is not normalized"),
        ),
        (
            with(&format!(r#"{{"lend": [{}]}}"#, lend("/lent/a/"))),
            Some("lend[0].at: /lent/a/ is not normalized"),
        ),
        (
            with(&format!(r#"{{"lend": [{}]}}"#, lend("//etc"))),
            Some("lend[0].at: //etc is not normalized"),
        ),
        (
            with(&format!(r#"{{"lend": [{}]}}"#, lend("/lent/a:rw"))),
            Some("lend[0].at: \"/lent/a:rw\" holds ':' or ','"),
        ),
    ]
}

pub(super) fn lend_overlap_cases() -> Vec<(String, Option<&'static str>)> {
    vec![
        (
            with(&format!(
                r#"{{"lend": [{}, {}]}}"#,
                lend("/lent/a"),
                lend("/lent/a")
            )),
            Some("lend[1].at: /lent/a is also lend[0].at"),
        ),
        (
            with(&format!(
                r#"{{"lend": [{}, {}]}}"#,
                lend("/lent/a"),
                lend("/lent/a/b")
            )),
            Some("lend[1].at: /lent/a/b is under lend[0].at /lent/a"),
        ),
        (
            with(&format!(
                r#"{{"lend": [{}, {}]}}"#,
                lend("/lent/a/b"),
                lend("/lent")
            )),
            Some("lend[1].at: /lent holds lend[0].at /lent/a/b"),
        ),
        (
            with(&format!(
                r#"{{"lend": [{}, {}]}}"#,
                lend("/lent/a"),
                lend("/lent/ab")
            )),
            None,
        ),
        (
            with(&format!(
                r#"{{"lend": [{}, {}, {}, {}]}}"#,
                lend("/lent/b/c"),
                lend("/lent/a0"),
                lend("/lent/a/z"),
                lend("/lent/a")
            )),
            Some("lend[3].at: /lent/a holds lend[2].at /lent/a/z"),
        ),
        (
            with(&format!(
                r#"{{"lend": [{}, {}, {}]}}"#,
                lend("/lent/b"),
                lend("/lent/a"),
                lend("/lent/b/c/d")
            )),
            Some("lend[2].at: /lent/b/c/d is under lend[0].at /lent/b"),
        ),
    ]
}

pub(super) fn lend_field_cases() -> Vec<(String, Option<&'static str>)> {
    vec![
        (
            with(r#"{"lend": [{"host": "h", "at": "/lent/a", "mode": "read"}]}"#),
            Some("lend[0].host: \"h\" is not an absolute path"),
        ),
        (
            with(r#"{"lend": [{"host": "/a,b", "at": "/lent/a", "mode": "read"}]}"#),
            Some("lend[0].host: \"/a,b\" holds ':' or ','"),
        ),
        (
            with(r#"{"lend": [{"host": "/h", "at": "/lent/a"}]}"#),
            Some("lend[0].mode: missing"),
        ),
        (
            with(r#"{"lend": [{"host": "/h", "at": "/lent/a", "mode": "rw"}]}"#),
            Some("lend[0].mode: unknown variant `rw`"),
        ),
        (
            with(r#"{"lend": [{"at": "/lent/a", "mode": "read"}]}"#),
            Some("lend[0].host: missing"),
        ),
        (
            with(r#"{"lend": [{"host": "/h", "at": "/lent/a", "mode": "read", "ro": true}]}"#),
            Some(r#"lend[0]."ro": unknown field"#),
        ),
        (
            with(r#"{"lend": ["/h"]}"#),
            Some("lend[0]: must be an object"),
        ),
        (with(r#"{"lend": {}}"#), Some("lend: invalid type: map")),
    ]
}

pub(super) fn env_and_keys_cases() -> Vec<(String, Option<&'static str>)> {
    let long_keys: Vec<String> = (0..=MAX_KEYS).map(|i| format!("K{i}")).collect();
    let long_keys = with(&format!(
        r#"{{"keys": {}}}"#,
        serde_json::to_string(&long_keys).unwrap()
    ));
    vec![
        // env
        (with(r#"{"env": {"_A1": "", "b": "x y"}}"#), None),
        (
            with(r#"{"env": {"1A": "x"}}"#),
            Some("env: \"1A\" is not a variable name"),
        ),
        (
            with(r#"{"env": {"A-B": "x"}}"#),
            Some("env: \"A-B\" is not a variable name"),
        ),
        (
            with(r#"{"env": {"PATH": "/x"}}"#),
            Some("env: PATH is set by warden itself"),
        ),
        (
            with(r#"{"env": {"LANG": "C"}}"#),
            Some("env: LANG is set by warden itself"),
        ),
        (
            with(r#"{"env": {"HTTPS_PROXY": "http://x"}}"#),
            Some("env: HTTPS_PROXY is set by warden itself"),
        ),
        (
            with(r#"{"env": {"no_proxy": "*"}}"#),
            Some("env: no_proxy is set by warden itself"),
        ),
        (
            with(r#"{"env": {"Http_Proxy": "http://x"}}"#),
            Some("env: Http_Proxy is set by warden itself"),
        ),
        (
            with(r#"{"env": {"A": "x\u0000y"}}"#),
            Some("env.A: the value holds a NUL byte"),
        ),
        (
            with(r#"{"env": {"A": 1}}"#),
            Some("env: invalid type: integer"),
        ),
        // keys
        (with(r#"{"keys": ["A_KEY", "B"], "env": {"C": "1"}}"#), None),
        (
            with(r#"{"keys": ["A", "A"]}"#),
            Some("keys[1]: A is also keys[0]"),
        ),
        (
            with(r#"{"keys": ["OK", "a b"]}"#),
            Some("keys[1]: \"a b\" is not a variable name"),
        ),
        (
            with(r#"{"keys": ["HOME"]}"#),
            Some("keys[0]: HOME is set by warden itself"),
        ),
        (
            with(r#"{"keys": ["A"], "env": {"A": "1"}}"#),
            Some("keys[0]: A is also set in env"),
        ),
        (long_keys, Some("keys: 65 names, at most 64")),
    ]
}

pub(super) fn hosts_setup_and_workspace_cases() -> Vec<(String, Option<&'static str>)> {
    vec![
        // hosts
        (with(r#"{"hosts": []}"#), None),
        (
            with(r#"{"hosts": ["example.com", "*.example.org:8443"]}"#),
            None,
        ),
        (
            with(r#"{"hosts": ["exa mple.com"]}"#),
            Some("hosts: host entry \"exa mple.com\""),
        ),
        (
            with(r#"{"hosts": ["10.0.0.1"]}"#),
            Some("hosts: host entry \"10.0.0.1\""),
        ),
        (
            with(r#"{"hosts": "example.com"}"#),
            Some("hosts: invalid type"),
        ),
        (with(r#"{"runtime_hosts": ["api.example.com"]}"#), None),
        (
            with(r#"{"runtime_hosts": ["10.0.0.1"]}"#),
            Some("runtime_hosts: host entry \"10.0.0.1\""),
        ),
        // setup
        (with(r#"{"setup": null}"#), None),
        (with(r#"{"setup": 1}"#), Some("setup: invalid type")),
        (
            with(r#"{"setup": "a\tb"}"#),
            Some("setup: \"a\\tb\" holds a control character"),
        ),
        // workspace
        (with(r#"{"workspace": "/home/me/work"}"#), None),
        (
            with(r#"{"workspace": "work"}"#),
            Some("workspace: \"work\" is neither \"volume\" nor an absolute folder"),
        ),
        (
            with(r#"{"workspace": null}"#),
            Some("workspace: invalid type: null"),
        ),
        (
            with(r#"{"workspace": "/w:/etc"}"#),
            Some("workspace: \"/w:/etc\" holds ':' or ','"),
        ),
    ]
}

pub(super) fn network_cases() -> Vec<(String, Option<&'static str>)> {
    vec![
        // network, keep_id
        (with(r#"{"network": "none"}"#), None),
        (with(r#"{"network": "private"}"#), None),
        (with(r#"{"network": "host"}"#), None),
        (with(r#"{"network": "/run/netns/agents"}"#), None),
        (
            with(r#"{"network": "bridge"}"#),
            Some("network: \"bridge\" is none of"),
        ),
        (
            with(r#"{"network": "/run/netns/a,b"}"#),
            Some("network: \"/run/netns/a,b\" holds ':' or ','"),
        ),
        (
            with(r#"{"network": null}"#),
            Some("network: invalid type: null"),
        ),
        (with(r#"{"keep_id": true}"#), None),
        (
            with(r#"{"keep_id": "yes"}"#),
            Some("keep_id: \"yes\" is none of false"),
        ),
    ]
}

pub(super) fn firewall_dns_and_limits_cases() -> Vec<(String, Option<&'static str>)> {
    vec![
        // firewall, dns
        (with(r#"{"firewall": "best-effort"}"#), None),
        (with(r#"{"firewall": "required"}"#), None),
        (
            with(r#"{"firewall": "off"}"#),
            Some("firewall: \"off\" is for measuring warden"),
        ),
        (
            with(r#"{"firewall": "maybe"}"#),
            Some("firewall: unknown variant `maybe`"),
        ),
        (with(r#"{"dns": ["10.0.0.1", "fd00::1"]}"#), None),
        (
            with(r#"{"dns": ["ns.example"]}"#),
            Some("dns: invalid IP address syntax"),
        ),
        (
            with(r#"{"dns": ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]}"#),
            Some("dns: 4 servers, at most 3"),
        ),
        (
            with(r#"{"allow_addresses": ["10.1.0.0/16", "fd00::/8"]}"#),
            None,
        ),
        (with(r#"{"kind": "vm"}"#), None),
        (with(r#"{"kind": "container"}"#), None),
        (
            with(r#"{"kind": "pod"}"#),
            Some("kind: unknown variant `pod`"),
        ),
        (
            with(r#"{"allow_addresses": ["10.1.0.1/16"]}"#),
            Some("allow_addresses[0]: "),
        ),
        // limits
        (
            with(r#"{"limits": {"cpu_seconds": 60, "open_files": 16, "processes": null}}"#),
            None,
        ),
        (
            with(r#"{"limits": {"timeout": 1}}"#),
            Some("limits: unknown field `timeout`"),
        ),
        (
            with(r#"{"limits": {"timeout_ms": -1}}"#),
            Some("limits: invalid value: integer `-1`"),
        ),
        (
            with(r#"{"limits": {"timeout_ms": 0}}"#),
            Some("limits.timeout_ms: 0 is less than the least, 1"),
        ),
        (
            with(r#"{"limits": {"open_files": 15}}"#),
            Some("limits.open_files: 15 is less than the least, 16"),
        ),
        (
            with(r#"{"limits": null}"#),
            Some("limits: invalid type: null"),
        ),
    ]
}
