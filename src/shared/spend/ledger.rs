//! Runs and their budgets, held by warden where the agent cannot touch
//! them: what each run has spent (in integer micro-dollars), what the
//! machine spent today outside any run, and whether a request may start.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::SystemTime;

/// The most runs kept (ended ones are dropped oldest first beyond it).
const MAX_RUNS: usize = 1024;

/// What a request is counted against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Account {
    Run(String),
    /// No run open: the machine's budget for the day.
    Day,
}

impl Account {
    /// The run's name, for the audit line (None: the day's).
    pub fn run(&self) -> Option<&str> {
        match self {
            Account::Run(r) => Some(r),
            Account::Day => None,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Ended,
    Budget,
    MachineStopped,
}

impl Ending {
    pub fn word(self) -> &'static str {
        match self {
            Ending::Ended => "ended",
            Ending::Budget => "budget",
            Ending::MachineStopped => "machine_stopped",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Run {
    pub budget: u64,
    pub spent: u64,
    pub requests: u64,
    pub began: SystemTime,
    /// Set once its budget was reached (the run stays open until ended).
    pub reached: bool,
    pub ended: Option<Ending>,
}

/// Why a run request or a provider request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpendError {
    #[error("run {0:?} is open already")]
    Open(String),
    #[error("no run {0:?} is open")]
    NotOpen(String),
    #[error("a run's name is 1 to 128 printable characters")]
    Name,
    #[error("a budget is 0 to 1000000 dollars")]
    Budget,
    #[error("{0} runs are open: name one with a `warden-run` header")]
    Which(usize),
    #[error("the run {run:?} reached its budget ({spent} of {budget} micro-dollars)")]
    RunReached {
        run: String,
        spent: u64,
        budget: u64,
    },
    #[error("the machine reached its budget for the day ({spent} of {budget} micro-dollars)")]
    DayReached { spent: u64, budget: u64 },
}

struct State {
    runs: BTreeMap<String, Run>,
    /// Runs in the order they began, to drop the oldest ended ones.
    order: Vec<String>,
    day: u64,
    day_spent: u64,
}

pub struct Ledger {
    state: Mutex<State>,
    pub per_run: u64,
    pub per_day: u64,
}

/// Whole days since the epoch (UTC), for the day's budget.
fn today() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400)
}

/// Dollars as micro-dollars, or why not.
pub fn micro_usd(usd: f64) -> Result<u64, SpendError> {
    match usd.is_finite() && (0.0..=1_000_000.0).contains(&usd) {
        true => Ok((usd * 1_000_000.0).round() as u64),
        false => Err(SpendError::Budget),
    }
}

impl Ledger {
    pub fn new(per_run: u64, per_day: u64) -> Ledger {
        Ledger {
            state: Mutex::new(State {
                runs: BTreeMap::new(),
                order: Vec::new(),
                day: today(),
                day_spent: 0,
            }),
            per_run,
            per_day,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a run with its budget (the machine's default when None).
    pub fn begin(&self, run: &str, budget: Option<u64>) -> Result<u64, SpendError> {
        let printable = run.chars().all(|c| !c.is_control());
        if run.is_empty() || run.len() > 128 || !printable {
            return Err(SpendError::Name);
        }
        let mut s = self.state();
        if s.runs.get(run).is_some_and(|r| r.ended.is_none()) {
            return Err(SpendError::Open(run.to_string()));
        }
        let budget = budget.unwrap_or(self.per_run);
        s.runs.insert(
            run.to_string(),
            Run {
                budget,
                spent: 0,
                requests: 0,
                began: SystemTime::now(),
                reached: false,
                ended: None,
            },
        );
        s.order.retain(|r| r != run);
        s.order.push(run.to_string());
        forget_oldest(&mut s);
        Ok(budget)
    }

    /// Ends an open run; returns it as it ended.
    pub fn end(&self, run: &str, how: Ending) -> Result<Run, SpendError> {
        let mut s = self.state();
        let found = s
            .runs
            .get_mut(run)
            .filter(|r| r.ended.is_none())
            .ok_or_else(|| SpendError::NotOpen(run.to_string()))?;
        found.ended = Some(match (how, found.reached) {
            (Ending::Ended, true) => Ending::Budget,
            (how, _) => how,
        });
        Ok(found.clone())
    }

    /// Every open run, ended because the machine stops.
    pub fn end_all(&self) -> Vec<(String, Run)> {
        let open: Vec<String> = {
            let s = self.state();
            s.runs
                .iter()
                .filter(|(_, r)| r.ended.is_none())
                .map(|(n, _)| n.clone())
                .collect()
        };
        open.into_iter()
            .filter_map(|n| Some((n.clone(), self.end(&n, Ending::MachineStopped).ok()?)))
            .collect()
    }

    /// The account a request is counted against: the run its header
    /// names, the only run open, or the day's when none is.
    pub fn account(&self, named: Option<&str>) -> Result<Account, SpendError> {
        let s = self.state();
        let open: Vec<&String> = s
            .runs
            .iter()
            .filter(|(_, r)| r.ended.is_none())
            .map(|(n, _)| n)
            .collect();
        match (named, open.as_slice()) {
            (Some(run), _) if open.iter().any(|o| *o == run) => Ok(Account::Run(run.to_string())),
            (Some(run), _) => Err(SpendError::NotOpen(run.to_string())),
            (None, []) => Ok(Account::Day),
            (None, [one]) => Ok(Account::Run(one.to_string())),
            (None, many) => Err(SpendError::Which(many.len())),
        }
    }

    /// What is left to spend on `account`, or why nothing is.
    pub fn left(&self, account: &Account) -> Result<u64, SpendError> {
        let mut s = self.state();
        match account {
            Account::Run(run) => {
                let r = s
                    .runs
                    .get(run)
                    .filter(|r| r.ended.is_none())
                    .ok_or_else(|| SpendError::NotOpen(run.clone()))?;
                match r.spent >= r.budget {
                    true => Err(SpendError::RunReached {
                        run: run.clone(),
                        spent: r.spent,
                        budget: r.budget,
                    }),
                    false => Ok(r.budget - r.spent),
                }
            }
            Account::Day => {
                roll_day(&mut s);
                match s.day_spent >= self.per_day {
                    true => Err(SpendError::DayReached {
                        spent: s.day_spent,
                        budget: self.per_day,
                    }),
                    false => Ok(self.per_day - s.day_spent),
                }
            }
        }
    }

    /// Counts one request's cost; returns the account's spend after it.
    pub fn charge(&self, account: &Account, micro: u64) -> u64 {
        let mut s = self.state();
        match account {
            Account::Run(run) => match s.runs.get_mut(run) {
                Some(r) => {
                    r.spent = r.spent.saturating_add(micro);
                    r.requests += 1;
                    r.reached |= r.spent >= r.budget;
                    r.spent
                }
                None => 0,
            },
            Account::Day => {
                roll_day(&mut s);
                s.day_spent = s.day_spent.saturating_add(micro);
                s.day_spent
            }
        }
    }

    /// A run as it stands.
    pub fn run(&self, run: &str) -> Option<Run> {
        self.state().runs.get(run).cloned()
    }

    /// The open runs, by name.
    pub fn open_runs(&self) -> Vec<(String, Run)> {
        let s = self.state();
        s.runs
            .iter()
            .filter(|(_, r)| r.ended.is_none())
            .map(|(n, r)| (n.clone(), r.clone()))
            .collect()
    }

    /// What the machine spent today outside runs.
    pub fn day_spent(&self) -> u64 {
        let mut s = self.state();
        roll_day(&mut s);
        s.day_spent
    }
}

fn roll_day(s: &mut State) {
    let now = today();
    if now != s.day {
        s.day = now;
        s.day_spent = 0;
    }
}

fn forget_oldest(s: &mut State) {
    while s.order.len() > MAX_RUNS {
        let Some(at) = s
            .order
            .iter()
            .position(|r| s.runs.get(r).is_some_and(|r| r.ended.is_some()))
        else {
            return;
        };
        let gone = s.order.remove(at);
        s.runs.remove(&gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_spends_until_its_budget_then_refuses() {
        let ledger = Ledger::new(1_000_000, 5_000_000);
        assert_eq!(ledger.begin("r1", Some(10_000)), Ok(10_000));
        assert_eq!(ledger.begin("r1", None), Err(SpendError::Open("r1".into())));
        let account = ledger.account(None).unwrap();
        assert_eq!(account, Account::Run("r1".into()));
        assert_eq!(ledger.left(&account), Ok(10_000));
        assert_eq!(ledger.charge(&account, 6_000), 6_000);
        assert_eq!(ledger.left(&account), Ok(4_000));
        assert_eq!(ledger.charge(&account, 6_000), 12_000);
        assert!(matches!(
            ledger.left(&account),
            Err(SpendError::RunReached { .. })
        ));
        let ended = ledger.end("r1", Ending::Ended).unwrap();
        assert_eq!(
            (ended.spent, ended.requests, ended.ended),
            (12_000, 2, Some(Ending::Budget))
        );
        assert_eq!(ledger.account(None), Ok(Account::Day), "no run open");
        // A second run starts fresh, with the default budget.
        assert_eq!(ledger.begin("r1", None), Ok(1_000_000));
        assert_eq!(ledger.left(&Account::Run("r1".into())), Ok(1_000_000));
    }

    #[test]
    fn a_request_names_its_run_when_several_are_open() {
        let ledger = Ledger::new(1_000, 1_000);
        ledger.begin("a", None).unwrap();
        ledger.begin("b", None).unwrap();
        assert_eq!(ledger.account(None), Err(SpendError::Which(2)));
        assert_eq!(ledger.account(Some("b")), Ok(Account::Run("b".into())));
        assert_eq!(
            ledger.account(Some("c")),
            Err(SpendError::NotOpen("c".into()))
        );
        assert_eq!(ledger.end_all().len(), 2);
        assert_eq!(ledger.run("a").unwrap().ended, Some(Ending::MachineStopped));
        assert_eq!(ledger.begin("", None), Err(SpendError::Name));
        assert_eq!(ledger.begin("x\n", None), Err(SpendError::Name));
    }

    #[test]
    fn the_day_has_its_own_budget() {
        let ledger = Ledger::new(1_000, 2_000);
        assert_eq!(ledger.charge(&Account::Day, 1_500), 1_500);
        assert_eq!(ledger.left(&Account::Day), Ok(500));
        ledger.charge(&Account::Day, 500);
        assert!(matches!(
            ledger.left(&Account::Day),
            Err(SpendError::DayReached { .. })
        ));
        assert_eq!(micro_usd(0.01), Ok(10_000));
        assert_eq!(micro_usd(-1.0), Err(SpendError::Budget));
    }
}
