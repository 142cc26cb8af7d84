//! A CONNECT to an opened host (one with credentials or rules by method
//! and path), from the proxy's side: what the tunnel will do, decided
//! before the origin is reached (`plan`), then the client's TLS ended with
//! the machine's own authority, warden's own TLS to the origin, and one
//! request carried between them (`opened::exchange`). Every other host
//! stays a tunnel warden never opens. A plain-HTTP request to such a host
//! meets the same rules, and never a credential.

use super::rules::Rules;
use super::upstream::Upstream;
use crate::guest::net::opened::ca::MachineCa;
use crate::guest::net::opened::exchange::{self, Added, Exchange, Outcome};
use crate::guest::net::opened::streams::Prefixed;
use crate::guest::net::opened::tls::{self, TlsError, Upstreams};
use crate::guest::net::opened::trust::{Published, TrustError};
use crate::guest::net::opened::vault::Vault;
use crate::guest::net::opened::OpenerError;
use crate::guest::vm::vsock::Capped;
use crate::shared::egress::credential::Holder;
use crate::shared::egress::refusal::{Kind, Refused};
use crate::shared::egress::request_rules::{self, Rule};
use crate::shared::spend::ledger::{micro_usd, Ledger};
use crate::shared::spend::meter::Meter;
use crate::shared::spend::prices::{LoadPricesError, Prices};
use crate::shared::spend::Spend;
use crate::wire::{CredentialState, OpenedState, RunState, SpendState};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// What opens hosts: the machine's authority, the credentials' values,
/// and the upstream trust (made on first use, again when `upstream_ca`
/// changes).
pub struct Opener {
    pub ca: MachineCa,
    pub vault: Arc<Vault>,
    upstreams: Mutex<Option<(Vec<PathBuf>, Arc<Upstreams>)>>,
    /// The runs and budgets provider requests count against.
    pub ledger: Arc<Ledger>,
    /// The models' prices (prices.json), or why there are none.
    pub prices: Result<Arc<Prices>, LoadPricesError>,
}

impl Opener {
    /// A new authority for the machine `name`, no credential yet, the
    /// budgets of `spend` and the prices of `prices`.
    pub fn new(
        name: &str,
        spend: &Spend,
        prices: Result<Prices, LoadPricesError>,
    ) -> Result<Opener, OpenerError> {
        Ok(Opener {
            ca: MachineCa::new(name)?,
            vault: Arc::new(Vault::default()),
            upstreams: Mutex::new(None),
            ledger: Arc::new(Ledger::new(
                micro_usd(spend.per_run_usd)?,
                micro_usd(spend.per_day_usd)?,
            )),
            prices: prices.map(Arc::new),
        })
    }

    fn upstreams(&self, extra: &[PathBuf]) -> Result<Arc<Upstreams>, TlsError> {
        let mut held = self.upstreams.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((files, made)) = held.as_ref() {
            if files == extra {
                return Ok(made.clone());
            }
        }
        let made = Arc::new(Upstreams::new(extra, &self.ca)?);
        *held = Some((extra.to_vec(), made.clone()));
        Ok(made)
    }

    /// For status: the authority, where tools find it, the opened hosts,
    /// and per credential how many requests got it (never a value).
    pub fn state(
        &self,
        rules: Option<&Rules>,
        trust: &Result<Published, TrustError>,
    ) -> OpenedState {
        let counts = self.vault.counts();
        let held = self.vault.names();
        let credentials = rules
            .map(|r| r.opened.credentials())
            .unwrap_or_default()
            .iter()
            .map(|c| CredentialState {
                host: c.host.clone(),
                key: c.key.clone(),
                header: c.header.clone(),
                holders: c.holders.iter().map(|h| h.word().to_string()).collect(),
                handed: held.contains(&c.key),
                requests: counts
                    .get(&credential_name(&c.key, &c.host))
                    .copied()
                    .unwrap_or(0),
            })
            .collect();
        OpenedState {
            ca_sha256: self.ca.fingerprint(),
            trust: trust
                .as_ref()
                .map(|p| p.bundle.display().to_string())
                .map_err(TrustError::to_string),
            trust_beside: trust.as_ref().ok().and_then(|p| p.beside_because.clone()),
            hosts: rules.map(|r| r.opened.hosts()).unwrap_or_default(),
            credentials,
            memory_dumpable: crate::guest::confine::memory::dumpable(),
            spend: rules
                .is_some_and(|r| !r.providers.is_empty())
                .then(|| self.spend()),
        }
    }

    fn spend(&self) -> SpendState {
        let runs = self
            .ledger
            .open_runs()
            .into_iter()
            .map(|(run, r)| RunState {
                run,
                budget_micro_usd: r.budget,
                spent_micro_usd: r.spent,
                requests: r.requests,
            });
        SpendState {
            runs: runs.collect(),
            day_spent_micro_usd: self.ledger.day_spent(),
            day_budget_micro_usd: self.ledger.per_day,
        }
    }
}

/// How a credential is named in the audit log and status.
fn credential_name(key: &str, host: &str) -> String {
    format!("{key} for {host}")
}

/// What a tunnel to an opened host will do.
pub(super) struct Plan {
    host: String,
    rules: Option<Vec<Rule>>,
    credential: Option<(String, String, String)>,
    secrets: Vec<Vec<u8>>,
    upstreams: Arc<Upstreams>,
    /// A model provider's host: each request metered.
    meter: Option<Mutex<Meter>>,
}

/// Whether `name:port` is a host warden opens.
pub(super) fn is_opened(rules: &Rules, name: &str, port: u16) -> bool {
    rules.opened.opening(name, port, Holder::Shell).is_some()
}

/// Whether shell and the runtime are owed the same credential (or none)
/// at `name:port`: then who asks need not be told.
pub(super) fn same_for_both(rules: &Rules, name: &str, port: u16) -> bool {
    let owed = |holder| {
        rules
            .opened
            .opening(name, port, holder)
            .and_then(|o| o.credential.map(|c| (c.key.clone(), c.header.clone())))
    };
    owed(Holder::Shell) == owed(Holder::Runtime)
}

/// The plan for `holder`'s CONNECT to the opened host `name:port`, or why
/// it cannot be carried (refused before the origin is reached).
pub(super) fn plan(
    rules: &Rules,
    opener: Option<&Opener>,
    name: &str,
    port: u16,
    holder: Holder,
) -> Result<Plan, Refused> {
    let opening = rules
        .opened
        .opening(name, port, holder)
        .ok_or_else(|| Refused::new(Kind::CannotOpen, format!("{name} is no longer opened")))?;
    let opener = opener.ok_or_else(|| {
        Refused::new(
            Kind::CannotOpen,
            format!("{name} has credentials or rules, and this proxy holds no authority to open its TLS"),
        )
    })?;
    let credential = match opening.credential {
        None => None,
        Some(c) => {
            let secret = opener.vault.value(&c.key).ok_or_else(|| {
                Refused::new(
                    Kind::CredentialMissing,
                    format!(
                        "the credential {} for {} was not handed to warden (the owner hands it at each start)",
                        c.key, c.host
                    ),
                )
            })?;
            let value = c.header_value(&String::from_utf8_lossy(&secret));
            Some((credential_name(&c.key, &c.host), c.header.clone(), value))
        }
    };
    let secrets = opener
        .vault
        .values_of(opening.host_credentials.iter().map(|c| c.key.as_str()));
    let upstreams = opener
        .upstreams(&rules.upstream_ca)
        .map_err(|e| Refused::new(Kind::CannotOpen, e.to_string()))?;
    Ok(Plan {
        host: name.to_string(),
        rules: opening.rules.map(<[Rule]>::to_vec),
        credential,
        secrets,
        upstreams,
        meter: meter(rules, opener, name)?,
    })
}

/// The meter of a request to `name`, when it is a provider's host.
fn meter(rules: &Rules, opener: &Opener, name: &str) -> Result<Option<Mutex<Meter>>, Refused> {
    let Some(provider) = rules.providers.iter().find(|p| p.host == name) else {
        return Ok(None);
    };
    let prices = opener.prices.as_ref().map_err(|why| {
        Refused::new(
            Kind::CannotOpen,
            format!("{name} is a model provider's host, and no price can be read: {why}"),
        )
    })?;
    let meter = Meter::new(
        &provider.name,
        provider.api,
        opener.ledger.clone(),
        prices.clone(),
    );
    Ok(Some(Mutex::new(meter)))
}

/// A plain-HTTP request to a host with rules: refused unless one allows
/// it (`path` in origin form).
pub(super) fn plain_refusal(
    rules: &Rules,
    name: &str,
    port: u16,
    method: &str,
    path: &str,
) -> Option<Refused> {
    let host_rules = rules
        .opened
        .rules_for(name, port)
        .or_else(|| rules.opened.rules_for(name, 443))?;
    request_rules::refusal(host_rules, method, path).map(|why| Refused::new(Kind::RuleRefused, why))
}

/// How an opened tunnel ended: the request's outcome, or why no request
/// could be read (a TLS failure), with the refusal kind it is audited as.
pub(super) enum Ended {
    Carried(Box<Outcome>),
    Failed(Refused),
}

/// Carries one request through the opened host of `plan`: the client told
/// its tunnel stands, its TLS ended with the machine's authority (what it
/// sent early read first), warden's own TLS to the origin, one exchange.
pub(super) async fn carry(
    opener: &Opener,
    plan: &Plan,
    mut client: TcpStream,
    upstream: Upstream,
    early: &[u8],
    idle: Duration,
) -> Ended {
    let tls_failed = |why: String| Ended::Failed(Refused::new(Kind::OpenedTls, why));
    let established = b"HTTP/1.1 200 Connection established\r\n\r\n";
    if client.write_all(established).await.is_err() {
        return tls_failed("the client was gone before its TLS".into());
    }
    let client = Prefixed::new(early.to_vec(), client);
    let accepted = tokio::time::timeout(idle, tls::accept(&opener.ca, client, &plan.host)).await;
    let mut client = match accepted {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return tls_failed(e.to_string()),
        Err(_) => return tls_failed("the client's TLS handshake timed out".into()),
    };
    to_origin(opener, plan, &mut client, upstream, idle, None).await
}

/// One request from `client` (its TLS ended by warden, or the runtime on
/// a provider's endpoint, `local` its path prefix) carried over warden's
/// own TLS to the origin.
pub(super) async fn to_origin<C>(
    opener: &Opener,
    plan: &Plan,
    client: &mut C,
    upstream: Upstream,
    idle: Duration,
    local: Option<&str>,
) -> Ended
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let capped = Capped::new(upstream.stream, upstream.max_write);
    let connected = tokio::time::timeout(idle, plan.upstreams.connect(capped, &plan.host)).await;
    let mut origin = match connected {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            let why = e.to_string();
            return Ended::Carried(Box::new(
                exchange::without_origin(client, &plan.host, &why, idle).await,
            ));
        }
        Err(_) => {
            let why = format!("the origin's TLS ({}) timed out", plan.host);
            return Ended::Carried(Box::new(
                exchange::without_origin(client, &plan.host, &why, idle).await,
            ));
        }
    };
    let credential = plan.credential.as_ref().map(|(name, header, value)| Added {
        name,
        header,
        value: value.clone(),
    });
    let ex = Exchange {
        host: &plan.host,
        rules: plan.rules.as_deref(),
        credential,
        secrets: &plan.secrets,
        idle,
        meter: plan.meter.as_ref(),
        local,
    };
    let mut outcome = exchange::carry(client, &mut origin, &ex).await;
    if let Some(name) = &outcome.credential {
        opener.vault.added(name);
    }
    if let Some(meter) = &plan.meter {
        let mut meter = meter.lock().unwrap_or_else(|e| e.into_inner());
        outcome.metered = Some((
            meter.provider.clone(),
            meter.api,
            meter.finish(outcome.status),
        ));
    }
    Ended::Carried(Box::new(outcome))
}
