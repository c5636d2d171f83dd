//! Leases in memory, with their fencing tokens made durable so that they never repeat.
//!
//! The lease rules are [`eventstore_api::in_process`]'s [`LeaseTable`]. What this module adds is a
//! persisted *ceiling* per lease: before a grant uses a token above the ceiling, a block of
//! tokens is reserved by writing a new ceiling durably, so most grants need no I/O. After a
//! reopen every lease starts above its persisted ceiling, higher than any token handed out
//! before, while the holders themselves are forgotten.

use std::io;
use std::path::Path;

use chrono::{DateTime, Utc};
use eventstore_api::in_process::LeaseTable;
use eventstore_api::{FencingToken, LeaseOutcome, LeaseRequest, ReleaseOutcome};
use hashbrown::HashMap;

use crate::codec::{put_str, put_u64, Decoder};
use crate::corruption::{Corruption, OpenFailure};
use crate::journal::Journal;

/// The journal's file name inside the store's directory.
pub(crate) const TOKENS_FILE: &str = "lease-tokens.log";

const MAGIC: [u8; 8] = *b"ESFTOK01";

/// Tokens reserved with one durable write.
const RESERVATION_BLOCK: u64 = 100;

/// The lease table and the durable token ceilings that keep its tokens from repeating.
#[derive(Debug)]
pub(crate) struct LeaseState {
    table: LeaseTable,
    ceilings: HashMap<String, u64>,
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
        let (mut journal, records) = Journal::open(&path, MAGIC)?;
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
        Ok(LeaseState {
            table,
            ceilings,
            journal: Some(journal),
        })
    }

    /// The state of a read-only store: no lease, and no token can be reserved.
    pub(crate) fn read_only() -> LeaseState {
        LeaseState {
            table: LeaseTable::new(),
            ceilings: HashMap::new(),
            journal: None,
        }
    }

    /// The lease table, for reading and for fence checks.
    pub(crate) fn table(&self) -> &LeaseTable {
        &self.table
    }

    /// The ceilings to make durable before answering `requests`: for each lease they name
    /// whose highest possible token lies above its ceiling, a block of tokens beyond it. Empty
    /// when the requests need no I/O.
    pub(crate) fn reservation(&self, requests: &[LeaseRequest]) -> Reservation {
        Reservation(
            self.highest_needed(requests)
                .into_iter()
                .filter(|(name, needed)| *needed > self.ceiling(name))
                .map(|(name, needed)| (name.to_owned(), needed + RESERVATION_BLOCK - 1))
                .collect(),
        )
    }

    /// Makes the ceilings of `reservation` durable.
    ///
    /// # Errors
    /// Writing or syncing the ceilings failed; no request may then be answered.
    pub(crate) fn reserve(&mut self, reservation: Reservation) -> io::Result<()> {
        let Reservation(raised) = reservation;
        if raised.is_empty() {
            return Ok(());
        }
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
        self.ceilings.extend(raised);
        if journal.wants_rewrite(self.ceilings.len()) {
            journal.rewrite(&encode_all(&self.ceilings)?)?;
        }
        Ok(())
    }

    /// Answers `requests` one by one at `now`. Call [`LeaseState::reserve`] first with their
    /// [`LeaseState::reservation`] unless it is empty.
    pub(crate) fn request_all(
        &mut self,
        requests: &[LeaseRequest],
        now: DateTime<Utc>,
    ) -> Vec<LeaseOutcome> {
        debug_assert!(self.reservation(requests).is_empty());
        requests
            .iter()
            .map(|request| self.table.request_with_outcome(request, now))
            .collect()
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

    fn ceiling(&self, lease_name: &str) -> u64 {
        self.ceilings.get(lease_name).copied().unwrap_or(0)
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

    #[test]
    fn tokens_after_reopen_exceed_every_token_handed_out_before() {
        let dir = tempfile::tempdir().unwrap();
        let mut highest = 0;
        for round in 0..3 {
            let mut state = LeaseState::open(dir.path()).unwrap();
            assert!(
                state.table().leases().is_empty(),
                "round {round}: holders are forgotten"
            );
            for owner in 0..150 {
                let request =
                    LeaseRequest::new("l", format!("o{owner}"), 0, Duration::from_secs(60));
                let requests = [request];
                let reservation = state.reservation(&requests);
                state.reserve(reservation).unwrap();
                let response = state.request_all(&requests, Utc::now()).remove(0).response;
                if response.status.is_leader() {
                    assert!(response.fencing_token.0 > highest, "round {round}");
                    highest = response.fencing_token.0;
                }
                state.release("l", &format!("o{owner}"), Utc::now());
            }
        }
        assert!(highest >= 450);
    }
}
