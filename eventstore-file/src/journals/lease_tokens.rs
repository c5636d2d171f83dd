//! Leases in memory, with their fencing tokens made durable so that they never repeat.
//!
//! The lease rules are [`eventstore_api::in_process`]'s [`LeaseTable`]. What this module adds is a
//! persisted *ceiling* per lease: before a grant uses a token above the ceiling, a block of
//! tokens is reserved by writing a new ceiling durably, so most grants need no I/O. After a
//! reopen every lease starts above its persisted ceiling, higher than any token handed out
//! before, while the holders themselves are forgotten.
//!
//! A batch that needs a reservation is answered, then the new ceilings are written and synced
//! on a blocking thread, and its answers leave only once they are durable. Should that write
//! fail, the table has granted tokens that a restart could grant again, so from then on every
//! lease operation is refused until the store is reopened, as the journal itself refuses every
//! later change after a failure.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use eventstore_api::in_process::LeaseTable;
use eventstore_api::lease_changes::LeaseChangeHub;
use eventstore_api::{
    EventStorageError, Fence, FencingToken, LeaseOutcome, LeaseRequest, ReleaseOutcome,
};
use hashbrown::HashMap;

use crate::disk::corruption::{Corruption, OpenFailure};
use crate::disk::file_failure::FileFailure;
use crate::journals::journal::{Journal, Kind};
use crate::log::codec::{put_str, put_u64, Decoder};

/// The journal's file name inside the store's directory.
pub(crate) const TOKENS_FILE: &str = "lease-tokens.log";

const KIND: Kind = *b"ESFTOK";

/// Tokens reserved with one durable write.
const RESERVATION_BLOCK: u64 = 100;

/// The lease table and the durable token ceilings that keep its tokens from repeating.
#[derive(Debug)]
pub(crate) struct LeaseState {
    table: LeaseTable,
    ceilings: TokenCeilings,
    /// Why every lease operation is refused: tokens the table granted could not be made
    /// durable.
    failure: Option<FileFailure>,
    tokens_file: PathBuf,
}

/// The highest token reserved per lease, and the journal that keeps them.
#[derive(Debug)]
struct TokenCeilings {
    by_lease: HashMap<String, u64>,
    /// `None` for a read-only store, which grants no lease.
    journal: Option<Journal>,
}

impl LeaseState {
    /// Opens the ceilings in `dir`; every lease starts above its ceiling and with no holder.
    ///
    /// # Errors
    /// I/O failure or damage (see [`Journal::open`]).
    pub(crate) fn open(dir: &Path) -> Result<LeaseState, OpenFailure> {
        let path = dir.join(TOKENS_FILE);
        let (mut journal, records) = Journal::open(&path, KIND)?;
        let mut ceilings = HashMap::new();
        for record in &records {
            let mut decoder = Decoder::new(&record.payload);
            let decoded = decoder.str("the lease name").and_then(|name| {
                let ceiling = decoder.u64("the token ceiling")?;
                decoder.finish("the token record")?;
                Ok((name.to_owned(), ceiling))
            });
            let (name, ceiling) = decoded.map_err(|error| {
                Corruption::new(
                    &path,
                    record.offset,
                    format!("the token record does not decode: {error}"),
                )
            })?;
            let known = ceilings.entry(name).or_insert(0);
            *known = ceiling.max(*known);
        }
        if journal.wants_rewrite(ceilings.len()) {
            encode_all(&ceilings)
                .and_then(|records| journal.rewrite(&records))
                .map_err(OpenFailure::io("cannot compact", &path))?;
        }
        let mut table = LeaseTable::new();
        for (name, &ceiling) in &ceilings {
            table.raise_floor(name, FencingToken(ceiling));
        }
        Ok(LeaseState::of(table, ceilings, Some(journal), path))
    }

    /// The state of a read-only store: no lease, and no token can be reserved.
    pub(crate) fn read_only() -> LeaseState {
        LeaseState::of(LeaseTable::new(), HashMap::new(), None, PathBuf::new())
    }

    fn of(
        table: LeaseTable,
        by_lease: HashMap<String, u64>,
        journal: Option<Journal>,
        tokens_file: PathBuf,
    ) -> LeaseState {
        LeaseState {
            table,
            ceilings: TokenCeilings { by_lease, journal },
            failure: None,
            tokens_file,
        }
    }

    /// The lease table, for reading, unless a reservation failed (see the module).
    ///
    /// # Errors
    /// A write of token ceilings failed earlier: refused until the store is reopened.
    pub(crate) fn table(&self) -> Result<&LeaseTable, EventStorageError> {
        match &self.failure {
            None => Ok(&self.table),
            Some(failure) => Err(EventStorageError::backend(
                format!(
                    "the event store refuses lease operations since fencing tokens it granted \
                     could not be made durable ({failure}); reopen it to recover"
                ),
                failure.cause(),
            )),
        }
    }

    /// Checks `fence` against the lease it names at `now`.
    ///
    /// # Errors
    /// [`EventStorageError::Fenced`] as [`LeaseTable::check_fence`] says, or the refusal of
    /// [`LeaseState::table`].
    pub(crate) fn check_fence(
        &self,
        fence: &Fence,
        now: DateTime<Utc>,
    ) -> Result<(), EventStorageError> {
        self.table()?.check_fence(fence, now)
    }

    /// Where the table publishes its changes.
    pub(crate) fn changes(&self) -> Arc<LeaseChangeHub> {
        self.table.changes()
    }

    /// The ceilings to make durable before answering `requests`: for each lease they name
    /// whose highest possible token lies above its ceiling, a block of tokens beyond it. Empty
    /// when the requests need no I/O.
    pub(crate) fn reservation(&self, requests: &[LeaseRequest]) -> Reservation {
        let ceilings = &self.ceilings;
        let ceiling = |name: &str| ceilings.by_lease.get(name).copied().unwrap_or(0);
        Reservation(
            self.highest_needed(requests)
                .into_iter()
                .filter(|(name, needed)| *needed > ceiling(name))
                .map(|(name, needed)| (name.to_owned(), needed + RESERVATION_BLOCK - 1))
                .collect(),
        )
    }

    /// Answers `requests` one by one at `now`, when their [`LeaseState::reservation`] is
    /// empty (see [`LeaseState::reserve_and_request_all`] for when it is not).
    pub(crate) fn request_all(
        &mut self,
        requests: &[LeaseRequest],
        now: DateTime<Utc>,
    ) -> Vec<LeaseOutcome> {
        debug_assert!(self.reservation(requests).is_empty());
        self.answer(requests, now)
    }

    /// Answers `requests` one by one at `now`, then writes and syncs the ceilings of their
    /// `reservation`; returns the answers once they are durable. Blocks on the write: run it to
    /// its end on a thread of its own, holding the state's lock (stopped half-way, the table
    /// would keep grants whose tokens may never have been made durable).
    ///
    /// # Errors
    /// The ceilings could not be made durable: nothing is answered, and every later lease
    /// operation is refused (see the module).
    pub(crate) fn reserve_and_request_all(
        &mut self,
        reservation: Reservation,
        requests: &[LeaseRequest],
        now: DateTime<Utc>,
    ) -> Result<Vec<LeaseOutcome>, EventStorageError> {
        // Lost until the write's outcome is known: should the write panic, the grants below
        // must not be answered later.
        self.failure = Some(self.lost(io::Error::new(
            io::ErrorKind::Interrupted,
            "the write was stopped before its outcome was known",
        )));
        let outcomes = self.answer(requests, now);
        match self.ceilings.reserve(reservation) {
            Ok(()) => {
                self.failure = None;
                Ok(outcomes)
            }
            Err(error) => {
                let failure = self.lost(error);
                let answer = EventStorageError::backend(failure.to_string(), failure.cause());
                self.failure = Some(failure);
                Err(answer)
            }
        }
    }

    /// The failure of a write of ceilings that failed with `error`.
    fn lost(&self, error: io::Error) -> FileFailure {
        FileFailure::new("make fencing tokens durable in", &self.tokens_file, error)
    }

    /// Applies `release_lease` at `now`.
    pub(crate) fn release(
        &mut self,
        lease_name: &str,
        owner: &str,
        now: DateTime<Utc>,
    ) -> ReleaseOutcome {
        self.table.release(lease_name, owner, now)
    }

    fn answer(&mut self, requests: &[LeaseRequest], now: DateTime<Utc>) -> Vec<LeaseOutcome> {
        requests
            .iter()
            .map(|request| self.table.request_with_outcome(request, now))
            .collect()
    }

    /// For each lease named in `requests`, the highest token they could be granted: each
    /// request for it could, at most, grant once.
    fn highest_needed<'a>(&self, requests: &'a [LeaseRequest]) -> HashMap<&'a str, u64> {
        let mut needed: HashMap<&str, u64> = HashMap::with_capacity(requests.len());
        for request in requests {
            needed
                .entry(&request.lease_name)
                .and_modify(|token| *token += 1)
                .or_insert_with(|| self.table.next_token(&request.lease_name).0);
        }
        needed
    }
}

impl TokenCeilings {
    /// Makes the ceilings of `reservation` durable.
    fn reserve(&mut self, reservation: Reservation) -> io::Result<()> {
        let Reservation(raised) = reservation;
        let records = raised
            .iter()
            .map(|(name, ceiling)| encode(name, *ceiling))
            .collect::<io::Result<Vec<_>>>()?;
        let Some(journal) = self.journal.as_mut() else {
            return Err(io::Error::new(
                io::ErrorKind::ReadOnlyFilesystem,
                "the store is open read-only: no fencing token can be reserved",
            ));
        };
        journal.append(&records)?;
        self.by_lease.extend(raised);
        if journal.wants_rewrite(self.by_lease.len()) {
            journal.rewrite(&encode_all(&self.by_lease)?)?;
        }
        Ok(())
    }
}

/// Token ceilings to make durable before some requests are answered.
#[derive(Debug)]
pub(crate) struct Reservation(Vec<(String, u64)>);

impl Reservation {
    /// Whether nothing needs to be written.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn encode(lease_name: &str, ceiling: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(lease_name.len() + 12);
    put_str(&mut out, lease_name)?;
    put_u64(&mut out, ceiling);
    Ok(out)
}

fn encode_all(ceilings: &HashMap<String, u64>) -> io::Result<Vec<Vec<u8>>> {
    ceilings
        .iter()
        .map(|(name, &ceiling)| encode(name, ceiling))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Answers `requests` as the storage does: with the reservation they need, if any.
    async fn ask(
        state: &mut LeaseState,
        requests: &[LeaseRequest],
    ) -> Result<Vec<LeaseOutcome>, EventStorageError> {
        let reservation = state.reservation(requests);
        if reservation.is_empty() {
            Ok(state.request_all(requests, Utc::now()))
        } else {
            state.reserve_and_request_all(reservation, requests, Utc::now())
        }
    }

    #[tokio::test]
    async fn tokens_after_reopen_exceed_every_token_handed_out_before() {
        let dir = tempfile::tempdir().unwrap();
        let mut highest = 0;
        for round in 0..3 {
            let mut state = LeaseState::open(dir.path()).unwrap();
            assert!(
                state.table().unwrap().leases().is_empty(),
                "round {round}: holders are forgotten"
            );
            for owner in 0..150 {
                let request =
                    LeaseRequest::new("l", format!("o{owner}"), 0, Duration::from_secs(60));
                let response = ask(&mut state, &[request]).await.unwrap()[0]
                    .response
                    .clone();
                if response.status.is_leader() {
                    assert!(response.fencing_token.0 > highest, "round {round}");
                    highest = response.fencing_token.0;
                }
                state.release("l", &format!("o{owner}"), Utc::now());
            }
        }
        assert!(highest >= 450);
    }

    #[tokio::test]
    async fn after_a_reservation_fails_every_lease_operation_is_refused() {
        // No journal to write to: the reservation fails as a failed sync would.
        let mut state = LeaseState::read_only();
        let ttl = Duration::from_secs(60);
        let first = [LeaseRequest::new("orders", "pod-a", 0, ttl)];
        let error = ask(&mut state, &first).await.unwrap_err();
        assert!(
            error
                .to_string()
                .contains("cannot make fencing tokens durable"),
            "{error}"
        );
        // The table granted the lease in memory; its token may not be durable, so nothing may
        // renew it, read it or check a fence against it.
        let refused = state.table().unwrap_err();
        assert!(
            refused.to_string().contains("reopen it to recover"),
            "{refused}"
        );
        let fence = Fence::new("orders", FencingToken(1));
        let fenced = state.check_fence(&fence, Utc::now()).unwrap_err();
        assert!(
            fenced.to_string().contains("reopen it to recover"),
            "{fenced}"
        );
    }
}
