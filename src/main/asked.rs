//! `warden status`, `warden reload` and `warden ready`: the commands of a
//! machine's own socket that ask warden one thing and print its answer.

use crate::connect;
use crate::describe::{describe, describe_proxy};
use crate::error::CliError;
use std::path::Path;

pub fn reload(socket: &Path) -> Result<i32, CliError> {
    let mut client = connect(socket)?;
    let state = client.reload()?;
    print!("reloaded: {}", describe_proxy(&state));
    Ok(0)
}

pub fn ready(socket: &Path) -> Result<i32, CliError> {
    let after_ms = connect(socket)?.ready()?;
    println!("ready since {after_ms} ms after warden started");
    Ok(0)
}

pub fn status(socket: &Path, json: bool) -> Result<i32, CliError> {
    let mut client = connect(socket)?;
    let status = client.status()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print!("{}", describe(&status));
    }
    Ok(0)
}
