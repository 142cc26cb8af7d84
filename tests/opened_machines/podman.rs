//! Rootful podman, on the internet's namespace, its image this build's
//! warden over the base one: the credential reaches the origin, and the
//! value is nowhere else, before and after a stop and a start.

use super::{
    assert_credential_arrived, assert_masked_echo, assert_no_secret,
    assert_status_shows_the_opened_host, merged, on_the_internet, opened, owners_files,
    RUNTIME_KEY, SECRET,
};
use crate::common::internet::Internet;
use crate::common::machine::{ready, sh_in, show, this_wardens_image, warden, TestMachine};
use crate::common::text;
use serde_json::json;
use std::process::Output;
use std::time::Instant;

/// The secret as a grep pattern that does not hold it (its last
/// character in brackets): no command line or log holds the value.
fn pattern() -> String {
    let (head, last) = SECRET.split_at(SECRET.len() - 1);
    format!("{head}[{last}]")
}

/// Rootful podman, on the internet's namespace: the credential from the
/// owner's `.env` reaches the origin on shell's plain curl (no CA flag:
/// the machine's bundle trusts its proxy's authority), the echo comes
/// back masked in every form, and the value is in no file of the
/// machine's (its volumes too), no process's environment, not in its
/// logs, its audit log or its status; the runtime's `.env` holds its own
/// key only.
#[test]
fn a_podman_machine_adds_the_owners_credential_and_holds_it_nowhere_else() {
    let test = "a_podman_machine_adds_the_owners_credential_and_holds_it_nowhere_else";
    if !ready(test) {
        return;
    }
    let started = Instant::now();
    let net = Internet::start();
    let fx = TestMachine::new("opened");
    let image = this_wardens_image(&fx, "opened");
    let ca = owners_files(fx.dir.path(), &net);
    fx.define(merged(
        merged(json!({"image": image.0}), opened(&ca)),
        on_the_internet(&net),
    ));
    eprintln!(
        "internet and image: {:.2} s",
        started.elapsed().as_secs_f64()
    );

    let out = fx.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(said.contains("credentials handed to warden: 1"), "{said}");
    assert_no_secret("up", &said);

    let audit = || warden(&["machine", "audit", &fx.id]);
    the_credential_is_added_and_its_echo_masked(&fx, &net, &audit);
    the_runtimes_env_holds_its_own_key_only(&fx);
    nothing_the_machines_root_reads_holds_it(&fx);
    no_process_environment_holds_it();
    the_logs_the_audit_log_and_status_hold_it_not(&fx);
    a_start_hands_it_again_from_the_owners_env(&fx, &audit);
    eprintln!("{test}: {:.2} s", started.elapsed().as_secs_f64());
}

/// shell's curl, no flag of its own: through the proxy, which adds the
/// credential and masks its echo (the body and X-Echo- headers).
fn the_credential_is_added_and_its_echo_masked(
    fx: &TestMachine,
    net: &Internet,
    audit: &dyn Fn() -> Output,
) {
    let timed = Instant::now();
    let out = fx.exec(&[
        "curl",
        "-sS",
        "--max-time",
        "20",
        "-D",
        "-",
        "https://allowed.test/echo",
    ]);
    eprintln!("curl: {:.2} s", timed.elapsed().as_secs_f64());
    assert_masked_echo("curl", &out, audit);
    assert!(
        text(&out.stdout).contains("X-Echo-Authorization: Bearer ****"),
        "{}",
        show("curl", &out)
    );
    // Its base64 and URL forms, as the origin sends them back.
    let out = fx.exec(&[
        "curl",
        "-sS",
        "--max-time",
        "20",
        "https://allowed.test/echo?b64=1&url=1",
    ]);
    assert_masked_echo("curl b64 url", &out, audit);
    assert!(
        text(&out.stdout).contains("\nb64=*"),
        "{}",
        show("curl b64", &out)
    );
    assert_credential_arrived(net, "/echo", 2);
}

/// The runtime's .env: its own key, not the credential.
fn the_runtimes_env_holds_its_own_key_only(fx: &TestMachine) {
    let out = sh_in(fx, "0", "cat /home/runtime/.env");
    let dotenv = text(&out.stdout);
    assert!(out.status.success(), "{}", show("cat .env", &out));
    assert_eq!(dotenv, format!("API_TOKEN={RUNTIME_KEY}\n"));
    assert!(!dotenv.contains("TEST_TOKEN"), "{dotenv}");
}

/// Every file of the machine (its volumes, lends and the published
/// bundle too; not /proc and /sys), as the machine's root: a control
/// written in the runtime's volume shows the search reaches them.
fn nothing_the_machines_root_reads_holds_it(fx: &TestMachine) {
    let timed = Instant::now();
    let script = format!(
        "echo control-mark-5 > /home/runtime/data/opened-control; \
         set --; for d in /*; do case $d in /proc|/sys) ;; *) set -- \"$@\" \"$d\" ;; esac; done; \
         timeout 300 grep -rl -a -D skip -e '{}' -e 'control-mark-[5]' \"$@\" 2>/dev/null; \
         for f in /proc/[0-9]*/environ; do \
           tr '\\0' '\\n' < $f 2>/dev/null | grep -q -e '{}' && echo \"environ $f\"; \
         done; \
         echo \"environs with PATH: $(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c '^PATH=')\"",
        pattern(),
        pattern()
    );
    let out = sh_in(fx, "0", &script);
    eprintln!(
        "search as the machine's root: {:.2} s",
        timed.elapsed().as_secs_f64()
    );
    let found = text(&out.stdout);
    let lines: Vec<&str> = found.lines().collect();
    assert!(
        lines.contains(&"/home/runtime/data/opened-control"),
        "{}",
        show("search", &out)
    );
    let counted = lines
        .iter()
        .find_map(|l| l.strip_prefix("environs with PATH: "))
        .and_then(|n| n.trim().parse::<u32>().ok())
        .unwrap_or(0);
    assert!(
        counted > 0,
        "no environment was read: {}",
        show("search", &out)
    );
    let holding: Vec<&&str> = lines
        .iter()
        .filter(|l| {
            !l.starts_with("environs with PATH") && **l != "/home/runtime/data/opened-control"
        })
        .collect();
    assert!(holding.is_empty(), "the secret is in: {holding:?}");
}

/// Every process's environment, read as the host's root (the machine's
/// own root cannot read warden's: it is not dumpable).
fn no_process_environment_holds_it() {
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            &format!(
                "grep -l -a -e '{}' /proc/[0-9]*/environ 2>/dev/null; true",
                pattern()
            ),
        ])
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout).trim(),
        "",
        "environments holding the secret"
    );
}

/// The machine's output, its audit log (read through warden and the
/// copy it verified) and its status.
fn the_logs_the_audit_log_and_status_hold_it_not(fx: &TestMachine) {
    let out = warden(&["machine", "logs", &fx.id]);
    assert!(out.status.success(), "{}", show("logs", &out));
    let logs = text(&out.stdout) + &text(&out.stderr);
    assert!(!logs.trim().is_empty(), "no logs");
    assert_no_secret("logs", &logs);
    let out = warden(&["machine", "audit", &fx.id]);
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{}", show("audit", &out));
    assert!(said.contains("chain intact"), "{said}");
    assert_no_secret("audit", &said);
    let copy = warden::host::machine::state_dir(&fx.id).join("audit-copy/warden.jsonl");
    let log = std::fs::read_to_string(&copy).unwrap();
    assert_no_secret("the audit log", &log);
    assert!(log.contains("\"credentials_handed\""), "{log}");
    assert!(
        log.lines().any(|l| l.contains("\"egress\"")
            && l.contains("\"credential\":\"TEST_TOKEN for allowed.test\"")),
        "{log}"
    );
    assert_status_shows_the_opened_host(&warden, &fx.id, 2);
}

/// Stopped, then started by `exec --start`: warden held the values in
/// its memory alone, and the start hands them again from the owner's
/// `.env`, never from a file of the machine's.
fn a_start_hands_it_again_from_the_owners_env(fx: &TestMachine, audit: &dyn Fn() -> Output) {
    let out = warden(&["machine", "stop", &fx.id]);
    assert!(out.status.success(), "{}", show("stop", &out));
    let out = warden(&[
        "machine",
        "exec",
        &fx.id,
        "--start",
        "--",
        "curl",
        "-sS",
        "--max-time",
        "20",
        "https://allowed.test/echo",
    ]);
    assert_masked_echo("curl after a start", &out, audit);
}
