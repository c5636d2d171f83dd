//! What [`check`](super::check()) answers: a summary, or why the history fails.

use std::fmt;
use std::time::Duration;

use super::record::{Answer, Operation, Outcome};

/// What a passing check went through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckSummary {
    /// Leases the history operated on.
    pub leases: usize,
    /// Operations checked, over every lease.
    pub operations: usize,
    /// Of those, the ones whose outcome is unknown.
    pub unknown: usize,
    /// Search steps taken, over every lease.
    pub steps: u64,
}

/// Why a history did not pass.
#[derive(Debug, Clone)]
pub enum CheckFailure {
    /// No order of the operations explains every answer: the storage broke the lease rules.
    Violation(Violation),
    /// The search ran out of steps before it found an order or ruled every order out.
    Inconclusive(Inconclusive),
}

impl fmt::Display for CheckFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckFailure::Violation(violation) => violation.fmt(f),
            CheckFailure::Inconclusive(inconclusive) => inconclusive.fmt(f),
        }
    }
}

impl std::error::Error for CheckFailure {}

/// One operation as a report shows it, its instants counted from the history's first
/// invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedOperation {
    /// Its position among the lease's operations, ordered by invocation.
    pub index: usize,
    /// What was asked.
    pub operation: Operation,
    /// When it was invoked.
    pub invoked: Duration,
    /// When it returned.
    pub returned: Duration,
    /// What the storage answered.
    pub outcome: Outcome,
}

impl fmt::Display for ReportedOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} ", self.index)?;
        match &self.operation {
            Operation::Request {
                owner,
                priority,
                ttl,
            } => write!(
                f,
                "request by {owner:?} (priority {priority}, ttl {})",
                Seconds(*ttl)
            )?,
            Operation::Release { owner } => write!(f, "release by {owner:?}")?,
        }
        write!(
            f,
            " during [{}, {}]: ",
            Seconds(self.invoked),
            Seconds(self.returned)
        )?;
        match &self.outcome {
            Outcome::Known(Answer::Lease(response)) => write!(
                f,
                "{:?}, token {}, owner {:?}",
                response.status, response.fencing_token, response.current_owner
            ),
            Outcome::Known(Answer::Release(released)) => write!(f, "{released:?}"),
            Outcome::Unknown => write!(f, "failed (may have taken effect, or not)"),
        }
    }
}

/// A lease whose operations no order explains.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The lease.
    pub lease_name: String,
    /// How many answered operations the longest explanation found covers.
    pub explained: usize,
    /// How many answered operations the lease has.
    pub answered: usize,
    /// The last operations of that explanation, in the order it takes them.
    pub explained_tail: Vec<ReportedOperation>,
    /// The lease as the model has it at the end of that explanation.
    pub state: String,
    /// The operations that could come next, none of which the model can take there.
    pub unexplained: Vec<ReportedOperation>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "lease {:?}: no order of the operations explains the answers; the longest \
             explanation covers {} of {} answered operations, ending with:",
            self.lease_name, self.explained, self.answered
        )?;
        for operation in &self.explained_tail {
            writeln!(f, "    {operation}")?;
        }
        writeln!(f, "  the lease then: {}", self.state)?;
        writeln!(f, "  and none of these can come next:")?;
        for operation in &self.unexplained {
            writeln!(f, "    {operation}")?;
        }
        Ok(())
    }
}

/// A lease whose search gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inconclusive {
    /// The lease.
    pub lease_name: String,
    /// Its operations.
    pub operations: usize,
    /// The steps spent on it.
    pub steps: u64,
}

impl fmt::Display for Inconclusive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lease {:?}: inconclusive, the search for an order of its {} operations gave up \
             after {} steps (raise the step budget, or bound unknown outcomes in time)",
            self.lease_name, self.operations, self.steps
        )
    }
}

/// A duration shown in seconds, to the microsecond.
pub(crate) struct Seconds(pub(crate) Duration);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6}s", self.0.as_secs_f64())
    }
}
