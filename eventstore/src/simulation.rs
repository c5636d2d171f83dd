//! Support for running the runtime in a deterministic simulation.
//!
//! The electors make a few random choices: each request interval is shortened by up to a
//! fifth so that instances drift apart, contenders woken by one missed notice spread their
//! requests over the handover grace, and a member joining a partition group picks one of the
//! lowest free seats. By default these come from the operating system's randomness. A
//! simulation that runs every elector on one current-thread runtime, on tokio's paused clock,
//! calls [`seed_this_thread`] first: every choice made on that thread then follows the seed,
//! and so does the whole run, so a failing seed replays exactly.
//!
//! ```
//! eventstore::simulation::seed_this_thread(42);
//! // … build a current-thread runtime with paused time and run the electors on it …
//! eventstore::simulation::unseed_this_thread();
//! ```

use std::cell::RefCell;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

thread_local! {
    /// The seeded generator of this thread, if a simulation set one.
    static SEEDED: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// Makes every random choice the electors make on this thread follow `seed`, from now until
/// [`unseed_this_thread`] (or another call). Other threads are not affected, nor are owner ids
/// ([`crate::elector::unique_owner_id`] stays random: ids must differ between processes).
pub fn seed_this_thread(seed: u64) {
    SEEDED.with(|seeded| *seeded.borrow_mut() = Some(StdRng::seed_from_u64(seed)));
}

/// Returns this thread to the operating system's randomness.
pub fn unseed_this_thread() {
    SEEDED.with(|seeded| *seeded.borrow_mut() = None);
}

/// Runs `choose` with this thread's seeded generator, or with the operating system's one.
pub(crate) fn with_rng<T>(choose: impl FnOnce(&mut dyn rand::RngCore) -> T) -> T {
    SEEDED.with(|seeded| match seeded.borrow_mut().as_mut() {
        Some(rng) => choose(rng),
        None => choose(&mut rand::thread_rng()),
    })
}

/// A fraction drawn uniformly from `[low, high]`.
pub(crate) fn fraction(low: f64, high: f64) -> f64 {
    with_rng(|rng| rng.gen_range(low..=high))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws() -> Vec<f64> {
        (0..8).map(|_| fraction(0.0, 1.0)).collect()
    }

    #[test]
    fn a_seed_repeats_its_draws_and_unseeding_ends_it() {
        seed_this_thread(7);
        let first = draws();
        seed_this_thread(7);
        assert_eq!(draws(), first);
        seed_this_thread(8);
        assert_ne!(draws(), first);
        unseed_this_thread();
        assert_ne!(draws(), draws(), "the system's randomness repeats nothing");
    }
}
