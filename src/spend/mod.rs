//! Spending held below the agent: the model providers a machine reaches
//! (their hosts opened by the proxy, their keys added by warden), the
//! prices their models are metered at, the runs and budgets requests count
//! against, and the metering of each request.

pub mod card;
pub mod ledger;
pub mod meter;
pub mod prices;
pub mod usage;

use crate::net::opened::credential::{CredentialText, Holder};
use serde::{Deserialize, Serialize};
use usage::Api;

/// The first loopback port of the providers' own endpoints.
pub const FIRST_LOCAL_PORT: u16 = 3130;

/// A model provider, as the definition and network.json name it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    pub name: String,
    pub host: String,
    pub api: Api,
    /// The key's name: its value is handed to warden, never to the runtime.
    pub key: String,
    /// warden's plain-HTTP endpoint for it on loopback (the runtime's
    /// alone); default 3130 and up, in the order written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_port: Option<u16>,
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

    /// The variable that points the provider's SDK at warden's endpoint,
    /// and its value.
    pub fn base_url(&self, port: u16) -> (&'static str, String) {
        match self.api {
            Api::AnthropicMessages => ("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{port}")),
            Api::OpenAi => ("OPENAI_BASE_URL", format!("http://127.0.0.1:{port}/v1")),
        }
    }
}

/// The local ports of `providers`, in order.
pub fn local_ports(providers: &[Provider]) -> Vec<u16> {
    providers
        .iter()
        .enumerate()
        .map(|(i, p)| p.local_port.unwrap_or(FIRST_LOCAL_PORT + i as u16))
        .collect()
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

/// Pure: the `provider_request` audit line of a metered request.
pub fn audit_line(
    provider: &str,
    api: Api,
    charged: &meter::Charged,
    status: Option<u16>,
) -> serde_json::Value {
    let t = &charged.tokens;
    let mut line = serde_json::json!({
        "run": charged.run, "provider": provider, "api": api.word(), "model": charged.model,
        "status": status, "streamed": charged.streamed, "cut": charged.cut,
        "estimated": charged.estimated, "input_tokens": t.input, "output_tokens": t.output,
        "cache_write_tokens": t.cache_write, "cache_read_tokens": t.cache_read,
        "micro_usd": charged.micro_usd, "duration_ms": charged.duration_ms,
    });
    if let Some(reason) = charged.refused {
        line["refused"] = reason.into();
    }
    line
}

/// Pure: why `providers` and `spend` cannot be taken, if they cannot
/// (names and local ports given twice, budgets out of range).
pub fn check(providers: &[Provider], spend: &Spend) -> Result<(), String> {
    for (i, p) in providers.iter().enumerate() {
        if let Some(j) = providers[..i].iter().position(|q| q.name == p.name) {
            return Err(format!(
                "providers[{i}]: the name {:?} is also providers[{j}]'s",
                p.name
            ));
        }
    }
    let ports = local_ports(providers);
    for (i, port) in ports.iter().enumerate() {
        if *port == 0 || ports[..i].contains(port) {
            return Err(format!(
                "providers[{i}]: local_port {port} is 0 or given twice"
            ));
        }
    }
    for (field, usd) in [
        ("per_run_usd", spend.per_run_usd),
        ("per_day_usd", spend.per_day_usd),
    ] {
        ledger::micro_usd(usd).map_err(|e| format!("spend.{field}: {e}"))?;
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
        assert_eq!(p.base_url(3130).1, "http://127.0.0.1:3130");
        let o: Provider = serde_json::from_str(
            r#"{"name": "openai", "host": "api.openai.com", "api": "openai", "key": "K", "local_port": 4000}"#,
        )
        .unwrap();
        assert_eq!(o.credential().value, "Bearer {key}");
        assert_eq!(local_ports(&[p, o]), vec![3130, 4000]);
        assert!(serde_json::from_str::<Provider>(
            r#"{"name": "x", "host": "h", "api": "other", "key": "K"}"#
        )
        .is_err());
        assert_eq!(Spend::default().per_run_usd, 1.0);
    }
}
