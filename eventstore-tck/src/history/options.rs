//! [`CheckOptions`]: how strictly [`check`](super::check()) reads a history.

use std::time::Duration;

use super::record::History;
use super::report::{CheckFailure, CheckSummary};

/// How the tokens of successive grants of one lease must relate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenRule {
    /// Each grant's token is the previous one plus one, as the contract and the in-process
    /// lease table give them. The first grant the history shows may have any token: the lease
    /// may have been granted before the history began.
    #[default]
    Successor,
    /// Each grant's token is greater than the previous one, for a backend that steps tokens
    /// by more than one (PostgreSQL after a failover).
    Increasing,
}

/// Options of the check; [`CheckOptions::default`] is the strictest reading.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    pub(crate) tolerance: Duration,
    pub(crate) unknown_horizon: Option<Duration>,
    pub(crate) step_budget: u64,
    pub(crate) tokens: TokenRule,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            tolerance: Duration::ZERO,
            unknown_horizon: None,
            step_budget: 2_000_000,
            tokens: TokenRule::Successor,
        }
    }
}

impl CheckOptions {
    /// The strictest options: no clock tolerance, unknown outcomes unbounded in time, tokens
    /// by [`TokenRule::Successor`], two million search steps per lease.
    pub fn new() -> Self {
        CheckOptions::default()
    }

    /// Lets a lease be judged live or expired up to `tolerance` either side of
    /// `heartbeat + ttl`, for a storage whose clock is not the recording one (a database
    /// server's clock, read at the start of its transaction).
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Takes a failed call to have taken effect, if at all, within `horizon` of its
    /// invocation (a statement timeout, say), rather than at any later time. Bounding it
    /// keeps the search small when many calls fail.
    pub fn unknown_horizon(mut self, horizon: Duration) -> Self {
        self.unknown_horizon = Some(horizon);
        self
    }

    /// Gives up on a lease, as inconclusive, after `steps` search steps.
    pub fn step_budget(mut self, steps: u64) -> Self {
        self.step_budget = steps;
        self
    }

    /// How tokens of successive grants must relate.
    pub fn tokens(mut self, rule: TokenRule) -> Self {
        self.tokens = rule;
        self
    }

    /// Checks `history` with these options; see [`check`](super::check()).
    ///
    /// # Errors
    /// [`CheckFailure::Violation`] when no order of the operations explains the answers,
    /// [`CheckFailure::Inconclusive`] when the search ran out of steps.
    pub fn check(&self, history: &History) -> Result<CheckSummary, CheckFailure> {
        super::check::check_entries(&history.entries(), self)
    }
}
