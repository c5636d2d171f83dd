//! The listener's task: connect, `LISTEN`, forward every notification to its hub, and after
//! a lost connection connect again with backoff, telling subscribers they may have missed
//! notifications in between.
//!
//! A connection can also go silent without closing: a server that vanished without a reset
//! (a failed host, a dropped network path) leaves a socket that never delivers again. Or it
//! can answer queries and still never deliver a notification: a pooler in transaction mode
//! runs the `LISTEN` on a server connection it then hands to other clients. Every heartbeat
//! therefore notifies a channel only this listener listens on: a heartbeat unanswered within
//! the interval counts as a lost connection, and one whose notice has not come back by the
//! next heartbeat as a connection that does not deliver.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::PgPool;
use tokio::sync::watch;
use tokio::time::{sleep_until, timeout, Instant};

use super::dispatch::Hubs;
use crate::connections::backoff::Backoff;

/// The longest one attempt to connect and `LISTEN` may take. The pool retries a refused
/// connection until then, so this is also how long an unreachable server delays the first
/// subscription.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// What the task listens to and where it publishes.
pub(super) struct Listen {
    pub(super) hubs: Arc<Hubs>,
    pub(super) connect_options: PgConnectOptions,
    /// How often the listening connection is asked to answer, and how long it may take.
    pub(super) heartbeat: Duration,
    /// The channel each heartbeat notifies, which only this listener listens on.
    pub(super) probe_channel: String,
}

/// Why forwarding ended.
enum Ended {
    Stopped,
    /// The connection was lost: closed, failing, or silent; the words say which.
    Lost(String),
    /// The connection answers, but a heartbeat's notice did not come back to it.
    Undelivered,
}

/// Listens until `stop` turns `true` or its sender goes; sets `first_attempt` once the first
/// attempt to listen has ended, either way.
pub(super) async fn listen_until_stopped(
    listen: Listen,
    mut stop: watch::Receiver<bool>,
    first_attempt: watch::Sender<bool>,
) {
    let mut outage = Outage::default();
    loop {
        // A pool of its own for each attempt: a connection that went silent may never come
        // back to its pool, and must not hold up the next attempt.
        let pool = listener_pool(&listen.connect_options);
        let attempt = tokio::select! {
            () = stop_requested(&mut stop) => break,
            attempt = start_listening(&pool, &listen) => attempt,
        };
        first_attempt.send_replace(true);
        match attempt {
            Ok(mut listener) => {
                outage.listening(&listen.hubs);
                let ended = forward(&mut listener, &listen, &mut stop, &mut outage).await;
                dispose(listener);
                match ended {
                    Ended::Stopped => {
                        close(pool).await;
                        break;
                    }
                    Ended::Lost(why) => tracing::info!(
                        channels = ?listen.hubs.channels(),
                        error = why,
                        "the notification listener lost its connection; reconnecting"
                    ),
                    Ended::Undelivered => outage.undelivered(&listen),
                }
            }
            Err(error) => outage.failed(&listen.hubs, &error),
        }
        tokio::select! {
            () = stop_requested(&mut stop) => break,
            () = tokio::time::sleep(outage.backoff.next_wait()) => {}
        }
    }
}

/// A pool of one connection, only for `PgListener` to connect with; never an idle reaper.
fn listener_pool(connect_options: &PgConnectOptions) -> PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(ATTEMPT_TIMEOUT)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_lazy_with(connect_options.clone())
}

/// Lets go of `listener` on a thread and a runtime of its own, which end within
/// [`ATTEMPT_TIMEOUT`].
///
/// A dropped `PgListener` spawns its `UNLISTEN *` on the runtime it is dropped on. On a
/// connection that went silent, that waits for ever: first for the answer to an abandoned
/// heartbeat, then for its own. Spawned on the storage's runtime, it would hold the socket
/// open for as long as the process runs, one more for every silence. Dropping the runtime it
/// was spawned on ends it and closes the socket; a connection that answers has unlistened
/// and gone back to its pool by then.
fn dispose(listener: PgListener) {
    let spawned = std::thread::Builder::new()
        .name("eventstore-listener-drop".to_owned())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => {
                    // Dropped outside any runtime, the listener could not unlisten at all.
                    tracing::warn!(%error, "cannot let go of the notification listener's connection");
                    std::mem::forget(listener);
                    return;
                }
            };
            runtime.block_on(async move {
                drop(listener);
                let deadline = Instant::now() + ATTEMPT_TIMEOUT;
                let metrics = tokio::runtime::Handle::current().metrics();
                while metrics.num_alive_tasks() > 0 && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start a thread to let go of the notification listener's connection");
    }
}

/// Closes `pool` and the listener's connection with it, unless the server does not answer in
/// time.
async fn close(pool: PgPool) {
    if timeout(ATTEMPT_TIMEOUT, pool.close()).await.is_err() {
        tracing::warn!(after = ?ATTEMPT_TIMEOUT,
            "closing the notification listener's connection timed out; the server did not answer");
    }
}

/// What the attempts so far mean for subscribers, the log, and the wait before the next one.
#[derive(Default)]
struct Outage {
    /// An attempt was made before: listening now follows a time nobody listened.
    attempted_before: bool,
    /// Pushes stopped working and a warning said so; until a notice comes back, further
    /// failures only say so at debug level, so that a listener that never works warns once.
    warned: bool,
    /// Starts over only once a notice came back: a connection that never delivers is not
    /// made again and again at the shortest wait.
    backoff: Backoff,
}

impl Outage {
    /// Listening on a new connection.
    fn listening(&mut self, hubs: &Hubs) {
        if self.attempted_before {
            // Whatever changed while nobody listened went unnoticed.
            hubs.missed();
        }
        self.attempted_before = true;
    }

    /// A heartbeat's notice came back: what is notified from now on is pushed.
    fn delivered(&mut self, hubs: &Hubs) {
        if self.warned {
            tracing::info!(
                channels = ?hubs.channels(),
                "lease changes and append hints are pushed again"
            );
        }
        self.warned = false;
        self.backoff.reset();
    }

    fn failed(&mut self, hubs: &Hubs, error: &sqlx::Error) {
        if self.warned {
            tracing::debug!(
                channels = ?hubs.channels(),
                error = %explain(error),
                "the notification listener still cannot LISTEN"
            );
        } else {
            tracing::warn!(
                channels = ?hubs.channels(),
                error = %explain(error),
                "lease changes fall back to polling, and so do append hints: the listener \
                 cannot LISTEN; it keeps retrying in the background and subscriptions stay \
                 silent until then"
            );
        }
        self.attempted_before = true;
        self.warned = true;
    }

    fn undelivered(&mut self, listen: &Listen) {
        if self.warned {
            tracing::debug!(
                channels = ?listen.hubs.channels(),
                "notifications still do not reach the listener's connection"
            );
        } else {
            tracing::warn!(
                channels = ?listen.hubs.channels(),
                heartbeat = ?listen.heartbeat,
                "notifications do not reach the listener's connection, though it answers \
                 queries: is a pooler in transaction mode between it and the server? Give the \
                 storage a listen url that reaches the server directly. Until then the \
                 listener connects again after each heartbeat, and subscribers hear that they \
                 may have missed notices, so that they ask the storage"
            );
        }
        self.warned = true;
    }
}

/// Resolves once a stop is asked for, or nobody can ask any more.
async fn stop_requested(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// A listener on the channels of the hubs and the probe channel, within [`ATTEMPT_TIMEOUT`].
async fn start_listening(pool: &PgPool, listen: &Listen) -> Result<PgListener, sqlx::Error> {
    let attempt = async {
        let mut listener = PgListener::connect_with(pool).await?;
        // A lost connection ends forwarding, so that this task reconnects with backoff and
        // says that notices may have been missed.
        listener.eager_reconnect(false);
        let channels = listen.hubs.channels();
        let probe = [listen.probe_channel.as_str()];
        listener
            .listen_all(channels.into_iter().chain(probe))
            .await?;
        Ok(listener)
    };
    tokio::time::timeout(ATTEMPT_TIMEOUT, attempt)
        .await
        .unwrap_or(Err(sqlx::Error::PoolTimedOut))
}

/// What went wrong with an attempt, for the log. The pool retries a refused connection
/// until the attempt times out, so a timeout says more than the driver's words for it.
fn explain(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::PoolTimedOut => format!(
            "no connection within {ATTEMPT_TIMEOUT:?}: the server refused, did not answer, or \
             was too slow"
        ),
        error => error.to_string(),
    }
}

/// Publishes every notification until a stop is asked for or the connection is lost; every
/// heartbeat interval, notifies the probe channel, the first time at once.
async fn forward(
    listener: &mut PgListener,
    listen: &Listen,
    stop: &mut watch::Receiver<bool>,
    outage: &mut Outage,
) -> Ended {
    let mut probes = Probes::default();
    let mut next_heartbeat = Instant::now();
    loop {
        // Receiving is cancel-safe: a notification half read when the heartbeat is due stays
        // buffered for the next receive.
        let received = tokio::select! {
            () = stop_requested(stop) => return Ended::Stopped,
            received = listener.try_recv() => received,
            () = sleep_until(next_heartbeat) => {
                if probes.awaited.is_some() {
                    return Ended::Undelivered;
                }
                let payload = probes.send();
                // The channel in the text, for whoever looks at `pg_stat_activity`.
                let statement = format!("SELECT pg_notify('{}', $1)", listen.probe_channel);
                let notify = sqlx::query(&statement).bind(&payload).persistent(false);
                // Notifications that arrive meanwhile are buffered, and received next.
                let answered = tokio::select! {
                    () = stop_requested(stop) => return Ended::Stopped,
                    answered = timeout(listen.heartbeat, notify.execute(&mut *listener)) => answered,
                };
                match answered {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => return Ended::Lost(error.to_string()),
                    Err(_elapsed) => {
                        return Ended::Lost(format!(
                            "the connection did not answer a heartbeat within {:?}",
                            listen.heartbeat
                        ))
                    }
                }
                next_heartbeat = Instant::now() + listen.heartbeat;
                continue;
            }
        };
        match received {
            Ok(Some(notification)) if notification.channel() == listen.probe_channel => {
                if probes.came_back(notification.payload()) {
                    outage.delivered(&listen.hubs);
                }
            }
            Ok(Some(notification)) => listen
                .hubs
                .publish(notification.channel(), notification.payload()),
            Ok(None) => return Ended::Lost("connection closed".to_owned()),
            Err(error) => return Ended::Lost(error.to_string()),
        }
    }
}

/// The heartbeats' notices on one connection: each carries a number of its own, so that a
/// late one is not taken for the one awaited.
#[derive(Default)]
struct Probes {
    sent: u64,
    /// The payload of the last notice sent, until it comes back.
    awaited: Option<String>,
}

impl Probes {
    /// The payload of the next notice, now awaited.
    fn send(&mut self) -> String {
        self.sent += 1;
        let payload = self.sent.to_string();
        self.awaited = Some(payload.clone());
        payload
    }

    /// Whether `payload` is the notice awaited, which then is no longer.
    fn came_back(&mut self, payload: &str) -> bool {
        let awaited = self.awaited.as_deref() == Some(payload);
        if awaited {
            self.awaited = None;
        }
        awaited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_last_notice_sent_counts_as_come_back() {
        let mut probes = Probes::default();
        let first = probes.send();
        let second = probes.send();
        assert!(!probes.came_back(&first));
        assert!(probes.awaited.is_some());
        assert!(probes.came_back(&second));
        assert!(probes.awaited.is_none());
        assert!(!probes.came_back(&second));
    }
}
