//! Read-your-writes behind the visibility barrier: an append returns once readers see it.
//!
//! Reads stop below the oldest running transaction, so a committed append is not yet
//! readable while a transaction older than its own is still running anywhere in the
//! cluster. An append's insert reports which older transactions may have been running when
//! it wrote (see `append`): with none, the append is readable the moment it commits and asks
//! nothing more; when all of them are the storage's own appends, it waits for those to end
//! ([`OwnAppends`](super::own_appends::OwnAppends)). Only otherwise does it poll the server,
//! which costs one more round trip when the older writers have finished by then, and a
//! bounded wait when one is still open.

use std::time::{Duration, Instant};

use eventstore_api::StorageResult;

use crate::shared::Shared;

/// The first pause between polls; pauses double up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(1);
/// The longest pause between polls, so that a long wait costs a few dozen polls a second.
const LONGEST_PAUSE: Duration = Duration::from_millis(20);
/// The longest wait for the storage's own appends before the server is asked: they commit
/// within milliseconds, and one held up (by a lock, say) must not keep an append from
/// learning from the server that the barrier passed it.
const LONGEST_LOCAL_WAIT: Duration = LONGEST_PAUSE;

/// Waits, up to the storage's visibility wait, until the barrier has passed transaction
/// `tx`, so that any read that starts afterwards, from any process, sees what it wrote.
/// `older` are the transactions older than `tx` that may have been running when it wrote,
/// when known; `what` names its events in the warning when the wait ends first.
pub(crate) async fn wait_until_visible(
    shared: &Shared,
    tx: u64,
    older: Option<&[u64]>,
    what: &str,
) {
    let wait = shared.settings.visibility_wait;
    if wait.is_zero() {
        return;
    }
    let deadline = Instant::now() + wait;
    if let Some(older) = older {
        let local_deadline = deadline.min(Instant::now() + LONGEST_LOCAL_WAIT);
        if shared.own_appends.all_ended(older, local_deadline).await {
            return;
        }
    }
    let mut pause = FIRST_PAUSE;
    loop {
        // Bounded as a whole: neither a pool without a free connection nor a server that
        // stopped answering holds the caller beyond the deadline.
        let passed = tokio::time::timeout_at(deadline.into(), barrier_passed(shared, tx)).await;
        // The events are committed; a failure here only means the caller may not see them
        // in its very next read.
        match passed {
            Ok(Ok(true)) => return,
            Ok(Ok(false)) if Instant::now() + pause <= deadline => {}
            Ok(Ok(false)) | Err(_) => {
                tracing::warn!(
                    tx,
                    ?wait,
                    "{what}: committed, but an older transaction still hides it from new reads \
                     after the visibility wait"
                );
                return;
            }
            Ok(Err(error)) => {
                tracing::warn!(tx, %error,
                    "{what}: committed, but whether new reads see it yet could not be checked");
                return;
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// Whether the visibility barrier has passed transaction `tx`.
async fn barrier_passed(shared: &Shared, tx: u64) -> StorageResult<bool> {
    let operation = "wait for the visibility barrier";
    let mut connection = shared.connection_for(operation).await?;
    let passed =
        sqlx::query_scalar("SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::text::xid8")
            .bind(tx.to_string())
            .persistent(shared.settings.prepared_statements)
            .fetch_one(&mut *connection)
            .await
            .map_err(|e| shared.settings.failing(operation).map(e))?;
    shared.end(operation, connection).await?;
    Ok(passed)
}
