//! The one `LISTEN` connection of a storage, shared by all its handles: started by the first
//! subscription to lease changes or append hints, it feeds what the lease functions and the
//! appends notify to the storage's hubs, and stops when the storage closes or its last handle
//! goes.

mod dispatch;
mod task;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use eventstore_api::append_hints::AppendHintHub;
use eventstore_api::lease_changes::LeaseChangeHub;
use eventstore_api::{AppendHints, EventStreamId, LeaseChanges, LeaseScope};
use sqlx::postgres::PgConnectOptions;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The `application_name` of the listener's connection, to tell it apart in
/// `pg_stat_activity`.
pub(crate) const APPLICATION_NAME: &str = "eventstore-listener";

/// The listener of one storage and the hubs it publishes on.
pub(crate) struct Listener {
    hubs: Arc<dispatch::Hubs>,
    connect_options: PgConnectOptions,
    heartbeat: Duration,
    /// The channel only this listener listens on, which its heartbeats notify.
    probe_channel: String,
    state: Mutex<State>,
    /// The task a `close` waits for, kept here so that a `close` given up part-way (a
    /// caller's timeout around it) leaves the next one something to wait on.
    stopping: tokio::sync::Mutex<Option<JoinHandle<()>>>,
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

impl Listener {
    /// A listener, not yet connected, that will connect with `connect_options`, listen on
    /// `lease_channel` and `append_channel`, and take a connection that does not answer a
    /// heartbeat within `heartbeat`, or whose heartbeat's notice on `probe_channel` does not
    /// come back by the next, as lost. Nothing else may listen on `probe_channel`.
    pub(crate) fn new(
        connect_options: PgConnectOptions,
        lease_channel: String,
        append_channel: String,
        probe_channel: String,
        heartbeat: Duration,
    ) -> Self {
        Listener {
            hubs: Arc::new(dispatch::Hubs {
                lease_channel,
                leases: LeaseChangeHub::new(),
                append_channel,
                appends: AppendHintHub::new(),
            }),
            connect_options: connect_options.application_name(APPLICATION_NAME),
            heartbeat,
            probe_channel,
            state: Mutex::new(State::Idle),
            stopping: tokio::sync::Mutex::new(None),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A subscription to the leases of `scope`; see [`Listener::started`].
    pub(crate) async fn subscribe_lease_changes(&self, scope: &LeaseScope) -> LeaseChanges {
        let subscription = self.hubs.leases.subscribe(scope);
        self.started().await;
        subscription
    }

    /// A subscription to the append hints of the streams `stream` covers; see
    /// [`Listener::started`].
    pub(crate) async fn subscribe_appends(&self, stream: &EventStreamId) -> AppendHints {
        let subscription = self.hubs.appends.subscribe(stream);
        self.started().await;
        subscription
    }

    /// Starts the listener if it is not running, for a subscription made just before.
    ///
    /// Returns once the listener's first attempt to listen has ended, so that every change
    /// committed after this returns reaches the subscription, unless the listener is down;
    /// then the subscription stays silent until it is back, and hears `Missed` then.
    async fn started(&self) {
        let mut first_attempt_ended = {
            let mut state = self.state();
            match &*state {
                State::Closed => return,
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
    }

    fn start(&self) -> Running {
        let (stop, stop_requested) = watch::channel(false);
        let (first_attempt, first_attempt_ended) = watch::channel(false);
        let task = tokio::spawn(task::listen_until_stopped(
            task::Listen {
                hubs: Arc::clone(&self.hubs),
                connect_options: self.connect_options.clone(),
                heartbeat: self.heartbeat,
                probe_channel: self.probe_channel.clone(),
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
        // The subscriptions first: they end even if this close is given up while it waits.
        self.hubs.leases.close();
        self.hubs.appends.close();
        let mut stopping = self.stopping.lock().await;
        let previous = std::mem::replace(&mut *self.state(), State::Closed);
        if let State::Running(running) = previous {
            running.stop.send_replace(true);
            *stopping = Some(running.task);
        }
        if let Some(task) = stopping.as_mut() {
            // A task that panicked has nothing left to stop.
            let _ = task.await;
            *stopping = None;
        }
    }
}
