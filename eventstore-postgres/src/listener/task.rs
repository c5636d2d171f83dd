//! The listener's task: connect, `LISTEN`, forward every notification to its hub, and after
//! a lost connection connect again with backoff, telling subscribers they may have missed
//! notifications in between.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::PgPool;
use tokio::sync::watch;

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
}

/// Why forwarding ended.
enum Ended {
    Stopped,
    /// The connection was lost: closed, or failing with this error.
    Lost(Option<sqlx::Error>),
}

/// Listens until `stop` turns `true` or its sender goes; sets `first_attempt` once the first
/// attempt to listen has ended, either way.
pub(super) async fn listen_until_stopped(
    listen: Listen,
    mut stop: watch::Receiver<bool>,
    first_attempt: watch::Sender<bool>,
) {
    // A pool of one connection, only for PgListener to connect with; never an idle reaper.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(ATTEMPT_TIMEOUT)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_lazy_with(listen.connect_options.clone());
    let mut backoff = Backoff::default();
    let mut outage = Outage::default();
    loop {
        let attempt = tokio::select! {
            () = stop_requested(&mut stop) => break,
            attempt = start_listening(&pool, &listen.hubs) => attempt,
        };
        first_attempt.send_replace(true);
        match attempt {
            Ok(mut listener) => {
                outage.listening(&listen);
                backoff.reset();
                match forward(&mut listener, &listen.hubs, &mut stop).await {
                    Ended::Stopped => break,
                    Ended::Lost(error) => tracing::info!(
                        channels = ?listen.hubs.channels(),
                        error = error.map_or_else(|| "connection closed".to_owned(), |e| e.to_string()),
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
    // The listener's connection goes back to the pool when the listener is dropped; closing
    // the pool closes it, unless the server does not answer in time.
    if tokio::time::timeout(ATTEMPT_TIMEOUT, pool.close())
        .await
        .is_err()
    {
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

/// Publishes every notification until a stop is asked for or the connection is lost.
async fn forward(
    listener: &mut PgListener,
    hubs: &Hubs,
    stop: &mut watch::Receiver<bool>,
) -> Ended {
    loop {
        let received = tokio::select! {
            () = stop_requested(stop) => return Ended::Stopped,
            received = listener.try_recv() => received,
        };
        match received {
            Ok(Some(notification)) => hubs.publish(notification.channel(), notification.payload()),
            Ok(None) => return Ended::Lost(None),
            Err(error) => return Ended::Lost(Some(error)),
        }
    }
}
