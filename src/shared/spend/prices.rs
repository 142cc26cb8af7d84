//! The prices models are metered at: `prices.json` in the policy folder
//! (the shipped `policy/prices.json` when the owner gives none), in US
//! dollars per million tokens for each kind of token, with the date and
//! the page each row was read from. Counting is in integer micro-dollars.

use serde::Deserialize;
use std::collections::BTreeMap;

/// The prices shipped with warden.
pub const BUILT_IN: &str = include_str!("../../../policy/prices.json");

/// Why the prices of a policy folder cannot be had: its `prices.json`
/// does not read, or is refused.
#[derive(Debug, thiserror::Error)]
pub enum LoadPricesError {
    #[error("{}: {source}", path.display())]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Refused {
        path: std::path::PathBuf,
        source: PriceError,
    },
}

/// The prices of the policy folder `dir` (`prices.json`), or the shipped
/// ones when it has none.
pub fn load(dir: &std::path::Path) -> Result<Prices, LoadPricesError> {
    let path = dir.join("prices.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BUILT_IN.to_string(),
        Err(source) => return Err(LoadPricesError::Read { path, source }),
    };
    Prices::parse(&text).map_err(|source| LoadPricesError::Refused { path, source })
}

/// One model's prices, in micro-dollars per million tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Price {
    pub input: u64,
    pub output: u64,
    pub cache_write: u64,
    pub cache_read: u64,
    pub date: String,
    pub source: String,
}

/// Tokens of one request, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub cache_write: u64,
    pub cache_read: u64,
}

impl Price {
    /// What `tokens` cost, in micro-dollars, rounded up once.
    pub fn cost(&self, t: &Tokens) -> u64 {
        let parts = [
            (t.input, self.input),
            (t.output, self.output),
            (t.cache_write, self.cache_write),
            (t.cache_read, self.cache_read),
        ];
        let total: u128 = parts
            .iter()
            .map(|&(n, p)| u128::from(n) * u128::from(p))
            .sum();
        u64::try_from(total.div_ceil(1_000_000)).unwrap_or(u64::MAX)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceText {
    input: f64,
    output: f64,
    #[serde(default)]
    cache_write: Option<f64>,
    #[serde(default)]
    cache_read: Option<f64>,
    date: String,
    source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PricesText {
    models: BTreeMap<String, PriceText>,
}

/// Why a prices file is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriceError {
    #[error("prices.json: {0}")]
    Json(String),
    #[error("prices.json: models.{model}.{field}: {value} is not a price (dollars per million tokens, 0 to 1000000)")]
    Value {
        model: String,
        field: &'static str,
        value: String,
    },
}

/// The models' prices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prices {
    models: BTreeMap<String, Price>,
}

impl Prices {
    /// Pure parser of a prices file.
    pub fn parse(text: &str) -> Result<Prices, PriceError> {
        let parsed: PricesText =
            serde_json::from_str(text).map_err(|e| PriceError::Json(e.to_string()))?;
        let mut models = BTreeMap::new();
        for (model, p) in parsed.models {
            let micro = |field: &'static str, usd: f64| {
                if usd.is_finite() && (0.0..=1_000_000.0).contains(&usd) {
                    Ok((usd * 1_000_000.0).round() as u64)
                } else {
                    Err(PriceError::Value {
                        model: model.clone(),
                        field,
                        value: usd.to_string(),
                    })
                }
            };
            let price = Price {
                input: micro("input", p.input)?,
                output: micro("output", p.output)?,
                cache_write: micro("cache_write", p.cache_write.unwrap_or(p.input))?,
                cache_read: micro("cache_read", p.cache_read.unwrap_or(p.input))?,
                date: p.date,
                source: p.source,
            };
            models.insert(model, price);
        }
        Ok(Prices { models })
    }

    /// The price of `model`: its own row, or that of its name without a
    /// date suffix (`-20250929`, `-2025-09-29`).
    pub fn lookup(&self, model: &str) -> Option<&Price> {
        self.models
            .get(model)
            .or_else(|| self.models.get(undated(model)?))
    }

    pub fn len(&self) -> usize {
        self.models.len()
    }

    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }
}

/// A model's name without its date suffix, if it has one.
fn undated(model: &str) -> Option<&str> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some((base, date)) = model.rsplit_once('-') {
        if date.len() == 8 && digits(date) {
            return Some(base);
        }
    }
    // -YYYY-MM-DD
    let cut = model.len().checked_sub(11)?;
    let (base, date) = model.split_at(cut);
    let parts: Vec<&str> = date.trim_start_matches('-').split('-').collect();
    let dated = date.starts_with('-')
        && parts.len() == 3
        && parts
            .iter()
            .zip([4, 2, 2])
            .all(|(p, n)| p.len() == n && digits(p));
    dated.then_some(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = r#"{"models": {
        "claude-sonnet-4-5": {"input": 3, "output": 15, "cache_write": 3.75, "cache_read": 0.3, "date": "2026-11-01", "source": "https://www.anthropic.com/pricing"},
        "gpt-4o-mini": {"input": 0.15, "output": 0.6, "cache_read": 0.075, "date": "2026-11-01", "source": "https://openai.com/api/pricing/"}
    }}"#;

    #[test]
    fn costs_are_exact_micro_dollars_rounded_up_once() {
        let prices = Prices::parse(TABLE).unwrap();
        let sonnet = prices.lookup("claude-sonnet-4-5").unwrap();
        let cases = [
            (
                Tokens {
                    input: 1_000_000,
                    ..Default::default()
                },
                3_000_000,
            ),
            (
                Tokens {
                    output: 1000,
                    ..Default::default()
                },
                15_000,
            ),
            (
                Tokens {
                    cache_write: 1000,
                    ..Default::default()
                },
                3_750,
            ),
            (
                Tokens {
                    cache_read: 1000,
                    ..Default::default()
                },
                300,
            ),
            (
                Tokens {
                    cache_read: 1,
                    ..Default::default()
                },
                1,
            ),
            (
                Tokens {
                    input: 1,
                    output: 1,
                    cache_write: 1,
                    cache_read: 1,
                },
                23,
            ),
            (Tokens::default(), 0),
        ];
        for (tokens, want) in cases {
            assert_eq!(sonnet.cost(&tokens), want, "{tokens:?}");
        }
        let mini = prices.lookup("gpt-4o-mini").unwrap();
        assert_eq!(mini.cache_write, mini.input, "left out: the input price");
        assert_eq!(
            mini.cost(&Tokens {
                input: 10_000,
                output: 10_000,
                ..Default::default()
            }),
            7_500
        );
    }

    #[test]
    fn a_dated_name_finds_its_model_and_an_unknown_one_nothing() {
        let prices = Prices::parse(TABLE).unwrap();
        for (model, found) in [
            ("claude-sonnet-4-5", true),
            ("claude-sonnet-4-5-20250929", true),
            ("gpt-4o-mini-2024-07-18", true),
            ("claude-sonnet-4", false),
            ("claude-sonnet-4-5-2025", false),
            ("gpt-5", false),
            ("", false),
        ] {
            assert_eq!(prices.lookup(model).is_some(), found, "{model}");
        }
    }

    #[test]
    fn the_shipped_table_reads_and_prices_its_models() {
        let prices = Prices::parse(BUILT_IN).unwrap();
        assert!(prices.len() >= 10);
        for model in [
            "claude-sonnet-4-5-20250929",
            "gpt-4o-mini",
            "claude-haiku-4-5",
        ] {
            assert!(prices.lookup(model).is_some(), "{model}");
        }
    }

    #[test]
    fn a_bad_table_says_what_is_wrong() {
        let cases = [
            (
                r#"{"models": {"m": {"input": -1, "output": 1, "date": "d", "source": "s"}}}"#,
                "models.m.input",
            ),
            (
                r#"{"models": {"m": {"input": 1, "date": "d", "source": "s"}}}"#,
                "missing field `output`",
            ),
            (
                r#"{"models": {"m": {"input": 1, "output": 1, "date": "d", "source": "s", "x": 1}}}"#,
                "unknown field",
            ),
            ("[]", "prices.json"),
        ];
        for (text, want) in cases {
            let e = Prices::parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }
}
