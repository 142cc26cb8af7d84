//! One provider request metered: its model priced before it leaves (an
//! unpriced model, or a spent budget, refused in the provider's own error
//! shape), its answer read as it goes (a stream cut at the event where it
//! crosses what is left), and its cost charged once it ends.

use super::ledger::{Account, Ledger, SpendError};
use super::prices::{Price, Prices, Tokens};
use super::usage::{self, Api, EventStream};
use std::sync::Arc;
use std::time::Instant;

/// The most of a whole (not streamed) JSON answer kept to read its usage.
const MAX_JSON: usize = 16 << 20;

/// A request warden answers itself, in the provider's error shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    /// `budget`, `unpriced`, `no_model` or `run`.
    pub reason: &'static str,
    pub message: String,
    /// The error body, as the provider's own errors look.
    pub body: String,
}

/// What a metered request used and cost, for its audit line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Charged {
    pub run: Option<String>,
    pub model: String,
    pub tokens: Tokens,
    pub micro_usd: u64,
    pub streamed: bool,
    pub cut: bool,
    pub estimated: bool,
    pub refused: Option<&'static str>,
    pub duration_ms: f64,
}

pub struct Meter {
    pub provider: String,
    pub api: Api,
    ledger: Arc<Ledger>,
    prices: Arc<Prices>,
    started: Instant,
    account: Option<Account>,
    price: Option<Price>,
    model: String,
    input_estimate: u64,
    left: u64,
    streamed: bool,
    stream: Option<EventStream>,
    json: Vec<u8>,
    cut: bool,
    refused: Option<&'static str>,
}

impl Meter {
    pub fn new(provider: &str, api: Api, ledger: Arc<Ledger>, prices: Arc<Prices>) -> Meter {
        Meter {
            provider: provider.to_string(),
            api,
            ledger,
            prices,
            started: Instant::now(),
            account: None,
            price: None,
            model: String::new(),
            input_estimate: 0,
            left: 0,
            streamed: false,
            stream: None,
            json: Vec::new(),
            cut: false,
            refused: None,
        }
    }

    /// Before anything leaves: the run it counts against (`run` from its
    /// `warden-run` header), its model priced, its budget not spent.
    pub fn request(&mut self, run: Option<&str>, body: &[u8]) -> Result<(), Refusal> {
        let asked = usage::asked(body).map_err(|e| self.refuse(400, "no_model", e.to_string()))?;
        self.model = asked.model.clone();
        self.streamed = asked.stream;
        let account = self
            .ledger
            .account(run)
            .map_err(|e| self.refuse(400, "run", e.to_string()))?;
        // Named in its line whatever follows: a refusal is the run's too.
        self.account = Some(account.clone());
        let price = self.prices.lookup(&asked.model).cloned().ok_or_else(|| {
            let why = format!(
                "the model {:?} has no price in warden's table (prices.json): a model without a public price is not used",
                asked.model
            );
            self.refuse(400, "unpriced", why)
        })?;
        self.left = self.ledger.left(&account).map_err(|e| {
            let status = 402;
            let message = match &e {
                SpendError::RunReached { .. } | SpendError::DayReached { .. } => e.to_string(),
                other => other.to_string(),
            };
            self.refuse(status, "budget", message)
        })?;
        self.price = Some(price);
        self.input_estimate = (body.len() as u64).div_ceil(4);
        Ok(())
    }

    fn refuse(&mut self, status: u16, reason: &'static str, message: String) -> Refusal {
        self.refused = Some(reason);
        Refusal {
            status,
            reason,
            body: error_body(self.api, status, &message),
            message,
        }
    }

    /// The answer's head: a stream of events is read as one.
    pub fn answer_head(&mut self, content_type: Option<&[u8]>) {
        let events = content_type.is_some_and(|t| {
            String::from_utf8_lossy(t)
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        });
        if events {
            self.streamed = true;
            self.stream = Some(EventStream::new(self.api));
        }
    }

    /// A piece of the answer's body (decoded): `Some(n)` when the stream
    /// must end after its first `n` bytes (an event that crossed what the
    /// account had left).
    pub fn answer_piece(&mut self, piece: &[u8]) -> Option<usize> {
        let Some(stream) = self.stream.as_mut() else {
            let room = MAX_JSON.saturating_sub(self.json.len());
            self.json.extend_from_slice(&piece[..piece.len().min(room)]);
            return None;
        };
        let (price, left, input) = (self.price.as_ref()?, self.left, self.input_estimate);
        // Checked at each event's end, with the stream as read up to it.
        let cut = stream.feed_until(piece, |read, _| price.cost(&read.used(input).0) >= left);
        self.cut |= cut.is_some();
        cut
    }

    /// The request ended (`status` from the origin): what it used, charged
    /// to its account.
    pub fn finish(&mut self, status: Option<u16>) -> Charged {
        let (tokens, estimated) = match (&self.stream, self.refused) {
            (_, Some(_)) => (Tokens::default(), false),
            (Some(stream), None) => stream.used(self.input_estimate),
            (None, None) => {
                let reported = serde_json::from_slice(&self.json)
                    .ok()
                    .and_then(|v| usage::reported(self.api, &v));
                match (reported, status) {
                    (Some(t), _) => (t, false),
                    // An error answer used nothing; anything else that
                    // says nothing is charged for its input.
                    (None, Some(s)) if s >= 400 => (Tokens::default(), false),
                    (None, _) => (
                        Tokens {
                            input: self.input_estimate,
                            ..Default::default()
                        },
                        true,
                    ),
                }
            }
        };
        let micro = self.price.as_ref().map_or(0, |p| p.cost(&tokens));
        if let Some(account) = &self.account {
            self.ledger.charge(account, micro);
        }
        Charged {
            run: self
                .account
                .as_ref()
                .and_then(|a| a.run().map(str::to_string)),
            model: self.model.clone(),
            tokens,
            micro_usd: micro,
            streamed: self.streamed,
            cut: self.cut,
            estimated,
            refused: self.refused,
            duration_ms: (self.started.elapsed().as_secs_f64() * 1e4).round() / 10.0,
        }
    }
}

/// An error body as `api`'s provider writes its own.
pub fn error_body(api: Api, status: u16, message: &str) -> String {
    let body = match api {
        Api::AnthropicMessages => {
            let kind = match status {
                402 => "billing_error",
                _ => "invalid_request_error",
            };
            serde_json::json!({"type": "error", "error": {"type": kind, "message": format!("warden: {message}")}})
        }
        Api::OpenAi => {
            let (kind, code) = match status {
                402 => ("insufficient_quota", "insufficient_quota"),
                _ => ("invalid_request_error", "model_not_found"),
            };
            serde_json::json!({"error": {"message": format!("warden: {message}"), "type": kind, "param": null, "code": code}})
        }
    };
    body.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prices() -> Arc<Prices> {
        Arc::new(
            Prices::parse(
                r#"{"models": {"m": {"input": 1, "output": 10, "date": "d", "source": "s"}}}"#,
            )
            .unwrap(),
        )
    }

    #[test]
    fn an_unpriced_model_or_a_spent_budget_is_refused_before_it_leaves() {
        let ledger = Arc::new(Ledger::new(1_000, 1_000));
        let mut meter = Meter::new("p", Api::AnthropicMessages, ledger.clone(), prices());
        let refused = meter.request(None, br#"{"model":"other"}"#).unwrap_err();
        assert_eq!((refused.status, refused.reason), (400, "unpriced"));
        assert!(
            refused.body.contains("\"invalid_request_error\""),
            "{}",
            refused.body
        );
        assert!(refused.body.contains("other"));
        assert_eq!(meter.finish(None).micro_usd, 0);
        ledger.charge(&Account::Day, 1_000);
        let mut meter = Meter::new("p", Api::OpenAi, ledger, prices());
        let refused = meter.request(None, br#"{"model":"m"}"#).unwrap_err();
        assert_eq!((refused.status, refused.reason), (402, "budget"));
        assert!(
            refused.body.contains("insufficient_quota"),
            "{}",
            refused.body
        );
    }

    #[test]
    fn a_json_answer_is_charged_its_reported_usage() {
        let ledger = Arc::new(Ledger::new(1_000_000, 1_000_000));
        ledger.begin("r", None).unwrap();
        let mut meter = Meter::new("p", Api::AnthropicMessages, ledger.clone(), prices());
        meter.request(None, br#"{"model":"m"}"#).unwrap();
        meter.answer_head(Some(b"application/json"));
        let answer = br#"{"usage":{"input_tokens":1000,"output_tokens":100}}"#;
        let (a, b) = answer.split_at(10);
        assert_eq!(meter.answer_piece(a), None);
        assert_eq!(meter.answer_piece(b), None);
        let charged = meter.finish(Some(200));
        assert_eq!(charged.micro_usd, 1_000 + 1_000);
        assert_eq!(charged.run.as_deref(), Some("r"));
        assert_eq!(ledger.run("r").unwrap().spent, 2_000);
    }

    #[test]
    fn a_stream_is_cut_at_the_event_that_crosses_the_budget() {
        let ledger = Arc::new(Ledger::new(1_000, 1_000));
        ledger.begin("r", Some(100)).unwrap();
        let mut meter = Meter::new("p", Api::OpenAi, ledger.clone(), prices());
        meter
            .request(None, br#"{"model":"m","stream":true}"#)
            .unwrap();
        meter.answer_head(Some(b"text/event-stream; charset=utf-8"));
        // 10 micro-dollars per output token: 40 bytes of text is 10 tokens,
        // 100 micro-dollars, the whole budget.
        let event = "data: {\"choices\":[{\"delta\":{\"content\":\"0123456789012345678901234567890123456789\"}}]}\n\n";
        let piece = format!("{event}{event}");
        assert_eq!(meter.answer_piece(piece.as_bytes()), Some(event.len()));
        let charged = meter.finish(Some(200));
        assert!(charged.cut && charged.estimated && charged.streamed);
        assert!(charged.micro_usd >= 100, "{charged:?}");
        assert!(matches!(
            ledger.left(&Account::Run("r".into())),
            Err(SpendError::RunReached { .. })
        ));
    }
}
