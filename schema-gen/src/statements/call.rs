//! Typed calls: one type per statement carrying its inputs ([`Call`]), what
//! the statement returns ([`Returns`]: rows of a shape, one id, a count of
//! rows affected, ...), and how a returned row is decoded ([`Decode`]).

use std::marker::PhantomData;

use sea_query_postgres::PostgresValues;
use tokio_postgres::Row;

use schema_model::SchemaName;

use super::{FromRow, RowError, Statement, StatementErrorKind};

/// One call of a hot-path statement: a type per statement whose fields are
/// the statement's inputs (`jobs::Claim { queue, worker_id, now, limit }`),
/// which says what the statement returns and binds its values without
/// building its text.
///
/// A [`Session`](super::Session) prepares the statement's text the first
/// time it runs a call of that type on its connection ([`statement`]
/// builds it), and from then on binds only [`values`]: the text depends on
/// the schema name alone.
///
/// [`statement`]: Call::statement
/// [`values`]: Call::values
///
/// ```
/// use schema_gen::statements::{Call, jobs};
/// use schema_gen::schema_model::SchemaName;
///
/// let claim = jobs::Claim { queue: "mail", worker_id: "worker-1", now: 1_700_000_000, limit: 10 };
/// let statement = claim.statement(&SchemaName::default());
/// assert_eq!(statement.name(), jobs::Claim::NAME);
/// // The values alone are the ones the whole statement binds.
/// assert_eq!(&claim.values(), statement.values());
/// ```
pub trait Call {
    /// The statement's name, as `schema-gen statements` lists it; unique
    /// among the statements, so a session prepares each once.
    const NAME: &'static str;

    /// What the statement returns, decoded.
    type Returns: Returns;

    /// The whole statement for `schema`: its text, built with sea-query, and
    /// this call's values.
    fn statement(&self, schema: &SchemaName) -> Statement;

    /// This call's values, one per placeholder of [`statement`]'s text, in
    /// order, without building the text.
    ///
    /// [`statement`]: Call::statement
    fn values(&self) -> PostgresValues;
}

/// What a call of `C` returns once decoded: `Vec<Job>` for
/// [`jobs::Claim`](super::jobs::Claim), `i64` for
/// [`jobs::Enqueue`](super::jobs::Enqueue), `u64` for
/// [`jobs::Ack`](super::jobs::Ack), ...
pub type Output<C> = <<C as Call>::Returns as Returns>::Output;

/// What a statement returns, and how its result is decoded.
pub trait Returns {
    /// The decoded result.
    type Output;

    /// Decodes the rows the statement returned and the number of rows it
    /// affected (inserted, updated or deleted; for a `SELECT`, the rows it
    /// returned).
    ///
    /// # Errors
    ///
    /// [`DecodeError::Row`] when a row does not decode,
    /// [`DecodeError::RowCount`] when the statement returned another number
    /// of rows than it promises.
    fn decode(rows: Vec<Row>, rows_affected: u64) -> Result<Self::Output, DecodeError>;
}

/// A statement's result that does not decode into what it returns; a
/// [`Session`](super::Session) reports it as the
/// [`StatementErrorKind`] of the same name.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A row did not decode into its shape.
    #[error(transparent)]
    Row(#[from] RowError),
    /// Another number of rows than the statement promises.
    #[error("returned {got} rows where it returns {expected}")]
    RowCount {
        /// What the statement promises: `exactly one row`, `at most one row`.
        expected: &'static str,
        /// How many it returned.
        got: usize,
    },
}

impl From<DecodeError> for StatementErrorKind {
    fn from(error: DecodeError) -> Self {
        match error {
            DecodeError::Row(row) => Self::Row(row),
            DecodeError::RowCount { expected, got } => Self::RowCount { expected, got },
        }
    }
}

/// One returned row, decoded: a whole value shape (every [`FromRow`] type,
/// such as [`Job`](super::Job)), or one typed column such as
/// [`jobs::JobId`](super::jobs::JobId).
pub trait Decode {
    /// The decoded row.
    type Output;

    /// Decodes `row`.
    ///
    /// # Errors
    ///
    /// [`RowError`] naming the column that is missing or of another type.
    fn decode(row: &Row) -> Result<Self::Output, RowError>;
}

impl<S: FromRow> Decode for S {
    type Output = S;

    fn decode(row: &Row) -> Result<S, RowError> {
        S::from_row(row)
    }
}

/// Every row the statement returned, decoded by `D`, in the order returned.
#[derive(Debug)]
pub struct Rows<D>(PhantomData<D>);

impl<D: Decode> Returns for Rows<D> {
    type Output = Vec<D::Output>;

    fn decode(rows: Vec<Row>, _: u64) -> Result<Self::Output, DecodeError> {
        rows.iter()
            .map(|row| D::decode(row).map_err(DecodeError::Row))
            .collect()
    }
}

/// Exactly one row, decoded by `D` (an insert's `RETURNING`).
#[derive(Debug)]
pub struct One<D>(PhantomData<D>);

impl<D: Decode> Returns for One<D> {
    type Output = D::Output;

    fn decode(rows: Vec<Row>, _: u64) -> Result<Self::Output, DecodeError> {
        match rows.as_slice() {
            [row] => Ok(D::decode(row)?),
            _ => Err(DecodeError::RowCount {
                expected: "exactly one row",
                got: rows.len(),
            }),
        }
    }
}

/// At most one row, decoded by `D`: `None` when the statement took no effect
/// (a lock held by someone else, a claim that was lost, a duplicate event).
#[derive(Debug)]
pub struct Optional<D>(PhantomData<D>);

impl<D: Decode> Returns for Optional<D> {
    type Output = Option<D::Output>;

    fn decode(rows: Vec<Row>, _: u64) -> Result<Self::Output, DecodeError> {
        match rows.as_slice() {
            [] => Ok(None),
            [row] => Ok(Some(D::decode(row)?)),
            _ => Err(DecodeError::RowCount {
                expected: "at most one row",
                got: rows.len(),
            }),
        }
    }
}

/// The number of rows the statement inserted, updated or deleted (it
/// returns no rows): 0 when an ack's claim was lost, when a promotion found
/// nothing due, ...
#[derive(Debug)]
pub struct RowsAffected;

impl Returns for RowsAffected {
    type Output = u64;

    fn decode(_: Vec<Row>, rows_affected: u64) -> Result<u64, DecodeError> {
        Ok(rows_affected)
    }
}

/// Nothing: a statement that only runs (`VACUUM`).
#[derive(Debug)]
pub struct Done;

impl Returns for Done {
    type Output = ();

    fn decode(_: Vec<Row>, _: u64) -> Result<(), DecodeError> {
        Ok(())
    }
}
