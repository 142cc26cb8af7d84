//! A person at a terminal: `warden machine exec -it M -- bash -i` in a
//! real tmux pane, driven with send-keys and read with capture-pane. The
//! terminal has the pane's size and follows it when the pane is resized,
//! Ctrl-C stops a `sleep`, python3 answers at its prompt, and `exit` gives
//! the status.

mod common;

use common::machine::*;
use common::text;
use std::process::Command;
use std::time::{Duration, Instant};

struct Tmux(String);

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux").args(args).output().unwrap();
        assert!(out.status.success(), "{}", show("tmux", &out));
        text(&out.stdout)
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", &self.0];
        args.extend(keys);
        self.run(&args);
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", &self.0])
    }

    /// Waits (bounded) until the screen shows `want`; the screen.
    fn wait_for(&self, want: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let screen = self.screen();
            if screen.contains(want) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "no {want:?} on the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .output();
    }
}

fn tmux_ready(test: &str) -> bool {
    if Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return true;
    }
    let reason = format!("{test}: needs tmux (scripts/test installs it)");
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{reason}, and CI=true forbids skipping");
    }
    common::skipped(&reason);
    false
}

#[test]
fn a_person_at_a_terminal_types_resizes_interrupts_and_exits() {
    let test = "a_person_at_a_terminal_types_resizes_interrupts_and_exits";
    if !ready_with(test, ROOTFS) || !tmux_ready(test) {
        return;
    }
    let m = TestMachine::defined("tty", serde_json::json!({"image": ROOTFS}));
    let id = &m.id;
    let out = m.up();
    assert!(out.status.success(), "{}", show("up", &out));

    let session = format!("warden-test-{}", std::process::id());
    let line = format!(
        "{} machine exec -it {id} -- bash -i; echo EXITED=$?; sleep 60",
        common::warden_bin()
    );
    let t = Tmux(session.clone());
    t.run(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "100",
        "-y",
        "30",
        &line,
    ]);
    t.wait_for("shell@");
    t.keys(&["stty size; id -un", "Enter"]);
    // Both lines, once both are on the screen.
    t.wait_for("30 100\nshell\n");

    // The pane grows: the command's terminal follows.
    t.run(&["resize-window", "-t", &session, "-x", "120", "-y", "40"]);
    std::thread::sleep(Duration::from_millis(400));
    t.keys(&["clear; stty size", "Enter"]);
    t.wait_for("40 120");

    // Ctrl-C reaches the foreground job.
    t.keys(&["clear; sleep 100", "Enter"]);
    std::thread::sleep(Duration::from_millis(500));
    t.keys(&["C-c"]);
    t.keys(&["echo status=$?", "Enter"]);
    t.wait_for("status=130");

    // A prompt that reads line by line.
    t.keys(&["clear; python3 -q", "Enter"]);
    t.wait_for(">>>");
    t.keys(&["print(6 * 7)", "Enter"]);
    t.wait_for("42");
    t.keys(&["C-d"]);
    t.keys(&["exit 7", "Enter"]);
    t.wait_for("EXITED=7");
}

/// A command leaves a DEBUG trap in shell's `~/.bashrc` and `~/.profile`
/// that logs every line to a file; the owner then types a line in `bash
/// -i` and in a login `bash -il` on a terminal; a later command reads the
/// log and bash's history: the typed lines are in neither (a terminal's
/// HOME is a folder no command can write).
#[test]
fn a_bashrc_a_command_left_never_sees_what_the_owner_types() {
    if !common::privileged("a_bashrc_a_command_left_never_sees_what_the_owner_types") {
        return;
    }
    let m = common::Machine::boot(common::Options::default());
    let plant = r#"trap="trap 'echo \"\$BASH_COMMAND\" >> /tmp/typed.log' DEBUG"
printf '%s\n' "$trap" >> ~/.bashrc && printf '%s\n' "$trap" >> ~/.profile"#;
    let o = m.client().run(run(common::sh(plant), None)).unwrap();
    assert_eq!(o.exit.status, 0, "{}", text(&o.stderr));

    // The owner at a terminal: a line typed, then exit.
    for (i, flags) in ["-i", "-il"].into_iter().enumerate() {
        let mut client = m.client();
        let bash = vec!["bash".to_string(), flags.into()];
        let size = warden::wire::PtySize { rows: 24, cols: 80 };
        client
            .send(1, &warden::wire::Request::Run(run(bash, Some(size))))
            .unwrap();
        let typed = format!("echo owner-typed-$((6*7))-secret-{i}\nexit 5\n");
        client
            .send_frame(warden::wire::Kind::Stdin, 1, typed.as_bytes())
            .unwrap();
        let mut screen = Vec::new();
        let status = loop {
            match client.receive().unwrap() {
                warden::wire::client::Message::Output(_, 1, bytes) => {
                    screen.extend_from_slice(&bytes)
                }
                warden::wire::client::Message::Event(1, warden::wire::Event::Exit(r)) => {
                    break r.status
                }
                _ => {}
            }
        };
        let screen = text(&screen);
        assert_eq!(status, 5, "{flags}: {screen}");
        let said = format!("owner-typed-42-secret-{i}");
        assert!(screen.contains(&said), "{flags}: {screen}");
    }

    let o = m
        .client()
        .run(run(
            common::sh("cat /tmp/typed.log ~/.bash_history 2>/dev/null; true"),
            None,
        ))
        .unwrap();
    let seen = text(&o.stdout);
    assert!(!seen.contains("owner-typed"), "{seen}");
}

fn run(argv: Vec<String>, pty: Option<warden::wire::PtySize>) -> warden::wire::RunRequest {
    warden::wire::RunRequest {
        argv: Some(argv),
        pty,
        ..Default::default()
    }
}
