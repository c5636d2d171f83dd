//! How the writer gathers the commands of one group.

use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::writer::command::Command;

/// The most commands one group takes, so that one group's write stays bounded.
pub(crate) const MAX_GROUP: usize = 1024;

/// Decides how long a group waits for the commands of callers that are about to come back.
///
/// When the last group answered `n` callers, those callers usually send their next command
/// within microseconds of each other; committing the first arrival alone would split them
/// into a small group and a large one behind it. So a new group waits for up to as many
/// commands as the last group had, but never longer than a fraction of the last commit's
/// time. A lone appender (groups of one) never waits.
#[derive(Debug, Default)]
pub(crate) struct GroupGathering {
    last_size: usize,
    last_commit: Duration,
}

impl GroupGathering {
    /// The most a group waits, however slow the commit.
    const MAX_WAIT: Duration = Duration::from_millis(1);

    /// The group that starts with `first`: it and the commands arriving soon after.
    pub(crate) fn gather(&self, first: Command, commands: &Receiver<Command>) -> Vec<Command> {
        let mut group = vec![first];
        let expected = self.last_size.min(MAX_GROUP);
        let deadline = Instant::now() + (self.last_commit / 4).min(Self::MAX_WAIT);
        while group.len() < expected {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            match commands.recv_timeout(left) {
                Ok(command) => group.push(command),
                Err(_) => break,
            }
        }
        while group.len() < MAX_GROUP {
            match commands.try_recv() {
                Ok(command) => group.push(command),
                Err(_) => break,
            }
        }
        group
    }

    /// Records that a group of `size` commands took `took` to commit.
    pub(crate) fn committed(&mut self, size: usize, took: Duration) {
        self.last_size = size;
        self.last_commit = took;
    }
}
