//! The storage's own appends, so that an append can often tell without asking the server
//! that the visibility barrier has passed it.
//!
//! An append is readable once no transaction older than its own is still running. Its insert
//! reports which transactions those were when it wrote (see `append`). Among appenders of one
//! process these are mostly the storage's own appends, still in flight: once each of them has
//! returned from its commit (or failed, which ended its transaction too), none is running,
//! and the append returns without a round trip. A transaction of anyone else, or one of ours
//! that failed before its id was known, leaves the answer to the server, as before.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The most finished transaction ids remembered: the transactions an append waits for were
/// running while it wrote, so they are among the last few thousand to finish here.
const MOST_REMEMBERED: usize = 4_096;

/// How long a finished transaction id is remembered: an append waits for transactions that
/// were running while it wrote, so they ended moments ago. Older ids are left to the server,
/// which also keeps an id handed out again by a promoted standby (a failover) from being
/// taken for one of ours.
const REMEMBERED_FOR: Duration = Duration::from_secs(1);

/// The appends of one storage under way, and the transactions of those that finished.
#[derive(Debug, Default)]
pub(crate) struct OwnAppends {
    state: Mutex<State>,
    /// Woken whenever an append ends.
    ended: Notify,
}

#[derive(Debug, Default)]
struct State {
    next_ticket: u64,
    /// The tickets of the appends under way.
    under_way: BTreeSet<u64>,
    /// Transaction ids of appends that ended, and when, in the order to forget them in.
    finished: HashSet<u64>,
    finished_order: VecDeque<(u64, Instant)>,
}

impl State {
    /// Forgets what ended more than [`REMEMBERED_FOR`] ago, and the oldest beyond
    /// [`MOST_REMEMBERED`].
    fn forget_old(&mut self, now: Instant) {
        while let Some(&(tx, ended)) = self.finished_order.front() {
            if self.finished_order.len() <= MOST_REMEMBERED && now - ended <= REMEMBERED_FOR {
                break;
            }
            self.finished_order.pop_front();
            self.finished.remove(&tx);
        }
    }
}

/// An append under way; dropping it says the append ended without a transaction to name.
#[derive(Debug)]
pub(crate) struct UnderWay<'a> {
    appends: &'a OwnAppends,
    ticket: u64,
}

impl OwnAppends {
    /// Marks the start of an append, before its transaction can have an id.
    pub(crate) fn start(&self) -> UnderWay<'_> {
        let mut state = self.state();
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.under_way.insert(ticket);
        UnderWay {
            appends: self,
            ticket,
        }
    }

    /// Waits, until `deadline` at most, while any of `older` may be an append of ours still
    /// under way: true once every one of them is known to have ended, false as soon as that
    /// cannot be learned here (no append that started before this call is still under way).
    pub(crate) async fn all_ended(&self, older: &[u64], deadline: Instant) -> bool {
        // The usual answer of a lone appender, without the lock.
        if older.is_empty() {
            return true;
        }
        let started_before = self.state().next_ticket;
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before looking, so that an append ending in between still wakes us.
            ended.as_mut().enable();
            {
                let mut state = self.state();
                state.forget_old(Instant::now());
                if older.iter().all(|tx| state.finished.contains(tx)) {
                    return true;
                }
                let earlier_under_way = state
                    .under_way
                    .first()
                    .is_some_and(|&ticket| ticket < started_before);
                if !earlier_under_way {
                    return false;
                }
            }
            if tokio::time::timeout_at(deadline.into(), ended)
                .await
                .is_err()
            {
                return false;
            }
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn end(&self, ticket: u64, tx: Option<u64>) {
        {
            let mut state = self.state();
            state.under_way.remove(&ticket);
            if let Some(tx) = tx {
                let now = Instant::now();
                if state.finished.insert(tx) {
                    state.finished_order.push_back((tx, now));
                }
                state.forget_old(now);
            }
        }
        self.ended.notify_waiters();
    }
}

impl UnderWay<'_> {
    /// The append ended: its transaction `tx` committed or rolled back, and runs no more.
    pub(crate) fn ended(self, tx: u64) {
        let (appends, ticket) = (self.appends, self.ticket);
        std::mem::forget(self);
        appends.end(ticket, Some(tx));
    }
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        self.appends.end(self.ticket, None);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::task::JoinHandle;

    use super::*;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    /// Asks in a task of its own whether `older` all ended.
    fn ask(appends: &Arc<OwnAppends>, older: &'static [u64]) -> JoinHandle<bool> {
        let appends = Arc::clone(appends);
        tokio::spawn(async move { appends.all_ended(older, soon()).await })
    }

    #[tokio::test]
    async fn nothing_older_has_ended_already() {
        assert!(OwnAppends::default().all_ended(&[], soon()).await);
    }

    #[tokio::test]
    async fn a_transaction_of_an_ended_append_is_known() {
        let appends = OwnAppends::default();
        appends.start().ended(7);
        assert!(appends.all_ended(&[7], soon()).await);
    }

    #[tokio::test]
    async fn a_transaction_nothing_here_is_running_is_left_to_the_server_at_once() {
        let appends = OwnAppends::default();
        let started = Instant::now();
        assert!(!appends.all_ended(&[7], soon()).await);
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn an_append_under_way_is_awaited_until_it_ends() {
        let appends = Arc::new(OwnAppends::default());
        let under_way = appends.start();
        let waiter = ask(&appends, &[7, 8]);
        appends.start().ended(8);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "7 may still be the append under way");
        under_way.ended(7);
        assert!(waiter.await.unwrap());
    }

    #[tokio::test]
    async fn an_append_that_failed_leaves_its_unknown_transaction_to_the_server() {
        let appends = Arc::new(OwnAppends::default());
        let under_way = appends.start();
        let waiter = ask(&appends, &[7]);
        drop(under_way);
        assert!(!waiter.await.unwrap());
    }

    #[tokio::test]
    async fn appends_started_after_the_question_are_not_awaited() {
        let appends = Arc::new(OwnAppends::default());
        let earlier = appends.start();
        let waiter = ask(&appends, &[7]);
        tokio::task::yield_now().await;
        let _later = appends.start();
        drop(earlier);
        assert!(!waiter.await.unwrap(), "7 cannot be the later append's");
    }

    #[tokio::test]
    async fn the_wait_ends_at_its_deadline() {
        let appends = OwnAppends::default();
        let _under_way = appends.start();
        let deadline = Instant::now() + Duration::from_millis(20);
        assert!(!appends.all_ended(&[7], deadline).await);
        assert!(Instant::now() >= deadline);
    }

    #[tokio::test]
    async fn only_the_last_finished_transactions_are_remembered() {
        let appends = OwnAppends::default();
        for tx in 0..=MOST_REMEMBERED as u64 {
            appends.start().ended(tx);
        }
        assert!(appends.all_ended(&[MOST_REMEMBERED as u64], soon()).await);
        assert!(
            !appends.all_ended(&[0], soon()).await,
            "the oldest forgotten"
        );
        assert_eq!(appends.state().finished.len(), MOST_REMEMBERED);
    }

    #[tokio::test]
    async fn a_transaction_that_ended_long_ago_is_left_to_the_server() {
        let appends = OwnAppends::default();
        appends.start().ended(7);
        let later = Instant::now() + REMEMBERED_FOR + Duration::from_millis(1);
        appends.state().forget_old(later);
        assert!(!appends.all_ended(&[7], soon()).await);
    }
}
