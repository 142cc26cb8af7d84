//! Which machine a `warden machine` command is for: one of this host's,
//! by id, or a warden reached through its TCP door.

use crate::error::CliError;
use warden::wire::client::Client;
use warden::wire::Request;

/// Which machine: one of this host's, by id, or a warden reached at
/// HOST:PORT (a pod's TCP door through `kubectl port-forward`).
#[derive(clap::Args)]
pub struct Target {
    /// The machine's id.
    #[arg(required_unless_present = "connect")]
    pub id: Option<String>,
    /// The machine's warden at HOST:PORT, its TCP door (on a cluster the
    /// local end of `kubectl port-forward pod/NAME PORT:7000`), with the
    /// machine's key from --key-file.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "id")]
    pub connect: Option<String>,
}

impl Target {
    /// The machine's id, checked, when it is one of this host's.
    pub fn id(&self) -> Result<Option<&str>, CliError> {
        match (&self.id, &self.connect) {
            (Some(id), _) => {
                warden::host::machine::check_id(id)?;
                Ok(Some(id))
            }
            (None, Some(_)) => Ok(None),
            (None, None) => Err(CliError::NoMachine),
        }
    }

    /// A client of the machine's warden, keyed.
    pub fn connect(&self, first: Option<(u32, &Request)>) -> Result<Client, CliError> {
        match (&self.id, &self.connect) {
            (Some(id), _) => Ok(warden::host::machine::connect(id, first)?),
            (None, Some(address)) => {
                let key = super::KEY.get().ok_or(CliError::NoKey)?;
                Client::connect_tcp(address, Some(key), first).map_err(|source| CliError::Door {
                    address: address.clone(),
                    source,
                })
            }
            (None, None) => Err(CliError::NoMachine),
        }
    }
}
