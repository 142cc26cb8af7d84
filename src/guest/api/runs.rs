//! The version 8 requests on runs: `begin_run` and `end_run` (the runtime
//! on its socket, or the owner through the host's door), whose provider
//! requests count against the run's budget in warden's ledger, and
//! `card`, a run's card built from the audit log.

use super::{error, Conn};
use crate::guest::audit::payload;
use crate::shared::spend::ledger::{micro_usd, Ending, Ledger};
use crate::wire::{ErrorCode, Event};

impl Conn {
    fn ledger(&self) -> Result<&Ledger, Box<Event>> {
        match &self.sup.network.opener {
            Ok(opener) => Ok(&opener.ledger),
            Err(why) => Err(Box::new(error(
                ErrorCode::Internal,
                format!("this machine meters no provider: {why}"),
            ))),
        }
    }

    pub(super) fn begin_run(&self, run: &str, budget_usd: Option<f64>) -> Event {
        if let Some(refused) = self.needs(8, "begin_run") {
            return refused;
        }
        let ledger = match self.ledger() {
            Ok(ledger) => ledger,
            Err(e) => return *e,
        };
        let begun = budget_usd
            .map(micro_usd)
            .transpose()
            .and_then(|budget| ledger.begin(run, budget));
        match begun {
            Ok(budget_micro_usd) => {
                self.sup.audit.record(&payload::RunBegin {
                    run,
                    budget_micro_usd,
                    requester_uid: self.requester(),
                });
                Event::RunBegun {
                    run: run.to_string(),
                    budget_micro_usd,
                }
            }
            Err(e) => error(ErrorCode::BadRequest, format!("begin_run: {e}")),
        }
    }

    pub(super) fn end_run(&self, run: &str) -> Event {
        if let Some(refused) = self.needs(8, "end_run") {
            return refused;
        }
        let ledger = match self.ledger() {
            Ok(ledger) => ledger,
            Err(e) => return *e,
        };
        match ledger.end(run, Ending::Ended) {
            Ok(ended) => {
                let how = ended.ended.unwrap_or(Ending::Ended).word();
                self.sup.audit.record(&payload::RunEnd {
                    run,
                    how,
                    budget_micro_usd: ended.budget,
                    spent_micro_usd: ended.spent,
                    requests: ended.requests,
                    requester_uid: Some(self.requester()),
                });
                Event::RunEnded {
                    run: run.to_string(),
                    spent_micro_usd: ended.spent,
                    how: how.to_string(),
                }
            }
            Err(e) => error(ErrorCode::BadRequest, format!("end_run: {e}")),
        }
    }

    pub(super) fn card(&self, run: &str) -> Event {
        if let Some(refused) = self.needs(8, "card") {
            return refused;
        }
        match crate::shared::spend::card::of_log(self.sup.audit.path(), run) {
            Ok(card) => Event::Card { card },
            Err(e) => error(ErrorCode::BadRequest, format!("card: {e}")),
        }
    }
}

/// Ends every open run because the machine stops, each with its line.
pub fn end_all(sup: &crate::guest::supervisor::Supervisor) {
    let Ok(opener) = &sup.network.opener else {
        return;
    };
    for (run, ended) in opener.ledger.end_all() {
        sup.audit.record(&payload::RunEnd {
            run: &run,
            how: Ending::MachineStopped.word(),
            budget_micro_usd: ended.budget,
            spent_micro_usd: ended.spent,
            requests: ended.requests,
            requester_uid: None,
        });
    }
}
