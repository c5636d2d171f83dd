//! The listener's task: connect, `LISTEN`, forward every notification to its hub, and after
//! a lost connection connect again with backoff, telling subscribers they may have missed
//! notifications in between.
//!
//! A connection can also go silent without closing: a server that vanished without a reset
//! (a failed host, a dropped network path) leaves a socket that never delivers again. A
//! heartbeat query on the listening connection finds that out: one unanswered within a
//! heartbeat interval counts as a lost connection.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{Executor, PgPool};
use tokio::sync::watch;
use tokio::time::{sleep_until, timeout, Instant};

use super::dispatch::Hubs;
use crate::backoff::Backoff;

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
}

/// Why forwarding ended.
enum Ended {
    Stopped,
    /// The connection was lost: closed, failing, or silent; the words say which.
    Lost(String),
}

/// Listens until `stop` turns `true` or its sender goes; sets `first_attempt` once the first
/// attempt to listen has ended, either way.
pub(super) async fn listen_until_stopped(
    listen: Listen,
    mut stop: watch::Receiver<bool>,
    first_attempt: watch::Sender<bool>,
) {
    let mut backoff = Backoff::default();
    let mut outage = Outage::default();
    loop {
        // A pool of its own for each attempt: a connection that went silent may never come
        // back to its pool, and must not hold up the next attempt.
        let pool = listener_pool(&listen.connect_options);
        let attempt = tokio::select! {
            () = stop_requested(&mut stop) => break,
            attempt = start_listening(&pool, &listen.hubs) => attempt,
        };
        first_attempt.send_replace(true);
        match attempt {
            Ok(mut listener) => {
                outage.listening(&listen);
                backoff.reset();
                match forward(&mut listener, &listen, &mut stop).await {
                    Ended::Stopped => {
                        drop(listener);
                        close(pool).await;
                        break;
                    }
                    Ended::Lost(why) => tracing::info!(
                        channels = ?listen.hubs.channels(),
                        error = why,
                        "the notification listener lost its connection; reconnecting"
                    ),
                }
            }
            Err(error) => outage.failed(&listen.hubs, &error),
        }
        tokio::select! {
            () = stop_requested(&mut stop) => break,
            () = tokio::time::sleep(backoff.next_wait()) => {}
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

/// Closes `pool` and the listener's connection with it, unless the server does not answer in
/// time.
async fn close(pool: PgPool) {
    if timeout(ATTEMPT_TIMEOUT, pool.close()).await.is_err() {
        tracing::warn!(after = ?ATTEMPT_TIMEOUT,
            "closing the notification listener's connection timed out; the server did not answer");
    }
}

/// What the attempts so far mean for subscribers and the log.
#[derive(Default)]
struct Outage {
    /// An attempt was made before: listening now follows a time nobody listened.
    attempted_before: bool,
    /// The last attempt failed and said so with a warning; later failures only say so at
    /// debug level, so that a listener that never works warns once.
    warned: bool,
}

impl Outage {
    fn listening(&mut self, listen: &Listen) {
        if self.attempted_before {
            // Whatever changed while nobody listened went unnoticed.
            listen.hubs.missed();
        }
        if self.warned {
            tracing::info!(
                channels = ?listen.hubs.channels(),
                "lease changes and append hints are pushed again"
            );
        }
        *self = Outage {
            attempted_before: true,
            warned: false,
        };
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
        *self = Outage {
            attempted_before: true,
            warned: true,
        };
    }
}

/// Resolves once a stop is asked for, or nobody can ask any more.
async fn stop_requested(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// A listener on the channels of `hubs`, within [`ATTEMPT_TIMEOUT`].
async fn start_listening(pool: &PgPool, hubs: &Hubs) -> Result<PgListener, sqlx::Error> {
    let attempt = async {
        let mut listener = PgListener::connect_with(pool).await?;
        // A lost connection ends forwarding, so that this task reconnects with backoff and
        // says that notices may have been missed.
        listener.eager_reconnect(false);
        listener.listen_all(hubs.channels()).await?;
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

/// Publishes every notification until a stop is asked for or the connection is lost; asks
/// the connection to answer every heartbeat interval.
async fn forward(
    listener: &mut PgListener,
    listen: &Listen,
    stop: &mut watch::Receiver<bool>,
) -> Ended {
    let mut next_heartbeat = Instant::now() + listen.heartbeat;
    loop {
        // Receiving is cancel-safe: a notification half read when the heartbeat is due stays
        // buffered for the next receive.
        let received = tokio::select! {
            () = stop_requested(stop) => return Ended::Stopped,
            received = listener.try_recv() => received,
            () = sleep_until(next_heartbeat) => {
                // Notifications that arrive meanwhile are buffered, and received next.
                let answered = tokio::select! {
                    () = stop_requested(stop) => return Ended::Stopped,
                    answered = timeout(listen.heartbeat, listener.execute("SELECT 1")) => answered,
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
            Ok(Some(notification)) => listen
                .hubs
                .publish(notification.channel(), notification.payload()),
            Ok(None) => return Ended::Lost("connection closed".to_owned()),
            Err(error) => return Ended::Lost(error.to_string()),
        }
    }
}
