//! `warden status` for people: every layer, the machine's figures and
//! its proxy, one line each.

use warden::wire::Status;

pub fn describe(s: &Status) -> String {
    // One section after another, in the order people read them.
    let mut out = describe_identity(s);
    out += &describe_main(s);
    if let Some(ready) = &s.ready {
        out += &describe_ready(ready);
    }
    out += &describe_commands(s);
    out += &describe_defences(s);
    if let Some(p) = &s.proxy {
        out += &describe_proxy(p);
    }
    out += &format!("audit log: {}\n", s.audit_log);
    out
}

/// Which warden, how long up, its users and its layout's paths.
fn describe_identity(s: &Status) -> String {
    let mut out = format!(
        "warden {} (protocol {}), {}, up {:.1} s, booted in {:.1} ms\n",
        s.version,
        s.protocol,
        if s.pid1 {
            "PID 1"
        } else {
            "subreaper (not PID 1)"
        },
        s.uptime_ms as f64 / 1000.0,
        s.boot_ms
    );
    for u in &s.users {
        out += &format!(
            "user {:<8} uid {} gid {} groups {:?} home {}\n",
            u.name, u.uid, u.gid, u.groups, u.home
        );
    }
    for p in &s.layout {
        let mark = if p.ok { "ok  " } else { "BAD " };
        out += &format!("{mark} {:<40} {}", p.path, p.found);
        if !p.ok {
            out += &format!(" (expected {})", p.expected);
        }
        out += "\n";
    }
    out
}

/// The main process and the machine's activity.
fn describe_main(s: &Status) -> String {
    let mut out = String::new();
    match &s.main {
        Some(m) => out += &format!("main process: pid {} {:?}\n", m.pid, m.argv),
        None => out += "main process: none\n",
    }
    if let Some(a) = &s.activity {
        out += &format!("last activity: {:.1} s ago", a.idle_ms as f64 / 1000.0);
        if let Some(until) = a.held_until_ms {
            out += &format!(", held by the runtime until {until} (Unix ms)");
        }
        out += &match a.idle_stop_s {
            Some(limit) => format!(", stops itself after {limit} s idle\n"),
            None => ", no idle stop\n".to_string(),
        };
    }
    out
}

/// The commands started and running, and the shell user's processes.
fn describe_commands(s: &Status) -> String {
    let mut out = format!(
        "commands: {} started, {} running\n",
        s.commands_started,
        s.running.len()
    );
    for r in &s.running {
        out += &format!(
            "  #{} pid {} {:?} in {} ({} ms)\n",
            r.command,
            r.pid,
            r.argv,
            r.folder.as_deref().unwrap_or("~shell"),
            r.running_ms
        );
    }
    let listed: Vec<String> = s
        .shell_processes
        .iter()
        .flatten()
        .map(|p| format!("{} {}", p.pid, p.name))
        .collect();
    out += &format!(
        "shell's processes: {}{}{}
",
        s.shell_process_count.unwrap_or(listed.len()),
        if listed.is_empty() { "" } else { ": " },
        listed.join(", ")
    );
    out
}

/// The gate, every layer, and what warden refuses or fails at.
fn describe_defences(s: &Status) -> String {
    let mut out = String::new();
    if let Some(gate) = &s.gate {
        out += &match &gate.reason {
            Some(reason) => format!("gate: CLOSED by the runtime: {reason}\n"),
            None => "gate: open\n".to_string(),
        };
    }
    for l in &s.layers {
        let mark = if l.holds { "holds" } else { "DOES NOT HOLD" };
        let need = if l.required {
            "required"
        } else {
            "best effort"
        };
        out += &format!("layer {:<13} {mark} ({need}): {}\n", l.layer, l.detail);
    }
    if let Some(reason) = &s.refusing {
        out += &format!("REFUSING COMMANDS: {reason}\n");
    }
    if let Some(why) = &s.audit_failing {
        out += &format!("AUDIT LOG FAILING: {why}\n");
    }
    out
}

pub fn describe_proxy(p: &warden::wire::ProxyState) -> String {
    let mut out = format!(
        "proxy on {}: {} carried, {} refused; hosts ({}): {}\n",
        p.listening.join(" "),
        p.carried,
        p.refused,
        p.hosts_from,
        p.hosts.join(" ")
    );
    if !p.allow_addresses.is_empty() {
        out += &format!("proxy may also reach: {}\n", p.allow_addresses.join(" "));
    }
    if let Some(opened) = p.opened.as_deref().filter(|o| !o.hosts.is_empty()) {
        out += &describe_opened(opened);
    }
    out
}

/// The hosts the proxy opens: its authority, where tools trust it, and
/// each credential's use (never a value).
fn describe_opened(o: &warden::wire::OpenedState) -> String {
    let trust = match &o.trust {
        Ok(bundle) => match &o.trust_beside {
            None => format!("trusted through {bundle}"),
            Some(why) => format!(
                "trusted through {bundle}, by the tools that read SSL_CERT_FILE and the like only ({why})"
            ),
        },
        Err(why) => format!("NOT trusted by the machine's tools: {why}"),
    };
    let mut out = format!(
        "opened hosts: {}; the machine's authority {} ({trust})\n",
        o.hosts.join(" "),
        o.ca_sha256
    );
    if let Some(spend) = &o.spend {
        let usd = |micro: u64| format!("${:.6}", micro as f64 / 1e6);
        out += &format!(
            "spend today outside runs: {} of {}\n",
            usd(spend.day_spent_micro_usd),
            usd(spend.day_budget_micro_usd)
        );
        for r in &spend.runs {
            out += &format!(
                "run {}: {} of {} in {} requests\n",
                r.run,
                usd(r.spent_micro_usd),
                usd(r.budget_micro_usd),
                r.requests
            );
        }
    }
    for c in &o.credentials {
        let handed = match c.handed {
            true => "",
            false => ", NOT handed over",
        };
        out += &format!(
            "credential {} for {} ({}, for {}): {} requests{handed}\n",
            c.key,
            c.host,
            c.header,
            c.holders.join(" and "),
            c.requests
        );
    }
    out
}

/// The machine's readiness, one line.
fn describe_ready(r: &warden::wire::ReadyState) -> String {
    match (&r.wanted, r.after_ms, &r.by) {
        (None, None, _) => {
            "ready: once warden answers (the definition waits for nothing more)\n".into()
        }
        (_, Some(ms), by) => {
            let how = match by.as_deref() {
                Some(port) if port.starts_with("port") => {
                    format!("its {port} accepted a connection")
                }
                _ => "the runtime said so".to_string(),
            };
            format!("ready: since {ms} ms after warden started ({how})\n")
        }
        (Some(wanted), None, _) => format!("ready: not yet (waiting for the {wanted})\n"),
    }
}
