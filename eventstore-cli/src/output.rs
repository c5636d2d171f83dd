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

/// Rows under a header, each column as wide as its widest cell, two spaces apart.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|cell| cell.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|cell| (*cell).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
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
}
