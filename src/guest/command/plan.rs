//! A command's spawn plan: what it takes to run a checked request as
//! `shell` (its limits, its folder opened or made, its environment, every
//! confinement layer, its cgroup and its lifetime tag), built from the
//! supervisor's state. The spawner thread then forks it.

use super::request::ValidRun;
use crate::guest::accounts::layout;
use crate::guest::confine::cgroups::CommandCgroup;
use crate::guest::confine::spawn::{Grouping, Launch, Workdir};
use crate::guest::supervisor::{c_path, identity, Supervisor};
use crate::wire::Limits;

/// Everything to run `run` as shell: its folder opened (made if
/// missing), its environment, and every confinement layer.
/// A command's launch as shell, carrying its lifetime `tag` as one more
/// supplementary group.
pub fn shell_launch(
    sup: &Supervisor,
    run: &ValidRun,
    limits: &Limits,
    tag: u32,
) -> Result<(Launch, Option<CommandCgroup>), String> {
    let mut env = sup.shell_env(&run.env);
    if run.pty.is_some() {
        terminal_env(&mut env, &run.env);
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let folder = match &run.folder {
        None => None,
        Some(parts) => Some(
            layout::make_folder(
                &sup.spawner.in_commands_view(&sup.paths.workspace),
                parts,
                layout::Who {
                    uid: sup.shell.uid,
                    gid: sup.shell.gid,
                    groups: &sup.shell.groups,
                },
                &refused_folders(sup),
            )
            .map_err(|e| format!("cannot make or enter the working folder: {e}"))?,
        ),
    };
    let mut confine = sup
        .confinement
        .for_command(folder.as_ref(), limits, false)
        .map_err(|e| e.to_string())?;
    let cgroup = sup
        .confinement
        .command_cgroup(&tag.to_string(), limits)
        .map_err(|e| e.to_string())?
        .map(|(cgroup, procs)| {
            confine.join_cgroup(procs);
            cgroup
        });
    let workdir = match folder {
        None => Workdir::At(c_path(&sup.shell.home).map_err(|e| e.to_string())?),
        Some(fd) => Workdir::Fd(fd),
    };
    let mut identity = identity(&sup.shell);
    identity.groups.push(tag);
    Launch::new(
        &run.argv,
        &env,
        &path,
        identity,
        Grouping::Session,
        workdir,
        Some(confine),
    )
    .map(|launch| (launch, cgroup))
    .map_err(|e| e.to_string())
}

/// Folders under the workspace that are never a command's (the
/// routines, when they are there), as components.
fn refused_folders(sup: &Supervisor) -> Vec<Vec<String>> {
    match sup.paths.routines.strip_prefix(&sup.paths.workspace) {
        Ok(rel) => vec![rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect()],
        Err(_) => Vec::new(),
    }
}

/// A terminal's environment: HOME is `/`, a folder no command can write,
/// unless the request names one. shell's home is shared and lasts; a
/// `.bashrc`, `.profile` or `.inputrc` a command left there would otherwise
/// run in the owner's interactive shell and see what is typed. warden
/// cannot give `--norc` to a program the owner names, so it moves HOME.
/// PYTHONSAFEPATH keeps an interactive `python3` from importing (say, its
/// `readline`) from the working folder, which commands write.
fn terminal_env(env: &mut Vec<(String, String)>, asked: &[(String, String)]) {
    for (name, value) in [("HOME", "/"), ("PYTHONSAFEPATH", "1")] {
        if asked.iter().any(|(k, _)| k == name) {
            continue;
        }
        env.retain(|(k, _)| k != name);
        env.push((name.into(), value.into()));
    }
    env.sort();
}
