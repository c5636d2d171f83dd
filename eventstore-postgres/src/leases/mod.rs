//! Leases: requests, releases and listings through the lease functions of the schema, with the
//! plain renewals and batches that skip them, and the fenced writes a lease guards.

pub(crate) mod fencing;
pub(crate) mod plain_batch;
pub(crate) mod renewals;
mod requests;

pub(crate) use requests::{
    all, contenders_in, listed, release, release_all, request, storage_time,
};
