//! A model provider's own endpoint, for the runtime alone: plain HTTP to
//! the proxy's port under `/providers/NAME/` (an SDK pointed there by
//! `ANTHROPIC_BASE_URL` or `OPENAI_BASE_URL`, which need not honour a
//! proxy), carried by warden over its own TLS to the provider with the
//! same key, metering and budget as the proxy's opened route. On the
//! proxy's port, which the firewall already gives the runtime; anyone but
//! the runtime is turned away.

use super::rules::Rules;
use super::{Proxy, Request};
use crate::shared::egress::refusal::{Kind, Refused};
use crate::shared::egress::target::{Host, Target};

/// Where a provider's endpoint begins on the proxy's port.
pub const PREFIX: &str = "/providers/";

/// Pure: the provider a request head is for, when its target is one of
/// the providers' endpoints (origin form, under `PREFIX`).
pub fn provider_name(head: &[u8]) -> Option<&str> {
    let line = head.split(|b| *b == b'\r' || *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let target = line.split(' ').nth(1)?;
    let rest = target.strip_prefix(PREFIX)?;
    let name = rest.split(['/', '?']).next()?;
    (!name.is_empty()).then_some(name)
}

/// The endpoint's prefix for `name`, cut from the target sent on.
pub fn prefix(name: &str) -> String {
    format!("{PREFIX}{name}")
}

impl Proxy {
    /// The request a provider's endpoint stands for (a CONNECT to its
    /// host), once the runtime is known to be the one asking.
    pub(super) async fn local_request(
        &self,
        rules: &Rules,
        name: &str,
        ends: super::Ends,
    ) -> Result<Request, Refused> {
        self.runtime_asks(ends).await?;
        let provider = rules
            .providers
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| {
                Refused::new(
                    Kind::BadTarget,
                    format!("{PREFIX}{name}: no provider of that name"),
                )
            })?;
        Ok(Request {
            method: "CONNECT".into(),
            target: Target {
                host: Host::Name(provider.host.clone()),
                port: 443,
            },
            plain: None,
        })
    }

    /// Only the runtime may use a provider's endpoint.
    async fn runtime_asks(&self, ends: super::Ends) -> Result<(), Refused> {
        let not = |why: String| Refused::new(Kind::UnknownAsker, why);
        let runtime = self
            .runtime
            .as_ref()
            .ok_or_else(|| not("no runtime is served here".into()))?;
        match self.client_uid(runtime, ends).await {
            Some(uid) if uid == runtime.uid => Ok(()),
            Some(uid) => Err(not(format!(
                "a provider's endpoint is the runtime's alone (uid {uid} asked)"
            ))),
            None => Err(not("who asks could not be told".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_s_endpoint_is_found_by_its_path() {
        let cases: [(&[u8], Option<&str>); 6] = [
            (
                b"POST /providers/anthropic/v1/messages HTTP/1.1\r\n",
                Some("anthropic"),
            ),
            (
                b"POST /providers/openai/v1/chat/completions?x=1 HTTP/1.1\r\n",
                Some("openai"),
            ),
            (b"GET /providers/openai HTTP/1.1\r\n", Some("openai")),
            (b"GET /providers/ HTTP/1.1\r\n", None),
            (b"CONNECT api.anthropic.com:443 HTTP/1.1\r\n", None),
            (b"GET http://x/providers/a HTTP/1.1\r\n", None),
        ];
        for (head, want) in cases {
            assert_eq!(
                provider_name(head),
                want,
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }
}
