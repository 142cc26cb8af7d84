//! The version 6 request `run_setup`: the owner has warden run the
//! machine's setup script as the runtime, where the owner has no other way
//! to act as the runtime (a VM: no engine to `exec` with). The script runs
//! on sh's stdin, in a fresh folder of the runtime's data (never the
//! workspace: see `shared::setup_script::SETUP_SCRIPT`), with what the main process
//! gets (its environment, its keys, the proxy), and without shell's
//! confinement: it is the owner's, like the main process. Its output comes
//! back whole up to its last 64 KiB, with its status, in one answer.

use super::{error, Conn, Door};
use crate::guest::audit::payload;
use crate::guest::confine::spawn::Stdio;
use crate::guest::supervisor::Supervisor;
use crate::wire::{ErrorCode, Event};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most of a setup's output that comes back (its end).
const OUTPUT_KEPT: usize = 64 * 1024;

/// One setup at a time, machine-wide.
static RUNNING: AtomicBool = AtomicBool::new(false);

impl Conn {
    pub(super) fn run_setup(self: &Arc<Self>, id: u32, script: String) -> Option<Event> {
        if let Some(refused) = self.needs(6, "run_setup") {
            return Some(refused);
        }
        if matches!(self.door, Door::Local) {
            return Some(error(
                ErrorCode::Refused,
                "run_setup is the owner's: the host's door, with the machine's key",
            ));
        }
        if RUNNING.swap(true, Ordering::SeqCst) {
            return Some(error(ErrorCode::BadRequest, "a setup runs already"));
        }
        let conn = self.clone();
        tokio::spawn(async move {
            let sup = conn.sup.clone();
            let ran = tokio::task::spawn_blocking(move || run(&sup, &script)).await;
            RUNNING.store(false, Ordering::SeqCst);
            let answer = match ran {
                Ok(Ok((status, output))) => Event::SetupEnded { status, output },
                Ok(Err(e)) => error(ErrorCode::Internal, format!("setup: {e}")),
                Err(_) => error(ErrorCode::Internal, "setup: its thread failed"),
            };
            conn.send(id, answer).await;
        });
        None
    }
}

/// Runs `script` as the runtime and waits for it: its status and the end
/// of its output. Recorded in the audit log (digests, never the text).
fn run(sup: &Supervisor, script: &str) -> Result<(i32, String), String> {
    let started = Instant::now();
    let folder = sup
        .paths
        .data
        .join(crate::shared::setup_script::SETUP_FOLDER);
    let argv = vec![
        "sh".to_string(),
        "-c".into(),
        crate::shared::setup_script::SETUP_SCRIPT.into(),
        "sh".into(),
        folder.display().to_string(),
    ];
    let launch = sup.main_launch(&argv).map_err(|e| e.to_string())?;
    let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
    let (stdin, feed) = nix::unistd::pipe2(cloexec).map_err(|e| e.to_string())?;
    let (drain, stdout) = nix::unistd::pipe2(cloexec).map_err(|e| e.to_string())?;
    let stderr = stdout.try_clone().map_err(|e| e.to_string())?;
    let stdio = Stdio {
        stdin,
        stdout,
        stderr,
        terminal: false,
    };
    let spawned = sup
        .spawn_runtime(launch, stdio, true)
        .map_err(|e| e.to_string())?;
    let text = script.to_owned();
    // Fed and drained on threads of their own: a script longer than a
    // pipe, or one that prints a lot before it reads, blocks neither.
    std::thread::spawn(move || {
        let _ = std::fs::File::from(feed).write_all(text.as_bytes());
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(tail_of(std::fs::File::from(drain)));
    });
    let exit = spawned
        .exit
        .blocking_recv()
        .map_err(|_| "its end was not seen".to_string())?;
    // A process it left behind may hold its output open: what came by
    // then is what it said.
    let output = rx.recv_timeout(Duration::from_secs(2)).unwrap_or_default();
    let status = exit.status();
    sup.audit.record(&payload::Setup {
        status,
        script_sha256: format!("{:x}", Sha256::digest(script.as_bytes())),
        output_bytes: output.len(),
        duration_ms: started.elapsed().as_millis() as u64,
    });
    Ok((status, String::from_utf8_lossy(&output).into_owned()))
}

/// Everything `from` gives until its end, keeping the last `OUTPUT_KEPT`
/// bytes.
fn tail_of(mut from: impl Read) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n @ 1..) = from.read(&mut buf) {
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > 2 * OUTPUT_KEPT {
            kept.drain(..kept.len() - OUTPUT_KEPT);
        }
    }
    if kept.len() > OUTPUT_KEPT {
        kept.drain(..kept.len() - OUTPUT_KEPT);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_is_the_last_64_kib() {
        let cases = [
            (0usize, 0usize),
            (100, 100),
            (OUTPUT_KEPT, OUTPUT_KEPT),
            (5 * OUTPUT_KEPT + 7, OUTPUT_KEPT),
        ];
        for (given, kept) in cases {
            let text: Vec<u8> = (0..given).map(|i| (i % 251) as u8).collect();
            let tail = tail_of(&text[..]);
            assert_eq!(tail.len(), kept, "{given}");
            assert_eq!(tail, &text[given - kept..], "{given}");
        }
    }
}
