//! Decoding value shapes from rows, by the model's typed column names.

use sea_query::IdenStatic;
use tokio_postgres::Row;
use tokio_postgres::types::FromSql;

use schema_model::TableModel;

/// A value shape read from a row that a statement returned, column by
/// column through the model's typed identifiers.
///
/// Every field is read from its column: a row without one of them, or with
/// one of another type, is a [`RowError`] naming the column, never a
/// default.
pub trait FromRow: Sized {
    /// Decodes the shape from `row`.
    ///
    /// # Errors
    ///
    /// [`RowError`] when a column is missing or does not decode into its
    /// field's type.
    fn from_row(row: &tokio_postgres::Row) -> Result<Self, RowError>;
}

/// A column of a row that did not decode into its value shape's field.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot read column {table}.{column} from the row: {}",
    super::error::driver_message(source)
)]
pub struct RowError {
    table: String,
    column: &'static str,
    #[source]
    source: tokio_postgres::Error,
}

impl RowError {
    /// The table whose shape was being read.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The column that was missing or of another type.
    pub fn column(&self) -> &'static str {
        self.column
    }
}

/// `column` of `row`, decoded.
pub(super) fn get<'a, C, V>(row: &'a Row, column: C) -> Result<V, RowError>
where
    C: TableModel + IdenStatic,
    V: FromSql<'a>,
{
    row.try_get(column.as_str()).map_err(|source| RowError {
        table: C::table_name(),
        column: column.as_str(),
        source,
    })
}

/// The column `column` of `row` that is no table's (a computed value named
/// after what computes it, `what`), decoded.
pub(super) fn get_computed<'a, V>(
    row: &'a Row,
    what: &str,
    column: &'static str,
) -> Result<V, RowError>
where
    V: FromSql<'a>,
{
    row.try_get(column).map_err(|source| RowError {
        table: what.to_owned(),
        column,
        source,
    })
}
