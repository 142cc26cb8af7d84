//! A definition's fields that stand alone: its id, where its image comes
//! from, its environment and keys, its host lists, workspace, network,
//! firewall and the addresses it allows. Each is taken out of the object
//! and checked, or refused with the field named.

use super::{valid_id, DefinitionError, Network, Parser, Source, Workspace, MAX_KEYS};
use crate::shared::policy::Requirement;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

type Object = Map<String, Value>;

impl Parser<'_> {
    pub(super) fn id(&self, object: &mut Object) -> Result<String, DefinitionError> {
        let id: String = self
            .take(object, "id", "id")?
            .ok_or_else(|| self.invalid("id", "missing; every definition needs one"))?;
        if !valid_id(&id) {
            return Err(self.invalid(
                "id",
                format!(
                    "{id:?} must match [a-z0-9][a-z0-9-]{{0,30}} (it names containers and volumes)"
                ),
            ));
        }
        Ok(id)
    }

    /// `image` or `dockerfile`, one of them.
    pub(super) fn source(&self, object: &mut Object) -> Result<Source, DefinitionError> {
        let image: Option<String> = self.take(object, "image", "image")?.flatten();
        let dockerfile: Option<String> = self.take(object, "dockerfile", "dockerfile")?.flatten();
        match (image, dockerfile) {
            (Some(_), Some(_)) => {
                Err(self.invalid("image and dockerfile", "give one of them, not both"))
            }
            (None, None) => Err(self.invalid("image", "missing; give image or dockerfile")),
            (Some(image), None) => Ok(Source::Image(self.image(image)?)),
            (None, Some(file)) => Ok(Source::Dockerfile(self.resolve("dockerfile", &file)?)),
        }
    }

    /// `env` and the names of the owner's `keys`, which `env` may not set.
    pub(super) fn env_and_keys(
        &self,
        object: &mut Object,
    ) -> Result<(BTreeMap<String, String>, Vec<String>), DefinitionError> {
        let env: BTreeMap<String, String> = self.take(object, "env", "env")?.unwrap_or_default();
        for (name, value) in &env {
            self.name("env", name)?;
            if value.contains('\0') {
                return Err(self.invalid(format!("env.{name}"), "the value holds a NUL byte"));
            }
        }
        let keys: Vec<String> = self.take(object, "keys", "keys")?.unwrap_or_default();
        if keys.len() > MAX_KEYS {
            return Err(self.invalid("keys", format!("{} names, at most {MAX_KEYS}", keys.len())));
        }
        for (i, key) in keys.iter().enumerate() {
            let field = format!("keys[{i}]");
            self.name(&field, key)?;
            if let Some(j) = keys[..i].iter().position(|k| k == key) {
                return Err(self.invalid(field, format!("{key} is also keys[{j}]")));
            }
            if env.contains_key(key) {
                return Err(self.invalid(field, format!("{key} is also set in env")));
            }
        }
        Ok((env, keys))
    }

    /// `hosts` or `runtime_hosts`: a host list as the proxy reads it.
    pub(super) fn host_list(
        &self,
        object: &mut Object,
        field: &str,
    ) -> Result<Option<Vec<String>>, DefinitionError> {
        let hosts: Option<Vec<String>> = self.take(object, field, field)?.flatten();
        if let Some(hosts) = &hosts {
            crate::shared::egress::hosts::HostList::parse(hosts, &[80, 443])
                .map_err(|e| self.invalid(field, e.to_string()))?;
        }
        Ok(hosts)
    }

    pub(super) fn workspace(&self, object: &mut Object) -> Result<Workspace, DefinitionError> {
        let workspace: Option<String> = self.take(object, "workspace", "workspace")?;
        match workspace.as_deref() {
            None | Some("volume") => Ok(Workspace::Volume),
            Some(folder) if folder.starts_with('/') => {
                Ok(Workspace::Folder(self.mount_path("workspace", folder)?))
            }
            Some(other) => Err(self.invalid(
                "workspace",
                format!("{other:?} is neither \"volume\" nor an absolute folder"),
            )),
        }
    }

    pub(super) fn network(&self, object: &mut Object) -> Result<Network, DefinitionError> {
        let network: Option<String> = self.take(object, "network", "network")?;
        match network.as_deref() {
            None | Some("none") => Ok(Network::None),
            Some("private") => Ok(Network::Private),
            Some("host") => Ok(Network::Host),
            Some(path) if path.starts_with('/') => {
                Ok(Network::Namespace(self.mount_path("network", path)?))
            }
            Some(other) => Err(self.invalid(
                "network",
                format!("{other:?} is none of \"none\", \"private\", \"host\" or the absolute path of a network namespace"),
            )),
        }
    }

    pub(super) fn firewall(
        &self,
        object: &mut Object,
    ) -> Result<Option<Requirement>, DefinitionError> {
        let firewall: Option<Requirement> = self.take(object, "firewall", "firewall")?;
        if firewall == Some(Requirement::Off) {
            return Err(self.invalid(
                "firewall",
                "\"off\" is for measuring warden, not for a machine: required or best-effort",
            ));
        }
        Ok(firewall)
    }

    pub(super) fn allow_addresses(
        &self,
        object: &mut Object,
    ) -> Result<Vec<String>, DefinitionError> {
        let allow_addresses: Vec<String> = self
            .take(object, "allow_addresses", "allow_addresses")?
            .unwrap_or_default();
        for (i, block) in allow_addresses.iter().enumerate() {
            block
                .parse::<crate::shared::egress::addr::Cidr>()
                .map_err(|e| self.invalid(format!("allow_addresses[{i}]"), e.to_string()))?;
        }
        Ok(allow_addresses)
    }
}
