//! The one `LISTEN` connection of a storage, shared by all its handles: started by the first
//! subscription to lease changes, it feeds what the lease functions notify to the storage's
//! [`LeaseChangeHub`], and stops when the storage closes or its last handle goes.

mod task;

use std::sync::{Arc, Mutex, MutexGuard};

use eventstore_api::lease_changes::LeaseChangeHub;
use eventstore_api::{LeaseChanges, LeaseScope};
use sqlx::postgres::PgConnectOptions;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The `application_name` of the listener's connection, to tell it apart in
/// `pg_stat_activity`.
pub(crate) const APPLICATION_NAME: &str = "eventstore-listener";

/// The listener of one storage and the hub it publishes on.
pub(crate) struct LeaseListener {
    hub: Arc<LeaseChangeHub>,
    connect_options: PgConnectOptions,
    channel: String,
    state: Mutex<State>,
}

enum State {
    /// Nobody subscribed yet: no connection.
    Idle,
    Running(Running),
    /// The storage is closed: no listener starts again.
    Closed,
}

struct Running {
    /// `true` asks the task to stop; dropping it (the storage's last handle went) does too.
    stop: watch::Sender<bool>,
    /// `true` once the task's first attempt to listen ended, whether it worked or not.
    first_attempt_ended: watch::Receiver<bool>,
    task: JoinHandle<()>,
}

impl LeaseListener {
    /// A listener, not yet connected, that will connect with `connect_options` and listen
    /// on `channel`.
    pub(crate) fn new(connect_options: PgConnectOptions, channel: String) -> Self {
        LeaseListener {
            hub: Arc::new(LeaseChangeHub::new()),
            connect_options: connect_options.application_name(APPLICATION_NAME),
            channel,
            state: Mutex::new(State::Idle),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A subscription to the leases of `scope`, starting the listener if it is not running.
    ///
    /// Returns once the listener's first attempt to listen has ended, so that every change
    /// committed after this returns reaches the subscription, unless the listener is down;
    /// then the subscription stays silent until it is back, and hears `Missed` then.
    pub(crate) async fn subscribe(&self, scope: &LeaseScope) -> LeaseChanges {
        let subscription = self.hub.subscribe(scope);
        let mut first_attempt_ended = {
            let mut state = self.state();
            match &*state {
                State::Closed => return subscription,
                State::Running(running) => running.first_attempt_ended.clone(),
                State::Idle => {
                    let running = self.start();
                    let ended = running.first_attempt_ended.clone();
                    *state = State::Running(running);
                    ended
                }
            }
        };
        // An error means the task is gone (the storage closed): nothing to wait for.
        let _ = first_attempt_ended.wait_for(|ended| *ended).await;
        subscription
    }

    fn start(&self) -> Running {
        let (stop, stop_requested) = watch::channel(false);
        let (first_attempt, first_attempt_ended) = watch::channel(false);
        let task = tokio::spawn(task::listen_until_stopped(
            task::Listen {
                hub: Arc::clone(&self.hub),
                connect_options: self.connect_options.clone(),
                channel: self.channel.clone(),
            },
            stop_requested,
            first_attempt,
        ));
        Running {
            stop,
            first_attempt_ended,
            task,
        }
    }

    /// Stops the listener, if it runs, and ends every subscription; later subscriptions end
    /// at once.
    pub(crate) async fn close(&self) {
        let previous = std::mem::replace(&mut *self.state(), State::Closed);
        if let State::Running(running) = previous {
            running.stop.send_replace(true);
            // A task that panicked has nothing left to stop.
            let _ = running.task.await;
        }
        self.hub.close();
    }
}
