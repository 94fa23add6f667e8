//! One table of the model as DDL: its `CREATE TABLE` (one clause per line,
//! `USING heap`, its storage parameters), its indexes and its comments,
//! rendered with sea-query's `PostgresQueryBuilder` from the typed model.

use sea_query::{
    Alias, Check, ColumnDef, Condition, ConditionalStatement, Expr, ExprTrait, Func, Index,
    IndexCreateStatement, IndexOrder, PostgresQueryBuilder, Table, TableCreateStatement,
};

use schema_model::{
    CheckRule, ColumnDefault, IndexDef, IndexExpression, IndexKey, IndexPredicate, Order,
    SchemaName, SqlType, StorageParameter, TableModel, TableVisitor,
};

use super::{Statement, StatementKind, TABLE_ACCESS_METHOD, quote_ident, quote_literal};

/// The statements of every table a family visits, in visiting order.
pub(super) struct Renderer {
    pub(super) schema: SchemaName,
    pub(super) statements: Vec<Statement>,
}

impl TableVisitor for Renderer {
    fn visit<T: TableModel>(&mut self) {
        let table = T::table_name();
        self.statements.push(Statement {
            kind: StatementKind::CreateTable,
            object: table.clone(),
            sql: one_clause_per_line(
                &create_table::<T>(&self.schema).to_string(PostgresQueryBuilder),
            ) + " USING "
                + TABLE_ACCESS_METHOD
                + &storage_clause::<T>(),
        });
        for (name, index) in create_indexes::<T>(&self.schema) {
            self.statements.push(Statement {
                kind: StatementKind::CreateIndex,
                object: name.to_owned(),
                sql: index.to_string(PostgresQueryBuilder),
            });
        }
        let qualified = format!(
            "{}.{}",
            quote_ident(self.schema.as_str()),
            quote_ident(&table)
        );
        self.statements.push(Statement {
            kind: StatementKind::Comment,
            object: table.clone(),
            sql: format!("COMMENT ON TABLE {qualified} IS {}", quote_literal(T::DOC)),
        });
        for (variant, column) in T::columns() {
            let name = variant.to_string();
            self.statements.push(Statement {
                kind: StatementKind::Comment,
                object: format!("{table}.{name}"),
                sql: format!(
                    "COMMENT ON COLUMN {qualified}.{} IS {}",
                    quote_ident(&name),
                    quote_literal(column.doc)
                ),
            });
        }
    }
}

fn table_ref<T: TableModel>(schema: &SchemaName) -> (Alias, T) {
    (Alias::new(schema.as_str()), T::TABLE)
}

/// ` WITH (name=value, ...)`, or nothing when the table declares no storage
/// parameters.
fn storage_clause<T: TableModel>() -> String {
    let parameters: Vec<String> = T::storage_parameters()
        .into_iter()
        .map(StorageParameter::reloption)
        .collect();
    if parameters.is_empty() {
        String::new()
    } else {
        format!(" WITH ({})", parameters.join(", "))
    }
}

/// The `CREATE TABLE IF NOT EXISTS` statement of one table, without its
/// access method and storage parameters (sea-query expresses neither `USING`
/// nor `WITH (...)` for PostgreSQL; the bootstrap statement appends them).
pub fn create_table<T: TableModel>(schema: &SchemaName) -> TableCreateStatement {
    let mut create = Table::create();
    create.table(table_ref::<T>(schema)).if_not_exists();
    for (variant, column) in T::columns() {
        let mut def = ColumnDef::new(variant);
        match column.sql_type {
            SqlType::BigInt => def.big_integer(),
            SqlType::Integer => def.integer(),
            SqlType::Text => def.text(),
            SqlType::Bytea => def.binary(),
            SqlType::Boolean => def.boolean(),
            SqlType::Xid8 => def.custom(Alias::new("xid8")),
        };
        if column.nullable {
            def.null();
        } else {
            def.not_null();
        }
        match column.default {
            None => {}
            Some(ColumnDefault::IdentityAlways) => {
                def.extra("GENERATED ALWAYS AS IDENTITY");
            }
            Some(ColumnDefault::CurrentTransactionId) => {
                def.default(Expr::cust("pg_current_xact_id()"));
            }
            Some(ColumnDefault::GeneratedSum(a, b)) => {
                def.generated(Expr::col(a).add(Expr::col(b)), true);
            }
        }
        create.col(&mut def);
    }
    let mut primary_key = Index::create();
    for column in T::primary_key() {
        primary_key.col(column);
    }
    create.primary_key(&mut primary_key);
    for check in T::checks() {
        create.check(Check::named(check.name, check_expr(&check.rule)));
    }
    create
}

fn check_expr<C: TableModel>(rule: &CheckRule<C>) -> Expr {
    match rule {
        CheckRule::NotEmpty(c) => Expr::col(*c).ne(""),
        CheckRule::AtLeast(c, n) => Expr::col(*c).gte(*n),
        CheckRule::Positive(c) => Expr::col(*c).gt(0),
        CheckRule::NullTogether(columns) => {
            let mut all_null = Condition::all();
            let mut all_set = Condition::all();
            for c in columns {
                all_null = all_null.add(Expr::col(*c).is_null());
                all_set = all_set.add(Expr::col(*c).is_not_null());
            }
            Condition::any().add(all_null).add(all_set).into()
        }
        CheckRule::SetOnlyIf { column, flag } => Condition::any()
            .add(Expr::col(*column).is_null())
            .add(Expr::col(*flag))
            .into(),
        CheckRule::NotBefore { later, earlier } => Expr::col(*later).gte(Expr::col(*earlier)),
    }
}

/// The conditions of a partial index, each added with `and_where`.
fn index_conditions<C: TableModel>(predicate: IndexPredicate<C>) -> Vec<Expr> {
    match predicate {
        IndexPredicate::IsNull(c) => vec![Expr::col(c).is_null()],
        IndexPredicate::IsNotNull(c) => vec![Expr::col(c).is_not_null()],
        IndexPredicate::IsTrue(c) => vec![Expr::col(c)],
        IndexPredicate::IsFalse(c) => vec![Expr::col(c).not()],
        IndexPredicate::All(conditions) => {
            conditions.into_iter().flat_map(index_conditions).collect()
        }
    }
}

/// The `CREATE INDEX IF NOT EXISTS` statements of one table, with their names.
pub fn create_indexes<T: TableModel>(
    schema: &SchemaName,
) -> Vec<(&'static str, IndexCreateStatement)> {
    T::indexes()
        .iter()
        .map(|index| (index.name, create_index(schema, index)))
        .collect()
}

/// The `CREATE [UNIQUE] INDEX IF NOT EXISTS` statement of one index of
/// table `T`: its keys (columns and expressions), and its `WHERE` clause.
pub fn create_index<T: TableModel>(
    schema: &SchemaName,
    index: &IndexDef<T>,
) -> IndexCreateStatement {
    let mut create = Index::create();
    create
        .if_not_exists()
        .name(index.name)
        .table(table_ref::<T>(schema));
    if index.unique {
        create.unique();
    }
    for key in &index.keys {
        let order = |order: Order| match order {
            Order::Asc => IndexOrder::Asc,
            Order::Desc => IndexOrder::Desc,
        };
        match *key {
            IndexKey::Column(column, Order::Asc) => create.col(column),
            IndexKey::Column(column, descending) => create.col((column, order(descending))),
            IndexKey::Expression(IndexExpression::Lower(column), direction) => {
                create.col((Func::lower(Expr::col(column)), order(direction)))
            }
        };
    }
    for condition in index
        .predicate
        .clone()
        .map(index_conditions)
        .unwrap_or_default()
    {
        create.and_where(condition);
    }
    create
}

/// Puts each column and constraint of a one-line `CREATE TABLE` on its own
/// line. Only whitespace outside quotes changes, so the statement means
/// exactly what sea-query rendered.
fn one_clause_per_line(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 256);
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), _) if c == q => {
                quote = None;
                out.push(c);
            }
            (Some(_), _) => out.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                out.push(c);
            }
            (None, '(') => {
                depth += 1;
                out.push(c);
                if depth == 1 {
                    out.push_str("\n    ");
                    skip_spaces(&mut chars);
                }
            }
            (None, ')') => {
                if depth == 1 {
                    while out.ends_with(' ') {
                        out.pop();
                    }
                    out.push('\n');
                }
                depth = depth.saturating_sub(1);
                out.push(c);
            }
            (None, ',') if depth == 1 => {
                out.push_str(",\n    ");
                skip_spaces(&mut chars);
            }
            _ => out.push(c),
        }
    }
    out
}

fn skip_spaces(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while chars.next_if_eq(&' ').is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(sql: &str) -> String {
        sql.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn line_breaks_change_only_whitespace() {
        let schema = SchemaName::default();
        let raw = create_table::<schema_model::Jobs>(&schema).to_string(PostgresQueryBuilder);
        let pretty = one_clause_per_line(&raw);
        assert_eq!(
            words(&pretty).replace("( ", "(").replace(" )", ")"),
            words(&raw).replace("( ", "(").replace(" )", ")")
        );
        assert!(pretty.lines().count() > 10, "{pretty}");
    }

    #[test]
    fn quotes_inside_literals_do_not_break_lines() {
        let sql = r#"CREATE TABLE "t" ( "a" text, CONSTRAINT "c" CHECK ("a" <> ',(') )"#;
        assert_eq!(
            one_clause_per_line(sql),
            "CREATE TABLE \"t\" (\n    \"a\" text,\n    CONSTRAINT \"c\" CHECK (\"a\" <> ',(')\n)"
        );
    }
}
