//! Why a command failed, and the exit code that says so.

use eventstore::EventStorageError;

use crate::output::printable;

/// A failed command: one line for standard error and an exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    /// Exit code 1: the command ran, and what it checked or needed is not there.
    pub(crate) fn check(message: impl Into<String>) -> Failure {
        Failure {
            code: 1,
            message: message.into(),
        }
    }

    /// Exit code 2: the command line asks for something that cannot be done.
    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            message: message.into(),
        }
    }

    /// A storage error while doing `what`: bad input is usage, anything else a failed check.
    pub(crate) fn storage(what: &str, error: &EventStorageError) -> Failure {
        let message = format!("{what}: {}", error.report());
        match error {
            EventStorageError::InvalidInput { .. } => Failure::usage(message),
            _ => Failure::check(message),
        }
    }

    /// The exit code.
    pub(crate) fn code(&self) -> u8 {
        self.code
    }

    /// The message on one line: its control characters, line breaks included, escaped
    /// ([`printable`]), so that a name or path it quotes is the one given, whatever it holds.
    pub(crate) fn one_line(&self) -> String {
        printable(self.message.trim())
    }
}
