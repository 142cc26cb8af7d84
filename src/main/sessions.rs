//! The command line's sessions beyond one run: detached commands listed
//! and followed (`commands`, `attach`), and a terminal's size followed
//! while a run has one (`run -t`, `machine exec -it`).

use crate::error::CliError;
use std::io::Write;
use warden::wire::client::{Client, Message};
use warden::wire::{Event, Kind, Request};

/// Prints the detached commands, one a line.
pub fn list_commands(mut client: Client) -> Result<i32, CliError> {
    client.send(0, &Request::List).map_err(CliError::Send)?;
    match client.receive()? {
        Message::Event(_, Event::Commands { commands }) => {
            for c in commands {
                let end = match &c.exit {
                    Some(exit) => format!("exited {}", exit.status),
                    None => "running".to_string(),
                };
                let tag = c.tag.map(|t| format!(" {t:?}")).unwrap_or_default();
                println!("{}{tag}\tpid {}\t{end}\t{:?}", c.command, c.pid, c.argv);
            }
            Ok(0)
        }
        Message::Event(_, Event::Error { code, message }) => {
            Err(CliError::Refused { code, message })
        }
        other => Err(CliError::Unexpected(Box::new(other))),
    }
}

/// Writes one output frame where it belongs, stdout flushed frame by
/// frame (a prompt has no newline); false once stdout is gone (the
/// reader stopped: exit as a Unix tool does, 141).
pub fn print_output(kind: Kind, bytes: &[u8], stdout: &mut std::io::StdoutLock) -> bool {
    match kind {
        Kind::Stderr => {
            let _ = std::io::stderr().write_all(bytes);
            true
        }
        _ => stdout
            .write_all(bytes)
            .and_then(|()| stdout.flush())
            .is_ok(),
    }
}

/// Follows a detached command to its end; its exit status is ours.
pub fn attach(mut client: Client, command: u64) -> Result<i32, CliError> {
    const ID: u32 = 1;
    client
        .send(ID, &Request::Attach { command })
        .map_err(CliError::Send)?;
    let mut stdout = std::io::stdout().lock();
    loop {
        match client.receive()? {
            Message::Output(kind, _, bytes) => {
                if !print_output(kind, &bytes, &mut stdout) {
                    return Ok(141);
                }
            }
            Message::Event(_, Event::Attached { dropped_bytes, .. }) if dropped_bytes > 0 => {
                eprintln!("warden: {dropped_bytes} bytes of its first output were let go (nobody was attached)");
            }
            Message::Event(_, Event::Exit(report)) => return Ok(report.status),
            Message::Event(_, Event::Error { code, message }) => {
                return Err(CliError::Refused { code, message })
            }
            Message::Event(..) => {}
        }
    }
}

/// Sends the command's terminal this terminal's size whenever it changes
/// (looked at ten times a second: no signal handler in this process).
pub fn follow_size(sender: warden::wire::client::Sender, target: u32) {
    std::thread::spawn(move || {
        let mut last = crate::terminal::own_size();
        loop {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let now = crate::terminal::own_size();
            if now != last {
                if let Some((rows, cols)) = now {
                    if sender
                        .send(0, &Request::Resize { target, rows, cols })
                        .is_err()
                    {
                        return;
                    }
                }
                last = now;
            }
        }
    });
}
