//! `warden machine`: each subcommand handed to the launcher, the ones
//! that talk to a machine's warden (exec, status, audit) started first when
//! asked.

use super::sessions::{attach, list_commands};
use super::{audit_cli, card_cli, describe, run_on};
use super::{CliError, CommandArgs, ExecArgs, MachineAction, Target};
use std::path::{Path, PathBuf};

pub(crate) fn machine(action: MachineAction) -> Result<i32, CliError> {
    use warden::host::machine as m;
    // Each action asks for what it needs: exec and status only the state
    // folder, never the engine.
    match action {
        MachineAction::Check => machine_check(),
        MachineAction::Up {
            definition,
            env_file,
            vm,
            setup,
            warm,
            paused,
            fill,
        } => {
            let env_file = env_file.as_deref();
            let spares = warm.map(|count| m::warm::Spares { count, paused });
            match spares {
                Some(_) if vm => Err(warden::host::LaunchError::new(
                    "--warm",
                    "spares are containers; --vm has none",
                )),
                Some(spares) if fill => m::warm::fill(&definition, env_file, spares),
                Some(spares) => m::warm::up_warm(&definition, env_file, setup, spares),
                None => m::up(&definition, env_file, vm, setup),
            }
            .map(|()| 0)
            .map_err(CliError::from)
        }
        MachineAction::VmRelay { config } => {
            warden::host::vm::relay::run(&config, keep_awake).map_err(CliError::Relay)?;
            Ok(0)
        }
        MachineAction::Kube {
            definition,
            env_file,
            sandbox,
            runtime_class,
        } => machine_kube(
            &definition,
            env_file.as_deref(),
            sandbox,
            runtime_class.as_deref(),
        ),
        MachineAction::Ps { json } => m::ps(json).map(|()| 0).map_err(CliError::from),
        MachineAction::Exec(ExecArgs {
            target,
            start,
            command,
        }) => machine_exec(target, start, command),
        MachineAction::Status {
            target,
            json,
            start,
        } => machine_status(target, json, start),
        MachineAction::Commands { id } => {
            m::check_id(&id)?;
            list_commands(m::connect(&id, None)?)
        }
        MachineAction::Attach { id, command } => {
            m::check_id(&id)?;
            attach(m::connect(&id, None)?, command)
        }
        MachineAction::Stop { id } => m::check_id(&id)
            .and_then(|()| m::stop(&id))
            .map(|()| 0)
            .map_err(CliError::from),
        MachineAction::Down { id } => m::check_id(&id)
            .and_then(|()| m::down(&id))
            .map(|()| 0)
            .map_err(CliError::from),
        MachineAction::Serve { lead } => {
            warden::host::machine::serve::run(std::time::Duration::from_secs(lead))
                .map(|()| 0)
                .map_err(CliError::from)
        }
        MachineAction::Logs { id } => m::check_id(&id)
            .and_then(|()| m::logs(&id))
            .map(|()| 0)
            .map_err(CliError::from),
        MachineAction::Rm { id, volumes } => m::check_id(&id)
            .and_then(|()| m::rm(&id, volumes))
            .map(|()| 0)
            .map_err(CliError::from),
        MachineAction::Prune => m::prune().map(|()| 0).map_err(CliError::from),
        MachineAction::Card(args) => card_cli::run(args),
        MachineAction::Audit {
            target,
            allow_gap,
            anchor,
        } => machine_audit(target, allow_gap, anchor),
    }
}

/// `warden machine check`: this host's facts, then its verdict.
fn machine_check() -> Result<i32, CliError> {
    use warden::host::machine as m;
    let host = m::host()?;
    for fact in &host.facts {
        println!("{fact}");
    }
    if let Some(line) = m::private_network(host) {
        println!("{line}");
    }
    println!("this host can run machines");
    Ok(0)
}

/// `warden machine kube`: prints the definition's manifests.
fn machine_kube(
    definition: &Path,
    env_file: Option<&Path>,
    sandbox: bool,
    runtime_class: Option<&str>,
) -> Result<i32, CliError> {
    let text = warden::host::kube::kube(definition, env_file, sandbox, runtime_class)?;
    print!("{text}");
    Ok(0)
}

/// Starts the machine `target` names when `start` asks for it; returns
/// its id (None for a door reached with --connect).
fn start_if_asked(target: &Target, start: bool) -> Result<Option<&str>, CliError> {
    let id = target.id()?;
    if start {
        warden::host::machine::start_asked(id.ok_or(CliError::StartNeedsId)?)?;
    }
    Ok(id)
}

/// `warden machine exec`: runs the command through the machine's warden.
fn machine_exec(target: Target, start: bool, command: CommandArgs) -> Result<i32, CliError> {
    start_if_asked(&target, start)?;
    run_on(command.request()?, |first| target.connect(first))
}

/// `warden machine status`: the warden's status, then (for a machine of
/// this host) what the engine says of it.
fn machine_status(target: Target, json: bool, start: bool) -> Result<i32, CliError> {
    use warden::host::machine as m;
    let id = start_if_asked(&target, start)?;
    let status = target.connect(None)?.status()?;
    match json {
        true => println!("{}", serde_json::to_string_pretty(&status)?),
        false => {
            print!("{}", describe(&status));
            // What the engine says of a machine of this host.
            if let Some(id) = id {
                for line in m::published_ports(id) {
                    println!("published: {line}");
                }
                if let Some(size) = m::size_of(&m::container(id)) {
                    println!("machine size: {size}");
                }
            }
        }
    }
    Ok(0)
}

/// `warden machine audit`: copies the log out, verifies it, prints its
/// last lines; returns the verification's status.
fn machine_audit(
    target: Target,
    allow_gap: bool,
    anchor: Option<PathBuf>,
) -> Result<i32, CliError> {
    use warden::host::machine as m;
    // `_copy` holds a door's copy until the log is read from it.
    let (files, anchor, _copy) = match target.id()? {
        Some(_) if anchor.is_some() => return Err(CliError::AnchorNeedsConnect),
        Some(id) => {
            let (files, anchor) = m::copy_audit(id)?;
            (files, anchor, None)
        }
        None => {
            // Read through the door into a folder of this run's.
            let copy = tempfile::tempdir().map_err(CliError::Io)?;
            let mut client = target.connect(None)?;
            let files = m::read_audit_into(&mut client, copy.path())?;
            (files, anchor, Some(copy))
        }
    };
    let status = audit_cli::verify(&files, anchor.as_deref(), allow_gap);
    for line in m::describe_tail(&files, 20) {
        println!("{line}");
    }
    Ok(status)
}

/// A VM's relay keeps the machine awake while it carries a connection to a
/// published port: thawed first when serve froze it (a wake of cause
/// `port`), and no freeze meanwhile.
fn keep_awake(id: &str) -> Result<Box<dyn Send>, String> {
    warden::host::machine::serve::awake(id, Some("port"))
        .map(|held| Box::new(held) as Box<dyn Send>)
        .map_err(|e| e.to_string())
}
