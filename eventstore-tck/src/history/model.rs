//! The contract's lease rules as a sequential model of one lease, with time as intervals.
//!
//! An operation takes effect at one instant of its interval, but which instant is not
//! recorded, and a lease's expiry depends on the instant its holder's last request took
//! effect. The model therefore keeps, for the holder's heartbeat, the earliest and latest
//! instant it can have, and lets an operation find the lease live or expired whenever some
//! instant of its interval allows it; every choice narrows the bounds for what follows.

use eventstore_api::ReleaseOutcome;

use super::options::TokenRule;

/// Nanoseconds since the history's first invocation.
pub(crate) type Nanos = u64;

/// An instant beyond every other: the return of an operation that may take effect at any
/// later time.
pub(crate) const NEVER: Nanos = Nanos::MAX;

/// An interned owner id, unique within one lease's operations.
pub(crate) type OwnerId = u32;

/// One operation of a lease, ready for the model.
#[derive(Debug, Clone)]
pub(crate) struct Op {
    /// The caller.
    pub(crate) owner: OwnerId,
    /// A request with its ttl, or a release.
    pub(crate) kind: OpKind,
    /// The earliest instant it can take effect.
    pub(crate) invoked: Nanos,
    /// The latest instant it can take effect ([`NEVER`] for an unbounded unknown outcome).
    pub(crate) returned: Nanos,
    /// What the storage answered; `None` when it is unknown whether it took effect.
    pub(crate) answer: Option<Expected>,
}

impl Op {
    /// Whether this failed operation can do whatever the failed operation `later` can, so
    /// that taking `later` while this one waits is never needed: same caller and request,
    /// invoked no later, neither bounded in time.
    pub(crate) fn stands_in_for(&self, later: &Op) -> bool {
        self.answer.is_none()
            && later.answer.is_none()
            && self.owner == later.owner
            && self.kind == later.kind
            && self.returned == NEVER
            && later.returned == NEVER
            && self.invoked <= later.invoked
    }
}

/// What an operation asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    /// A request, with its ttl as the storage keeps it (whole microseconds).
    Request { ttl: Nanos },
    /// A release.
    Release,
}

/// A recorded answer, with owner names interned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expected {
    /// The answer to a request.
    Lease {
        /// Leader or step-down requested (both mean the caller holds it).
        leads: bool,
        /// The holder's token.
        token: u64,
        /// The holder.
        owner: OwnerId,
    },
    /// The answer to a release.
    Release(ReleaseOutcome),
}

/// What is known of the lease's latest token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Token {
    /// Exactly this one.
    Exact(u64),
    /// Not observed, but at least this one (0: never granted as far as the history shows).
    AtLeast(u64),
}

/// The holder of record, live or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Tenure {
    /// The holder.
    pub(crate) owner: OwnerId,
    /// Bounds of the instant of the holder's last grant or renewal.
    pub(crate) heartbeat_lo: Nanos,
    /// See `heartbeat_lo`; [`NEVER`] when unbounded.
    pub(crate) heartbeat_hi: Nanos,
    /// The ttl of the holder's last request.
    pub(crate) ttl: Nanos,
    /// Released, or found expired: nobody holds it any more.
    pub(crate) ended: bool,
}

impl Tenure {
    fn expiry_lo(&self) -> Nanos {
        self.heartbeat_lo.saturating_add(self.ttl)
    }

    fn expiry_hi(&self) -> Nanos {
        self.heartbeat_hi.saturating_add(self.ttl)
    }
}

/// The model's state for one lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct State {
    /// The latest token granted.
    pub(crate) token: Token,
    /// The holder of record; `None` before the first grant.
    pub(crate) tenure: Option<Tenure>,
    /// The earliest instant the next operation can take effect (instants never go back).
    pub(crate) now: Nanos,
}

impl State {
    /// A lease nobody holds, whose tokens are unknown.
    pub(crate) fn initial() -> Self {
        State {
            token: Token::AtLeast(0),
            tenure: None,
            now: 0,
        }
    }
}

/// The rules, with how strictly they are applied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Model {
    /// Slack allowed between the storage's clock and the recorded instants.
    pub(crate) tolerance: Nanos,
    /// How tokens of successive grants relate.
    pub(crate) tokens: TokenRule,
}

/// Instants an operation may take effect at: `lo..=hi`.
#[derive(Debug, Clone, Copy)]
struct Window {
    lo: Nanos,
    hi: Nanos,
}

impl Window {
    fn new(lo: Nanos, hi: Nanos) -> Option<Window> {
        (lo <= hi).then_some(Window { lo, hi })
    }
}

impl Model {
    /// Every state `op` can leave `state` in, its answer respected, pushed onto `next`.
    /// Nothing is pushed when no instant and no reading of the rules explain the answer.
    pub(crate) fn step(&self, state: &State, op: &Op, next: &mut Vec<State>) {
        let Some(window) = Window::new(op.invoked.max(state.now), op.returned) else {
            return;
        };
        let mut state = *state;
        if let Some(tenure) = &mut state.tenure {
            // The heartbeat was set by an operation that took effect before this one.
            tenure.heartbeat_hi = tenure.heartbeat_hi.min(window.hi);
        }
        match op.kind {
            OpKind::Request { ttl } => self.request(&state, op, ttl, window, next),
            OpKind::Release => self.release(&state, op, window, next),
        }
    }

    /// The instants of `window` at which `tenure` is still live, if any.
    fn live(&self, tenure: &Tenure, window: Window) -> Option<Window> {
        if tenure.ended {
            return None;
        }
        // Live until and including heartbeat + ttl.
        Window::new(
            window.lo,
            window
                .hi
                .min(tenure.expiry_hi().saturating_add(self.tolerance)),
        )
    }

    /// The instants of `window` at which `tenure` is over, if any.
    fn over(&self, tenure: &Tenure, window: Window) -> Option<Window> {
        if tenure.ended {
            return Some(window);
        }
        // Expired strictly after heartbeat + ttl.
        let first = tenure
            .expiry_lo()
            .saturating_add(1)
            .saturating_sub(self.tolerance);
        Window::new(window.lo.max(first), window.hi)
    }

    fn request(&self, state: &State, op: &Op, ttl: Nanos, window: Window, next: &mut Vec<State>) {
        let Some(tenure) = state.tenure else {
            self.grant(state, op, ttl, window, next);
            return;
        };
        if let Some(live) = self.live(&tenure, window) {
            if tenure.owner == op.owner {
                if let Some(token) = self.observe(state.token, op, true, tenure.owner) {
                    next.push(State {
                        token,
                        tenure: Some(Tenure {
                            heartbeat_lo: tenure.heartbeat_lo.max(live.lo),
                            heartbeat_hi: tenure.heartbeat_hi.max(live.hi),
                            ttl,
                            ..tenure
                        }),
                        now: live.lo,
                    });
                }
            } else if op.answer.is_none() {
                // An unknown standby changes nothing: better not applied at all.
            } else if let Some(token) = self.observe(state.token, op, false, tenure.owner) {
                next.push(State {
                    token,
                    tenure: Some(self.found_live(tenure, live)),
                    now: live.lo,
                });
            }
        }
        if let Some(over) = self.over(&tenure, window) {
            self.grant(state, op, ttl, over, next);
        }
    }

    fn grant(&self, state: &State, op: &Op, ttl: Nanos, window: Window, next: &mut Vec<State>) {
        let token = match (op.answer, state.token, self.tokens) {
            (None, Token::Exact(last), TokenRule::Successor) => Token::Exact(last + 1),
            (None, Token::Exact(last) | Token::AtLeast(last), _) => Token::AtLeast(last + 1),
            (
                Some(Expected::Lease {
                    leads,
                    token,
                    owner,
                }),
                known,
                rule,
            ) => {
                let follows = match (known, rule) {
                    (Token::Exact(last), TokenRule::Successor) => token == last + 1,
                    (Token::Exact(last) | Token::AtLeast(last), _) => token > last,
                };
                if !(leads && owner == op.owner && follows) {
                    return;
                }
                Token::Exact(token)
            }
            (Some(Expected::Release(_)), ..) => return,
        };
        next.push(State {
            token,
            tenure: Some(Tenure {
                owner: op.owner,
                heartbeat_lo: window.lo,
                heartbeat_hi: window.hi,
                ttl,
                ended: false,
            }),
            now: window.lo,
        });
    }

    fn release(&self, state: &State, op: &Op, window: Window, next: &mut Vec<State>) {
        let answered = |held: bool| match op.answer {
            None | Some(Expected::Release(ReleaseOutcome::Unreported)) => true,
            Some(Expected::Release(ReleaseOutcome::Released)) => held,
            Some(Expected::Release(ReleaseOutcome::NotHeld)) => !held,
            Some(_) => false,
        };
        let held_by_caller = state.tenure.filter(|tenure| tenure.owner == op.owner);
        let Some(tenure) = held_by_caller.filter(|tenure| !tenure.ended) else {
            // Never granted, held by another, or over: nothing changes (an unknown release
            // that changes nothing is better not applied at all).
            if op.answer.is_some() && answered(false) {
                next.push(State {
                    now: window.lo,
                    ..*state
                });
            }
            return;
        };
        let ended = Tenure {
            ended: true,
            ..tenure
        };
        if let Some(live) = self.live(&tenure, window).filter(|_| answered(true)) {
            next.push(State {
                tenure: Some(ended),
                now: live.lo,
                ..*state
            });
        }
        if let Some(over) = self.over(&tenure, window).filter(|_| answered(false)) {
            next.push(State {
                tenure: Some(ended),
                now: over.lo,
                ..*state
            });
        }
    }

    /// `tenure` seen live somewhere in `live`: its heartbeat was recent enough.
    fn found_live(&self, tenure: Tenure, live: Window) -> Tenure {
        let earliest = live
            .lo
            .saturating_sub(tenure.ttl)
            .saturating_sub(self.tolerance);
        Tenure {
            heartbeat_lo: tenure.heartbeat_lo.max(earliest),
            ..tenure
        }
    }

    /// Checks an answer naming the current holder (`leads` says whether the caller is it)
    /// against what is known of the current token, and returns what is known after it.
    fn observe(&self, known: Token, op: &Op, leads: bool, holder: OwnerId) -> Option<Token> {
        match op.answer {
            None => Some(known),
            Some(Expected::Lease {
                leads: answered_leads,
                token,
                owner,
            }) => {
                let matches = match known {
                    Token::Exact(current) => token == current,
                    Token::AtLeast(least) => token >= least.max(1),
                };
                (answered_leads == leads && owner == holder && matches)
                    .then_some(Token::Exact(token))
            }
            Some(Expected::Release(_)) => None,
        }
    }
}
