//! Where the values of a machine's credentials come from, so that every
//! start hands them again: warden holds them in its memory alone, and a
//! machine started again (`--start`, `warden machine serve`) has none
//! until they are. `up` keeps the definition's path and the owner's `.env`
//! in the state folder (`handed-from.json`: paths, never values); a start
//! reads the values from there again.

use crate::host::definition::Definition;
use crate::host::LaunchError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

const FILE: &str = "handed-from.json";

/// The files the values were read from at the last `up`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandedFrom {
    pub definition: PathBuf,
    pub env_file: PathBuf,
}

/// Keeps them, for a machine with credentials; forgets them otherwise.
pub fn keep(state: &Path, def: &Definition, definition: &Path, env_file: &Path) {
    if def.opened.keys().is_empty() {
        let _ = std::fs::remove_file(state.join(FILE));
        return;
    }
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let from = HandedFrom {
        definition: absolute(definition),
        env_file: absolute(env_file),
    };
    let otherwise = "a start of the machine cannot hand its credentials again (`up` does)";
    crate::host::kept::write_or_say(&state.join(FILE), &from, otherwise);
}

/// Hands the machine's credentials again after a start, from where `up`
/// read them; a machine without any costs a look at its state folder.
/// What cannot be handed is said: its hosts refuse requests
/// (`credential_missing`) until the next `up`.
pub fn hand_again(id: &str, state: &Path) {
    let Ok(text) = std::fs::read(state.join(FILE)) else {
        return;
    };
    let handed = serde_json::from_slice::<HandedFrom>(&text)
        .map_err(|e| LaunchError::new(FILE, e.to_string()))
        .and_then(|from| {
            let def = Definition::load(&from.definition)?;
            let values = super::credentials_for(&def, &from.definition, Some(&from.env_file))?;
            crate::host::agent_setup::hand_credentials(&values, || super::connect(id, None))
        });
    if let Err(e) = handed {
        eprintln!("warden: machine {id}: its credentials were not handed again ({e}); its hosts with credentials refuse requests (credential_missing) until `warden machine up`");
    }
}
