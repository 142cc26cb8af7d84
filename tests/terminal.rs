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
