//! The command line as `clap` reads it: commands, flags and their help.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use eventstore::EventStreamId;

use crate::stream_name;

/// The whole command line.
#[derive(Debug, Parser)]
#[command(
    name = "eventstore",
    version,
    about = "Look at an event store: leases, bookmarks, events, and the PostgreSQL schema",
    long_about = "Look at an event store: leases, bookmarks, events, and the PostgreSQL schema.\n\n\
        PostgreSQL: --url (or DATABASE_URL) and --prefix. A file store: --dir.\n\
        Reading never creates anything; only `schema apply` creates a schema.\n\
        Exit codes: 0 success, 1 failed check, 2 bad usage."
)]
pub(crate) struct Cli {
    /// Which store to look at.
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where the store is.
#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// PostgreSQL url, postgres://user:password@host:port/database [default: $DATABASE_URL]
    #[arg(long, global = true, value_name = "URL", conflicts_with = "dir")]
    pub(crate) url: Option<String>,
    /// Table prefix of the PostgreSQL store [default: eventstore_]
    #[arg(long, global = true, value_name = "PREFIX", conflicts_with = "dir")]
    pub(crate) prefix: Option<String>,
    /// Directory of a file store (opened read-only, beside the process that holds it)
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
}

/// The most events `eventstore events` prints: an operator's look, held in memory at once.
const MAX_EVENTS: u64 = 100_000;

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Every lease: holder, fencing token, priority, acquired, last renewal, expiry, live, live
    /// contenders
    Leases {
        /// Only the leases whose names start with this text (a partition group's: GROUP/)
        #[arg(long, value_name = "TEXT")]
        lease_prefix: Option<String>,
        /// One JSON document (with --watch, one per refresh and line)
        #[arg(long)]
        json: bool,
        /// Print again every --interval seconds until interrupted; a failed refresh after the
        /// first is reported on standard error and tried again
        #[arg(long)]
        watch: bool,
        /// Seconds between refreshes with --watch
        #[arg(long, value_name = "SECONDS", default_value = "2", value_parser = parse_interval,
              requires = "watch")]
        interval: Duration,
    },
    /// The contenders of one lease: owner, priority, last request, ttl, live
    Contenders {
        /// The lease
        #[arg(value_name = "LEASE")]
        lease: String,
        /// One JSON document
        #[arg(long)]
        json: bool,
    },
    /// A partition group: its live members, what each holds, what nobody holds
    Partitions {
        /// The group (the name its members were started with)
        #[arg(value_name = "GROUP")]
        group: String,
        /// One JSON document
        #[arg(long)]
        json: bool,
    },
    /// Every reader's bookmark: reader, position, updated
    Bookmarks {
        /// One JSON document
        #[arg(long)]
        json: bool,
    },
    /// The last events of a stream, oldest first
    Events {
        /// The stream, CONTEXT/PURPOSE; `*` for any (orders/*, */*); a `\` before a `/`, `\` or
        /// lone `*` that is part of a name
        #[arg(long, value_name = "CONTEXT/PURPOSE", value_parser = stream_name::parse)]
        stream: EventStreamId,
        /// How many of the stream's last events, 1 to 100000
        #[arg(long, value_name = "N", default_value_t = 20,
              value_parser = clap::value_parser!(u64).range(1..=MAX_EVENTS))]
        limit: u64,
        /// One JSON document
        #[arg(long)]
        json: bool,
    },
    /// The PostgreSQL schema of a prefix
    Schema {
        /// What to do with it.
        #[command(subcommand)]
        action: SchemaAction,
        /// One JSON document: the prefix and what the action found or did
        #[arg(long, global = true)]
        json: bool,
    },
}

/// What `schema` does.
#[derive(Debug, Clone, Copy, Subcommand)]
pub(crate) enum SchemaAction {
    /// Print the DDL with the prefix applied (connects to nothing)
    Print,
    /// Check that every table, index and function is in place; exit 1 when not
    Check,
    /// Create what is missing (safe while the store is in use)
    Apply,
    /// Drop every table and function of the prefix, with every event, bookmark and lease
    Drop {
        /// Yes, delete everything stored under the prefix
        #[arg(long)]
        yes: bool,
    },
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(0.1..=86_400.0).contains(&seconds) {
        return Err(format!("{text} s is not between 0.1 and 86400"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
