//! The API against a real warden (PID 1 of its own namespace), with real
//! users: who commands run as, what they see, how they end, who may connect,
//! and what malformed input gets. The tests are in tests/api/, by concern;
//! the requests they share are here.

mod common;

#[path = "api/commands.rs"]
mod commands;
#[path = "api/connections.rs"]
mod connections;
#[path = "api/ends.rs"]
mod ends;
#[path = "api/records.rs"]
mod records;

use common::{Machine, Options};
use warden::wire::client::Output;
use warden::wire::RunRequest;

fn argv(args: &[&str]) -> RunRequest {
    RunRequest {
        argv: Some(args.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
}

fn shell(line: &str) -> RunRequest {
    RunRequest {
        shell: Some(line.into()),
        ..Default::default()
    }
}

fn run(m: &Machine, req: RunRequest) -> Output {
    m.client().run(req).unwrap()
}

fn boot() -> Machine {
    Machine::boot(Options::default())
}
