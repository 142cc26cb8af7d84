//! `warden machine ...` end to end, with rootful podman and the base image
//! localhost/warden-machine:latest: a machine is made from a definition,
//! gets only its named keys, answers only with its key, is kept when
//! nothing changed, stops with warden's status and leaves nothing behind.

mod common;

use common::machine::{
    fixture, image_id, inspect, leftovers, machine_id, podman, ready, sh_in, show,
    this_wardens_image, wait_exited, warden, Image, TestMachine, CANARY, IMAGE,
};
use common::{text, warden_bin};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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

    only_the_runtimes_env_holds_the_named_key(&fx);

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

    the_lend_is_read_only_for_root_and_shell(&fx);

    a_build_runs_in_a_workspace_folder_and_the_firewall_holds(&fx);

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

/// A build in a workspace folder: the one place shell may write; status
/// says the firewall holds.
fn a_build_runs_in_a_workspace_folder_and_the_firewall_holds(fx: &TestMachine) {
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
}

/// shell's environment and the runtime's .env are shut to shell; the
/// runtime's .env holds the named key only.
fn only_the_runtimes_env_holds_the_named_key(fx: &TestMachine) {
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
}

/// The lend is mounted read-only.
fn the_lend_is_read_only_for_root_and_shell(fx: &TestMachine) {
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
    let record = warden::host::machine::state_dir(&fx.id).join("kept.json");
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

    // A new machine of a known image asks the engine nothing before its
    // run; a stranger holding its name is found there then, and replaced.
    let new = TestMachine::defined("seen", serde_json::json!({"image": tag}));
    let stranger = podman(&["create", "--name", &new.container(), IMAGE]);
    assert!(stranger.status.success(), "{}", show("create", &stranger));
    let (out, _) = timed_up(&new, "up of a new machine of a known image");
    assert!(out.contains("the engine not asked before its run"), "{out}");
    assert!(out.contains("there already: looked at"), "{out}");
    assert!(out.contains("made again"), "{out}");
    assert_ne!(
        inspect(&new.container(), "{{.Id}}"),
        text(&stranger.stdout).trim()
    );
    let id = new.exec(&["id", "-un"]);
    assert_eq!(text(&id.stdout), "shell\n", "{}", show("id", &id));
    drop(new);

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

    a_change_of_the_definition_builds_no_image(&fx, &tag, &first_container, &first_image);

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

/// `up > up.log` beside the Dockerfile, and a change of the definition
/// there that warden reads again: neither image nor container is made
/// again; a change it does not read again makes the container again
/// (saying why), not the image (`first_image` of `tag`).
fn a_change_of_the_definition_builds_no_image(
    fx: &TestMachine,
    tag: &str,
    first_container: &str,
    first_image: &str,
) {
    std::fs::write(fx.dir.path().join("up.log"), "the owner's log of up\n").unwrap();
    fx.edit(|d| d["idle_stop_minutes"] = 30.into());
    let (logged, _) = timed_up(fx, "up after a log and a definition change");
    assert!(logged.contains("context unchanged"), "{logged}");
    assert!(!logged.contains(": built"), "{logged}");
    assert!(logged.contains("reloaded: idle_stop_minutes"), "{logged}");
    assert_eq!(inspect(&fx.container(), "{{.Id}}"), first_container);
    fx.edit(|d| d["requires"] = serde_json::json!(["sh"]));
    let (remade, _) = timed_up(fx, "up after a change that makes the container");
    assert!(!remade.contains(": built"), "{remade}");
    assert!(
        remade.contains("made again: the definition's requires changed"),
        "{remade}"
    );
    assert_eq!(image_id(tag), first_image);
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
    let image = this_wardens_image(&fx, "readlog");
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
    let copy = warden::host::machine::state_dir(&fx.id).join("audit-copy/warden.jsonl");
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
