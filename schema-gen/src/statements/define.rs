//! The one definition of a statement: [`statement!`] declares its name,
//! what it returns, its builder function and its [`Call`](super::Call)
//! type with its inputs, and a [`Build`] body writes its text. The
//! builder, the call's [`statement`](super::Call::statement) and its
//! [`values`](super::Call::values) are all generated from these, so the
//! binding order, the parameter names and the values cannot disagree: the
//! values are what the body asks the binder for, in the order it asks (see
//! the module docs of [`statements`](super), "Adding a statement").

use std::sync::LazyLock;

use sea_query::PostgresQueryBuilder;
use sea_query_postgres::{PostgresBinder, PostgresValues};

use schema_model::SchemaName;

use super::Statement;
use super::binder::{self, Binder};

/// A statement's text, written once: the body builds it with sea-query
/// from `self`'s inputs and asks `b` for every value, in text order
/// ([`Binder::col`], [`Binder::now`], [`Binder::limit`], ...). It runs in
/// three passes (the text, the text with marks that checks the order, the
/// values alone), so it must not depend on the values it binds: the text
/// depends on `schema` only.
pub(crate) trait Build {
    /// The statement for `schema`, asking `b` for its values.
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder;
}

/// The statement `name` of `call` for `schema`: what the generated
/// [`Call::statement`](super::Call::statement) returns.
pub(crate) fn statement_of<T: Build>(
    name: &'static str,
    call: &T,
    schema: &SchemaName,
) -> Statement {
    binder::render(name, |b| {
        call.build(schema, b).build_postgres(PostgresQueryBuilder)
    })
}

/// The values of `call`, from its body, without rendering its text: what
/// the generated [`Call::values`](super::Call::values) returns.
pub(crate) fn values_of<T: Build>(call: &T) -> PostgresValues {
    // The text names a schema but is never rendered.
    static ANY_SCHEMA: LazyLock<SchemaName> = LazyLock::new(SchemaName::default);
    binder::values_of(|b| {
        let _unrendered = call.build(&ANY_SCHEMA, b);
    })
}

/// Declares one statement: its name (spelled once), what it returns, its
/// builder function (`pub fn claim;`, taking the schema and then the call's
/// fields in order) and its [`Call`](super::Call) type (the struct, with
/// its documented inputs). Its text is the type's [`Build`] impl, written
/// beside it. Generated: the struct (`Debug, Clone, Copy`), the builder,
/// and the [`Call`](super::Call) impl, whose `statement` builds the text
/// with the body and whose `values` runs the same body without rendering.
///
/// ```text
/// statement! {
///     name: "lock_release",
///     returns: Optional<Lock>,
///     /// Release: ... (the SQL as a doc-test)
///     pub fn release;
///     /// A call of [`release`]: ...
///     pub struct Release<'a> {
///         /// The lock.
///         pub name: &'a str,
///         /// Its holder.
///         pub owner: &'a str,
///         /// The fence the holder got from [`acquire`].
///         pub fence: i64,
///     }
/// }
///
/// impl Build for Release<'_> {
///     fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
///         Query::delete()
///             .from_table(table::<Locks>(schema))
///             .and_where(Expr::col(Locks::Name).eq(b.col(Locks::Name, self.name)))
///             // ...
///             .take()
///     }
/// }
/// ```
macro_rules! statement {
    (
        name: $name:literal,
        returns: $returns:ty,
        $(#[$builder_attr:meta])*
        pub fn $builder:ident;
        $(#[$call_attr:meta])*
        pub struct $call:ident $(<$lt:lifetime>)? {
            $( $(#[$field_attr:meta])* pub $field:ident: $ty:ty ),+ $(,)?
        }
    ) => {
        $(#[$call_attr])*
        #[derive(Debug, Clone, Copy)]
        pub struct $call $(<$lt>)? {
            $( $(#[$field_attr])* pub $field: $ty, )+
        }

        $(#[$builder_attr])*
        pub fn $builder $(<$lt>)? (
            schema: &$crate::SchemaName,
            $( $field: $ty ),+
        ) -> $crate::statements::Statement {
            $crate::statements::Call::statement(&$call { $( $field ),+ }, schema)
        }

        $crate::statements::define::statement!(@call $call $(<$lt>)?, $name, $returns);
    };
    (
        name: $name:literal,
        returns: $returns:ty,
        $(#[$builder_attr:meta])*
        pub fn $builder:ident;
        $(#[$call_attr:meta])*
        pub struct $call:ident;
    ) => {
        $(#[$call_attr])*
        #[derive(Debug, Clone, Copy)]
        pub struct $call;

        $(#[$builder_attr])*
        pub fn $builder(schema: &$crate::SchemaName) -> $crate::statements::Statement {
            $crate::statements::Call::statement(&$call, schema)
        }

        $crate::statements::define::statement!(@call $call, $name, $returns);
    };
    (@call $call:ident $(<$lt:lifetime>)?, $name:literal, $returns:ty) => {
        impl $(<$lt>)? $crate::statements::Call for $call $(<$lt>)? {
            const NAME: &'static str = $name;
            type Returns = $returns;

            fn statement(&self, schema: &$crate::SchemaName) -> $crate::statements::Statement {
                $crate::statements::define::statement_of(Self::NAME, self, schema)
            }

            fn values(&self) -> ::sea_query_postgres::PostgresValues {
                $crate::statements::define::values_of(self)
            }
        }
    };
}

pub(crate) use statement;
