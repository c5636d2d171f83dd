//! `eventstore partitions GROUP`: a partition group as the storage shows it: its live
//! members, what each holds, what nobody holds, and whether it has settled.

use eventstore::partitions::GroupStatus;
use serde::Serialize;

use crate::cli::StoreArgs;
use crate::failure::Failure;
use crate::output::{print_json, print_text, printable, table};
use crate::store::{OpenStore, StoreDescription, Target};
use crate::time_text::instant;

/// The JSON document of `eventstore partitions GROUP --json`.
#[derive(Debug, Serialize)]
struct PartitionsDocument {
    #[serde(flatten)]
    store: StoreDescription,
    #[serde(flatten)]
    status: GroupStatus,
    /// The partition count the live members announce, when those that announce one agree.
    partitions: Option<u32>,
    /// The partitions below that count nobody holds live.
    unheld: Vec<u32>,
    /// Every partition held by a live member, each member holding ⌊M/N⌋ or ⌈M/N⌉.
    balanced: bool,
}

/// Runs `eventstore partitions GROUP`.
///
/// # Errors
/// The store cannot be opened or read; a file store, whose leases live in its process; a
/// group of which the storage has no lease.
pub(crate) async fn run(args: &StoreArgs, group: &str, json: bool) -> Result<(), Failure> {
    let target = Target::from_args(args)?;
    if let Target::File(dir) = &target {
        return Err(Failure::check(format!(
            "the leases of a file store live in the memory of the process that holds it, not \
             in its directory {}: ask that process (GroupStatus::read)",
            dir.display()
        )));
    }
    let store = OpenStore::open(&target).await?;
    let outcome = GroupStatus::read(store.storage(), group).await;
    let description = store.description();
    store.close().await;
    let status = outcome.map_err(|error| Failure::storage("cannot read the group", &error))?;
    if status.members.is_empty() && status.holders.is_empty() {
        return Err(Failure::check(format!(
            "no live member of partition group {group:?} in {description}"
        )));
    }
    let document = PartitionsDocument {
        store: description,
        partitions: status.partitions(),
        unheld: status.unheld(),
        balanced: status.is_balanced(),
        status,
    };
    if json {
        print_json(&document)
    } else {
        print_text(&render(&document))
    }
}

fn render(document: &PartitionsDocument) -> String {
    let status = &document.status;
    let counts = status.announced_counts();
    let count = match counts[..] {
        [count] => format!("{count} partitions"),
        [] => "no partition count announced".to_owned(),
        _ => {
            let counts: Vec<String> = counts.iter().map(u32::to_string).collect();
            format!(
                "members that count different partitions ({})",
                counts.join(", ")
            )
        }
    };
    let state = if document.balanced {
        "balanced".to_owned()
    } else if document.unheld.is_empty() {
        "settling".to_owned()
    } else {
        format!("settling, unheld: {}", ranges(&document.unheld))
    };
    let mut text = format!(
        "partition group {}: {} live members, {count}, {state}, in {}; storage time {}\n",
        printable(&status.group),
        status.members.len(),
        document.store,
        instant(status.storage_time)
    );
    let rows: Vec<Vec<String>> = status
        .members
        .iter()
        .map(|member| {
            vec![
                member.owner.clone(),
                member
                    .seat
                    .map_or_else(|| "-".to_owned(), |seat| seat.to_string()),
                member
                    .partitions
                    .map_or_else(|| "-".to_owned(), |count| count.to_string()),
                member.held.len().to_string(),
                ranges(&member.held),
            ]
        })
        .collect();
    text.push_str(&table(
        &["MEMBER", "SEAT", "COUNTS", "HOLDS", "PARTITIONS"],
        &rows,
    ));
    let strays: Vec<String> = status
        .holders
        .iter()
        .filter(|(_, holder)| !status.members.iter().any(|m| m.owner == **holder))
        .map(|(partition, holder)| format!("{partition} ({})", printable(holder)))
        .collect();
    if !strays.is_empty() {
        text.push_str(&format!(
            "held by owners that are no live member: {}\n",
            strays.join(", ")
        ));
    }
    text
}

/// `partitions` (in order) as ranges: `0-3,7,9-10`; `-` when there are none.
fn ranges(partitions: &[u32]) -> String {
    let mut spans: Vec<(u32, u32)> = Vec::new();
    for &partition in partitions {
        match spans.last_mut() {
            Some((_, last)) if last.checked_add(1) == Some(partition) => *last = partition,
            _ => spans.push((partition, partition)),
        }
    }
    if spans.is_empty() {
        return "-".to_owned();
    }
    let spans: Vec<String> = spans
        .iter()
        .map(|(first, last)| {
            if first == last {
                first.to_string()
            } else {
                format!("{first}-{last}")
            }
        })
        .collect();
    spans.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_print_as_ranges() {
        assert_eq!(ranges(&[]), "-");
        assert_eq!(ranges(&[4]), "4");
        assert_eq!(ranges(&[0, 1, 2, 3, 7, 9, 10]), "0-3,7,9-10");
        assert_eq!(
            ranges(&[u32::MAX - 1, u32::MAX]),
            format!("{}-{}", u32::MAX - 1, u32::MAX)
        );
    }
}
