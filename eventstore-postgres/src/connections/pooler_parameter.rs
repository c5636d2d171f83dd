//! The `pgbouncer` parameter of a database url: `?pgbouncer=true` says the url reaches the
//! server through a pooler in transaction mode. It is the storage's to read and never reaches
//! the driver.

use std::borrow::Cow;

use eventstore_api::EventStorageError;
use percent_encoding::percent_decode_str;

/// The name of the url parameter.
const NAME: &str = "pgbouncer";

/// `url` without its `pgbouncer` parameter, and the parameter's value if it had one.
///
/// # Errors
/// `InvalidInput` naming `field` when the value is neither `true` nor `false`, in any case (the
/// url itself is not shown: it may hold a password).
pub(crate) fn take(field: &str, url: &str) -> Result<(String, Option<bool>), EventStorageError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let (query, fragment) = match query.split_once('#') {
        Some((query, fragment)) => (query, Some(fragment)),
        None => (query, None),
    };
    let mut value = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, given) = pair.split_once('=').unwrap_or((pair, ""));
        // Decoded, and in any case: a url written `PGBOUNCER=TRUE` or `pg%62ouncer=true`
        // means the same, and the driver would ignore it rather than refuse it.
        let (key, given) = (decoded(key), decoded(given));
        if !key.eq_ignore_ascii_case(NAME) {
            kept.push(pair);
            continue;
        }
        value = Some(match given.to_ascii_lowercase().as_str() {
            "true" => true,
            "false" => false,
            _ => {
                return Err(EventStorageError::invalid(
                    field,
                    format!("{key}={given}"),
                    "pgbouncer must be true or false",
                ))
            }
        });
    }
    let mut stripped = base.to_owned();
    if !kept.is_empty() {
        stripped.push('?');
        stripped.push_str(&kept.join("&"));
    }
    if let Some(fragment) = fragment {
        stripped.push('#');
        stripped.push_str(fragment);
    }
    Ok((stripped, value))
}

/// A url component with its percent escapes decoded, as the driver reads its parameters.
fn decoded(component: &str) -> Cow<'_, str> {
    percent_decode_str(component).decode_utf8_lossy()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parameter_is_read_and_removed_and_the_others_stay() {
        let url = "postgres://u:p@h:6432/db?sslmode=disable&pgbouncer=true&application_name=x";
        assert_eq!(
            take("database url", url).unwrap(),
            (
                "postgres://u:p@h:6432/db?sslmode=disable&application_name=x".to_owned(),
                Some(true)
            )
        );
        assert_eq!(
            take("database url", "postgres://h/db?pgbouncer=false").unwrap(),
            ("postgres://h/db".to_owned(), Some(false))
        );
        assert_eq!(
            take("database url", "postgres://h/db").unwrap(),
            ("postgres://h/db".to_owned(), None)
        );
        assert_eq!(
            take("database url", "postgres://h/db?sslmode=require").unwrap(),
            ("postgres://h/db?sslmode=require".to_owned(), None)
        );
    }

    #[test]
    fn the_parameter_is_read_in_any_case() {
        for (url, expected) in [
            ("postgres://h/db?PGBOUNCER=true", true),
            ("postgres://h/db?PgBouncer=TRUE", true),
            ("postgres://h/db?pgbouncer=False", false),
        ] {
            assert_eq!(
                take("database url", url).unwrap(),
                ("postgres://h/db".to_owned(), Some(expected)),
                "{url}"
            );
        }
        let error = take("database url", "postgres://h/db?PGBOUNCER=1").unwrap_err();
        assert!(error.to_string().contains("PGBOUNCER=1"), "{error}");
    }

    #[test]
    fn the_parameter_is_read_with_its_escapes_decoded() {
        for (url, expected) in [
            ("postgres://h/db?pg%62ouncer=true", true),
            ("postgres://h/db?pgbouncer=tru%65", true),
            ("postgres://h/db?%50%47BOUNCER=%66alse", false),
        ] {
            assert_eq!(
                take("database url", url).unwrap(),
                ("postgres://h/db".to_owned(), Some(expected)),
                "{url}"
            );
        }
        let error = take("database url", "postgres://h/db?pgbouncer=%31").unwrap_err();
        assert!(error.to_string().contains("pgbouncer=1"), "{error}");
    }

    #[test]
    fn a_value_other_than_true_or_false_is_refused_without_showing_the_url() {
        let error = take("database url", "postgres://u:secret@h/db?pgbouncer=yes").unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, EventStorageError::InvalidInput { .. }),
            "{message}"
        );
        assert!(message.contains("pgbouncer=yes"), "{message}");
        assert!(!message.contains("secret"), "{message}");
    }
}
