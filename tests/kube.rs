//! `warden machine kube` for real: the Pod it prints runs under rootful
//! `podman kube play` with the baseline Pod Security Standard's
//! capabilities only. warden boots as PID 1, says in `status` what holds
//! and what cannot (the firewall and shell's own namespaces, without
//! NET_ADMIN and SYS_ADMIN), runs commands as shell, gives the runtime its
//! keys and never shell, and `podman kube down` keeps the claims, which a
//! second play finds again. The owner's way in, the TCP door on the pod's
//! loopback, is reached as `kubectl port-forward` reaches it: from inside
//! the pod's network namespace (here `nsenter -t PID -n`, PID the
//! machine's warden), with the machine's key from the printed Secret.
//! Through that door the attack suite (`tests/common/attacks.rs`) runs in
//! the pod as in every other machine, and fails; the firewall layer,
//! held by warden's connect gate, refuses a direct connection at once.

mod common;

use common::attacks::{
    assert_blocked, assert_no_secret, programs, shell_lines, Targets, DATA_CANARY, ENV_CANARY,
    ROUTINE_CANARY,
};
use common::kube::{has_catatonit, Played, DOOR};
use common::machine::{podman, ready, show};
use common::{text, warden_bin};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const CANARY: &str = "canary-kube-7f3a";

/// The attack program, as shell runs it in the pod.
const ATTACK: &str = "/tmp/warden-attack/attack";

/// The layer named `name` of a status.
fn layer<'a>(status: &'a Value, name: &str) -> &'a Value {
    let layers = status["layers"].as_array().unwrap();
    layers
        .iter()
        .find(|l| l["layer"] == name)
        .unwrap_or_else(|| panic!("no layer {name}"))
}

/// The manifests of a machine whose key API_TOKEN is `token`.
fn manifests(fx: &Played, token: &str) -> Vec<Value> {
    let dir = fx.dir.path();
    let def = serde_json::json!({
        "id": fx.id,
        "image": fx.image,
        "keys": ["API_TOKEN"],
        "command": ["sleep", "infinity"],
    });
    std::fs::write(dir.join("def.json"), def.to_string()).unwrap();
    std::fs::write(
        dir.join(".env"),
        format!("API_TOKEN={token}\nOTHER=not-named\n"),
    )
    .unwrap();
    let out = Command::new(warden_bin())
        .args(["machine", "kube"])
        .arg(dir.join("def.json"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show("machine kube", &out));
    let yaml = text(&out.stdout);
    std::fs::write(dir.join("manifests.yaml"), &yaml).unwrap();
    yaml.split("\n---\n")
        .skip(1)
        .map(|doc| serde_json::from_str(doc).unwrap())
        .collect()
}

#[test]
fn a_pod_runs_under_baseline_with_its_keys_and_keeps_its_data() {
    let test = "a_pod_runs_under_baseline_with_its_keys_and_keeps_its_data";
    if !ready(test) || !has_catatonit(test) {
        return;
    }
    let fx = Played::new("kube");
    fx.build_image();
    let docs = manifests(&fx, CANARY);
    let status = fx.up(&docs, "first.yaml");

    what_holds_without_net_admin_and_sys_admin(&status);

    commands_run_as_shell_and_the_keys_are_the_runtimes_alone(&fx);

    // The owner's way in: the TCP door, with the key; refused without it.
    the_owner_comes_in_through_the_door(&fx, &docs);

    what_is_written_stays_in_the_claims(&fx, docs);
}

/// What holds without NET_ADMIN and SYS_ADMIN, as status says it.
fn what_holds_without_net_admin_and_sys_admin(status: &Value) {
    for name in [
        "identity",
        "capabilities",
        "no_new_privs",
        "landlock",
        "seccomp",
        "rlimits",
        "lifetime",
    ] {
        let l = layer(status, name);
        assert!(l["required"] == true && l["holds"] == true, "{l}");
    }
    let l = layer(status, "shell_space");
    assert!(l["required"] == false && l["holds"] == false, "{l}");
    assert!(
        l["detail"].as_str().unwrap().contains("CAP_SYS_ADMIN"),
        "{l}"
    );
    // Without NET_ADMIN, nftables cannot hold: warden's connect gate holds
    // the (required) layer in its place, and says why.
    let l = layer(status, "firewall");
    assert!(l["required"] == true && l["holds"] == true, "{l}");
    let detail = l["detail"].as_str().unwrap();
    assert!(detail.contains("held by warden's connect gate"), "{l}");
    assert!(detail.contains("CAP_NET_ADMIN"), "{l}");
    assert!(
        status.get("refusing").is_none_or(Value::is_null),
        "{status}"
    );
}

/// Commands run as shell, and the keys are the runtime's alone.
fn commands_run_as_shell_and_the_keys_are_the_runtimes_alone(fx: &Played) {
    let out = fx.run("id -un");
    assert_eq!(text(&out.stdout).trim(), "shell", "{}", show("id", &out));
    let out = fx.exec(&["cat", "/home/runtime/.env"]);
    assert_eq!(
        text(&out.stdout),
        format!("API_TOKEN={CANARY}\n"),
        "{}",
        show(".env", &out)
    );
    let out = fx.exec_as(
        "2000",
        &[
            "sh",
            "-c",
            "tr '\\0' '\\n' < /proc/$(pgrep -x sleep)/environ",
        ],
    );
    assert!(
        text(&out.stdout).contains(CANARY),
        "{}",
        show("main's environ", &out)
    );
    let out = fx.run(
        "env; cat /home/runtime/.env /root/warden/runtime/runtime.env /root/warden/machine/key; \
         ls /root/warden; cat /proc/1/environ",
    );
    let seen = text(&out.stdout) + &text(&out.stderr);
    assert!(
        !seen.contains(CANARY) && !seen.contains("API_TOKEN"),
        "{seen}"
    );
    assert!(seen.contains("Permission denied"), "{seen}");
}

/// What is written stays in the claims across `kube down`.
fn what_is_written_stays_in_the_claims(fx: &Played, docs: Vec<Value>) {
    let out = fx.run_in("kept", "echo kept-by-shell > marker");
    assert!(out.status.success(), "{}", show("write", &out));
    let out = fx.exec_as(
        "2000",
        &[
            "sh",
            "-c",
            "echo kept-by-runtime > /home/runtime/data/marker",
        ],
    );
    assert!(out.status.success(), "{}", show("write data", &out));
    fx.down();
    for claim in ["-data", "-work"] {
        assert!(
            fx.volume_exists(&format!("{}{claim}", fx.pod())),
            "{claim} kept"
        );
    }
    // The claims exist, as a cluster keeps them: podman 4.3 refuses to
    // make an existing volume again, so they are not played twice.
    let again: Vec<Value> = docs
        .into_iter()
        .filter(|d| d["kind"] != "PersistentVolumeClaim")
        .collect();
    let status = fx.up(&again, "second.yaml");
    assert_eq!(layer(&status, "landlock")["holds"], true);
    let out = fx.run_in("kept", "cat marker");
    assert_eq!(
        text(&out.stdout),
        "kept-by-shell\n",
        "{}",
        show("marker", &out)
    );
    let out = fx.exec(&["cat", "/home/runtime/data/marker"]);
    assert_eq!(
        text(&out.stdout),
        "kept-by-runtime\n",
        "{}",
        show("data", &out)
    );
}

/// `warden machine exec/status/audit --connect 127.0.0.1:7000 --key-file
/// K`, as after `kubectl port-forward pod/NAME 7000:7000`: a command runs
/// as shell, status and the log come back and the log verifies; a wrong
/// key is refused, and audited as the door's.
fn the_owner_comes_in_through_the_door(fx: &Played, docs: &[Value]) {
    let key = fx.key_file(docs, "owner.key");
    let key = key.to_str().unwrap();
    let out = fx.through_door(&[
        "machine",
        "exec",
        "--connect",
        DOOR,
        "--key-file",
        key,
        "--",
        "id",
        "-un",
    ]);
    assert_eq!(text(&out.stdout).trim(), "shell", "{}", show("exec", &out));
    let out = fx.through_door(&[
        "machine",
        "status",
        "--connect",
        DOOR,
        "--key-file",
        key,
        "--json",
    ]);
    assert!(out.status.success(), "{}", show("status", &out));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(layer(&status, "landlock")["holds"], true);
    let out = fx.through_door(&["machine", "audit", "--connect", DOOR, "--key-file", key]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{}", show("audit", &out));
    assert!(
        said.contains("read through the machine's warden: lines 1 to"),
        "{said}"
    );
    assert!(said.contains("chain intact"), "{said}");
    // A wrong key, and none: refused.
    let wrong = fx.dir.path().join("wrong.key");
    std::fs::write(&wrong, "0".repeat(64)).unwrap();
    let out = fx.through_door(&[
        "machine",
        "exec",
        "--connect",
        DOOR,
        "--key-file",
        &wrong.to_string_lossy(),
        "--",
        "id",
    ]);
    assert!(!out.status.success(), "{}", show("wrong key", &out));
    assert!(
        text(&out.stderr).contains("wrong key"),
        "{}",
        show("wrong key", &out)
    );
    let out = fx.through_door(&["machine", "exec", "--connect", DOOR, "--", "id"]);
    assert!(!out.status.success(), "{}", show("no key", &out));
    assert!(
        text(&out.stderr).contains("needs the machine's key"),
        "{}",
        show("no key", &out)
    );
    let out = fx.exec(&["cat", "/home/runtime/data/audit/warden.jsonl"]);
    let log = text(&out.stdout);
    let refused = log
        .lines()
        .filter(|l| l.contains("\"kind\":\"connection_refused\"") && l.contains("\"via\":\"tcp\""))
        .count();
    assert_eq!(refused, 1, "{log}");
}

/// The attack suite (`tests/common/attacks.rs`, the same attempts as in
/// namespaces and in the launcher's machines) in the Pod under baseline:
/// every attempt runs as shell through the owner's way in, the TCP door
/// with the machine's key, and each fails without a canary leaking. Then
/// the firewall layer, held by warden's connect gate without NET_ADMIN:
/// a direct connection to an address outside is refused at once (EACCES,
/// not a timeout), and the log read through the door says so.
#[test]
fn the_attack_suite_fails_in_a_pod_under_baseline() {
    let test = "the_attack_suite_fails_in_a_pod_under_baseline";
    if !ready(test) || !has_catatonit(test) {
        return;
    }
    let fx = Played::new("kattack");
    fx.build_image();
    // The ENV canary is the runtime's key, from the pod's Secret.
    let docs = manifests(&fx, ENV_CANARY);
    fx.up(&docs, "attacked.yaml");
    let key = fx.key_file(&docs, "owner.key");
    plant_the_canaries(&fx);
    let _bin_dir = hand_the_attack_program_to_shell(&fx);
    let (status, main) = what_warden_says_holds(&fx, &key);
    let targets = Targets {
        home: "/home/runtime".into(),
        main,
        audit: "/home/runtime/data/audit/warden.jsonl".into(),
        config: "/etc/warden/machine.json".into(),
        socket: "/run/warden/api.sock".into(),
        // The door itself listens on the pod's loopback.
        port: DOOR.rsplit_once(':').unwrap().1.into(),
        // The runtime here (sleep) has no abstract socket.
        abstract_name: None,
    };
    let (mut tried, skipped) = every_shell_line_fails(&fx, &key, &targets, &status);
    tried += every_program_is_blocked(&fx, &key, &targets);

    // A setuid-root binary runs, but as shell.
    let shell_uid = fx.exec(&["id", "-u", "shell"]);
    let o = fx.door(&key, "exec", &["--", "/tmp/warden-attack/id-suid", "-u"]);
    assert_eq!(
        text(&o.stdout),
        text(&shell_uid.stdout),
        "{}",
        show("id-suid", &o)
    );
    tried += 1;

    a_direct_connection_is_refused_by_the_gate(&fx, &key);
    tried += 1;

    eprintln!(
        "{tried} attacks tried in the pod under baseline, all stopped; skipped \
         (proc_hidden does not hold): {skipped:?}"
    );
    assert!(tried >= 40);
    // What the suite found is what warden says.
    let out = fx.door(&key, "status", &["--json"]);
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        status.get("refusing").is_none_or(Value::is_null),
        "{status}"
    );
    for l in status["layers"].as_array().unwrap() {
        if l["required"] == true {
            assert_eq!(l["holds"], true, "{l}");
        }
    }
}

/// The canaries where the suite looks for them: the runtime's .env
/// (written by warden from the Secret), its memory, a routine and a
/// folder of its own in the workspace, all made as the runtime.
fn plant_the_canaries(fx: &Played) {
    let out = fx.exec(&["cat", "/home/runtime/.env"]);
    assert!(
        text(&out.stdout).contains(ENV_CANARY),
        "{}",
        show(".env", &out)
    );
    let as_runtime = |line: &str| {
        let out = fx.exec_as("2000", &["sh", "-c", line]);
        assert!(out.status.success(), "{}", show(line, &out));
    };
    as_runtime(&format!(
        "echo {DATA_CANARY} > /home/runtime/data/memory.txt"
    ));
    as_runtime(&format!(
        "printf %s {ROUTINE_CANARY} > /home/runtime/workspace/routines/agent.md && \
         chmod 644 /home/runtime/workspace/routines/agent.md"
    ));
    as_runtime(
        "mkdir /home/runtime/workspace/runtime-notes && \
         echo notes > /home/runtime/workspace/runtime-notes/n.txt",
    );
}

/// The attack program, linked statically (the image's C library need
/// not be this host's, nor need it have a compiler), into the pod's
/// /tmp: shell's /tmp, as shell has no mount namespace of its own
/// without SYS_ADMIN (the layer shell_space, asserted by
/// `what_warden_says_holds`). A setuid-root id beside it, made from the
/// image's own. Returns the program's folder on the host.
fn hand_the_attack_program_to_shell(fx: &Played) -> tempfile::TempDir {
    let (bin_dir, bin) = common::attacks::build_attack_program_with(&["-static"]);
    let out = fx.exec(&["mkdir", "-m", "755", "/tmp/warden-attack"]);
    assert!(out.status.success(), "{}", show("mkdir", &out));
    let into = format!("{}:/tmp/warden-attack/attack", fx.container());
    let out = podman(&["cp", bin.to_str().unwrap(), &into]);
    assert!(out.status.success(), "{}", show("podman cp", &out));
    let out = fx.exec(&[
        "sh",
        "-c",
        "cd /tmp/warden-attack && chown 0:0 attack && chmod 755 attack && \
         cp /usr/bin/id id-suid && chmod 4755 id-suid",
    ]);
    assert!(out.status.success(), "{}", show("chmod", &out));
    bin_dir
}

/// What warden says holds in the pod, through the door; its status and
/// the runtime's main process, whose environ holds the canary.
fn what_warden_says_holds(fx: &Played, key: &Path) -> (Value, String) {
    let out = fx.door(key, "status", &["--json"]);
    assert!(out.status.success(), "{}", show("status", &out));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    let l = layer(&status, "shell_space");
    assert!(l["required"] == false && l["holds"] == false, "{l}");
    let l = layer(&status, "firewall");
    assert!(l["required"] == true && l["holds"] == true, "{l}");
    let detail = l["detail"].as_str().unwrap();
    assert!(detail.contains("held by warden's connect gate"), "{l}");
    let main = &status["main"];
    assert_eq!(
        main["argv"],
        serde_json::json!(["sleep", "infinity"]),
        "{status}"
    );
    let main = main["pid"].as_i64().unwrap().to_string();
    // The runtime's main process holds the key: the canary is there to
    // be stolen (read as the runtime: root here has no CAP_SYS_PTRACE).
    let out = fx.exec_as("2000", &["cat", &format!("/proc/{main}/environ")]);
    assert!(
        text(&out.stdout).contains(ENV_CANARY),
        "{}",
        show("environ", &out)
    );
    (status, main)
}

/// Every attack as a shell line fails through the door and shows no
/// secret, and nothing they tried changed anything; how many were tried,
/// and which were skipped.
fn every_shell_line_fails(
    fx: &Played,
    key: &Path,
    targets: &Targets,
    status: &Value,
) -> (usize, Vec<&'static str>) {
    // /proc with hidepid is a remount of /proc, which needs SYS_ADMIN:
    // under baseline status says proc_hidden (not required) does not
    // hold, and shell sees the runtime's process and its cmdline, as any
    // user's without hidepid. Those two attempts try that layer alone:
    // skipped while it says so. The runtime's environ, its memory and
    // ptrace stay refused, and are asserted with the rest.
    let l = layer(status, "proc_hidden");
    assert_eq!(l["required"], false, "{l}");
    let proc_hidden = l["holds"] == true;
    if !proc_hidden {
        assert!(l["detail"].as_str().unwrap().contains("hidepid"), "{l}");
    }
    let needs_proc_hidden = ["read the runtime's cmdline", "see the runtime's process"];
    let mut tried = 0;
    let mut skipped = Vec::new();
    for (name, line) in shell_lines(targets) {
        if !proc_hidden && needs_proc_hidden.contains(&name) {
            skipped.push(name);
            continue;
        }
        let o = fx.door(key, "exec", &["--folder", "attacks", "--shell", &line]);
        // 125 is warden's own refusal or a failed way in: the line never
        // ran, which proves nothing.
        let code = o.status.code();
        assert!(
            code.is_some_and(|c| c != 0 && c != 125),
            "{name} succeeded, or never ran: {}",
            show(name, &o)
        );
        assert_no_secret(name, &o);
        tried += 1;
    }
    // And nothing those lines tried changed anything.
    let out = fx.exec(&["cat", "/home/runtime/workspace/routines/agent.md"]);
    assert_eq!(text(&out.stdout), ROUTINE_CANARY, "a routine was changed");
    for (path, there) in [
        ("/home/runtime/workspace/runtime-notes/n.txt", true),
        ("/home/runtime/workspace/routines/planted", false),
        ("/var/tmp/planted-by-shell", false),
        ("/etc/planted", false),
    ] {
        let out = fx.exec(&["test", "-e", path]);
        assert_eq!(out.status.success(), there, "{path}");
    }
    (tried, skipped)
}

/// Every attack of the program is blocked through the door and shows no
/// secret; how many were tried.
fn every_program_is_blocked(fx: &Played, key: &Path, targets: &Targets) -> usize {
    let mut tried = 0;
    for (name, args) in programs(targets) {
        let mut argv = vec!["--folder", "attacks", "--", ATTACK];
        argv.extend(args.iter().map(String::as_str));
        let o = fx.door(key, "exec", &argv);
        assert_blocked(name, &o);
        tried += 1;
    }
    tried
}

/// The firewall layer, through the gate: a direct connection to an
/// address outside (TEST-NET-1, where nothing listens) is refused at
/// once, EACCES, never a timeout; no packet leaves the pod.
fn a_direct_connection_is_refused_by_the_gate(fx: &Played, key: &Path) {
    let o = fx.door(
        key,
        "exec",
        &[
            "--folder",
            "attacks",
            "--",
            ATTACK,
            "tcp-connect",
            "80",
            "192.0.2.1",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show("192.0.2.1:80", &o));
    assert_eq!(
        text(&o.stdout),
        "blocked: tcp connect to 192.0.2.1:80: Permission denied\n",
        "{}",
        show("192.0.2.1:80", &o)
    );
    // Landlock would say EACCES too: the log says it was the gate. Its
    // line is written by a thread of its own, so it is waited for.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = fx.door(key, "audit", &[]);
        let said = text(&out.stdout);
        assert!(out.status.success(), "{}", show("audit", &out));
        assert!(said.contains("chain intact"), "{said}");
        let refused = said
            .lines()
            .any(|l| l.contains(" connect_refused ") && l.contains("address=192.0.2.1:80"));
        if refused {
            break;
        }
        assert!(Instant::now() < deadline, "no connect_refused line: {said}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
