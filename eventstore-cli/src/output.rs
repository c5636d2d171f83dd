//! Writing to standard output: JSON documents and aligned tables.

use std::io::{self, Write};

use serde::Serialize;

use crate::failure::Failure;

/// Prints `document` as one line of JSON.
///
/// # Errors
/// A failed check when standard output is gone (other than a closed pipe, which ends quietly).
pub(crate) fn print_json(document: &impl Serialize) -> Result<(), Failure> {
    let text = serde_json::to_string(document)
        .map_err(|error| Failure::check(format!("cannot write JSON: {error}")))?;
    print_text(&format!("{text}\n"))
}

/// Prints `text` as it is.
///
/// # Errors
/// As [`print_json`].
pub(crate) fn print_text(text: &str) -> Result<(), Failure> {
    let mut stdout = io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        // `eventstore leases | head`: the reader has what it wanted.
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(error) => Err(Failure::check(format!(
            "cannot write to standard output: {error}"
        ))),
    }
}

/// Rows under a header, each column as wide as its widest cell, two spaces apart, each cell
/// [`printable`].
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| printable(cell)).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|cell| cell.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|cell| (*cell).to_owned()).collect();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (index, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if index + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:width$}  "));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `text` with its control characters escaped as Rust writes them (`\n`, `\u{1b}`): names may
/// hold any character but NUL, and one that a store holds must neither break a row into two
/// nor drive the operator's terminal.
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `text` cut to `chars` characters, with `…` when cut.
pub(crate) fn shorten(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(chars.saturating_sub(1)).collect();
    short.push('…');
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let text = table(
            &["A", "LONG HEADER", "C"],
            &[vec!["wide cell".into(), "x".into(), "last".into()]],
        );
        assert_eq!(
            text,
            "A          LONG HEADER  C\nwide cell  x            last\n"
        );
        assert_eq!(shorten("abcdef", 4), "abc…");
        assert_eq!(shorten("abc", 4), "abc");
    }

    #[test]
    fn control_characters_in_cells_are_escaped_and_never_start_a_row() {
        let forged = "pod-x\nl1  ownerB  live\u{1b}[2J";
        let text = table(&["OWNER", "STATE"], &[vec![forged.into(), "free".into()]]);
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(!text.contains('\u{1b}'), "{text:?}");
        assert!(text.contains(r"pod-x\nl1  ownerB  live\u{1b}[2J"), "{text}");
        assert_eq!(printable("orders/default"), "orders/default");
    }
}
