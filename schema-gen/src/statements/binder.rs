//! How a statement's text and values are made from its one definition (a
//! [`Build`](super::define::Build) body): the [`Binder`] the body asks for
//! each value, [`build`] (the whole statement, with the checks that the text
//! and the names agree) and [`values_of`] (the values alone, from the same
//! body, without rendering the text); and the small sea-query helpers the
//! bodies share.

use sea_query::{
    Alias, ArrayType, Expr, IdenStatic, IntoIden, Keyword, Query, QueryBuilder, SelectStatement,
    Value,
};
use sea_query_postgres::{PostgresBinder, PostgresValue, PostgresValues};

use schema_model::{SchemaName, SqlType, TableModel};

use super::pinned;
use super::{Definition, Param, Statement};

/// Which pass of a definition's body a [`Binder`] serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Pass {
    /// The text, with the real values bound (what sea-query renders).
    #[default]
    Text,
    /// The text again, every value replaced by its placeholder's index, so
    /// the rendered values show the order sea-query numbered them in.
    Marking,
    /// Only the values, in the order the body asks for them; the text is
    /// not rendered (what [`Call::values`](super::Call::values) runs on
    /// every call).
    Values,
}

/// Collects the placeholders of a statement while its body builds it, in
/// the order the body asks for them (which [`build`] checks is the order
/// sea-query numbers them).
///
/// A name asked for again is the same placeholder: the body gets `$n` of
/// the first request written as text, so each name is bound once. (The
/// names follow the value shape's fields, so two requests of one name carry
/// one value; checked in debug builds.)
#[derive(Default)]
pub(crate) struct Binder {
    params: Vec<Param>,
    /// The values asked for, in order: the call's values in the
    /// [`Pass::Values`] pass, and what checks that a name asked for again
    /// carries the same value.
    values: Vec<Value>,
    pass: Pass,
}

/// What a bound value stands for in a pass that renders no text.
fn unrendered() -> Expr {
    Expr::Keyword(Keyword::Null)
}

impl Binder {
    /// A value named `name` of type `sql_type` (`now`, `horizon`: values no
    /// column names).
    pub(crate) fn bind(&mut self, name: &'static str, sql_type: SqlType, value: Value) -> Expr {
        self.bind_param(
            Param {
                name,
                sql_type,
                array: false,
            },
            value,
        )
    }

    fn bind_param(&mut self, param: Param, value: Value) -> Expr {
        if let Some(at) = self.params.iter().position(|p| p.name == param.name) {
            debug_assert_eq!(
                self.params[at], param,
                "{} is asked for with two types",
                param.name
            );
            debug_assert!(
                self.pass == Pass::Marking || self.values[at] == value,
                "{} is asked for with two values: {:?} and {value:?}",
                param.name,
                self.values[at]
            );
            if self.pass == Pass::Values {
                return unrendered();
            }
            // sea-query numbers only the values it binds and has no
            // expression for "placeholder $k again": it is written as its
            // number (the order check of `build` proves the k-th request is
            // sea-query's `$k`). A custom keyword, not `Expr::cust`, which
            // sea-query would wrap in parentheses as an operand.
            return Expr::Keyword(Keyword::Custom(
                Alias::new(format!("${}", at + 1)).into_iden(),
            ));
        }
        let index = self.params.len() as u64;
        self.params.push(param);
        let expr = match self.pass {
            Pass::Text => Expr::val(value.clone()),
            Pass::Marking => Expr::val(index),
            Pass::Values => unrendered(),
        };
        self.values.push(value);
        expr
    }

    /// An array of values for `column`, one per row of a batch, named and
    /// typed after the column and cast to its array type (so the server
    /// never guesses it).
    pub(crate) fn col_array<C: TableModel + IdenStatic>(
        &mut self,
        column: C,
        values: Vec<Value>,
    ) -> Expr {
        let param = array_param(column);
        let value = self.bind_param(param, array_value(column, values));
        if self.pass == Pass::Values {
            return value;
        }
        pinned::cast_array(value, param.sql_type)
    }

    /// A value for `column`, named and typed after it.
    pub(crate) fn col<C: TableModel + IdenStatic>(
        &mut self,
        column: C,
        value: impl Into<Value>,
    ) -> Expr {
        self.bind(column.as_str(), column_type(column), value.into())
    }

    /// The current unix second.
    pub(crate) fn now(&mut self, now: i64) -> Expr {
        self.bind("now", SqlType::BigInt, now.into())
    }

    /// `LIMIT $n` on `select` (sea-query binds the limit itself).
    pub(crate) fn limit(&mut self, select: &mut SelectStatement, limit: u32) {
        debug_assert!(
            !self.params.iter().any(|p| p.name == "limit"),
            "a statement has one limit"
        );
        let index = self.params.len() as u64;
        self.params.push(Param {
            name: "limit",
            sql_type: SqlType::BigInt,
            array: false,
        });
        self.values.push(u64::from(limit).into());
        select.limit(if self.pass == Pass::Marking {
            index
        } else {
            u64::from(limit)
        });
    }

    /// The limit of a pick whose plan the server's plan cache must keep:
    /// `(SELECT CAST($n AS bigint))`, hidden from the planner like
    /// [`hidden`]; written by [`any_of_picked`] (sea-query binds a `LIMIT`
    /// only as a value, which the planner reads).
    pub(crate) fn hidden_limit(&mut self, limit: u32) -> Expr {
        debug_assert!(
            !self.params.iter().any(|p| p.name == "limit"),
            "a statement has one limit"
        );
        let value = self.bind("limit", SqlType::BigInt, u64::from(limit).into());
        hidden(value, SqlType::BigInt)
    }

    /// Whether this pass renders the text with marks instead of values (a
    /// body must not look: the tests prove the check of [`build`] catches
    /// one that does).
    #[cfg(test)]
    pub(crate) fn is_marking(&self) -> bool {
        self.pass == Pass::Marking
    }
}

/// A statement sea-query cannot write (`VACUUM`): its text, as is, with no
/// values.
pub(crate) struct Raw(pub(crate) String);

impl PostgresBinder for Raw {
    fn build_postgres<T: QueryBuilder>(&self, _: T) -> (String, PostgresValues) {
        (self.0.clone(), PostgresValues(Vec::new()))
    }
}

/// Builds the statement `name` with `body`, which asks the [`Binder`] for
/// every placeholder value in the order they appear in the text.
#[cfg(test)]
pub(crate) fn build<Q, F>(name: &'static str, body: F) -> Statement
where
    Q: PostgresBinder,
    F: Fn(&mut Binder) -> Q,
{
    render(name, |b| {
        body(b).build_postgres(sea_query::PostgresQueryBuilder)
    })
}

/// Builds the statement `name` with `render`, which builds its text with a
/// body that asks the [`Binder`] for every placeholder value in the order
/// they appear in the text, and renders it.
pub(crate) fn render<F>(name: &'static str, render: F) -> Statement
where
    F: Fn(&mut Binder) -> (String, PostgresValues),
{
    let mut binder = Binder::default();
    let (sql, values) = render(&mut binder);
    // The names are recorded in call order, the values come out in
    // placeholder order: a body that asked in another order would name its
    // placeholders wrongly (and `values_of` would list its values in
    // another order than the text binds them). Every statement is built by
    // the tests, which run with debug assertions, so this cannot ship
    // unnoticed.
    #[cfg(debug_assertions)]
    {
        let mut marking = Binder {
            pass: Pass::Marking,
            ..Binder::default()
        };
        let (marked_sql, marks) = render(&mut marking);
        let order: Vec<Value> = marks.0.into_iter().map(|v| v.0).collect();
        let expected: Vec<Value> = (0..binder.params.len() as u64).map(Value::from).collect();
        debug_assert_eq!(marked_sql, sql, "{name}: the text depends on the values");
        debug_assert_eq!(
            order, expected,
            "{name}: placeholders were asked for out of text order"
        );
        for (param, value) in binder.params.iter().zip(&values.0) {
            debug_assert!(
                value_fits(param, &value.0),
                "{name}: {} is a {:?} placeholder bound to {:?}",
                param.name,
                param.sql_type,
                value.0
            );
        }
    }
    Statement {
        definition: Definition {
            name,
            sql,
            params: binder.params,
        },
        values,
    }
}

/// The values `body` asks the [`Binder`] for, in order, without rendering
/// the text: the values [`render`] binds to the same body's placeholders
/// (the order check of [`render`] proves the request order is the text's).
pub(crate) fn values_of<F>(body: F) -> PostgresValues
where
    F: FnOnce(&mut Binder),
{
    let mut binder = Binder {
        pass: Pass::Values,
        ..Binder::default()
    };
    body(&mut binder);
    PostgresValues(binder.values.into_iter().map(PostgresValue).collect())
}

/// Whether a bound value has the wire type of its placeholder (the binder
/// sends each value in its own binary format, so an `i32` bound for a
/// `bigint` would be refused by the server). Checked in debug builds only.
#[cfg(any(debug_assertions, test))]
pub(crate) fn value_fits(param: &Param, value: &Value) -> bool {
    let scalar = |value: &Value| {
        matches!(
            (param.sql_type, value),
            (SqlType::BigInt, Value::BigInt(_) | Value::BigUnsigned(_))
                | (SqlType::Integer, Value::Int(_))
                | (SqlType::Text, Value::String(_))
                | (SqlType::Bytea, Value::Bytes(_))
                | (SqlType::Boolean, Value::Bool(_))
        )
    };
    match (param.array, value) {
        (true, Value::Array(_, Some(elements))) => elements.iter().all(scalar),
        (true, _) => false,
        (false, value) => scalar(value),
    }
}

/// `"schema"."table"`, as sea-query's table reference.
pub(crate) fn table<T: TableModel>(schema: &SchemaName) -> (Alias, T) {
    (Alias::new(schema.as_str()), T::TABLE)
}

/// `column OPERATOR(pg_catalog.=) ANY(ARRAY(<select>))`: the rows `select`
/// picks (and locks), found through the primary key. The array makes the
/// subquery an InitPlan run once, so the outer scan is always an index scan
/// on the key, never a join the planner could turn into a hash or a sort.
pub(crate) fn any_of<C: TableModel>(column: C, select: SelectStatement) -> Expr {
    pinned::eq_any(Expr::col(column), pinned::array_of(select))
}

/// `column OPERATOR(pg_catalog.=) ANY(ARRAY((<select>) LIMIT <limit> FOR UPDATE SKIP LOCKED))`:
/// [`any_of`] for a pick of at most `limit` rows (a [`Binder::hidden_limit`])
/// that skips the rows other sessions hold. PostgreSQL's grammar merges the
/// `LIMIT` and the locking clause into the parenthesised select: the same
/// query as writing them inside it, which sea-query cannot do with a limit
/// that is an expression. `select` has neither.
pub(crate) fn any_of_picked<C: TableModel>(
    column: C,
    select: SelectStatement,
    limit: Expr,
) -> Expr {
    Expr::cust_with_exprs(
        "$1 OPERATOR(pg_catalog.=) ANY(ARRAY($2 LIMIT $3 FOR UPDATE SKIP LOCKED))",
        [
            Expr::col(column),
            Expr::SubQuery(None, Box::new(select.into())),
            limit,
        ],
    )
}

/// `(SELECT CAST(<expr> AS <type>))`: a value the planner never reads. A
/// scalar sub-select is an InitPlan, evaluated at execution, so a custom
/// plan knows no more of it than the generic plan does; their estimated
/// costs are equal and the server's plan cache keeps the generic plan
/// after its five custom ones, on a prepared statement whatever the data.
/// For the hot paths' predicates and limits, whose generic plans the plan
/// proofs check (a placeholder the planner can read makes every custom
/// plan look cheaper than the generic one, so the cache replans on every
/// execution).
pub(crate) fn hidden(expr: Expr, sql_type: SqlType) -> Expr {
    Expr::SubQuery(
        None,
        Box::new(Query::select().expr(cast(expr, sql_type)).take().into()),
    )
}

/// `CAST(<expr> AS <type>)`, for a placeholder whose type the server could
/// not infer from its context.
/// `CAST(<expr> AS pg_catalog.<type>)`, for a placeholder whose type the
/// server could not infer from its context.
pub(crate) fn cast(expr: Expr, sql_type: SqlType) -> Expr {
    pinned::cast(expr, sql_type)
}

/// The placeholder of an array of `column`'s values.
fn array_param<C: TableModel + IdenStatic>(column: C) -> Param {
    Param {
        name: column.as_str(),
        sql_type: column_type(column),
        array: true,
    }
}

/// `values` as an array of `column`'s type, as sea-query-postgres binds it.
fn array_value<C: TableModel>(column: C, values: Vec<Value>) -> Value {
    let element = match column_type(column) {
        SqlType::BigInt => ArrayType::BigInt,
        SqlType::Integer => ArrayType::Int,
        SqlType::Text | SqlType::Xid8 => ArrayType::String,
        SqlType::Bytea => ArrayType::Bytes,
        SqlType::Boolean => ArrayType::Bool,
    };
    Value::Array(element, Some(Box::new(values)))
}

/// The declared type of `column` (`Text` for the table variant, which is
/// no column).
fn column_type<C: TableModel>(column: C) -> SqlType {
    column
        .column()
        .map_or(SqlType::Text, |definition| definition.sql_type)
}

#[cfg(test)]
mod tests {
    use schema_model::Jobs;
    use sea_query::Query;

    use super::*;

    /// The binder's guard fires on one name asked for with two values (a
    /// name is one placeholder, so it can carry only one).
    #[test]
    #[should_panic(expected = "queue is asked for with two values")]
    fn a_name_asked_for_with_two_values_is_caught() {
        build("two_queues", |b| {
            Query::select()
                .expr(b.col(Jobs::Queue, "a"))
                .expr(b.col(Jobs::Queue, "b"))
                .to_owned()
        });
    }

    /// ... in the values-only pass too.
    #[test]
    #[should_panic(expected = "queue is asked for with two values")]
    fn a_name_asked_for_with_two_values_is_caught_without_the_text() {
        values_of(|b| {
            Query::select()
                .expr(b.col(Jobs::Queue, "a"))
                .expr(b.col(Jobs::Queue, "b"));
        });
    }

    /// ... and on one name asked for with two types.
    #[test]
    #[should_panic(expected = "now is asked for with two types")]
    fn a_name_asked_for_with_two_types_is_caught() {
        build("two_nows", |b| {
            Query::select()
                .expr(b.now(1))
                .expr(b.bind("now", SqlType::Integer, 1_i32.into()))
                .to_owned()
        });
    }

    /// ... and on a second limit (sea-query binds each limit anew).
    #[test]
    #[should_panic(expected = "a statement has one limit")]
    fn a_second_limit_is_caught() {
        build("two_limits", |b| {
            let mut inner = Query::select();
            inner.expr(b.now(1));
            b.limit(&mut inner, 1);
            let mut outer = Query::select();
            outer.expr(Expr::SubQuery(None, Box::new(inner.into())));
            b.limit(&mut outer, 2);
            outer
        });
    }

    /// A name asked for again is written as the first placeholder's number,
    /// and bound once (in the text pass and in the values-only pass).
    #[test]
    fn a_name_asked_for_again_is_the_same_placeholder() {
        let body = |b: &mut Binder| {
            Query::select()
                .expr(b.col(Jobs::Queue, "q"))
                .expr(b.now(5))
                .expr(b.col(Jobs::Queue, "q"))
                .to_owned()
        };
        let statement = build("twice", body);
        assert_eq!(statement.sql(), "SELECT $1, $2, $1");
        assert_eq!(statement.param_names(), ["queue", "now"]);
        assert_eq!(statement.values().0.len(), 2);
        assert_eq!(
            &values_of(|b| {
                body(b);
            }),
            statement.values()
        );
    }

    /// The type check of [`build`] fires on a value of another wire type
    /// than its placeholder (an `i32` for a `bigint` column).
    #[test]
    #[should_panic(expected = "is a BigInt placeholder bound to Int")]
    fn a_value_of_another_wire_type_is_caught() {
        build("narrow", |b| {
            Query::select().expr(b.col(Jobs::RunAt, 5_i32)).to_owned()
        });
    }

    /// The text check of [`build`] fires on a statement whose text changes
    /// with the values it binds.
    #[test]
    #[should_panic(expected = "peeking: the text depends on the values")]
    fn a_statement_whose_text_depends_on_its_values_is_caught() {
        build("peeking", |b| {
            let queue = b.col(Jobs::Queue, "q");
            let mut select = Query::select();
            select.expr(queue);
            if b.is_marking() {
                select.expr(Expr::cust("1"));
            }
            select
        });
    }

    /// A value bound past the [`Binder`] (`Expr::val`) has no name: the
    /// order check of [`build`] catches it too.
    #[test]
    #[should_panic(expected = "unnamed: placeholders were asked for out of text order")]
    fn a_value_bound_past_the_binder_is_caught() {
        build("unnamed", |b| {
            Query::select()
                .expr(b.now(1))
                .expr(Expr::val(2_i64))
                .to_owned()
        });
    }

    /// ... and on an array whose elements are of another wire type.
    #[test]
    #[should_panic(expected = "is a BigInt placeholder bound to Array")]
    fn an_array_of_another_wire_type_is_caught() {
        build("narrow_array", |b| {
            Query::select()
                .expr(b.col_array(Jobs::RunAt, vec![5_i32.into()]))
                .to_owned()
        });
    }

    /// The order check of [`build`] fires on a statement that asks for its
    /// values out of text order (whose values alone would come out in
    /// another order than the text binds them).
    #[test]
    #[should_panic(expected = "placeholders were asked for out of text order")]
    fn a_statement_that_asks_out_of_order_is_caught() {
        build("backwards", |b| {
            let second = b.now(2);
            let first = b.col(Jobs::Queue, "q");
            Query::select().expr(first).expr(second).to_owned()
        });
    }
}
