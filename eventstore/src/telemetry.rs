//! Metrics, through the [`metrics`] facade: nothing is recorded until the application installs
//! a recorder (a Prometheus exporter, a statsd client, a test's recorder), and this crate
//! forces no exporter on anyone.
//!
//! The names below are stable. Counters end in `_total`, durations are histograms in seconds.
//!
//! | metric | kind | labels | counts or measures |
//! |---|---|---|---|
//! | [`LEASE_REQUESTS`] | counter | `lease`, `outcome` | each lease request of a [`LeaderElector`], by outcome: `leader`, `step_down_requested`, `standby`, `failed` |
//! | [`LEASE_ACQUISITIONS`] | counter | `lease` | an elector became leader under a token it did not lead with before |
//! | [`LEASE_TAKEOVERS`] | counter | `lease` | an elector acquired the lease from another owner that let it expire without a release (storages with [`Capability::LeaseOutcomes`](crate::Capability::LeaseOutcomes)); a count that climbs means holders die or renew too late |
//! | [`LEASE_STEP_DOWNS`] | counter | `lease` | an elector stepped down for a contender of higher priority |
//! | [`LEASE_RELEASES`] | counter | `lease` | an elector released its lease (stepping down, or shutting down) |
//! | [`ELECTOR_LEADER`] | gauge | `lease`, `owner` | 1 while the elector leads, else 0 |
//! | [`PARTITION_COUNT_MISMATCH`] | gauge | `group`, `owner` | 1 while a [`PartitionElector`](crate::PartitionElector) sees a member of its group that counts other partitions, else 0 (0 once it stops) |
//! | [`FENCED_REFUSALS`] | counter | `lease` | a fenced write refused because its token is not the live holder's, in any backend |
//! | [`APPEND_SECONDS`] | histogram | `backend` | how long an append (fenced or not) took, answered with success or not |
//!
//! The `owner` label gives each elector a series of its own, so that several electors of
//! one lease in one process (a demonstration, a test) do not overwrite each other. An elector
//! started without `.owner(…)` gets a new owner id at every start: a process that restarts
//! its electors should give them a stable owner (unique to the process), or let its exporter
//! drop series that no longer change.
//!
//! The last two are recorded by the backends (`eventstore::telemetry` names them for
//! every backend). Backends add their own, named `eventstore_<backend>_…` (the file backend's group commit:
//! `eventstore_file_group_size`, `eventstore_file_sync_seconds`).
//!
//! # Tracing
//!
//! Backends open a `debug` span per storage operation (see `eventstore::telemetry`).
//! Electors log each leadership change at `info`.
//!
//! [`LeaderElector`]: crate::LeaderElector

/// Counter: lease requests of leader electors, labelled `lease` and `outcome`.
pub const LEASE_REQUESTS: &str = "eventstore_lease_requests_total";
/// Counter: acquisitions by leader electors (leading under a new token), labelled `lease`.
pub const LEASE_ACQUISITIONS: &str = "eventstore_lease_acquisitions_total";
/// Counter: takeovers by leader electors of a lease another owner let expire, labelled
/// `lease`.
pub const LEASE_TAKEOVERS: &str = "eventstore_lease_takeovers_total";
/// Counter: step-downs of leader electors for a higher-priority contender, labelled `lease`.
pub const LEASE_STEP_DOWNS: &str = "eventstore_lease_step_downs_total";
/// Counter: releases by leader electors, labelled `lease`.
pub const LEASE_RELEASES: &str = "eventstore_lease_releases_total";
/// Gauge: 1 while an elector leads, else 0, labelled `lease` and `owner`.
pub const ELECTOR_LEADER: &str = "eventstore_elector_leader";
/// Gauge: 1 while a partition elector sees a member of its group that counts other
/// partitions (announced with its membership, or a partition held at or above this member's
/// count), else 0 (and 0 once the elector stops), labelled `group` and `owner`.
pub const PARTITION_COUNT_MISMATCH: &str = "eventstore_partition_count_mismatch";
pub use eventstore_api::telemetry::{APPEND_SECONDS, FENCED_REFUSALS};

/// The outcome label of a lease request answered with this status.
pub(crate) fn outcome_label(status: crate::LeaseStatus) -> &'static str {
    match status {
        crate::LeaseStatus::Leader => "leader",
        crate::LeaseStatus::LeaderStepDownRequested => "step_down_requested",
        crate::LeaseStatus::Standby => "standby",
    }
}
