//! A container `up` keeps although its definition changed, because what
//! changed is what its warden reads again (`made_from::RELOADED`): the
//! machine's files written anew and its warden asked to `reload` them.

use super::backend::Prepared;
use super::state::write_machine_files;
use super::{made_from, step, LaunchError};
use std::time::Instant;

/// A container kept as it is: the fields its warden reads again that
/// changed (`made_from::RELOADED`) are written to its files, for the
/// `reload` once it answers (or its boot, when it is not running).
pub(super) fn keep(p: &Prepared, name: &str, reloads: &[String]) -> Result<(), LaunchError> {
    if reloads.is_empty() {
        step(p.start, &format!("{name}: unchanged, kept"));
        return Ok(());
    }
    write_machine_files(p.def, &p.state, p.host, None)?;
    made_from::keep(&p.state, &p.made_from);
    let changed = reloads.join(", ");
    step(
        p.start,
        &format!("{name}: kept; the definition's {changed} changed, which warden takes without making it again"),
    );
    Ok(())
}

/// Asks the machine's warden to read its files again (network policy,
/// limits, idle stop); a refusal says which file and that nothing changed.
pub(super) fn reload(id: &str, reloads: &[String], start: Instant) -> Result<(), LaunchError> {
    let what = "reload the machine's hosts, limits and idle stop";
    let mut client = super::state::connect(id, None)?;
    client
        .reload()
        .map_err(|e| LaunchError::new(what, e.to_string()))?;
    step(start, &format!("reloaded: {}", reloads.join(", ")));
    Ok(())
}
