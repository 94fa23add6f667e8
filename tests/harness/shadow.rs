//! What the product's SQL resolves, asked of the server, and shadows of it.
//!
//! The server parses a statement wrapped in a SQL-standard function body
//! (`CREATE FUNCTION ... BEGIN ATOMIC <statement>; END`, PostgreSQL 14+) and
//! stores the parse tree (`pg_proc.prosqlbody`), with every function,
//! operator, aggregate and type it resolved by OID; the DDL's defaults,
//! `CHECK`s and index expressions are parse trees in the catalog too. Both
//! are read with [`resolved`], so the list of what the SQL calls comes from
//! the server, never from a hand-written list, and a name resolved under a
//! caller's search path shows as the object it resolved to.
//!
//! [`create_shadows`] then creates, in given schemas, an exact-type object
//! of the same name for each (polymorphic arguments made concrete with every
//! type the SQL uses) that logs `current_user` and its own name to a table
//! when called: a function of the same name and argument types, an
//! aggregate, an operator, a domain over a type.

use std::collections::BTreeSet;

use tokio_postgres::Client;

use crate::pg::describe_error;

/// OIDs a parse tree names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// Functions and aggregates (`funcid`, `aggfnoid`, `winfnoid`).
    pub functions: BTreeSet<u32>,
    /// Operators (`opno`, row comparisons' `opnos`).
    pub operators: BTreeSet<u32>,
    /// Types (of constants, parameters, results, casts).
    pub types: BTreeSet<u32>,
}

impl Resolved {
    /// Everything of `other` added.
    pub fn extend(&mut self, other: &Resolved) {
        self.functions.extend(&other.functions);
        self.operators.extend(&other.operators);
        self.types.extend(&other.types);
    }
}

/// The OIDs named in `tree`, a `pg_node_tree` in its text form.
pub fn parse_tree(tree: &str) -> Resolved {
    let mut out = Resolved::default();
    let words: Vec<&str> = tree
        .split(|c: char| c.is_whitespace() || c == '{' || c == '}')
        .filter(|w| !w.is_empty())
        .collect();
    let mut i = 0;
    while i + 1 < words.len() {
        let number = words[i + 1].trim_end_matches(')').parse::<u32>().ok();
        match (words[i], number) {
            (":funcid" | ":aggfnoid" | ":winfnoid", Some(oid)) if oid != 0 => {
                out.functions.insert(oid);
            }
            (":opno", Some(oid)) if oid != 0 => {
                out.operators.insert(oid);
            }
            (
                ":consttype" | ":paramtype" | ":resulttype" | ":funcresulttype" | ":vartype"
                | ":minmaxtype" | ":array_typeid" | ":element_typeid" | ":aggtype"
                | ":opresulttype" | ":row_typeid",
                Some(oid),
            ) if oid != 0 => {
                out.types.insert(oid);
            }
            // `:opnos (o 521 521)`: a row comparison's operators.
            (":opnos", None) if words[i + 1] == "(o" => {
                let mut j = i + 2;
                while let Some(oid) = words
                    .get(j)
                    .and_then(|w| w.trim_end_matches(')').parse::<u32>().ok())
                {
                    out.operators.insert(oid);
                    let closes = words[j].ends_with(')');
                    j += 1;
                    if closes {
                        break;
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Creates `probe_schema.name(param_types) RETURNS returns` whose body is
/// `sql` (as the session's search path resolves it), and returns what the
/// server resolved in it.
///
/// # Panics
///
/// If the server refuses the function.
pub async fn resolved(
    client: &Client,
    probe_schema: &str,
    name: &str,
    sql: &str,
    param_types: &[String],
    returns: &str,
) -> Resolved {
    try_resolved(client, probe_schema, name, sql, param_types, returns)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// [`resolved`], or the server's refusal of the function (a name that no
/// longer resolves to one object, say).
///
/// # Panics
///
/// If the function's body cannot be read back.
pub async fn try_resolved(
    client: &Client,
    probe_schema: &str,
    name: &str,
    sql: &str,
    param_types: &[String],
    returns: &str,
) -> Result<Resolved, String> {
    let create = format!(
        "CREATE FUNCTION \"{probe_schema}\".\"{name}\"({}) RETURNS {returns} LANGUAGE sql \
         BEGIN ATOMIC {sql}; END",
        param_types.join(", ")
    );
    client
        .batch_execute(&create)
        .await
        .map_err(|e| format!("{create}: {}", describe_error(&e)))?;
    // Qualified: the session's path may hold shadows.
    let tree: String = client
        .query_one(
            "SELECT p.prosqlbody::pg_catalog.text FROM pg_catalog.pg_proc p
             JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
             WHERE n.nspname OPERATOR(pg_catalog.=) $1::pg_catalog.name
               AND p.proname OPERATOR(pg_catalog.=) $2::pg_catalog.name",
            &[&probe_schema, &name],
        )
        .await
        .unwrap_or_else(|e| panic!("reading {name}: {}", describe_error(&e)))
        .get(0);
    Ok(parse_tree(&tree))
}

/// What the stored expressions of `schema`'s tables resolved: column
/// defaults and generation expressions, constraints, index expressions and
/// predicates.
///
/// # Panics
///
/// If the catalog cannot be read.
pub async fn resolved_by_tables(client: &Client, schema: &str) -> Resolved {
    let rows = client
        .query(
            "SELECT d.adbin::text FROM pg_catalog.pg_attrdef d
             JOIN pg_catalog.pg_class c ON c.oid = d.adrelid
             WHERE c.relnamespace = $1::text::regnamespace
             UNION ALL
             SELECT k.conbin::text FROM pg_catalog.pg_constraint k
             WHERE k.connamespace = $1::text::regnamespace AND k.conbin IS NOT NULL
             UNION ALL
             SELECT coalesce(x.indexprs::text, '') || ' ' || coalesce(x.indpred::text, '')
             FROM pg_catalog.pg_index x
             JOIN pg_catalog.pg_class c ON c.oid = x.indrelid
             WHERE c.relnamespace = $1::text::regnamespace",
            &[&schema],
        )
        .await
        .unwrap_or_else(|e| {
            panic!(
                "reading the expressions of {schema}: {}",
                describe_error(&e)
            )
        });
    let mut out = Resolved::default();
    for row in rows {
        out.extend(&parse_tree(row.get(0)));
    }
    out
}

/// One object the SQL resolved, as the catalog describes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Object {
    /// `function`, `aggregate`, `operator` or `type`.
    pub kind: &'static str,
    /// `pg_catalog.unnest(anyarray)`, `pg_catalog.=(bigint,bigint)`, `pg_catalog.text`.
    pub signature: String,
    /// Its OID.
    pub oid: u32,
}

/// The objects of `resolved`, described, with whether each lives in
/// `pg_catalog`.
///
/// # Panics
///
/// If the catalog cannot be read.
pub async fn describe(client: &Client, resolved: &Resolved) -> Vec<(Object, bool)> {
    let functions: Vec<u32> = resolved.functions.iter().copied().collect();
    let operators: Vec<u32> = resolved.operators.iter().copied().collect();
    let types: Vec<u32> = resolved.types.iter().copied().collect();
    let rows = client
        .query(
            "SELECT CASE p.prokind WHEN 'a' THEN 'aggregate' ELSE 'function' END,
                    n.nspname || '.' || p.oid::regprocedure::text, p.oid, n.nspname = 'pg_catalog'
             FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
             WHERE p.oid = ANY($1::oid[])
             UNION ALL
             SELECT 'operator', n.nspname || '.' || o.oprname || '(' ||
                        coalesce(format_type(o.oprleft, NULL), 'NONE') || ',' ||
                        format_type(o.oprright, NULL) || ')', o.oid, n.nspname = 'pg_catalog'
             FROM pg_catalog.pg_operator o JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace
             WHERE o.oid = ANY($2::oid[])
             UNION ALL
             SELECT 'type', n.nspname || '.' || t.typname, t.oid, n.nspname = 'pg_catalog'
             FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
             -- A table's row type is the table's, named with it.
             WHERE t.oid = ANY($3::oid[]) AND t.typrelid = 0
             ORDER BY 1, 2",
            &[&functions, &operators, &types],
        )
        .await
        .unwrap_or_else(|e| panic!("describing what the SQL resolved: {}", describe_error(&e)));
    rows.iter()
        .map(|row| {
            let kind: String = row.get(0);
            let kind = match kind.as_str() {
                "aggregate" => "aggregate",
                "operator" => "operator",
                "type" => "type",
                _ => "function",
            };
            (
                Object {
                    kind,
                    signature: row.get(1),
                    oid: row.get(2),
                },
                row.get(3),
            )
        })
        .collect()
}

/// The log every shadow writes to when called: `schema.calls (role, object)`.
pub const LOG_TABLE: &str = "calls";

/// Creates the log table in `log_schema` (as the connected role), open for
/// every role to insert into, and the function that writes to it.
///
/// # Panics
///
/// If the server refuses.
pub async fn create_log(client: &Client, log_schema: &str) {
    let sql = format!(
        "CREATE SCHEMA \"{log_schema}\";
         GRANT USAGE ON SCHEMA \"{log_schema}\" TO PUBLIC;
         CREATE TABLE \"{log_schema}\".{LOG_TABLE} (
             role pg_catalog.text NOT NULL, object pg_catalog.text NOT NULL);
         GRANT INSERT ON \"{log_schema}\".{LOG_TABLE} TO PUBLIC;
         CREATE FUNCTION \"{log_schema}\".called(object pg_catalog.text) RETURNS pg_catalog.bool
             LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $f$
             BEGIN
                 INSERT INTO \"{log_schema}\".{LOG_TABLE} VALUES (current_user, object);
                 RETURN true;
             END $f$;"
    );
    client
        .batch_execute(&sql)
        .await
        .unwrap_or_else(|e| panic!("creating the shadows' log: {}", describe_error(&e)));
}

/// The calls logged so far: `(role, object)`.
///
/// # Panics
///
/// If the log cannot be read.
pub async fn calls(client: &Client, log_schema: &str) -> Vec<(String, String)> {
    client
        .query(
            &format!("SELECT role, object FROM \"{log_schema}\".{LOG_TABLE} ORDER BY 1, 2"),
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("reading the shadows' log: {}", describe_error(&e)))
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// What [`create_shadows`] made: the shadows, and what it could not shadow
/// (with why).
#[derive(Debug, Default)]
pub struct Shadows {
    /// `public.unnest(pg_catalog.text[])`, ...
    pub created: Vec<String>,
    /// `(object, why)`.
    pub skipped: Vec<(String, String)>,
}

/// Pseudo-types that stand for "any type" or "any array": made concrete.
const ELEMENT_LIKE: [u32; 5] = [2283, 2776, 5077, 5079, 2276];
const ARRAY_LIKE: [u32; 2] = [2277, 5078];

/// A type's qualified name for a shadow's signature: `pg_catalog.int8`,
/// `pg_catalog.text[]`; `None` for a pseudo-type that is not made concrete.
async fn type_names(client: &Client, oids: &[u32]) -> std::collections::BTreeMap<u32, String> {
    client
        .query(
            "SELECT t.oid,
                    CASE WHEN t.typcategory = 'A' AND t.typelem <> 0
                         THEN 'pg_catalog.' || quote_ident(e.typname) || '[]'
                         ELSE 'pg_catalog.' || quote_ident(t.typname) END
             FROM pg_catalog.pg_type t LEFT JOIN pg_catalog.pg_type e ON e.oid = t.typelem
             WHERE t.oid = ANY($1::oid[]) AND (t.typtype <> 'p' OR t.typname = 'void')
               AND t.typnamespace = 'pg_catalog'::regnamespace",
            &[&oids.to_vec()],
        )
        .await
        .unwrap_or_else(|e| panic!("naming types: {}", describe_error(&e)))
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// The concrete element types the SQL uses (of its types and of its
/// arrays' elements), each with its array type's name if it has one.
async fn concrete_types(client: &Client, types: &BTreeSet<u32>) -> Vec<(String, Option<String>)> {
    let oids: Vec<u32> = types.iter().copied().collect();
    client
        .query(
            "SELECT DISTINCT 'pg_catalog.' || quote_ident(e.typname),
                    CASE WHEN e.typarray <> 0 THEN 'pg_catalog.' || quote_ident(e.typname) || '[]' END
             FROM pg_catalog.pg_type t
             JOIN pg_catalog.pg_type e
                 ON e.oid = CASE WHEN t.typcategory = 'A' AND t.typelem <> 0 THEN t.typelem ELSE t.oid END
             WHERE t.oid = ANY($1::oid[]) AND e.typtype = 'b' AND e.typcategory <> 'A'
               AND e.typnamespace = 'pg_catalog'::regnamespace
             ORDER BY 1",
            &[&oids],
        )
        .await
        .unwrap_or_else(|e| panic!("finding the concrete types: {}", describe_error(&e)))
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// Signatures with the polymorphic types of `args` (and `result`) made
/// concrete with each of `concrete`: `(args, result)`.
fn concrete_signatures(
    args: &[u32],
    result: u32,
    names: &std::collections::BTreeMap<u32, String>,
    concrete: &[(String, Option<String>)],
) -> Result<Vec<(Vec<String>, String)>, String> {
    let polymorphic = |oid: u32| ELEMENT_LIKE.contains(&oid) || ARRAY_LIKE.contains(&oid);
    let name_of = |oid: u32, element: &str, array: Option<&str>| -> Result<String, String> {
        if ELEMENT_LIKE.contains(&oid) {
            Ok(element.to_owned())
        } else if ARRAY_LIKE.contains(&oid) {
            array
                .map(str::to_owned)
                .ok_or_else(|| "no array type".to_owned())
        } else {
            names
                .get(&oid)
                .cloned()
                .ok_or_else(|| format!("pseudo-type {oid}"))
        }
    };
    if !args.iter().chain([&result]).any(|&t| polymorphic(t)) {
        let args = args
            .iter()
            .map(|&t| name_of(t, "", None))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(vec![(args, name_of(result, "", None)?)]);
    }
    if !args.iter().any(|&t| polymorphic(t)) {
        return Err("a polymorphic result without a polymorphic argument".to_owned());
    }
    let mut out = Vec::new();
    for (element, array) in concrete {
        let made: Result<Vec<String>, String> = args
            .iter()
            .map(|&t| name_of(t, element, array.as_deref()))
            .collect();
        if let (Ok(made), Ok(result)) = (made, name_of(result, element, array.as_deref())) {
            out.push((made, result));
        }
    }
    Ok(out)
}

/// Creates, in each of `in_schemas`, a shadow of every `pg_catalog`
/// object of `resolved` that logs to `log_schema` when called (see the
/// module docs), as the connected role.
///
/// # Panics
///
/// If the catalog cannot be read.
pub async fn create_shadows(
    client: &Client,
    log_schema: &str,
    in_schemas: &[&str],
    resolved: &Resolved,
) -> Shadows {
    let mut wanted: BTreeSet<u32> = resolved.types.clone();
    let functions = client
        .query(
            "SELECT p.oid, p.proname, p.prokind::text, p.proargtypes::oid[], p.prorettype,
                    p.proretset, p.provariadic <> 0 OR p.proallargtypes IS NOT NULL,
                    p.oid::regprocedure::text
             FROM pg_catalog.pg_proc p
             WHERE p.oid = ANY($1::oid[]) AND p.pronamespace = 'pg_catalog'::regnamespace",
            &[&resolved.functions.iter().copied().collect::<Vec<u32>>()],
        )
        .await
        .unwrap_or_else(|e| panic!("reading functions: {}", describe_error(&e)));
    let operators = client
        .query(
            "SELECT o.oid, o.oprname, o.oprleft, o.oprright, o.oprresult,
                    o.oid::regoperator::text
             FROM pg_catalog.pg_operator o
             WHERE o.oid = ANY($1::oid[]) AND o.oprnamespace = 'pg_catalog'::regnamespace",
            &[&resolved.operators.iter().copied().collect::<Vec<u32>>()],
        )
        .await
        .unwrap_or_else(|e| panic!("reading operators: {}", describe_error(&e)));
    for row in &functions {
        wanted.extend(row.get::<_, Vec<u32>>(3));
        wanted.insert(row.get(4));
    }
    for row in &operators {
        wanted.extend([row.get::<_, u32>(2), row.get(3), row.get(4)]);
    }
    let names = type_names(client, &wanted.iter().copied().collect::<Vec<_>>()).await;
    let concrete = concrete_types(client, &resolved.types).await;
    let mut shadows = Shadows::default();
    let mut counter = 0usize;
    let log = format!("\"{log_schema}\".called");
    for schema in in_schemas {
        let mut statements: Vec<(String, String)> = Vec::new();
        for row in &functions {
            let (name, kind, args, result, set, variadic, described): (
                String,
                String,
                Vec<u32>,
                u32,
                bool,
                bool,
                String,
            ) = (
                row.get(1),
                row.get(2),
                row.get(3),
                row.get(4),
                row.get(5),
                row.get(6),
                row.get(7),
            );
            if variadic {
                shadows
                    .skipped
                    .push((described, "variadic or OUT arguments".to_owned()));
                continue;
            }
            let signatures = match concrete_signatures(&args, result, &names, &concrete) {
                Ok(signatures) => signatures,
                Err(why) => {
                    shadows.skipped.push((described, why));
                    continue;
                }
            };
            for (args, result) in signatures {
                counter += 1;
                let object = format!("{schema}.{name}({})", args.join(", "));
                let logged = format!("PERFORM {log}({});", quote(&object));
                let sql = if kind == "a" {
                    let state = format!("\"{schema}\".alk_shadow_state_{counter}");
                    let state_args = std::iter::once(result.clone())
                        .chain(args.iter().cloned())
                        .collect::<Vec<_>>()
                        .join(", ");
                    format!(
                        "CREATE FUNCTION {state}({state_args}) RETURNS {result} LANGUAGE plpgsql \
                         SET search_path = pg_catalog, pg_temp AS $f$ BEGIN {logged} RETURN NULL; \
                         END $f$;
                         CREATE AGGREGATE \"{schema}\".\"{name}\"({}) (SFUNC = {state}, STYPE = {result})",
                        if args.is_empty() { "*".to_owned() } else { args.join(", ") }
                    )
                } else if kind == "f" {
                    let returns = if set {
                        format!("SETOF {result}")
                    } else {
                        result.clone()
                    };
                    let back = if set || result == "pg_catalog.void" {
                        "RETURN;"
                    } else {
                        "RETURN NULL;"
                    };
                    format!(
                        "CREATE FUNCTION \"{schema}\".\"{name}\"({}) RETURNS {returns} \
                         LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $f$ BEGIN \
                         {logged} {back} END $f$",
                        args.join(", ")
                    )
                } else {
                    shadows
                        .skipped
                        .push((described.clone(), format!("kind {kind}")));
                    continue;
                };
                statements.push((object, sql));
            }
        }
        for row in &operators {
            let (name, left, right, result, described): (String, u32, u32, u32, String) =
                (row.get(1), row.get(2), row.get(3), row.get(4), row.get(5));
            let args: Vec<u32> = if left == 0 {
                vec![right]
            } else {
                vec![left, right]
            };
            let signatures = match concrete_signatures(&args, result, &names, &concrete) {
                Ok(signatures) => signatures,
                Err(why) => {
                    shadows.skipped.push((described, why));
                    continue;
                }
            };
            for (args, result) in signatures {
                counter += 1;
                let object = format!("{schema}.{name}({})", args.join(", "));
                let function = format!("\"{schema}\".alk_shadow_op_{counter}");
                let operands = if args.len() == 1 {
                    format!("RIGHTARG = {}", args[0])
                } else {
                    format!("LEFTARG = {}, RIGHTARG = {}", args[0], args[1])
                };
                statements.push((
                    object.clone(),
                    format!(
                        "CREATE FUNCTION {function}({}) RETURNS {result} LANGUAGE plpgsql \
                         SET search_path = pg_catalog, pg_temp AS $f$ BEGIN PERFORM {log}({}); \
                         RETURN NULL; END $f$;
                         CREATE OPERATOR \"{schema}\".{name} ({operands}, FUNCTION = {function})",
                        args.join(", "),
                        quote(&object)
                    ),
                ));
            }
        }
        for (oid, name) in &names {
            if !resolved.types.contains(oid) || name.ends_with("[]") || name.ends_with(".void") {
                continue;
            }
            let bare = name.trim_start_matches("pg_catalog.");
            let object = format!("{schema}.{bare}");
            statements.push((
                object.clone(),
                format!(
                    "CREATE DOMAIN \"{schema}\".{bare} AS {name} CHECK ({log}({}))",
                    quote(&format!("type {object}"))
                ),
            ));
        }
        for (object, sql) in statements {
            match client.batch_execute(&sql).await {
                Ok(()) => shadows.created.push(object),
                Err(err) => shadows.skipped.push((object, describe_error(&err))),
            }
        }
    }
    shadows
}

/// A string literal.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Runs every statement of both layouts' registries once with its sample
/// values, committed, so the tables hold rows for the statements' conditions
/// to read (a statement its sample cannot run, a constraint say, is left).
/// The samples name offsets and ids of their own, so every sequence of the
/// family is then moved past them: the family still matches the model.
///
/// # Panics
///
/// If the sequences cannot be moved (never on a refused statement).
pub async fn seed(client: &Client, schema: &schema_model::SchemaName) {
    use schema_gen::statements::registry;
    use schema_model::Layout;
    for layout in [Layout::SingleServer, Layout::CitusSchemaSharding] {
        for entry in registry(layout) {
            let statement = entry.statement(schema);
            let _ = client.execute(statement.sql(), &statement.args()).await;
        }
    }
    client
        .execute(
            "SELECT pg_catalog.setval(c.oid, 1000000) FROM pg_catalog.pg_class c
             WHERE c.relkind = 'S' AND c.relnamespace = $1::text::regnamespace",
            &[&schema.as_str()],
        )
        .await
        .unwrap_or_else(|e| panic!("moving the sequences of {schema}: {}", describe_error(&e)));
}

/// Runs `statement` with its sample values in a transaction rolled back
/// (a `VACUUM`, which no transaction may hold, alone).
///
/// # Panics
///
/// If the server refuses it.
pub async fn run_sample(client: &Client, statement: &schema_gen::statements::Statement) {
    let transaction = !statement.sql().starts_with("VACUUM");
    if transaction {
        client
            .batch_execute("BEGIN")
            .await
            .unwrap_or_else(|e| panic!("BEGIN: {e}"));
    }
    let result = client.execute(statement.sql(), &statement.args()).await;
    if transaction {
        let _ = client.batch_execute("ROLLBACK").await;
    }
    if let Err(err) = result {
        panic!("{}: {}", statement.name(), describe_error(&err));
    }
}
