//! `warden machine ps`'s rows: this owner's machines as the engine's one
//! listing (`podman ps -a --format json`, Docker's `{{json .}}` lines) and
//! the VMs' folders give them, with the idle time each running machine's
//! warden says; printed as a table for people or as JSON. The parsers and
//! the printing are pure.

use serde::Serialize;
use serde_json::Value;

/// One machine, as `ps` shows it (and `ps --json` gives it, field for
/// field).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    /// The machine's id, which the other commands take.
    pub id: String,
    /// The engine's name of it (`warden-<id>`).
    pub name: String,
    /// "container" or "vm".
    pub kind: &'static str,
    /// "podman" or "docker" (a container's), "qemu" (a VM's).
    pub engine: &'static str,
    /// The uid of the owner: a container's `warden.owner` label, the
    /// owner of a VM's folder; None when the label is missing or no uid.
    pub owner: Option<u32>,
    /// The image the machine was made from.
    pub image: String,
    /// The engine's word (running, exited, created, paused...); a VM's
    /// running or stopped.
    pub state: String,
    /// The engine's words for people ("Up 3 minutes").
    pub status: String,
    pub running: bool,
    /// Each published port, `3000/tcp -> 127.0.0.1:3100`; none while
    /// stopped.
    pub ports: Vec<String>,
    /// Milliseconds since the machine's last request or command's end
    /// (0 while a command runs); None when it is stopped or its warden
    /// did not say.
    pub idle_ms: Option<u64>,
}

/// The format Docker's `ps` is asked for: the container as JSON, and the
/// two labels read apart, since Docker gives `.Labels` as one `k=v,k=v`
/// string that a comma in another label's value would confuse.
pub const DOCKER_FORMAT: &str = r#"{"row":{{json .}},"machine":{{json (.Label "warden.machine")}},"owner":{{json (.Label "warden.owner")}}}"#;

/// Why an engine's listing could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ListingError {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("not a JSON array")]
    NotAnArray,
    #[error("{source}: {line}")]
    Line {
        line: String,
        source: serde_json::Error,
    },
}

/// Pure: the rows of podman's `ps -a --format json` (one array).
pub fn podman_rows(out: &str) -> Result<Vec<Row>, ListingError> {
    let listing: Value = match out.trim() {
        "" => return Ok(Vec::new()),
        text => serde_json::from_str(text)?,
    };
    let Value::Array(containers) = listing else {
        return Err(ListingError::NotAnArray);
    };
    Ok(containers
        .iter()
        .filter_map(|c| {
            let labels = &c["Labels"];
            let row = container_row(
                "podman",
                c,
                labels["warden.machine"].as_str(),
                labels["warden.owner"].as_str(),
            )?;
            let ports = match row.running {
                true => podman_ports(&c["Ports"]),
                false => Vec::new(),
            };
            Some(Row { ports, ..row })
        })
        .collect())
}

/// Pure: the rows of Docker's `ps -a --format DOCKER_FORMAT` (a JSON
/// object a line).
pub fn docker_rows(out: &str) -> Result<Vec<Row>, ListingError> {
    let mut rows = Vec::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).map_err(|source| ListingError::Line {
            line: line.to_string(),
            source,
        })?;
        let c = &v["row"];
        let Some(row) = container_row("docker", c, v["machine"].as_str(), v["owner"].as_str())
        else {
            continue;
        };
        let ports = match row.running {
            true => docker_ports(c["Ports"].as_str().unwrap_or("")),
            false => Vec::new(),
        };
        rows.push(Row { ports, ..row });
    }
    Ok(rows)
}

/// What both engines' listings share; None for a container without the
/// machine label (not one `up` made).
fn container_row(
    engine: &'static str,
    c: &Value,
    machine: Option<&str>,
    owner: Option<&str>,
) -> Option<Row> {
    let id = machine.filter(|m| !m.is_empty())?.to_string();
    // podman lists names as an array, Docker as a `a,b` string.
    let name = match &c["Names"] {
        Value::Array(names) => names.first().and_then(Value::as_str).unwrap_or(""),
        Value::String(names) => names.split(',').next().unwrap_or(""),
        _ => "",
    };
    let text = |key: &str| c[key].as_str().unwrap_or("").to_string();
    let state = text("State").to_lowercase();
    let status = match text("Status") {
        words if words.is_empty() => state.clone(),
        words => words,
    };
    Some(Row {
        id,
        name: name.to_string(),
        kind: "container",
        engine,
        owner: owner.and_then(|o| o.parse().ok()),
        image: text("Image"),
        running: state == "running",
        state,
        status,
        ports: Vec::new(),
        idle_ms: None,
    })
}

/// Pure: podman's `Ports` (`[{host_ip, container_port, host_port, range,
/// protocol}]`, null when none) as `podman port` says them, a range
/// spelled out port by port.
fn podman_ports(ports: &Value) -> Vec<String> {
    let Some(ports) = ports.as_array() else {
        return Vec::new();
    };
    let mut said = Vec::new();
    for p in ports {
        let number = |key: &str| p[key].as_u64().unwrap_or(0);
        let (guest, host) = (number("container_port"), number("host_port"));
        if host == 0 {
            continue;
        }
        let ip = match p["host_ip"].as_str().unwrap_or("") {
            "" => "0.0.0.0",
            ip => ip,
        };
        let protocol = p["protocol"].as_str().unwrap_or("tcp");
        for i in 0..number("range").max(1) {
            said.push(format!("{}/{protocol} -> {ip}:{}", guest + i, host + i));
        }
    }
    said
}

/// Pure: Docker's `Ports` (`127.0.0.1:3100->3000/tcp, 3001/tcp`) as
/// `podman port` says them; a port exposed but not published is left out.
fn docker_ports(ports: &str) -> Vec<String> {
    ports
        .split(", ")
        .filter_map(|p| {
            let (host, guest) = p.trim().split_once("->")?;
            Some(format!("{guest} -> {host}"))
        })
        .collect()
}

/// Pure: the idle time for people: `-` when stopped, `?` when its warden
/// did not say, else `42s`, `5m07s`, `3h04m`, `2d05h`.
pub fn idle_text(row: &Row) -> String {
    let ms = match (row.running, row.idle_ms) {
        (false, _) => return "-".into(),
        (true, None) => return "?".into(),
        (true, Some(ms)) => ms,
    };
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// The table's columns, in order.
const HEADER: [&str; 8] = [
    "MACHINE", "KIND", "ENGINE", "OWNER", "STATE", "IDLE", "IMAGE", "PORTS",
];

/// Pure: the rows as a table with a header, columns aligned (the last,
/// the ports, runs to the end of the line).
pub fn table(rows: &[Row]) -> String {
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            [
                r.id.clone(),
                r.kind.to_string(),
                r.engine.to_string(),
                r.owner.map_or("-".into(), |o| o.to_string()),
                r.state.clone(),
                idle_text(r),
                r.image.clone(),
                match r.ports.join(", ") {
                    p if p.is_empty() => "-".into(),
                    p => p,
                },
            ]
        })
        .collect();
    let header = HEADER.map(String::from);
    let mut widths = [0usize; 8];
    for line in std::iter::once(&header).chain(&cells) {
        for (w, cell) in widths.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    for line in std::iter::once(&header).chain(&cells) {
        let mut out = String::new();
        for (i, cell) in line.iter().enumerate() {
            match i + 1 == line.len() {
                true => out.push_str(cell),
                false => out.push_str(&format!("{cell:<w$}  ", w = widths[i])),
            }
        }
        text.push_str(out.trim_end());
        text.push('\n');
    }
    text
}

/// Pure: the idle time from a machine's status: 0 while a command runs
/// (it is in use), else the time since its last request or command's
/// end; None from a warden too old to say (protocol before version 4).
pub fn idle_of(status: &crate::wire::Status) -> Option<u64> {
    let activity = status.activity.as_ref()?;
    match status.running.is_empty() {
        true => Some(activity.idle_ms),
        false => Some(0),
    }
}

#[cfg(test)]
#[path = "ps_tests.rs"]
mod tests;
