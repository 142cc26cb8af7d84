//! `warden machine ...` end to end, with rootful podman and the base image
//! localhost/warden-machine:latest: a machine is made from a definition,
//! gets only its named keys, answers only with its key, is kept when
//! nothing changed, stops with warden's status and leaves nothing behind.

mod common;

use common::machine::{
    inspect, leftovers, machine_id, podman, ready, show, wait_exited, warden, TestMachine, IMAGE,
};
use common::{text, warden_bin};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const CANARY: &str = "canary-xyz-123";

/// A machine whose definition has its `.env`, a lent folder and a setup
/// script.
fn fixture(tag: &str, keys: &[&str]) -> TestMachine {
    let fx = TestMachine::new(tag);
    let dir = fx.dir.path();
    let lent = dir.join("lent");
    std::fs::create_dir(&lent).unwrap();
    std::fs::write(lent.join("file.txt"), "lent-content\n").unwrap();
    std::fs::write(dir.join(".env"), format!("API_TOKEN={CANARY}\nOTHER=no\n")).unwrap();
    std::fs::write(
        dir.join("setup.sh"),
        "set -e\necho made-by-setup > \"$HOME/workspace/setup-marker\"\n",
    )
    .unwrap();
    fx.define(serde_json::json!({
        "image": IMAGE,
        "keys": keys,
        "lend": [{"host": lent, "at": "/lent/src", "mode": "read"}],
        "setup": "setup.sh",
        // A main process that runs until stopped, as an agent would.
        "command": ["sleep", "infinity"],
    }));
    fx
}

#[test]
fn a_machine_is_made_keyed_kept_stopped_and_removed() {
    if !ready("a_machine_is_made_keyed_kept_stopped_and_removed") {
        return;
    }
    let fx = fixture("life", &["API_TOKEN"]);

    let out = fx.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let first_id = inspect(&fx.container(), "{{.Id}}");

    let out = fx.exec(&["id", "-un"]);
    assert_eq!(text(&out.stdout).trim(), "shell", "{}", show("id", &out));
    // ssh goes through the proxy: the image says so to every ssh.
    let out = fx.exec(&["ssh", "-G", "github.com"]);
    assert!(
        text(&out.stdout).contains("proxycommand /sbin/warden connect"),
        "{}",
        show("ssh -G", &out)
    );

    let out = fx.exec(&["env"]);
    assert!(out.status.success(), "{}", show("env", &out));
    let env = text(&out.stdout);
    assert!(!env.contains(CANARY) && !env.contains("API_TOKEN"), "{env}");

    let out = fx.exec(&["cat", "/home/runtime/.env"]);
    assert!(!out.status.success(), "{}", show("cat .env", &out));
    assert!(!text(&out.stdout).contains(CANARY));

    // The runtime's .env holds the named key only.
    let out = podman(&[
        "exec",
        "-u",
        "0",
        &fx.container(),
        "cat",
        "/home/runtime/.env",
    ]);
    let dotenv = text(&out.stdout);
    assert!(dotenv.contains(&format!("API_TOKEN={CANARY}")), "{dotenv}");
    assert!(!dotenv.contains("OTHER"), "{dotenv}");

    // The setup script ran once, as runtime, writing in the workspace.
    let out = podman(&[
        "exec",
        "-u",
        "0",
        &fx.container(),
        "stat",
        "-c",
        "%u %n",
        "/home/runtime/workspace/setup-marker",
    ]);
    assert!(
        text(&out.stdout).starts_with("2000 "),
        "{}",
        show("stat", &out)
    );

    // The lend is mounted read-only.
    let out = podman(&[
        "exec",
        "-u",
        "0",
        &fx.container(),
        "cat",
        "/lent/src/file.txt",
    ]);
    assert_eq!(
        text(&out.stdout),
        "lent-content\n",
        "{}",
        show("lend", &out)
    );
    let out = podman(&["exec", "-u", "0", &fx.container(), "touch", "/lent/src/new"]);
    assert!(!out.status.success(), "the lend is writable");
    // shell gets the lend as lent: readable (Landlock grants it read-only),
    // not writable.
    let out = fx.exec(&["cat", "/lent/src/file.txt"]);
    assert_eq!(
        text(&out.stdout),
        "lent-content\n",
        "{}",
        show("cat lend", &out)
    );
    let out = fx.exec(&["touch", "/lent/src/by-shell"]);
    assert!(!out.status.success(), "{}", show("write lend", &out));

    // A build in a workspace folder: the one place shell may write.
    let out = warden(&[
        "machine",
        "exec",
        &fx.id,
        "--folder",
        "build",
        "--shell",
        "echo built > out.txt && cat out.txt && pwd",
    ]);
    assert_eq!(
        text(&out.stdout),
        "built\n/home/runtime/workspace/build\n",
        "{}",
        show("build", &out)
    );

    let out = warden(&["machine", "status", &fx.id]);
    let status = text(&out.stdout);
    assert!(out.status.success(), "{}", show("status", &out));
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("layer firewall") && l.contains(" holds ")),
        "{status}"
    );

    // Nothing changed: the container is kept.
    let out = fx.up();
    assert!(out.status.success(), "{}", show("second up", &out));
    assert!(text(&out.stdout).contains("unchanged, kept"));
    assert_eq!(inspect(&fx.container(), "{{.Id}}"), first_id);

    wrong_key_is_refused_and_audited(&fx);

    let out = warden(&["machine", "stop", &fx.id]);
    assert!(out.status.success(), "{}", show("stop", &out));
    assert_eq!(inspect(&fx.container(), "{{.State.ExitCode}}"), "143");

    let out = warden(&["machine", "rm", &fx.id, "--volumes"]);
    assert!(out.status.success(), "{}", show("rm", &out));
    assert_eq!(leftovers(&fx.id), "");
    assert!(!Path::new("/var/lib/warden/machines").join(&fx.id).exists());
}

/// The last `up` records the container by id; the next `up` of the
/// unchanged, stopped machine starts that id without asking the engine
/// first, and never starts a container the record no longer describes: one
/// replaced behind warden's back, or one whose image's name moved.
#[test]
fn an_unchanged_machine_is_started_by_its_recorded_id_and_never_a_stale_one() {
    let test = "an_unchanged_machine_is_started_by_its_recorded_id_and_never_a_stale_one";
    if !ready(test) {
        return;
    }
    let tag = format!("localhost/{}-image:latest", machine_id("kept"));
    let _image = Image(tag.clone());
    let tagged = podman(&["tag", IMAGE, &tag]);
    assert!(tagged.status.success(), "{}", show("tag", &tagged));
    let fx = TestMachine::defined("kept", serde_json::json!({"image": tag}));
    let record = warden::launcher::machine::state_dir(&fx.id).join("kept.json");
    let recorded = || -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap()
    };
    let stop = || {
        let out = warden(&["machine", "stop", &fx.id]);
        assert!(out.status.success(), "{}", show("stop", &out));
    };

    let (_, _) = timed_up(&fx, "first up");
    let first = inspect(&fx.container(), "{{.Id}}");
    assert_eq!(recorded()["container"], first.as_str());
    stop();
    let (out, _) = timed_up(&fx, "up of the unchanged machine");
    assert!(out.contains("started by its id, as recorded"), "{out}");
    let id = fx.exec(&["id", "-un"]);
    assert_eq!(text(&id.stdout), "shell\n", "{}", show("id", &id));

    // Replaced behind warden's back by a container of the same name: the
    // recorded id is gone, and the stranger is not kept either.
    stop();
    let removed = podman(&["rm", &fx.container()]);
    assert!(removed.status.success(), "{}", show("rm", &removed));
    let stranger = podman(&["create", "--name", &fx.container(), IMAGE]);
    assert!(stranger.status.success(), "{}", show("create", &stranger));
    let (out, _) = timed_up(&fx, "up after the container was replaced");
    assert!(
        out.contains("made again: the container there is not the one warden made"),
        "{out}"
    );
    assert!(
        out.contains("its recorded container did not start"),
        "{out}"
    );
    assert!(!out.contains("as recorded"), "{out}");
    let second = inspect(&fx.container(), "{{.Id}}");
    assert_ne!(second, text(&stranger.stdout).trim());
    assert_eq!(recorded()["container"], second.as_str());

    // The image's name moved to another image: made again from it.
    stop();
    let moved = fx.dir.path().join("Containerfile");
    std::fs::write(&moved, format!("FROM {IMAGE}\nLABEL warden.test=moved\n")).unwrap();
    let moved = podman(&["build", "-t", &tag, "-f", moved.to_str().unwrap()]);
    assert!(moved.status.success(), "{}", show("build", &moved));
    let (out, _) = timed_up(&fx, "up after the image moved");
    assert!(out.contains("made again: its image changed ("), "{out}");
    assert_eq!(inspect(&fx.container(), "{{.Image}}"), image_id(&tag));
}

/// A copy of the key with another value is refused on the host socket, and
/// the audit log (copied out and verified) says so.
fn wrong_key_is_refused_and_audited(fx: &TestMachine) {
    let bad = fx.dir.path().join("bad-key");
    let key = std::fs::read_to_string(format!("/var/lib/warden/machines/{}/key", fx.id)).unwrap();
    let flipped: String = key
        .trim()
        .chars()
        .map(|c| if c == '0' { '1' } else { '0' })
        .collect();
    std::fs::write(&bad, flipped).unwrap();
    let socket = format!("/var/lib/warden/machines/{}/run/api.sock", fx.id);
    let out = warden(&[
        "--key-file",
        bad.to_str().unwrap(),
        "status",
        "--socket",
        &socket,
    ]);
    assert!(!out.status.success(), "{}", show("wrong key", &out));
    assert!(
        text(&out.stderr).contains("wrong key"),
        "{}",
        show("wrong key", &out)
    );

    let out = warden(&["machine", "audit", &fx.id]);
    let audit = text(&out.stdout);
    assert!(out.status.success(), "{}", show("audit", &out));
    assert!(audit.contains("chain intact"), "{audit}");
    assert!(audit.contains("connection_refused"), "{audit}");
}

#[test]
fn a_missing_key_stops_up_before_anything_is_made() {
    if !ready("a_missing_key_stops_up_before_anything_is_made") {
        return;
    }
    let fx = fixture("nokey", &["API_TOKEN", "NOT_THERE"]);
    let out = fx.up();
    assert!(!out.status.success(), "{}", show("up", &out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("NOT_THERE") && !stderr.contains("API_TOKEN,"),
        "{stderr}"
    );
    assert!(!stderr.contains(CANARY), "{stderr}");
    assert_eq!(leftovers(&fx.id), "");
}

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
    assert_eq!(leftovers(&fx.id), "", "{err}");
    let state = warden::launcher::machine::state_dir(&fx.id);
    assert!(!state.exists(), "{} is left", state.display());
}

/// `podman exec -u USER C sh -c SCRIPT`.
fn sh_in(fx: &TestMachine, user: &str, script: &str) -> Output {
    podman(&["exec", "-u", user, &fx.container(), "sh", "-c", script])
}

/// Removes the images a test built (by tag or id), after its machine:
/// declare it before the machine so it drops after it.
struct Images(Vec<String>);

impl Drop for Images {
    fn drop(&mut self) {
        for image in &self.0 {
            let _ = podman(&["rmi", "-f", image]);
        }
    }
}

fn image_id(image: &str) -> String {
    text(&podman(&["image", "inspect", "--format", "{{.Id}}", image]).stdout)
        .trim()
        .to_string()
}

/// `up`, timed; fails the test when `up` fails.
fn timed_up(fx: &TestMachine, what: &str) -> (String, f64) {
    let started = Instant::now();
    let out = fx.up();
    let seconds = started.elapsed().as_secs_f64();
    assert!(out.status.success(), "{}", show(what, &out));
    eprintln!("{what}: {seconds:.2} s");
    (text(&out.stdout), seconds)
}

#[test]
fn a_dockerfile_is_built_once_and_rebuilt_when_changed_keeping_data() {
    if !ready("a_dockerfile_is_built_once_and_rebuilt_when_changed_keeping_data") {
        return;
    }
    let tag = format!("localhost/warden-{}:latest", machine_id("dfile"));
    let mut images = Images(vec![tag.clone()]);
    let fx = fixture("dfile", &[]);
    let dockerfile = fx.dir.path().join("Dockerfile");
    let write_dockerfile = |word: &str| {
        std::fs::write(
            &dockerfile,
            // COPY of the whole context: the owner's .env beside the
            // Dockerfile must not come along.
            format!("FROM {IMAGE}\nRUN echo {word} > /etc/warden-test-marker\nCOPY . /ctx\n"),
        )
        .unwrap()
    };
    write_dockerfile("one");
    // The owner's own ignore file: logs are no input of the image.
    std::fs::write(fx.dir.path().join(".dockerignore"), "*.log\n").unwrap();
    fx.edit(|d| {
        d.as_object_mut().unwrap().remove("image");
        d["dockerfile"] = "Dockerfile".into();
    });

    let (first, first_s) = timed_up(&fx, "first up");
    assert!(first.contains(&format!("image {tag}: built")), "{first}");
    assert!(first.contains(": created"), "{first}");
    let first_container = inspect(&fx.container(), "{{.Id}}");
    let first_image = image_id(&tag);
    images.0.push(first_image.clone());
    let out = sh_in(&fx, "0", "cat /etc/warden-test-marker");
    assert_eq!(text(&out.stdout), "one\n", "{}", show("marker", &out));
    let out = sh_in(&fx, "0", "ls -a /ctx");
    let listed = text(&out.stdout);
    assert!(
        listed.contains("Dockerfile") && !listed.contains(".env"),
        "{listed}"
    );
    let out = sh_in(&fx, "2000", "echo keep > /home/runtime/data/kept");
    assert!(out.status.success(), "{}", show("write kept", &out));

    // Nothing changed: neither rebuilt nor recreated.
    let (second, second_s) = timed_up(&fx, "second up");
    assert!(second.contains("context unchanged"), "{second}");
    assert!(!second.contains(": built"), "{second}");
    assert!(second.contains("unchanged, kept"), "{second}");
    assert!(!second.contains(": created"), "{second}");
    assert_eq!(inspect(&fx.container(), "{{.Id}}"), first_container);
    assert_eq!(image_id(&tag), first_image);
    eprintln!("up timings: first (build) {first_s:.2} s, second (unchanged) {second_s:.2} s");

    // `up > up.log` beside the Dockerfile, and a change of the definition
    // there: the container is made again (saying why), the image is not.
    std::fs::write(fx.dir.path().join("up.log"), "the owner's log of up\n").unwrap();
    fx.edit(|d| d["idle_stop_minutes"] = 30.into());
    let (logged, _) = timed_up(&fx, "up after a log and a definition change");
    assert!(logged.contains("context unchanged"), "{logged}");
    assert!(!logged.contains(": built"), "{logged}");
    assert!(
        logged.contains("made again: the definition's idle_stop_minutes changed"),
        "{logged}"
    );
    assert_eq!(image_id(&tag), first_image);

    // The Dockerfile changed: rebuilt, recreated, the data volume kept.
    write_dockerfile("two");
    let (third, third_s) = timed_up(&fx, "third up");
    eprintln!("up timings: third (rebuild) {third_s:.2} s");
    assert!(third.contains(&format!("image {tag}: built")), "{third}");
    assert!(third.contains("made again: its image changed ("), "{third}");
    assert!(third.contains(": created"), "{third}");
    let third_container = inspect(&fx.container(), "{{.Id}}");
    assert!(!third_container.is_empty());
    assert_ne!(third_container, first_container);
    let third_image = image_id(&tag);
    images.0.push(third_image.clone());
    assert_ne!(third_image, first_image);
    let out = sh_in(&fx, "0", "cat /etc/warden-test-marker");
    assert_eq!(text(&out.stdout), "two\n", "{}", show("marker", &out));
    let out = sh_in(&fx, "0", "cat /home/runtime/data/kept");
    assert_eq!(text(&out.stdout), "keep\n", "{}", show("kept", &out));
}

#[test]
fn podman_stop_and_kill_end_the_machine_with_143() {
    if !ready("podman_stop_and_kill_end_the_machine_with_143") {
        return;
    }
    let fx = fixture("stop", &[]);
    let out = fx.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let c = fx.container();
    let main = inspect(&c, "{{json .Config.Cmd}}");
    assert!(
        main.contains("sleep") && main.contains("infinity"),
        "{main}"
    );

    // SIGTERM from podman stop: warden ends within the grace period.
    let started = Instant::now();
    let out = podman(&["stop", "-t", "10", &c]);
    let took = started.elapsed();
    assert!(out.status.success(), "{}", show("podman stop", &out));
    eprintln!("podman stop took {:.2} s", took.as_secs_f64());
    assert!(took < Duration::from_secs(10), "stop took {took:?}");
    assert_eq!(inspect(&c, "{{.State.Running}}"), "false");
    assert_eq!(inspect(&c, "{{.State.ExitCode}}"), "143");

    // Started again by up; then SIGTERM from podman kill.
    let out = fx.up();
    assert!(out.status.success(), "{}", show("up again", &out));
    assert!(
        text(&out.stdout).contains(": started"),
        "{}",
        show("up again", &out)
    );
    assert_eq!(inspect(&c, "{{.State.Running}}"), "true");
    let started = Instant::now();
    let out = podman(&["kill", "-s", "TERM", &c]);
    assert!(out.status.success(), "{}", show("podman kill", &out));
    assert!(
        wait_exited(&c, Duration::from_secs(15)),
        "still running 15 s after SIGTERM"
    );
    eprintln!(
        "exited {:.2} s after podman kill -s TERM",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(inspect(&c, "{{.State.ExitCode}}"), "143");
}

/// The container's processes in state Z, as `pid (comm) Z` lines.
fn zombies(fx: &TestMachine) -> Vec<String> {
    let out = sh_in(
        fx,
        "0",
        "for f in /proc/[0-9]*/stat; do cat $f 2>/dev/null; echo; done",
    );
    let stat = text(&out.stdout);
    // Not vacuous: PID 1 (warden) is listed.
    assert!(
        stat.lines().any(|l| l.starts_with("1 (")),
        "{}",
        show("stat", &out)
    );
    stat.lines()
        .filter(|line| {
            // comm may hold spaces and parentheses: the state follows the
            // last ')'.
            line.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                == Some("Z")
        })
        .map(String::from)
        .collect()
}

#[test]
fn orphans_of_exec_leave_no_zombies() {
    if !ready("orphans_of_exec_leave_no_zombies") {
        return;
    }
    let fx = fixture("zomb", &[]);
    let out = fx.up();
    assert!(out.status.success(), "{}", show("up", &out));

    let script = "for i in $(seq 50); do (sleep 0.1 &) ; done; sleep 1";
    let runs: Vec<_> = (0..3)
        .map(|_| {
            let id = fx.id.clone();
            std::thread::spawn(move || warden(&["machine", "exec", &id, "--", "sh", "-c", script]))
        })
        .collect();
    // While they run, orphans come and go (reaped by warden).
    std::thread::sleep(Duration::from_millis(500));
    eprintln!("zombies while running: {}", zombies(&fx).len());
    for run in runs {
        let out = run.join().unwrap();
        assert!(out.status.success(), "{}", show("exec", &out));
    }
    // And once more, alone.
    let out = fx.exec(&["sh", "-c", script]);
    assert!(out.status.success(), "{}", show("exec", &out));

    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left = zombies(&fx);
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "zombies 3 s after: {left:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn keys_never_reach_shell() {
    if !ready("keys_never_reach_shell") {
        return;
    }
    let fx = fixture("keys", &["API_TOKEN"]);
    let out = fx.up();
    assert!(out.status.success(), "{}", show("up", &out));
    // The runtime has it: the test is not vacuous.
    let out = sh_in(&fx, "0", "cat /home/runtime/.env");
    assert!(text(&out.stdout).contains(CANARY), "{}", show(".env", &out));

    // The pattern is written so that no command line or log holds the
    // canary itself; a control file shows the grep reaches what it may.
    let pattern = format!(
        "{}[{}]",
        &CANARY[..CANARY.len() - 1],
        &CANARY[CANARY.len() - 1..]
    );
    let script = format!(
        "echo control-mark-7 > /tmp/control; \
         cat /proc/*/environ 2>/dev/null; echo; env; \
         timeout 60 grep -r -e '{pattern}' -e 'control-mark-[7]' \
           /home /tmp /etc /run /var 2>/dev/null | head"
    );
    let started = Instant::now();
    let out = fx.exec(&["sh", "-c", &script]);
    eprintln!("search took {:.2} s", started.elapsed().as_secs_f64());
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{}", show("exec", &out));
    assert!(all.contains("PATH="), "env printed nothing: {all}");
    assert!(all.contains("/tmp/control:control-mark-7"), "{all}");
    assert!(!all.contains(CANARY), "{all}");
    assert!(!all.contains("API_TOKEN"), "{all}");
    assert!(!all.contains("[redacted]"), "{all}");
}

/// A plain user with subordinate ids and the base image in their own
/// storage: the owner of rootless machines. Made once per test run (the
/// image is loaded again only when it changed).
struct Owner {
    name: &'static str,
    uid: u32,
    /// A copy of warden the owner can run wherever the checkout is.
    bin: PathBuf,
}

const OWNER: &str = "warden-owner";

fn owner() -> &'static Owner {
    static OWNER_ONCE: std::sync::OnceLock<Owner> = std::sync::OnceLock::new();
    OWNER_ONCE.get_or_init(|| {
        if Command::new("id")
            .arg(OWNER)
            .output()
            .unwrap()
            .status
            .code()
            != Some(0)
        {
            let out = Command::new("useradd")
                .args(["-m", "-s", "/bin/sh", OWNER])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", show("useradd", &out));
        }
        for file in ["/etc/subuid", "/etc/subgid"] {
            let listed = std::fs::read_to_string(file)
                .unwrap_or_default()
                .lines()
                .any(|l| l.starts_with(&format!("{OWNER}:")));
            if !listed {
                let out = Command::new("usermod")
                    .args(["--add-subuids", "400000-465535"])
                    .args(["--add-subgids", "400000-465535", OWNER])
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{}", show("usermod", &out));
            }
        }
        let uid = text(
            &Command::new("id")
                .args(["-u", OWNER])
                .output()
                .unwrap()
                .stdout,
        )
        .trim()
        .parse()
        .unwrap();
        // One fixed copy, replaced by rename (a copy still running is kept
        // by its inode).
        let bin = PathBuf::from(format!("/var/tmp/{OWNER}-warden"));
        let fresh = PathBuf::from(format!("/var/tmp/{OWNER}-warden.{}", std::process::id()));
        std::fs::copy(warden_bin(), &fresh).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&fresh, &bin).unwrap();
        let owner = Owner {
            name: OWNER,
            uid,
            bin,
        };
        owner.load(IMAGE);
        owner
    })
}

impl Owner {
    /// Loads `image` from root's storage into the owner's, when theirs
    /// differs.
    fn load(&self, image: &str) {
        let theirs = text(
            &self
                .command(
                    "podman",
                    &["image", "inspect", "--format", "{{.Id}}", image],
                )
                .output()
                .unwrap()
                .stdout,
        );
        if theirs.trim() == image_id(image) {
            return;
        }
        let started = Instant::now();
        let out = Command::new("sh")
            .args([
                "-c",
                &format!(
                    "podman save {image} | runuser -u {} -- podman load",
                    self.name
                ),
            ])
            .current_dir("/")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", show("podman load", &out));
        eprintln!(
            "{image} loaded for {} in {:.1} s",
            self.name,
            started.elapsed().as_secs_f64()
        );
    }

    /// `program args` as the owner (runuser sets HOME and USER).
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut command = Command::new("runuser");
        command
            .args(["-u", self.name, "--", program])
            .args(args)
            .current_dir("/")
            .stdin(Stdio::null());
        command
    }

    fn warden(&self, args: &[&str]) -> Output {
        self.command(self.bin.to_str().unwrap(), args)
            .output()
            .unwrap()
    }

    fn state(&self, id: &str) -> PathBuf {
        PathBuf::from(format!(
            "/home/{}/.local/share/warden/machines/{id}",
            self.name
        ))
    }
}

/// A rootless machine, made and removed by the owner: its definition in a
/// folder the owner owns, with a folder lent for writing; `extra` is laid
/// over it.
fn rootless_machine(tag: &str, extra: serde_json::Value) -> TestMachine {
    let uid = nix::unistd::Uid::from_raw(owner().uid);
    let id = machine_id(tag);
    let state = owner().state(&id);
    let m = TestMachine::in_folder(
        id,
        tempfile::tempdir_in("/var/tmp").unwrap(),
        |args| owner().warden(args),
        state,
    );
    let out_dir = m.dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let mut definition = serde_json::json!({
        "image": IMAGE,
        "lend": [{"host": out_dir, "at": "/lent/out", "mode": "write"}],
    });
    if let (Some(d), Some(e)) = (definition.as_object_mut(), extra.as_object()) {
        d.extend(e.clone());
    }
    m.define(definition);
    for path in [m.dir.path(), &out_dir, &m.definition()] {
        nix::unistd::chown(path, Some(uid), None).unwrap();
    }
    m
}

#[test]
fn a_rootless_owner_gets_what_shell_writes_with_keep_id() {
    if !ready("a_rootless_owner_gets_what_shell_writes_with_keep_id") {
        return;
    }
    let owner = owner();
    let m = rootless_machine("keepid", serde_json::json!({"keep_id": true}));
    let id = &m.id;

    let out = owner.warden(&["machine", "check"]);
    let facts = text(&out.stdout);
    assert!(out.status.success(), "{}", show("check", &out));
    assert!(
        facts.contains(&format!("rootless (uid {})", owner.uid)),
        "{facts}"
    );
    assert!(facts.contains("subordinate ids of warden-owner"), "{facts}");

    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let out = m.exec(&["id", "-un"]);
    assert_eq!(text(&out.stdout).trim(), "shell", "{}", show("id", &out));
    let out = m.exec(&["sh", "-c", "echo from-shell > /lent/out/made && id -u"]);
    assert_eq!(text(&out.stdout).trim(), "2001", "{}", show("write", &out));
    let made = std::fs::metadata(m.dir.path().join("out/made")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        made.uid(),
        owner.uid,
        "shell's file belongs to the owner on the host"
    );

    // keep-id makes the owner's files shell's inside: the key warden reads
    // was handed to the machine's root, and shell cannot read it, not even
    // after an `up` that keeps the machine (which must not touch the files
    // the machine has mounted).
    let out = m.up();
    assert!(
        text(&out.stdout).contains("unchanged, kept"),
        "{}",
        show("up again", &out)
    );
    let out = m.exec(&["cat", "/etc/warden/key"]);
    assert!(!out.status.success(), "{}", show("cat key", &out));
    let key = std::fs::read_to_string(owner.state(id).join("key")).unwrap();
    assert!(!text(&out.stdout).contains(key.trim()));

    let out = owner.warden(&["machine", "status", id]);
    let status = text(&out.stdout);
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("layer firewall") && l.contains(" holds ")),
        "{status}"
    );
    let out = owner.warden(&["machine", "ps"]);
    assert!(
        text(&out.stdout).contains(&format!("warden-{id}")),
        "{}",
        show("ps", &out)
    );

    let out = owner.warden(&["machine", "rm", id, "--volumes"]);
    assert!(out.status.success(), "{}", show("rm", &out));
    assert!(!owner.state(id).exists(), "the state folder is gone");
}

/// The Python framework's case: a container of the agent's own from an
/// image with no warden in it, the project lent at the path it has on the
/// host (in the owner's home), `requires` checked, keep-id as shell: what a
/// command writes there is the owner's.
#[test]
fn a_container_of_the_agents_own_from_any_image_writes_as_the_owner() {
    let test = "a_container_of_the_agents_own_from_any_image_writes_as_the_owner";
    if !ready(test) || !common::machine::ready_with(test, common::machine::ROOTFS) {
        return;
    }
    let owner = owner();
    owner.load(common::machine::ROOTFS);
    let project = PathBuf::from(format!("/home/{}/proj-{}", owner.name, std::process::id()));
    let _gone = common::machine::Gone(project.clone());
    let out = owner
        .command("mkdir", &["-p", project.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show("mkdir", &out));
    let m = rootless_machine(
        "pyfw",
        serde_json::json!({
            "image": common::machine::ROOTFS,
            "keep_id": "shell",
            "requires": ["python3", "git"],
            "lend": [{"host": project, "at": project, "mode": "write"}],
        }),
    );
    let id = &m.id;
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let line = format!(
        "cd {} && python3 -c 'open(\"from-python.txt\", \"w\").write(\"py\")' && id -un",
        project.display()
    );
    let out = owner.warden(&["machine", "exec", id, "--shell", &line]);
    assert_eq!(text(&out.stdout).trim(), "shell", "{}", show("exec", &out));
    use std::os::unix::fs::MetadataExt;
    let made = std::fs::metadata(project.join("from-python.txt")).unwrap();
    assert_eq!(
        made.uid(),
        owner.uid,
        "the command's file is the owner's on the host"
    );
    let out = owner.warden(&["machine", "status", id]);
    let status = text(&out.stdout);
    for line in status
        .lines()
        .filter(|l| l.starts_with("layer ") && l.contains("(required)"))
    {
        assert!(line.contains(" holds "), "{status}");
    }
    let out = owner.warden(&["machine", "rm", id, "--volumes"]);
    assert!(out.status.success(), "{}", show("rm", &out));
    assert!(
        project.join("from-python.txt").exists(),
        "the project stays"
    );
}

/// The Node runtime's case, rootless: keep-id as runtime, its agent folder
/// lent for writing at routines: what the agent writes there (its
/// self-changes) is the owner's on the host, and shell still cannot write.
#[test]
fn keep_id_runtime_makes_the_agents_own_changes_the_owners() {
    let test = "keep_id_runtime_makes_the_agents_own_changes_the_owners";
    if !ready(test) {
        return;
    }
    let owner = owner();
    let agent = PathBuf::from(format!("/home/{}/agent-{}", owner.name, std::process::id()));
    let _gone = common::machine::Gone(agent.clone());
    let out = owner
        .command("mkdir", &["-p", agent.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show("mkdir", &out));
    let routines = "/home/runtime/workspace/routines";
    let m = rootless_machine(
        "keeprt",
        serde_json::json!({
            "keep_id": "runtime",
            "command": ["sleep", "infinity"],
            "lend": [{"host": agent, "at": routines, "mode": "write"}],
        }),
    );
    let id = &m.id;
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));
    // The agent (runtime) changes its own routines.
    let container = format!("warden-{id}");
    let line = format!("echo self-change > {routines}/skill.md && id -un");
    let out = owner
        .command(
            "podman",
            &["exec", "-u", "2000", &container, "sh", "-c", &line],
        )
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout).trim(),
        "runtime",
        "{}",
        show("exec as runtime", &out)
    );
    use std::os::unix::fs::MetadataExt;
    let made = std::fs::metadata(agent.join("skill.md")).unwrap();
    assert_eq!(
        made.uid(),
        owner.uid,
        "the agent's change is the owner's on the host"
    );
    // shell cannot write them, nor change what the agent wrote.
    let line = format!(
        "touch {routines}/planted; echo evil >> {routines}/skill.md; cat {routines}/skill.md"
    );
    let out = owner.warden(&["machine", "exec", id, "--shell", &line]);
    assert_eq!(
        text(&out.stdout),
        "self-change\n",
        "{}",
        show("shell", &out)
    );
    assert!(!agent.join("planted").exists());
    assert_eq!(
        std::fs::read_to_string(agent.join("skill.md")).unwrap(),
        "self-change\n"
    );
}

#[test]
fn a_rootless_machine_on_the_hosts_network_is_held_by_the_connect_gate() {
    let test = "a_rootless_machine_on_the_hosts_network_is_held_by_the_connect_gate";
    if !ready(test) {
        return;
    }
    let owner = owner();
    let m = rootless_machine("hostnet", serde_json::json!({"network": "host"}));
    let id = &m.id;
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));

    // nftables cannot hold on a network the machine does not own; warden's
    // connect gate stands in, so the required layer holds and commands run.
    let out = owner.warden(&["machine", "status", id]);
    let status = text(&out.stdout);
    let firewall = status
        .lines()
        .find(|l| l.starts_with("layer firewall"))
        .unwrap_or_default()
        .to_string();
    assert!(
        firewall.contains("held by warden's connect gate"),
        "{status}"
    );
    assert!(
        firewall.contains("shares a network it does not own"),
        "{status}"
    );
    assert!(!status.contains("REFUSING COMMANDS"), "{status}");
    let out = m.exec(&["id", "-un"]);
    assert_eq!(text(&out.stdout).trim(), "shell", "{}", show("exec", &out));

    // On the host's own loopback: shell makes no UDP socket at all
    // (nothing arrives), and its TCP connect to a host port is refused by
    // the gate (nothing is accepted).
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let (udp_port, tcp_port) = (
        udp.local_addr().unwrap().port(),
        tcp.local_addr().unwrap().port(),
    );
    let line = format!("echo hi > /dev/udp/127.0.0.1/{udp_port}");
    let out = m.exec(&["bash", "-c", &line]);
    assert!(!out.status.success(), "{}", show("udp", &out));
    assert!(
        text(&out.stderr).contains("Operation not permitted"),
        "{}",
        show("udp", &out)
    );
    for port in [tcp_port, 3128] {
        let line = format!(
            "echo hi > /dev/tcp/127.0.0.{}/{port}",
            if port == 3128 { 2 } else { 1 }
        );
        let out = m.exec(&["bash", "-c", &line]);
        assert!(!out.status.success(), "{}", show("tcp", &out));
        assert!(
            text(&out.stderr).contains("Permission denied"),
            "{}",
            show("tcp", &out)
        );
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut buf = [0u8; 16];
    assert!(udp.recv(&mut buf).is_err(), "a datagram from shell arrived");
    assert!(tcp.accept().is_err(), "shell connected to a host port");

    // listen(2) without bind(2) would bind a port on every address of the
    // host's network, a server its processes reach: warden refuses it,
    // and a unix socket still listens.
    let listen =
        "import socket; s = socket.socket(); s.listen(); print('listening on', s.getsockname())";
    let out = m.exec(&["python3", "-c", listen]);
    eprintln!("listen: {}", show("listen", &out));
    assert!(!out.status.success(), "{}", show("listen", &out));
    assert!(
        text(&out.stderr).contains("[Errno 13] Permission denied"),
        "{}",
        show("listen", &out)
    );
    let unix = "import socket; s = socket.socket(socket.AF_UNIX); s.bind('/tmp/u.sock'); s.listen(); c = socket.socket(socket.AF_UNIX); c.connect('/tmp/u.sock'); print('unix listens')";
    let out = m.exec(&["python3", "-c", unix]);
    assert!(
        text(&out.stdout).contains("unix listens"),
        "{}",
        show("unix listen", &out)
    );
}

#[test]
fn the_launcher_refuses_what_this_host_cannot_hold_and_says_why() {
    if !ready("the_launcher_refuses_what_this_host_cannot_hold_and_says_why") {
        return;
    }
    let out = warden(&["machine", "check"]);
    let facts = text(&out.stdout);
    assert!(out.status.success(), "{}", show("check", &out));
    for fact in [
        "engine: podman, rootful",
        "cgroups:",
        "limits: nofile",
        "this host can run machines",
    ] {
        assert!(facts.contains(fact), "{fact}: {facts}");
    }
    let cases = [
        (serde_json::json!({"network": "host"}), "refused rootful"),
        (
            serde_json::json!({"keep_id": true}),
            "keep_id: needs rootless podman",
        ),
        (
            serde_json::json!({"dns": ["10.0.0.1"]}),
            "dns: name servers need a network",
        ),
        (
            serde_json::json!({"network": "/run/netns/no-such-namespace-here"}),
            "no such namespace",
        ),
    ];
    for (extra, want) in cases {
        let fx = fixture("refused", &[]);
        fx.edit(|d| {
            if let (Some(d), Some(e)) = (d.as_object_mut(), extra.as_object()) {
                d.extend(e.clone());
            }
        });
        let out = fx.up();
        assert!(!out.status.success(), "{}", show("up", &out));
        assert!(
            text(&out.stderr).contains(want),
            "{want}: {}",
            show("up", &out)
        );
        assert_eq!(leftovers(&fx.id), "", "nothing made for {extra}");
    }
    // An engine that is not there, or not running (a Docker client whose
    // daemon does not answer), is named as such.
    for (engine, want) in [
        ("docker", "docker"),
        ("lxc", "the engines are podman and docker"),
    ] {
        let out = Command::new(warden_bin())
            .args(["machine", "check"])
            .env("WARDEN_ENGINE", engine)
            .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{}", show(engine, &out));
        assert!(text(&out.stderr).contains(want), "{}", show(engine, &out));
    }
}

#[test]
fn a_machine_on_a_namespace_reaches_listed_hosts_through_its_proxy_only() {
    let test = "a_machine_on_a_namespace_reaches_listed_hosts_through_its_proxy_only";
    if !ready(test) {
        return;
    }
    // The tests' own internet: DNS, HTTP and HTTPS in a namespace reached
    // from `machine_ns`, which the machine joins.
    let net = common::internet::Internet::start();
    let fx = fixture("netns", &[]);
    let ca_dir = net.ca.parent().unwrap().to_path_buf();
    fx.edit(|d| {
        d["network"] = format!("/run/netns/{}", net.machine_ns).into();
        d["dns"] = serde_json::json!([net.v4.to_string()]);
        d["hosts"] = serde_json::json!(["allowed.test"]);
        // The tests' internet uses private addresses.
        d["allow_addresses"] =
            serde_json::json!([format!("{}/32", net.v4), format!("{}/128", net.v6)]);
        d["lend"] = serde_json::json!([{"host": ca_dir, "at": "/lent/ca", "mode": "read"}]);
    });
    let out = fx.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let ca = format!("/lent/ca/{}", net.ca.file_name().unwrap().to_string_lossy());
    let curl = |url: &str, extra: &[&str]| {
        let mut argv = vec!["curl", "-sS", "--max-time", "20", "--cacert", &ca];
        argv.extend(extra);
        argv.push(url);
        fx.exec(&argv)
    };
    // Listed: through the proxy warden points shell's tools at.
    let out = curl("https://allowed.test/from-machine", &[]);
    assert_eq!(
        text(&out.stdout),
        "hello allowed.test /from-machine",
        "{}",
        show("allowed", &out)
    );
    // Not listed: the proxy refuses, with its reason.
    let out = curl("http://denied.test/", &["-i"]);
    let head = text(&out.stdout);
    assert!(head.starts_with("HTTP/1.1 403"), "{}", show("denied", &out));
    assert!(
        head.contains("Warden-Reason: denied.test:80 is not on the host list"),
        "{head}"
    );
    // Around the proxy: the firewall refuses at once (curl exit 7).
    let direct = format!("http://{}/direct", net.v4);
    let out = curl(&direct, &["--noproxy", "*"]);
    assert_eq!(out.status.code(), Some(7), "{}", show("direct", &out));
    // The internet saw the listed request, and nothing else from shell.
    let seen = net.http_requests();
    assert!(
        seen.contains("https GET allowed.test /from-machine"),
        "{seen}"
    );
    assert!(
        !seen.contains("denied.test") && !seen.contains("/direct"),
        "{seen}"
    );
}

/// An image removed when dropped.
struct Image(String);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = podman(&["rmi", "-f", &self.0]);
    }
}

/// `warden machine audit ID` reads a running machine's log through its
/// warden (`read_audit`): the whole chain, to its last line, checked
/// against the anchor; once the machine is stopped, from its volume, and
/// the anchor still holds. The image carries this build's warden (the
/// base image's may be older).
#[test]
fn a_running_machines_log_is_read_through_its_warden() {
    if !ready("a_running_machines_log_is_read_through_its_warden") {
        return;
    }
    let fx = TestMachine::new("readlog");
    let image = Image(format!("localhost/warden-readlog-{}:test", fx.id));
    let context = fx.dir.path().join("image");
    std::fs::create_dir(&context).unwrap();
    std::fs::copy(warden_bin(), context.join("warden")).unwrap();
    let file = format!("FROM {IMAGE}\nCOPY warden /sbin/warden\n");
    std::fs::write(context.join("Containerfile"), file).unwrap();
    let out = podman(&["build", "-q", "-t", &image.0, &context.to_string_lossy()]);
    assert!(out.status.success(), "{}", show("build", &out));
    fx.define(serde_json::json!({"image": image.0, "command": ["sleep", "infinity"]}));
    let out = fx.up();
    assert!(out.status.success(), "{}", show("up", &out));
    let out = fx.exec(&["echo", "read-me"]);
    assert_eq!(text(&out.stdout), "read-me\n", "{}", show("exec", &out));

    let out = warden(&["machine", "audit", &fx.id]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{}", show("audit", &out));
    assert!(
        said.contains("read through the machine's warden: lines 1 to"),
        "{said}"
    );
    assert!(said.contains("chain intact"), "{said}");
    assert!(said.contains("no anchor yet"), "{said}");
    // What came is the whole log: the command just run is in it.
    let copy = warden::launcher::machine::state_dir(&fx.id).join("audit-copy/warden.jsonl");
    let log = std::fs::read_to_string(&copy).unwrap();
    assert!(log.contains("\"read-me\""), "{log}");
    let out = warden(&["machine", "audit", &fx.id]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{}", show("audit again", &out));
    assert!(said.contains("verified before is still there"), "{said}");

    // Stopped: read from its volume, and the anchor still holds.
    let out = warden(&["machine", "stop", &fx.id]);
    assert!(out.status.success(), "{}", show("stop", &out));
    let out = warden(&["machine", "audit", &fx.id]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{}", show("audit stopped", &out));
    assert!(
        !said.contains("read through the machine's warden"),
        "{said}"
    );
    assert!(said.contains("chain intact"), "{said}");
    assert!(said.contains("verified before is still there"), "{said}");
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
    fx.edit(|d| d["idle_stop_minutes"] = 30.into());
    let said = up("remade", &[]);
    assert_ne!(inspect(&fx.container(), "{{.Id}}"), first, "made again");
    assert!(
        said.contains("made again: the definition's idle_stop_minutes changed"),
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
