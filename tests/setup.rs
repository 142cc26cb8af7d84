//! `run_setup` (protocol version 6): the owner, on the host's door, has
//! warden run a setup script as the runtime; the machine's own socket may
//! not ask for it.

mod common;

use common::{privileged, sh, text, Machine, Options, HOST_KEY};
use std::os::unix::fs::PermissionsExt;
use warden::wire::client::{Client, ClientError};
use warden::wire::{ErrorCode, RunRequest, SUPPORTED_VERSIONS};

#[test]
fn the_owner_runs_setup_as_the_runtime_and_the_machine_may_not() {
    if !privileged("the_owner_runs_setup_as_the_runtime_and_the_machine_may_not") {
        return;
    }
    let (m, host) = Machine::keyed(0o600);
    m.wait_ready();

    // The owner: run as the runtime, in a folder of its data, status and
    // output back (stderr too), a script longer than a pipe read whole.
    let mut owner = Client::connect_keyed(&host, Some(HOST_KEY), None).unwrap();
    assert_eq!(owner.version, *SUPPORTED_VERSIONS.last().unwrap());
    let padding = format!("# {}\n", "x".repeat(200)).repeat(1000);
    let script =
        format!("{padding}id -un\npwd\necho to-stderr >&2\nprintf made > \"$HOME/workspace/made-by-setup\"\nexit 3\n");
    let (status, output) = owner.run_setup(&script).unwrap();
    assert_eq!(status, 3, "{output}");
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(lines[0], "runtime", "{output}");
    assert!(lines[1].ends_with("/home/runtime/data/.setup"), "{output}");
    assert!(output.contains("to-stderr"), "{output}");
    let made = m.root().join("home/runtime/workspace/made-by-setup");
    let meta = std::fs::metadata(&made).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 2000);

    // The machine's own socket (root here): refused, and the connection
    // stays open.
    let mut local = m.client();
    match local.run_setup("id") {
        Err(ClientError::Warden { code, message }) => {
            assert_eq!(code, ErrorCode::Refused, "{message}");
            assert!(message.contains("the owner's"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(local.status().is_ok());

    // One audit line, with the status and digests, never the text.
    let lines = m.audit_kinds("setup");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["status"], 3);
    assert!(lines[0]["script_sha256"].as_str().unwrap().len() == 64);
    let log = text(&std::fs::read(m.audit_path()).unwrap());
    assert!(!log.contains("to-stderr") && !log.contains("made-by-setup"));
}

/// shell plants a `venv` module in a folder of the workspace; the owner's
/// setup then runs `python3 -m venv`. The setup runs in a fresh folder of
/// the runtime's (removed after), with PYTHONSAFEPATH: shell's code never
/// runs as the runtime, and the runtime's key is never printed.
#[test]
fn a_setup_never_runs_what_shell_planted_in_the_workspace() {
    if !privileged("a_setup_never_runs_what_shell_planted_in_the_workspace") {
        return;
    }
    let (m, host) = Machine::keyed(0o600);
    m.wait_ready();
    let mut owner = Client::connect_keyed(&host, Some(HOST_KEY), None).unwrap();
    owner.hand_keys("SETUP_KEY=setup-key-canary\n").unwrap();

    // As shell, through the API: a folder `venv` of the workspace with a
    // `__main__.py`, and `.py` files Python would import from there.
    let planted = "import os, pathlib; print('planted-ran', os.environ.get('SETUP_KEY')); \
                   pathlib.Path(os.environ['HOME'], 'planted-ran').write_text('x')";
    let plant =
        format!("printf '%s\\n' \"{planted}\" > __main__.py && cp __main__.py __init__.py && ls");
    let o = m
        .client()
        .run(RunRequest {
            argv: Some(sh(&plant)),
            folder: Some("venv".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(o.exit.status, 0, "{}", text(&o.stderr));
    let workspace = m.home.join("workspace");
    assert!(workspace.join("venv/__main__.py").is_file());

    // The owner's setup, as many are: python3 -m venv, run from where it
    // stands, then a file made in the workspace by its path.
    let script = "python3 -m venv --without-pip made-venv; echo venv-status=$?\n\
                  python3 -c 'import venv, sys; print(\"from\", venv.__file__)'\n\
                  printf ok > \"$HOME/workspace/setup-ran\"\n";
    let (status, output) = owner.run_setup(script).unwrap();
    assert_eq!(status, 0, "{output}");
    assert!(!output.contains("planted-ran"), "{output}");
    assert!(!output.contains("setup-key-canary"), "{output}");
    assert!(!m.home.join("planted-ran").exists(), "{output}");
    assert!(output.contains("from /usr/lib/python3"), "{output}");
    assert!(workspace.join("setup-ran").is_file(), "{output}");
    // Its folder is gone once it ended.
    assert!(!m.home.join("data/.setup").exists());
}

/// The runtime's PATH names a folder of the workspace (as an image's ENV
/// might); shell puts a `python3` there. The setup (and the main process,
/// which starts the same way) runs without that folder on its PATH, and
/// warden says so.
#[test]
fn the_runtime_never_takes_a_program_from_a_path_folder_shell_writes() {
    if !privileged("the_runtime_never_takes_a_program_from_a_path_folder_shell_writes") {
        return;
    }
    let dir = Machine::folder("");
    let key = dir.path().join("key");
    std::fs::write(&key, format!("{HOST_KEY}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let host = dir.path().join("host/api.sock");
    std::fs::create_dir(dir.path().join("host")).unwrap();
    let shells = dir.path().join("home/runtime/workspace/bin");
    let path = format!("{}:/usr/bin:/bin", shells.display());
    let m = Machine::start_in(
        dir,
        Options {
            config: serde_json::json!({"host_socket": host, "key_file": key}),
            env: vec![("PATH".into(), path)],
            ..Default::default()
        },
    );
    m.wait_ready();
    let plant = "printf '#!/bin/sh\\necho planted-ran\\n' > python3 && chmod 755 python3";
    let o = m
        .client()
        .run(RunRequest {
            argv: Some(sh(plant)),
            folder: Some("bin".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(o.exit.status, 0, "{}", text(&o.stderr));
    assert!(shells.join("python3").is_file());

    let mut owner = Client::connect_keyed(&host, Some(HOST_KEY), None).unwrap();
    let (status, output) = owner
        .run_setup("python3 -c 'print(\"the-real-one\")'\necho \"$PATH\"\n")
        .unwrap();
    assert_eq!(status, 0, "{output}");
    assert!(!output.contains("planted-ran"), "{output}");
    assert!(
        output.starts_with("the-real-one\n/usr/bin:/bin"),
        "{output}"
    );
    assert!(
        m.log().contains("bin left out (shell writes there)"),
        "{}",
        m.log()
    );
}
