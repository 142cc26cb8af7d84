//! A machine's setup, end to end with rootful podman and the base image:
//! it runs as the runtime where shell cannot plant anything, a failing one
//! fails `up` with its output, it runs again only when it changed or is
//! asked for, and the runtime finds warden's clients in the image.

mod common;

use common::machine::{
    fixture, inspect, leftovers, podman, ready, sh_in, show, warden, TestMachine, IMAGE,
};
use common::text;
use std::time::{Duration, Instant};

/// shell plants a `venv` package in a folder of the workspace; the
/// definition then gets a setup that runs `python3 -m venv` (the next `up`
/// makes a new container on the same workspace volume and runs it). The
/// setup runs in a fresh folder of the runtime's: shell's code never runs
/// as the runtime, nor sees its key.
#[test]
fn a_containers_setup_never_runs_what_shell_planted_in_the_workspace() {
    if !ready("a_containers_setup_never_runs_what_shell_planted_in_the_workspace") {
        return;
    }
    let fx = fixture("plant", &["API_TOKEN"]);
    fx.edit(|d| {
        d.as_object_mut().unwrap().remove("setup");
    });
    let out = fx.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let planted = "import os, pathlib; print('planted-ran'); \
                   pathlib.Path('/home/runtime/data/planted-ran').write_text(open('/home/runtime/.env').read())";
    let plant = format!("printf '%s\\n' \"{planted}\" > __main__.py && cp __main__.py __init__.py");
    let out = warden(&[
        "machine", "exec", &fx.id, "--folder", "venv", "--shell", &plant,
    ]);
    assert!(out.status.success(), "{}", show("plant", &out));

    std::fs::write(
        fx.dir.path().join("setup.sh"),
        "python3 -m venv --without-pip made-venv\n\
         python3 -c 'import venv; print(venv.__file__)' > \"$HOME/workspace/venv-from\"\n\
         pwd >> \"$HOME/workspace/venv-from\"\n",
    )
    .unwrap();
    fx.edit(|d| d["setup"] = "setup.sh".into());
    let out = fx.up();
    assert!(out.status.success(), "{}", show("up", &out));
    assert!(
        !text(&out.stdout).contains("planted-ran"),
        "{}",
        show("up", &out)
    );
    let as_root = |argv: &[&str]| {
        let mut args = vec!["exec", "-u", "0"];
        let container = fx.container();
        args.push(&container);
        args.extend(argv);
        podman(&args)
    };
    let out = as_root(&[
        "ls",
        "/home/runtime/data/planted-ran",
        "/home/runtime/data/.setup",
    ]);
    assert!(!out.status.success(), "{}", show("ls", &out));
    assert!(
        !text(&out.stdout).contains("planted"),
        "{}",
        show("ls", &out)
    );
    let out = as_root(&["cat", "/home/runtime/workspace/venv-from"]);
    assert_eq!(
        text(&out.stdout),
        "/usr/lib/python3.11/venv/__init__.py\n/home/runtime/data/.setup\n",
        "{}",
        show("venv-from", &out)
    );
}

#[test]
fn a_failing_setup_fails_up_with_its_output() {
    if !ready("a_failing_setup_fails_up_with_its_output") {
        return;
    }
    let fx = fixture("setup", &[]);
    std::fs::write(
        fx.dir.path().join("setup.sh"),
        "echo setup-says-no >&2\nexit 3\n",
    )
    .unwrap();
    // A data volume there before (its state folder gone): the failed
    // `up` did not make it, and leaves it.
    let data = format!("warden-{}-data", fx.id);
    let before = podman(&["volume", "create", &data]);
    assert!(
        before.status.success(),
        "{}",
        show("volume create", &before)
    );
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let out = fx.up();
    assert!(!out.status.success(), "{}", show("up", &out));
    assert!(
        text(&out.stderr).contains("setup-says-no"),
        "{}",
        show("up", &out)
    );
    // What this `up` made is gone again, and it says so.
    let err = text(&out.stderr);
    assert!(
        err.contains("removed what this `up` made: container"),
        "{err}"
    );
    assert_eq!(leftovers(&fx.id), format!("{data}\n"), "{err}");
    let removed = podman(&["volume", "rm", &data]);
    assert!(removed.status.success(), "{}", show("volume rm", &removed));
    let state = warden::host::machine::state_dir(&fx.id);
    assert!(!state.exists(), "{} is left", state.display());
}
#[test]
fn a_runtime_uses_the_clients_the_image_carries() {
    if !ready("a_runtime_uses_the_clients_the_image_carries") {
        return;
    }
    // The two lines a Node runtime writes, run as the machine's main
    // process from the runtime's home: no install, no copy.
    let node = "import { shellRun, VERSION } from '@warden/client';\n\
                import { writeFileSync } from 'node:fs';\n\
                const r = await shellRun('id -un');\n\
                writeFileSync('/home/runtime/data/node-client', `${VERSION} ${r.exitCode} ${String(r.stdout).trim()}\\n`);\n\
                setInterval(() => {}, 1 << 30);\n";
    let fx = TestMachine::new("clients");
    // And the Python client, from the owner's setup (the runtime's too).
    std::fs::write(
        fx.dir.path().join("setup.sh"),
        "python3 -c 'import warden_client; r = warden_client.Client.connect().run([\"id\", \"-un\"]); \
         open(\"/home/runtime/data/python-client\", \"w\").write(\"%s %s %s\\n\" % (warden_client.__version__, r.status, r.stdout.decode().strip()))'\n",
    )
    .unwrap();
    fx.define(serde_json::json!({
        "image": IMAGE,
        "setup": "setup.sh",
        "command": ["node", "--input-type=module", "-e", node],
    }));
    let out = fx.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let version = env!("CARGO_PKG_VERSION");
    let deadline = Instant::now() + Duration::from_secs(20);
    let read =
        |name: &str| text(&sh_in(&fx, "runtime", &format!("cat /home/runtime/data/{name}")).stdout);
    while read("node-client").is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        read("node-client"),
        format!("{version} 0 shell\n"),
        "{}",
        text(&podman(&["logs", &fx.container()]).stderr)
    );
    assert_eq!(read("python-client"), format!("{version} 0 shell\n"));
    // Resolvable from any folder, for shell's own Node and Python too.
    let out = fx.exec(&[
        "sh",
        "-c",
        "cd /tmp && node --input-type=module -e \"import { VERSION } from '@warden/client'; console.log(VERSION)\" && python3 -c 'import warden_client; print(warden_client.__version__)'",
    ]);
    assert_eq!(
        text(&out.stdout),
        format!("{version}\n{version}\n"),
        "{}",
        show("exec", &out)
    );
}

#[test]
fn setup_runs_again_only_when_it_changed_or_is_asked_for() {
    if !ready("setup_runs_again_only_when_it_changed_or_is_asked_for") {
        return;
    }
    let fx = TestMachine::new("setup-once");
    let script = fx.dir.path().join("setup.sh");
    std::fs::write(&script, "echo one >> \"$HOME/data/setup-runs\"\n").unwrap();
    fx.define(serde_json::json!({
        "image": IMAGE, "setup": "setup.sh", "command": ["sleep", "infinity"],
    }));
    let runs = || {
        let out = sh_in(&fx, "runtime", "cat /home/runtime/data/setup-runs");
        text(&out.stdout)
    };
    let definition = fx.definition();
    let up = |what: &str, args: &[&str]| {
        let mut argv = vec!["machine", "up", definition.to_str().unwrap()];
        argv.extend(args);
        let out = warden(&argv);
        assert!(out.status.success(), "{}", show(what, &out));
        text(&out.stdout)
    };
    let said = up("first up", &[]);
    assert!(said.contains("setup.sh ran"), "{said}");
    assert_eq!(runs(), "one\n");
    let first = inspect(&fx.container(), "{{.Id}}");

    // A change that makes the container again, over the same volumes.
    fx.edit(|d| d["requires"] = serde_json::json!(["sh"]));
    let said = up("remade", &[]);
    assert_ne!(inspect(&fx.container(), "{{.Id}}"), first, "made again");
    assert!(
        said.contains("made again: the definition's requires changed"),
        "{said}"
    );
    assert!(
        said.contains("setup.sh: unchanged since it ran, not run again"),
        "{said}"
    );
    assert_eq!(runs(), "one\n");

    // The script changed: it runs.
    std::fs::write(&script, "echo two >> \"$HOME/data/setup-runs\"\n").unwrap();
    let said = up("script changed", &[]);
    assert!(said.contains("setup.sh ran"), "{said}");
    assert_eq!(runs(), "one\ntwo\n");

    // Asked for: it runs, the machine otherwise unchanged.
    let said = up("up --setup", &["--setup"]);
    assert!(said.contains("setup.sh ran"), "{said}");
    assert_eq!(runs(), "one\ntwo\ntwo\n");
    // And the digest it keeps is root's, out of shell's reach.
    let out = fx.exec(&["cat", "/home/runtime/data/.setup-ran"]);
    assert!(!out.status.success(), "{}", show("shell reads", &out));
}
