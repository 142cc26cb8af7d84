//! What a definition says about the agent that lives in the machine: its
//! main process (`command`, `restart`), the ports its server is reached on
//! (`ports`), what the image must hold (`requires`), who the owner is inside
//! (`keep_id`), and when an idle machine stops itself
//! (`idle_stop_minutes`). Pure checks, each naming the field it refuses;
//! `definition.rs` calls them.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

/// The most entries `requires` and `ports` may hold.
pub const MAX_REQUIRES: usize = 64;
pub const MAX_PORTS: usize = 32;

/// How far past `from` an automatic host port is looked for.
pub const AUTO_SPAN: u16 = 1000;

/// The homes of the image's users (machine/README.md): a lend may not land
/// in either, except the agent's folder below.
pub const RUNTIME_HOME: &str = "/home/runtime";
pub const SHELL_HOME: &str = "/home/shell";

/// The agent's folder: the one place in a user's home a lend may land.
pub const ROUTINES: &str = "/home/runtime/workspace/routines";

/// The machine's own size: what the engine (or QEMU) gives it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Size {
    pub cpus: Option<f64>,
    /// Bytes.
    pub memory: Option<u64>,
    pub pids: Option<u64>,
}

/// The size a laptop owner would pick when the definition says nothing:
/// two CPUs (or fewer, on a smaller host), 2 GiB, 4096 processes.
pub const DEFAULT_CPUS: f64 = 2.0;
pub const DEFAULT_MEMORY: u64 = 2 << 30;
pub const DEFAULT_PIDS: u64 = 4096;
/// The least memory a machine may be given.
pub const MIN_MEMORY: u64 = 64 << 20;

impl Size {
    /// The definition's size with the defaults filled in, for a host of
    /// `host_cpus` CPUs.
    pub fn resolved(self, host_cpus: usize) -> (f64, u64, u64) {
        (
            self.cpus
                .unwrap_or(DEFAULT_CPUS.min(host_cpus.max(1) as f64)),
            self.memory.unwrap_or(DEFAULT_MEMORY),
            self.pids.unwrap_or(DEFAULT_PIDS),
        )
    }
}

/// Pure: a memory size, `"512m"`, `"2g"`, `"1536M"`, `"1073741824"` (bytes)
/// or with `k`; at least `MIN_MEMORY`.
pub fn memory(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => text.split_at(at),
        None => (text, ""),
    };
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("{text:?}: a size such as \"512m\" or \"2g\"")),
    };
    let bytes = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("{text:?}: a size such as \"512m\" or \"2g\""))?;
    if bytes < MIN_MEMORY {
        return Err(format!("{text:?} is less than the least, 64m"));
    }
    Ok(bytes)
}

/// What the engine does when the machine's main process ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Restart {
    /// The machine ends with its main process (the default).
    #[default]
    No,
    /// Started again when it ended with a status other than 0.
    OnFailure,
    /// Started again whatever its status, until `warden machine stop`.
    Always,
}

impl Restart {
    /// The engine's `--restart` value.
    pub fn engine_value(self) -> &'static str {
        match self {
            Restart::No => "no",
            Restart::OnFailure => "on-failure",
            Restart::Always => "always",
        }
    }
}

/// Which of the machine's users the owner's host uid is (rootless podman's
/// keep-id), so that what that user writes in a lent folder is the owner's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum KeepId {
    /// No mapping: the machine's ids are its own (the default).
    #[default]
    Off,
    /// The owner is `shell`: files commands write are the owner's.
    Shell,
    /// The owner is `runtime`: files the agent writes (its routines) are
    /// the owner's.
    Runtime,
}

impl KeepId {
    /// `false`, `true` (shell, as before), `"shell"` or `"runtime"`.
    pub fn parse(value: &Value) -> Result<KeepId, String> {
        match value {
            Value::Null | Value::Bool(false) => Ok(KeepId::Off),
            Value::Bool(true) => Ok(KeepId::Shell),
            Value::String(s) if s == "shell" => Ok(KeepId::Shell),
            Value::String(s) if s == "runtime" => Ok(KeepId::Runtime),
            other => Err(format!(
                "{other} is none of false, \"shell\" or \"runtime\" (true means \"shell\")"
            )),
        }
    }

    pub fn is_on(self) -> bool {
        self != KeepId::Off
    }
}

/// Where a published port is reached on the host (always 127.0.0.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HostPort {
    /// This port, or `up` fails saying it is taken.
    Fixed(u16),
    /// The first free port from `from` on, chosen when the machine is made.
    Auto { from: u16 },
}

/// One of the runtime's server ports, published on the host's loopback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Port {
    /// The port the runtime listens on inside the machine.
    pub port: u16,
    pub host: HostPort,
}

/// `ports`: `[{"port": 3000, "host": 3100}]` or `{"port": 3000, "host":
/// "auto", "from": 3100}` (`from` defaults to `port`).
pub fn ports(value: Vec<Value>) -> Result<Vec<Port>, (String, String)> {
    if value.len() > MAX_PORTS {
        return Err((
            "ports".into(),
            format!("{} ports, at most {MAX_PORTS}", value.len()),
        ));
    }
    let mut out: Vec<Port> = Vec::new();
    for (i, entry) in value.into_iter().enumerate() {
        let field = format!("ports[{i}]");
        let invalid = |sub: &str, problem: String| (format!("{field}{sub}"), problem);
        let Value::Object(object) = entry else {
            return Err(invalid("", "must be an object with port and host".into()));
        };
        if let Some(unknown) = object
            .keys()
            .find(|k| !["port", "host", "from"].contains(&k.as_str()))
        {
            return Err(invalid(
                &format!(".{unknown}"),
                "unknown field (port, host, from)".into(),
            ));
        }
        let number = |name: &str, v: &Value| -> Result<u16, (String, String)> {
            v.as_u64()
                .filter(|n| (1..=65535).contains(n))
                .map(|n| n as u16)
                .ok_or_else(|| invalid(&format!(".{name}"), format!("{v} is not a port (1-65535)")))
        };
        let port = match object.get("port") {
            Some(v) => number("port", v)?,
            None => return Err(invalid(".port", "missing".into())),
        };
        let host = match (object.get("host"), object.get("from")) {
            (None, _) => return Err(invalid(".host", "missing: a port, or \"auto\"".into())),
            (Some(Value::String(s)), from) if s == "auto" => HostPort::Auto {
                from: from.map(|f| number("from", f)).transpose()?.unwrap_or(port),
            },
            (Some(_), Some(_)) => {
                return Err(invalid(".from", "only with \"host\": \"auto\"".into()))
            }
            (Some(v), None) => HostPort::Fixed(number("host", v)?),
        };
        if let Some(j) = out.iter().position(|p| p.port == port) {
            return Err(invalid(".port", format!("{port} is also ports[{j}].port")));
        }
        if let HostPort::Fixed(h) = host {
            if let Some(j) = out.iter().position(|p| p.host == HostPort::Fixed(h)) {
                return Err(invalid(".host", format!("{h} is also ports[{j}].host")));
            }
        }
        out.push(Port { port, host });
    }
    Ok(out)
}

/// `command`: the main process's argv, non-empty, no NUL byte.
pub fn command(argv: &[String]) -> Result<(), String> {
    match argv.first() {
        None => Err("empty: give the program and its arguments, or leave it out".into()),
        Some(first) if first.is_empty() => Err("the program's name is empty".into()),
        _ if argv.iter().any(|a| a.contains('\0')) => Err("an argument holds a NUL byte".into()),
        _ => Ok(()),
    }
}

/// `requires`: names of commands looked up on warden's PATH at `up`.
pub fn requires(names: &[String]) -> Result<(), (String, String)> {
    if names.len() > MAX_REQUIRES {
        let problem = format!("{} names, at most {MAX_REQUIRES}", names.len());
        return Err(("requires".into(), problem));
    }
    for (i, name) in names.iter().enumerate() {
        let plain = !name.is_empty()
            && name.len() <= 64
            && !name.starts_with(['-', '.'])
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c));
        if !plain {
            let problem = format!("{name:?} is not a command's name ([A-Za-z0-9._+-], no '/')");
            return Err((format!("requires[{i}]"), problem));
        }
    }
    Ok(())
}

/// Why a lend may not land at `at`, when it is in a user's home: the homes
/// are the machine's own, but for the agent's folder.
pub fn in_a_home(at: &Path) -> Option<&'static str> {
    if at == Path::new(ROUTINES) {
        return None;
    }
    [RUNTIME_HOME, SHELL_HOME]
        .into_iter()
        .find(|home| at.starts_with(home) || Path::new(home).starts_with(at))
}

/// The first free TCP port of 127.0.0.1 from `from` on (bounded), found by
/// binding it; None when the span is all taken.
pub fn free_port(from: u16, taken: &[u16]) -> Option<u16> {
    (from..=from.saturating_add(AUTO_SPAN))
        .filter(|p| !taken.contains(p))
        .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ports_table() {
        let cases: Vec<(Value, Result<Vec<Port>, &str>)> = vec![
            (json!([]), Ok(vec![])),
            (
                json!([{"port": 3000, "host": 3100}]),
                Ok(vec![Port {
                    port: 3000,
                    host: HostPort::Fixed(3100),
                }]),
            ),
            (
                json!([{"port": 3000, "host": "auto"}]),
                Ok(vec![Port {
                    port: 3000,
                    host: HostPort::Auto { from: 3000 },
                }]),
            ),
            (
                json!([{"port": 3000, "host": "auto", "from": 3100}]),
                Ok(vec![Port {
                    port: 3000,
                    host: HostPort::Auto { from: 3100 },
                }]),
            ),
            (json!([3000]), Err("ports[0]")),
            (json!([{"port": 0, "host": 1}]), Err("ports[0].port")),
            (json!([{"port": 70000, "host": 1}]), Err("ports[0].port")),
            (json!([{"port": 1}]), Err("ports[0].host")),
            (json!([{"host": 1}]), Err("ports[0].port")),
            (json!([{"port": 1, "host": "any"}]), Err("ports[0].host")),
            (
                json!([{"port": 1, "host": 2, "from": 3}]),
                Err("ports[0].from"),
            ),
            (
                json!([{"port": 1, "host": 2, "bind": "0.0.0.0"}]),
                Err("ports[0].bind"),
            ),
            (
                json!([{"port": 1, "host": 2}, {"port": 1, "host": 3}]),
                Err("ports[1].port"),
            ),
            (
                json!([{"port": 1, "host": 2}, {"port": 3, "host": 2}]),
                Err("ports[1].host"),
            ),
        ];
        for (value, want) in cases {
            let Value::Array(list) = value.clone() else {
                unreachable!()
            };
            match (ports(list), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{value}"),
                (Err((field, _)), Err(want)) => assert_eq!(field, want, "{value}"),
                (got, want) => panic!("{value}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn memory_table() {
        let cases = [
            ("512m", Ok(512 << 20)),
            ("2g", Ok(2 << 30)),
            ("1536M", Ok(1536 << 20)),
            ("2GiB", Ok(2 << 30)),
            ("1073741824", Ok(1 << 30)),
            ("65536k", Ok(64 << 20)),
            ("63m", Err(())),
            ("", Err(())),
            ("2t", Err(())),
            ("m", Err(())),
            ("-1g", Err(())),
            ("99999999999999999999g", Err(())),
        ];
        for (text, want) in cases {
            assert_eq!(memory(text).map_err(|_| ()), want, "{text}");
        }
        let size = Size::default();
        assert_eq!(size.resolved(1), (1.0, DEFAULT_MEMORY, DEFAULT_PIDS));
        assert_eq!(size.resolved(8), (2.0, DEFAULT_MEMORY, DEFAULT_PIDS));
    }

    #[test]
    fn keep_id_table() {
        let cases = [
            (json!(false), Some(KeepId::Off)),
            (json!(null), Some(KeepId::Off)),
            (json!(true), Some(KeepId::Shell)),
            (json!("shell"), Some(KeepId::Shell)),
            (json!("runtime"), Some(KeepId::Runtime)),
            (json!("root"), None),
            (json!(1), None),
        ];
        for (value, want) in cases {
            assert_eq!(KeepId::parse(&value).ok(), want, "{value}");
        }
    }

    #[test]
    fn requires_and_command_table() {
        let ok = |v: &[&str]| requires(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(ok(&["python3", "git", "g++", "node.js"]).is_ok());
        assert_eq!(ok(&["python3", "/bin/sh"]).unwrap_err().0, "requires[1]");
        assert_eq!(ok(&["-x"]).unwrap_err().0, "requires[0]");
        assert_eq!(ok(&[""]).unwrap_err().0, "requires[0]");
        assert_eq!(ok(&["a b"]).unwrap_err().0, "requires[0]");
        let argv = |v: &[&str]| command(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(argv(&["node", "server.js"]).is_ok());
        assert!(argv(&[]).is_err());
        assert!(argv(&[""]).is_err());
        assert!(argv(&["a", "b\0"]).is_err());
    }

    #[test]
    fn homes_table() {
        let cases = [
            ("/home/me/project", None),
            ("/home/runtime/workspace/routines", None),
            ("/home/runtime", Some(RUNTIME_HOME)),
            ("/home/runtime/workspace", Some(RUNTIME_HOME)),
            ("/home/runtime/workspace/routines/x", Some(RUNTIME_HOME)),
            ("/home/runtime/data", Some(RUNTIME_HOME)),
            ("/home/shell/x", Some(SHELL_HOME)),
            ("/home/shellfish", None),
            ("/home", Some(RUNTIME_HOME)),
        ];
        for (at, want) in cases {
            assert_eq!(in_a_home(Path::new(at)), want, "{at}");
        }
    }

    #[test]
    fn a_free_port_is_found_past_a_taken_one() {
        let held = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = held.local_addr().unwrap().port();
        let found = free_port(port, &[]).unwrap();
        assert_ne!(found, port);
        assert!(found > port);
        let skipped = free_port(found, &[found]).unwrap();
        assert_ne!(skipped, found);
    }
}
