//! The deliberate mistakes the mutation check puts into [`MutantStorage`], one at a time.
//!
//! Each is a mistake a newcomer plausibly makes when writing a backend from the trait docs
//! and the kit's guide. A [`Verdict::Caught`] mistake must fail at least one test of the kit;
//! a [`Verdict::Allowed`] one is a choice the contract leaves to the backend, documented as
//! such, and the kit must pass it.
//!
//! [`MutantStorage`]: super::mutant_storage::MutantStorage

/// What the kit must make of a mutation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A mistake: at least one test of the kit fails.
    Caught,
    /// A choice the contract leaves to the backend: every test of the kit passes.
    Allowed,
}

/// One deliberate change to the small backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mutation {
    /// Positions count from 0 instead of 1.
    PositionsFromZero,
    /// Positions leave a gap after every event.
    PositionsWithGaps,
    /// The input is validated before the storage is found closed.
    ClosedCheckedAfterInput,
    /// `OptimisticLock` names no expected last event although the criteria had one.
    OptimisticLockWithoutExpectedLast,
    /// `OptimisticLock` names the stream in its `Debug` form.
    StreamInDebugForm,
    /// Every event of a batch is stamped on its own.
    TimestampPerEvent,
    /// `query` ignores `after`.
    QueryIgnoresAfter,
    /// A backward read takes `after` as a bound in reading order: the events before it.
    BackwardAfterInReadingOrder,
    /// `after` is taken as inclusive: the event it names is read again.
    AfterInclusive,
    /// `after` is compared with `Ord`, whose ties at one place are broken by id: a bound with
    /// an event's place and a lower id reads that event again.
    AfterBreaksTiesById,
    /// `query` ignores the limit.
    LimitIgnored,
    /// A backward read with a limit takes the oldest events, then reverses them.
    BackwardLimitFromTheOldest,
    /// A backward read with `after` and a limit takes the events next to the reference, not
    /// the newest.
    BackwardAfterLimitFromTheReference,
    /// The items of an `or` after the first are matched beside the stream and `after`, not
    /// within them (`stream = $1 AND a OR b`).
    OrItemsBesideTheStream,
    /// The append criteria ignore their filter's `until`.
    CriteriaIgnoreUntil,
    /// The append criteria look at every stream, not the one appended to.
    CriteriaLookAtEveryStream,
    /// The append criteria are never checked.
    CriteriaIgnored,
    /// `OptimisticLock` names the last matching event instead of the first after the
    /// expected last.
    ConflictNamesTheLastMatch,
    /// An empty batch returns before its criteria are checked.
    EmptyBatchSkipsCriteria,
    /// Idempotency keys are not looked at: a retry is stored again.
    IdempotencyIgnored,
    /// Idempotency keys are unique across the storage instead of per stream.
    IdempotencyKeysAcrossStreams,
    /// A retry is checked against its criteria like a new batch.
    RetryCheckedAgainstCriteria,
    /// `query` reads the stream given only, ignoring wildcards.
    QueryIgnoresWildcards,
    /// `head` looks at the stream given only, ignoring wildcards.
    HeadIgnoresWildcards,
    /// `head` answers the first event of the streams instead of the last.
    HeadIsTheFirstEvent,
    /// No input is validated.
    InputNotValidated,
    /// `InvalidInput` names neither the field nor the rule broken.
    InvalidInputNamesNothing,
    /// A bookmark looks for its event before it judges the reader's name.
    BookmarkEventBeforeReader,
    /// A bookmark at an event the storage does not hold is accepted.
    BookmarkOfAnUnknownEventAccepted,
    /// A bookmark keeps the caller's reference instead of the storage's own.
    BookmarkInTheCallersCoordinates,
    /// A replaced bookmark keeps its first update time.
    BookmarkUpdateTimeNotMoved,
    /// A replaced bookmark keeps its first tags.
    BookmarkTagsKept,
    /// `get_bookmarks` lists the newest reader first instead of by reader name.
    BookmarksNotOrderedByReader,
    /// Removing a bookmark that is not there is an error.
    RemovingNoBookmarkFails,
    /// `close` closes the handle it is called on, not its clones.
    CloseClosesOneHandle,
    /// Closing a closed storage is an error.
    SecondCloseFails,
    /// `query_raw` reads on after `close`.
    RawQueryAfterClose,
    /// `get_event_by_id` answers the first event, whatever the id.
    EventByIdIgnoresTheId,
    /// `FencedWrites` is declared without `Lease`.
    FencedWritesWithoutLease,
    /// `get_leases` is overridden (answering no lease) without `Lease` declared.
    LeaseMethodWithoutLease,
    /// `Lease` is declared while every lease method keeps its default body.
    LeaseWithDefaultMethods,
    /// A fenced write is judged by the token alone: the current token of a lease that expired
    /// or was released, with nobody taking it since, passes.
    FenceJudgedByTokenAlone,
    /// A fenced write checks the fence under the lease table's lock, lets go of the lock (and
    /// awaits), then writes: a release and a takeover fit between the check and the write.
    FenceCheckedThenUnlockedBeforeTheWrite,
    /// `storage_time` reads the wall clock instead of the storage's clock.
    StorageTimeFromTheWallClock,
    /// A bookmark's `updated_at` is read from the wall clock instead of the storage's clock.
    BookmarkTimeFromTheWallClock,
}

impl Mutation {
    /// Every mutation, in the order the check applies them.
    pub(crate) const ALL: [Mutation; 45] = [
        Mutation::PositionsFromZero,
        Mutation::PositionsWithGaps,
        Mutation::ClosedCheckedAfterInput,
        Mutation::OptimisticLockWithoutExpectedLast,
        Mutation::StreamInDebugForm,
        Mutation::TimestampPerEvent,
        Mutation::QueryIgnoresAfter,
        Mutation::BackwardAfterInReadingOrder,
        Mutation::AfterInclusive,
        Mutation::AfterBreaksTiesById,
        Mutation::LimitIgnored,
        Mutation::BackwardLimitFromTheOldest,
        Mutation::BackwardAfterLimitFromTheReference,
        Mutation::OrItemsBesideTheStream,
        Mutation::CriteriaIgnoreUntil,
        Mutation::CriteriaLookAtEveryStream,
        Mutation::CriteriaIgnored,
        Mutation::ConflictNamesTheLastMatch,
        Mutation::EmptyBatchSkipsCriteria,
        Mutation::IdempotencyIgnored,
        Mutation::IdempotencyKeysAcrossStreams,
        Mutation::RetryCheckedAgainstCriteria,
        Mutation::QueryIgnoresWildcards,
        Mutation::HeadIgnoresWildcards,
        Mutation::HeadIsTheFirstEvent,
        Mutation::InputNotValidated,
        Mutation::InvalidInputNamesNothing,
        Mutation::BookmarkEventBeforeReader,
        Mutation::BookmarkOfAnUnknownEventAccepted,
        Mutation::BookmarkInTheCallersCoordinates,
        Mutation::BookmarkUpdateTimeNotMoved,
        Mutation::BookmarkTagsKept,
        Mutation::BookmarksNotOrderedByReader,
        Mutation::RemovingNoBookmarkFails,
        Mutation::CloseClosesOneHandle,
        Mutation::SecondCloseFails,
        Mutation::RawQueryAfterClose,
        Mutation::EventByIdIgnoresTheId,
        Mutation::FencedWritesWithoutLease,
        Mutation::LeaseMethodWithoutLease,
        Mutation::LeaseWithDefaultMethods,
        Mutation::FenceJudgedByTokenAlone,
        Mutation::FenceCheckedThenUnlockedBeforeTheWrite,
        Mutation::StorageTimeFromTheWallClock,
        Mutation::BookmarkTimeFromTheWallClock,
    ];

    /// The environment variable that selects the mutation of a run of the kit.
    pub(crate) const VARIABLE: &'static str = "EVENTSTORE_MUTATION";

    /// The mutation the environment selects, or `None` for the backend as written.
    ///
    /// # Panics
    /// When the variable names no mutation.
    pub(crate) fn from_environment() -> Option<Mutation> {
        let name = std::env::var(Self::VARIABLE).ok()?;
        let mutation = Self::ALL
            .into_iter()
            .find(|mutation| mutation.name() == name);
        Some(mutation.unwrap_or_else(|| panic!("{}={name} names no mutation", Self::VARIABLE)))
    }

    /// The mutation's name, as the environment variable gives it.
    pub(crate) fn name(self) -> String {
        let debug = format!("{self:?}");
        let mut name = String::new();
        for (index, character) in debug.char_indices() {
            if character.is_ascii_uppercase() && index > 0 {
                name.push('_');
            }
            name.push(character.to_ascii_lowercase());
        }
        name
    }

    /// Whether it is a mistake of a backend with leases, made by the
    /// [`FenceMutant`](super::fence_mutant::FenceMutant) and judged by the kit's tests of it
    /// (`leasing::`), not by those of the backend without leases (`kit::`).
    pub(crate) fn leasing(self) -> bool {
        matches!(
            self,
            Mutation::FenceJudgedByTokenAlone
                | Mutation::FenceCheckedThenUnlockedBeforeTheWrite
                | Mutation::StorageTimeFromTheWallClock
                | Mutation::BookmarkTimeFromTheWallClock
        )
    }

    /// The filter of the kit's tests that judge it.
    pub(crate) fn kit(self) -> &'static str {
        if self.leasing() {
            "leasing::"
        } else {
            "kit::"
        }
    }

    /// What the kit must make of it.
    pub(crate) fn verdict(self) -> Verdict {
        match self {
            Mutation::PositionsFromZero | Mutation::PositionsWithGaps => Verdict::Allowed,
            _ => Verdict::Caught,
        }
    }
}
