//! `eventstore`: the operator's command line for an event store with leader-election leases.
//!
//! ```text
//! eventstore leases [--lease-prefix TEXT] [--json] [--watch [--interval SECONDS]]
//!                                                    every lease: holder, token, ages, live or not
//! eventstore contenders LEASE [--json]               who waits for a lease, live or not
//! eventstore partitions GROUP [--json]               a partition group's members and holdings
//! eventstore bookmarks [--json]                      every reader's bookmark
//! eventstore events --stream CONTEXT/PURPOSE [--limit N] [--json]
//! eventstore schema print|check|apply|drop [--yes] [--json]
//!                                                    the PostgreSQL schema of a prefix
//! ```
//!
//! A PostgreSQL store is named by `--url` (or the `DATABASE_URL` environment variable) and
//! `--prefix`; a file store by `--dir`. Reading never creates anything: a prefix without its
//! schema is refused, and only `schema apply` creates one. Every age on PostgreSQL is on the
//! storage's clock (its `now()`), never the clock of the machine running the command; a file
//! store's clock is that of the machine it is on, which runs the command.
//!
//! Exit codes: 0 success, 1 a failed check (no schema for the prefix, no connection, a
//! directory that is no store), 2 bad usage. A failure is one line on standard error.
//!
//! With `--json` each call prints one JSON document (with `--watch`, one per refresh, one per
//! line); the field names are stable and listed in this crate's manual,
//! `eventstore-cli/README.md`.

mod bookmarks;
mod cli;
mod contenders;
mod events;
mod failure;
mod leases;
mod output;
mod partitions;
mod schema;
mod store;
mod stream_name;
mod time_text;

use std::process::ExitCode;

use clap::Parser as _;

use crate::cli::{Cli, Command};
use crate::failure::Failure;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("eventstore: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("eventstore: {}", failure.one_line());
            ExitCode::from(failure.code())
        }
    }
}

/// What the argument parser refused, on one line like every failure, with exit code 2; help
/// and version go out as the parser writes them.
fn usage_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        error.exit();
    }
    let text = error.render().to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    // What was wrong, then the usage line, each of the parser's lines trimmed; the advice to
    // try `--help` is left out.
    let mut line = String::new();
    for part in text.lines().map(str::trim) {
        if part.is_empty() || part.starts_with("For more information") {
            continue;
        }
        let separator = if part.starts_with("Usage:") {
            "; "
        } else {
            " "
        };
        if !line.is_empty() {
            line.push_str(separator);
        }
        line.push_str(part);
    }
    eprintln!("eventstore: {}", output::printable(&line));
    ExitCode::from(2)
}

async fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Leases {
            lease_prefix,
            json,
            watch,
            interval,
        } => {
            let rounds = leases::Rounds {
                lease_prefix: lease_prefix.as_deref().unwrap_or_default(),
                json,
                watch: watch.then_some(interval),
            };
            leases::run(&cli.store, &rounds).await
        }
        Command::Contenders { lease, json } => contenders::run(&cli.store, &lease, json).await,
        Command::Partitions { group, json } => partitions::run(&cli.store, &group, json).await,
        Command::Bookmarks { json } => bookmarks::run(&cli.store, json).await,
        Command::Events {
            stream,
            limit,
            json,
        } => events::run(&cli.store, &stream, limit, json).await,
        Command::Schema { action, json } => schema::run(&cli.store, action, json).await,
    }
}
