//! The words of the hot-path statements that PostgreSQL looks up by name,
//! each pinned to `pg_catalog`: operators (`OPERATOR(pg_catalog.=)`),
//! functions (`pg_catalog.unnest`) and the types of casts
//! (`pg_catalog.text[]`).
//!
//! The statements run on the engine's sessions, whose search path the
//! product does not set (a pooler drops session settings, and a caller's
//! path is the caller's). Unqualified, each name would resolve through that
//! path: a role with `CREATE` on `public` (the default before PostgreSQL
//! 15) creates `public.unnest(text[])` or `public.=(text, text)`, an exact
//! match that PostgreSQL prefers to `pg_catalog`'s polymorphic or
//! cross-type one whatever the path order (and, with `public` ahead of
//! `pg_catalog` on the path, even to an identical one), and its code runs
//! inside the engine's statement with the engine's rights. Qualified, only
//! `pg_catalog` is searched. Syntax that is not looked up by name needs no
//! pinning: `AND`, `OR`, `NOT`, `IS NULL`, `COALESCE`, `CASE`, `ORDER BY`
//! (the type's default operator class), `ON CONFLICT`, `LIMIT`, `FOR
//! UPDATE`, the keyword types (`bigint`, `integer`, `boolean` are always
//! `pg_catalog`'s; written qualified here anyway, one rule for every cast).
//! `tests/trust_shadows.rs` derives, from the server's own parse of
//! every statement, the functions, operators and types they use, shadows
//! each one in `public` and in a schema earlier on the path, and proves none
//! is called.

use sea_query::{Alias, BinOper, Expr, ExprTrait, Func, FunctionCall, SelectStatement};

use schema_model::SqlType;

/// `OPERATOR(pg_catalog.=)`.
const EQ: BinOper = BinOper::Custom("OPERATOR(pg_catalog.=)");
/// `OPERATOR(pg_catalog.<)`.
const LT: BinOper = BinOper::Custom("OPERATOR(pg_catalog.<)");
/// `OPERATOR(pg_catalog.<=)`.
const LE: BinOper = BinOper::Custom("OPERATOR(pg_catalog.<=)");
/// `OPERATOR(pg_catalog.>)`.
const GT: BinOper = BinOper::Custom("OPERATOR(pg_catalog.>)");
/// `OPERATOR(pg_catalog.>=)`.
const GE: BinOper = BinOper::Custom("OPERATOR(pg_catalog.>=)");
/// `OPERATOR(pg_catalog.+)`.
const ADD: BinOper = BinOper::Custom("OPERATOR(pg_catalog.+)");

/// The pinned operators, on any expression. sea-query writes an operand
/// that is itself an operation in parentheses (it knows no precedence of
/// a custom operator), which `OPERATOR(...)` needs: PostgreSQL gives every
/// operator written that way one precedence.
pub(crate) trait Pinned: ExprTrait + Sized {
    /// `self OPERATOR(pg_catalog.=) right`.
    fn pg_eq(self, right: impl Into<Expr>) -> Expr {
        self.binary(EQ, right)
    }
    /// `self OPERATOR(pg_catalog.<) right`.
    fn pg_lt(self, right: impl Into<Expr>) -> Expr {
        self.binary(LT, right)
    }
    /// `self OPERATOR(pg_catalog.<=) right`.
    fn pg_le(self, right: impl Into<Expr>) -> Expr {
        self.binary(LE, right)
    }
    /// `self OPERATOR(pg_catalog.>) right`.
    fn pg_gt(self, right: impl Into<Expr>) -> Expr {
        self.binary(GT, right)
    }
    /// `self OPERATOR(pg_catalog.>=) right`.
    fn pg_ge(self, right: impl Into<Expr>) -> Expr {
        self.binary(GE, right)
    }
    /// `self OPERATOR(pg_catalog.+) right`.
    fn pg_add(self, right: impl Into<Expr>) -> Expr {
        self.binary(ADD, right)
    }
}

impl<T: ExprTrait> Pinned for T {}

/// `left OPERATOR(pg_catalog.=) ANY(array)`: `array` is an array value (a
/// placeholder cast to its array type, `ARRAY (SELECT ...)`).
pub(crate) fn eq_any(left: Expr, array: Expr) -> Expr {
    Expr::cust_with_exprs("$1 OPERATOR(pg_catalog.=) ANY($2)", [left, array])
}

/// `left OPERATOR(pg_catalog.=) ANY (<select>)`: `IN (<select>)`, pinned
/// (`left` may be a row: `("id", "attempts")`). The subquery is written in
/// one pair of parentheses: in two it would be a scalar subquery.
pub(crate) fn in_rows(left: Expr, select: SelectStatement) -> Expr {
    Expr::cust_with_exprs(
        "$1 OPERATOR(pg_catalog.=) ANY $2",
        [left, Expr::SubQuery(None, Box::new(select.into()))],
    )
}

/// `ARRAY (<select>)`.
pub(crate) fn array_of(select: SelectStatement) -> Expr {
    Expr::cust_with_exprs("ARRAY $1", [Expr::SubQuery(None, Box::new(select.into()))])
}

/// A call of `pg_catalog.<name>`.
pub(crate) fn function(name: &str) -> FunctionCall {
    Func::cust(Alias::new(format!("pg_catalog.{name}")))
}

/// `pg_catalog.unnest(<array>)`.
pub(crate) fn unnest(array: Expr) -> FunctionCall {
    function("unnest").arg(array)
}

/// `CAST(<expr> AS pg_catalog.<type>)`.
pub(crate) fn cast(expr: Expr, sql_type: SqlType) -> Expr {
    expr.cast_as(Alias::new(type_name(sql_type)))
}

/// `CAST(<expr> AS pg_catalog.<type>[])`.
pub(crate) fn cast_array(expr: Expr, sql_type: SqlType) -> Expr {
    expr.cast_as(Alias::new(format!("{}[]", type_name(sql_type))))
}

/// A type by its qualified catalog name: `pg_catalog.int8` (`bigint` is a
/// keyword for it), `pg_catalog.text`, ...
pub(crate) fn type_name(sql_type: SqlType) -> String {
    let name = match sql_type {
        SqlType::BigInt => "int8",
        SqlType::Integer => "int4",
        SqlType::Text => "text",
        SqlType::Bytea => "bytea",
        SqlType::Boolean => "bool",
        SqlType::Xid8 => "xid8",
    };
    format!("pg_catalog.{name}")
}

#[cfg(test)]
mod tests {
    use sea_query::{PostgresQueryBuilder, Query};

    use super::*;

    #[test]
    fn operands_that_are_operations_are_parenthesised() {
        let sql = Query::select()
            .and_where(Expr::col(Alias::new("a")).pg_eq(Expr::val(1).pg_add(Expr::val(2))))
            .and_where(Expr::col(Alias::new("b")).pg_le(cast(Expr::val(3), SqlType::BigInt)))
            .to_string(PostgresQueryBuilder);
        assert_eq!(
            sql,
            r#"SELECT  WHERE ("a" OPERATOR(pg_catalog.=) (1 OPERATOR(pg_catalog.+) 2)) AND ("b" OPERATOR(pg_catalog.<=) CAST(3 AS pg_catalog.int8))"#
        );
    }

    #[test]
    fn every_type_is_named_in_pg_catalog() {
        for sql_type in [
            SqlType::BigInt,
            SqlType::Integer,
            SqlType::Text,
            SqlType::Bytea,
            SqlType::Boolean,
            SqlType::Xid8,
        ] {
            assert!(type_name(sql_type).starts_with("pg_catalog."));
        }
    }
}
