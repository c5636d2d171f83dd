//! A stream's name on the command line and in what the command prints: `CONTEXT/PURPOSE`,
//! `*` for "any". A context or purpose may hold any character, so a `/`, a `\` or a part that
//! is a lone `*` is written with a `\` before it, and a control character as Rust escapes it
//! (`\t`, `\u{1b}`): every name printed can be given back to `--stream` and names that one
//! stream.

use eventstore::EventStreamId;

/// The name of `stream`, as [`parse`] reads it back.
pub(crate) fn name(stream: &EventStreamId) -> String {
    format!(
        "{}/{}",
        part_name(stream.context.as_deref()),
        part_name(stream.purpose.as_deref())
    )
}

fn part_name(part: Option<&str>) -> String {
    match part {
        None => "*".to_owned(),
        Some("*") => r"\*".to_owned(),
        Some(text) => text
            .chars()
            .map(|c| match c {
                '\\' => r"\\".to_owned(),
                '/' => r"\/".to_owned(),
                c if c.is_control() => c.escape_debug().to_string(),
                c => c.to_string(),
            })
            .collect(),
    }
}

/// The stream that `text` names (see [`name`]).
///
/// # Errors
/// What is wrong with `text`, quoting it.
pub(crate) fn parse(text: &str) -> Result<EventStreamId, String> {
    let not_a_stream =
        || format!("{text:?} is not CONTEXT/PURPOSE (e.g. orders/default, orders/*)");
    let mut parts = Vec::new();
    let mut part = String::new();
    let mut escaped_star = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(next @ ('\\' | '/')) => part.push(next),
                Some('*') if part.is_empty() => {
                    part.push('*');
                    escaped_star = true;
                }
                Some(escape) => part.push(control(escape, &mut chars).ok_or_else(|| {
                    format!(
                        "{text:?} has a '\\' before neither '\\', '/', a lone '*' nor a \
                         control character's escape (\\t, \\u{{1b}})"
                    )
                })?),
                None => return Err(format!("{text:?} ends with a lone '\\'")),
            },
            '/' => parts.push((std::mem::take(&mut part), std::mem::take(&mut escaped_star))),
            c => part.push(c),
        }
    }
    parts.push((part, escaped_star));
    let [context, purpose] = <[(String, bool); 2]>::try_from(parts).map_err(|_| not_a_stream())?;
    let part = |(text, escaped): (String, bool)| -> Result<Option<String>, String> {
        match text.as_str() {
            "" => Err(not_a_stream()),
            "*" if !escaped => Ok(None),
            _ if escaped && text != "*" => Err(format!(
                "{text:?}: a '\\*' stands for a context or purpose that is a lone '*'"
            )),
            _ => Ok(Some(text)),
        }
    };
    Ok(EventStreamId {
        context: part(context)?,
        purpose: part(purpose)?,
    })
}

/// The control character whose escape (as `char::escape_debug` writes it) starts with
/// `escape` after its `\`, reading the rest of it from `chars`; `None` for any other text.
fn control(escape: char, chars: &mut std::str::Chars<'_>) -> Option<char> {
    let c = match escape {
        't' => '\t',
        'n' => '\n',
        'r' => '\r',
        '0' => '\0',
        'u' => {
            let rest = chars.as_str().strip_prefix('{')?;
            let (hex, _) = rest.split_once('}')?;
            let c = char::from_u32(u32::from_str_radix(hex, 16).ok()?)?;
            // Past `{`, the digits and `}`.
            chars.nth(hex.len() + 1)?;
            c
        }
        _ => return None,
    };
    c.is_control().then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_context_slash_purpose_with_stars_for_any() {
        assert_eq!(
            parse("orders/eu").unwrap(),
            EventStreamId::new("orders", "eu")
        );
        assert_eq!(
            parse("orders/*").unwrap(),
            EventStreamId::for_context("orders").any_purpose()
        );
        assert_eq!(parse("*/*").unwrap(), EventStreamId::any());
        for bad in [
            "orders", "/eu", "orders/", "a/b/c", r"a\b/c", r"\*x/c", "a/b\\",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_name_printed_reads_back_as_its_stream() {
        let odd = [
            "orders/eu",
            "*",
            r"back\slash",
            "*x",
            r"\*",
            "/",
            "plain",
            "tab\there",
            "esc\u{1b}[2J",
            "nul\0",
            r"\t",
            "\u{85}",
        ];
        for context in odd {
            for purpose in odd {
                let stream = EventStreamId::new(context, purpose);
                let printed = name(&stream);
                assert_eq!(parse(&printed).as_ref(), Ok(&stream), "{printed}");
            }
        }
        for stream in [
            EventStreamId::any(),
            EventStreamId::for_context("a/b").any_purpose(),
        ] {
            assert_eq!(parse(&name(&stream)).as_ref(), Ok(&stream));
        }
        assert_eq!(
            name(&EventStreamId::new("orders/eu", "default")),
            r"orders\/eu/default"
        );
        assert_eq!(
            name(&EventStreamId::new("orders", "default")),
            "orders/default"
        );
        assert_eq!(name(&EventStreamId::new("a\tb", "c")), r"a\tb/c");
        for bad in [r"a\q/b", r"a\u{41}/b", r"a\u{zz}/b", r"a\u{1b/b", "a\\"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
