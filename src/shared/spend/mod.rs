//! Spending held below the agent: the model providers a machine reaches
//! (their hosts opened by the proxy, their keys added by warden), the
//! prices their models are metered at, the runs and budgets requests count
//! against, the metering of each request, and a run's card.
//!
//! All of it is pure (the prices file and the audit log aside, read
//! whole), and both sides use it: the guest's proxy meters and keeps the
//! ledger, its API builds cards; the host's launcher checks a
//! definition's providers and budgets (`check`); the command line builds
//! and renders cards from a copied log.

pub mod card;
pub mod card_render;
pub mod ledger;
pub mod meter;
pub mod prices;
pub mod usage;

use crate::shared::egress::credential::{CredentialText, Holder};
use serde::{Deserialize, Serialize};
use usage::Api;

/// A model provider, as the definition and network.json name it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    pub name: String,
    pub host: String,
    pub api: Api,
    /// The key's name: its value is handed to warden, never to the runtime.
    pub key: String,
}

impl Provider {
    /// The credential warden adds for it: the runtime's alone.
    pub fn credential(&self) -> CredentialText {
        let (header, value) = match self.api {
            Api::AnthropicMessages => ("x-api-key", "{key}"),
            Api::OpenAi => ("Authorization", "Bearer {key}"),
        };
        CredentialText {
            host: self.host.clone(),
            key: self.key.clone(),
            header: header.into(),
            value: value.into(),
            holders: vec![Holder::Runtime],
        }
    }

    /// The variable that points the provider's SDK at its endpoint on the
    /// proxy's `port` (the runtime's alone), and its value.
    pub fn base_url(&self, port: u16) -> (&'static str, String) {
        let endpoint = format!("http://127.0.0.1:{port}/providers/{}", self.name);
        match self.api {
            Api::AnthropicMessages => ("ANTHROPIC_BASE_URL", endpoint),
            Api::OpenAi => ("OPENAI_BASE_URL", format!("{endpoint}/v1")),
        }
    }
}

/// The budgets, in dollars.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Spend {
    #[serde(default = "per_run")]
    pub per_run_usd: f64,
    #[serde(default = "per_day")]
    pub per_day_usd: f64,
}

fn per_run() -> f64 {
    1.0
}

fn per_day() -> f64 {
    10.0
}

impl Default for Spend {
    fn default() -> Spend {
        Spend {
            per_run_usd: per_run(),
            per_day_usd: per_day(),
        }
    }
}

/// The metered half of the guest's `provider_request` audit line.
#[derive(Debug, Clone, Serialize)]
pub struct AuditLine {
    pub run: Option<String>,
    pub provider: String,
    pub api: &'static str,
    pub model: String,
    pub status: Option<u16>,
    pub streamed: bool,
    pub cut: bool,
    pub estimated: bool,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_write_tokens: u64,
    pub cache_read_tokens: u64,
    pub micro_usd: u64,
    pub duration_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<&'static str>,
}

/// Pure: the `provider_request` audit line of a metered request.
pub fn audit_line(
    provider: &str,
    api: Api,
    charged: &meter::Charged,
    status: Option<u16>,
) -> AuditLine {
    let t = &charged.tokens;
    AuditLine {
        run: charged.run.clone(),
        provider: provider.to_string(),
        api: api.word(),
        model: charged.model.clone(),
        status,
        streamed: charged.streamed,
        cut: charged.cut,
        estimated: charged.estimated,
        input_tokens: t.input,
        output_tokens: t.output,
        cache_write_tokens: t.cache_write,
        cache_read_tokens: t.cache_read,
        micro_usd: charged.micro_usd,
        duration_ms: charged.duration_ms,
        refused: charged.refused,
    }
}

/// Why `providers` and `spend` cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpendPolicyError {
    /// A name that cannot be a path segment.
    #[error("providers[{index}]: the name {name:?} is not [a-z0-9-]+")]
    Name { index: usize, name: String },
    #[error("providers[{index}]: the name {name:?} is also providers[{first}]'s")]
    Twice {
        index: usize,
        name: String,
        first: usize,
    },
    /// `per_run_usd` or `per_day_usd` out of range.
    #[error("spend.{field}: {source}")]
    Budget {
        field: &'static str,
        source: ledger::SpendError,
    },
}

/// Pure: why `providers` and `spend` cannot be taken, if they cannot
/// (a name that cannot be a path segment, or given twice; a budget out of
/// range).
pub fn check(providers: &[Provider], spend: &Spend) -> Result<(), SpendPolicyError> {
    for (index, p) in providers.iter().enumerate() {
        let segment = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-';
        if p.name.is_empty() || !p.name.bytes().all(segment) {
            return Err(SpendPolicyError::Name {
                index,
                name: p.name.clone(),
            });
        }
        if let Some(first) = providers[..index].iter().position(|q| q.name == p.name) {
            return Err(SpendPolicyError::Twice {
                index,
                name: p.name.clone(),
                first,
            });
        }
    }
    for (field, usd) in [
        ("per_run_usd", spend.per_run_usd),
        ("per_day_usd", spend.per_day_usd),
    ] {
        ledger::micro_usd(usd).map_err(|source| SpendPolicyError::Budget { field, source })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_s_key_is_the_runtime_s_header_of_its_api() {
        let p: Provider = serde_json::from_str(
            r#"{"name": "anthropic", "host": "api.anthropic.com", "api": "anthropic-messages", "key": "ANTHROPIC_API_KEY"}"#,
        )
        .unwrap();
        let c = p.credential();
        assert_eq!(
            (c.header.as_str(), c.value.as_str()),
            ("x-api-key", "{key}")
        );
        assert_eq!(c.holders, vec![Holder::Runtime]);
        assert_eq!(
            p.base_url(3128).1,
            "http://127.0.0.1:3128/providers/anthropic"
        );
        let o: Provider = serde_json::from_str(
            r#"{"name": "openai", "host": "api.openai.com", "api": "openai", "key": "K"}"#,
        )
        .unwrap();
        assert_eq!(o.credential().value, "Bearer {key}");
        assert_eq!(
            o.base_url(3128),
            (
                "OPENAI_BASE_URL",
                "http://127.0.0.1:3128/providers/openai/v1".into()
            )
        );
        assert!(check(&[p.clone(), p.clone()], &Spend::default())
            .unwrap_err()
            .to_string()
            .contains("also providers[0]"));
        let mut bad = p.clone();
        bad.name = "A/B".into();
        assert!(check(&[bad], &Spend::default()).is_err());
        assert!(check(
            &[p],
            &Spend {
                per_run_usd: -1.0,
                per_day_usd: 1.0
            }
        )
        .is_err());
        assert!(serde_json::from_str::<Provider>(
            r#"{"name": "x", "host": "h", "api": "other", "key": "K"}"#
        )
        .is_err());
        assert_eq!(Spend::default().per_run_usd, 1.0);
    }
}
