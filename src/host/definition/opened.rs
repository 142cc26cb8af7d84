//! A definition's opened hosts: `credentials` (added by warden's proxy,
//! their values from the owner's `.env`, never the machine's), `rules` by
//! method and path, `upstream_ca` (files inside the machine that its
//! proxy trusts for those hosts' origins, beside the image's store), and
//! the model `providers` whose requests it meters against `spend`.

use super::{DefinitionError, Parser};
use crate::shared::egress::credential::CredentialText;
use crate::shared::egress::opened_hosts::{HostRulesText, OpenedHosts};
use crate::shared::spend::{Provider, Spend};
use serde_json::{Map, Value};
use std::path::PathBuf;

/// The opened hosts' fields, checked.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Opened {
    pub credentials: Vec<CredentialText>,
    pub rules: Vec<HostRulesText>,
    pub upstream_ca: Vec<PathBuf>,
    pub providers: Vec<Provider>,
    pub spend: Option<Spend>,
}

impl Opened {
    /// The keys whose values the proxy adds (each once).
    pub fn keys(&self) -> Vec<String> {
        let credentials = self.credentials.iter().map(|c| c.key.clone());
        let providers = self.providers.iter().map(|p| p.key.clone());
        let mut keys: Vec<String> = credentials.chain(providers).collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// Pure: network.json's fields for them (none when there are none).
    pub fn policy(&self) -> Map<String, Value> {
        let mut policy = Map::new();
        if !self.credentials.is_empty() {
            policy.insert("credentials".into(), serde_json::json!(self.credentials));
        }
        if !self.rules.is_empty() {
            policy.insert("rules".into(), serde_json::json!(self.rules));
        }
        if !self.upstream_ca.is_empty() {
            policy.insert("upstream_ca".into(), serde_json::json!(self.upstream_ca));
        }
        if !self.providers.is_empty() {
            policy.insert("providers".into(), serde_json::json!(self.providers));
        }
        if let Some(spend) = &self.spend {
            policy.insert("spend".into(), serde_json::json!(spend));
        }
        policy
    }
}

impl Parser<'_> {
    pub(super) fn opened(
        &self,
        object: &mut Map<String, Value>,
    ) -> Result<Opened, DefinitionError> {
        let credentials: Vec<CredentialText> = self
            .take(object, "credentials", "credentials")?
            .unwrap_or_default();
        let rules: Vec<HostRulesText> = self.take(object, "rules", "rules")?.unwrap_or_default();
        let upstream_ca: Vec<PathBuf> = self
            .take(object, "upstream_ca", "upstream_ca")?
            .unwrap_or_default();
        let providers: Vec<Provider> = self
            .take(object, "providers", "providers")?
            .unwrap_or_default();
        let spend: Option<Spend> = self.take(object, "spend", "spend")?;
        crate::shared::spend::check(&providers, &spend.unwrap_or_default()).map_err(|e| {
            let text = e.to_string();
            let (field, problem) = text.split_once(": ").unwrap_or(("providers", &text));
            self.invalid(field, problem)
        })?;
        let mut all = credentials.clone();
        all.extend(providers.iter().map(Provider::credential));
        OpenedHosts::parse(&all, &rules).map_err(|e| {
            let text = e.to_string();
            let (field, problem) = text.split_once(": ").unwrap_or(("credentials", &text));
            self.invalid(field, problem)
        })?;
        if let Some((i, _)) = upstream_ca
            .iter()
            .enumerate()
            .find(|(_, p)| !p.is_absolute())
        {
            return Err(self.invalid(
                format!("upstream_ca[{i}]"),
                "must be an absolute path inside the machine (lend the file)",
            ));
        }
        Ok(Opened {
            credentials,
            rules,
            upstream_ca,
            providers,
            spend,
        })
    }
}
