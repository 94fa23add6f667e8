//! Why a connection could not be configured.

use super::{Origin, ParseError};
use crate::error::{Error, ErrorKind};

/// Why a connection could not be configured. Nothing reached the network;
/// no message carries a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The connection string does not parse.
    #[error("the connection string is not valid: {0}")]
    Parse(#[from] ParseError),
    /// A setting has a value libpq would refuse.
    #[error("{message}")]
    Invalid {
        /// The keyword or variable.
        origin: Origin,
        /// What is wrong and what is expected.
        message: String,
    },
    /// A setting libpq knows that schema-gen cannot honour.
    #[error("{origin} is not supported by schema-gen: {reason}")]
    Unsupported {
        /// The keyword or variable.
        origin: Origin,
        /// Why, and what to do instead.
        reason: String,
    },
    /// A certificate or key file cannot be used.
    #[error("{0}")]
    TlsFile(String),
}

impl From<ConfigError> for Error {
    fn from(err: ConfigError) -> Self {
        ErrorKind::Configuration {
            message: err.to_string(),
        }
        .into()
    }
}
