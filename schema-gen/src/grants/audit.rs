//! `check --runtime-role R [--maintenance-role M]`: one more question in
//! `check`'s catalog round trip ([`question`]) about what the roles may do
//! on the family, and the readiness conditions the statements need; the
//! gaps ([`gaps`]), each in words a DBA acts on, with the statement that
//! closes it.

use serde::Deserialize;

use schema_model::{Layout, SchemaName, SchemaVersions, TableModel};

use super::script::grant_list;
use super::{Matrix, Privilege, matrix};
use crate::difference::Difference;
use crate::render::{quote_ident, quote_literal};

/// The roles whose privileges `check` verifies.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Roles {
    /// The engine's runtime role.
    pub runtime: String,
    /// The role that runs the engine's vacuum (the runtime role when `None`).
    pub maintenance: Option<String>,
}

impl Roles {
    fn vacuums(&self) -> &str {
        self.maintenance.as_deref().unwrap_or(&self.runtime)
    }
}

/// The question, one `SELECT` of one text column (a JSON document), to
/// send in the catalog read's round trip
/// ([`catalog::read_with`](crate::catalog::read_with)).
pub fn question(schema: &SchemaName, roles: &Roles) -> String {
    let r = quote_literal(&roles.runtime);
    let m = quote_literal(roles.vacuums());
    let s = quote_literal(schema.as_str());
    format!(
        "SELECT json_build_object(
    'runtime', (SELECT json_build_object('superuser', rolsuper, 'bypass_rls', rolbypassrls)
                FROM pg_catalog.pg_roles WHERE rolname = {r}),
    'maintenance_exists', EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = {m}),
    'schema', (SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = {r})
                THEN json_build_object(
                    'usage', pg_catalog.has_schema_privilege({r}, n.oid, 'USAGE'),
                    'create', pg_catalog.has_schema_privilege({r}, n.oid, 'CREATE'),
                    'owner', pg_catalog.pg_has_role({r}, n.nspowner, 'USAGE'),
                    'maintenance_usage', CASE WHEN EXISTS (
                            SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = {m})
                        THEN pg_catalog.has_schema_privilege({m}, n.oid, 'USAGE') END) END
               FROM pg_catalog.pg_namespace n WHERE n.nspname = {s}),
    'relations', COALESCE((SELECT json_agg(json_build_object(
            'name', c.relname,
            'kind', c.relkind::text,
            'owner', pg_catalog.pg_get_userbyid(c.relowner),
            'privileges', CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = {r})
                THEN CASE WHEN c.relkind = 'S' THEN json_build_object(
                    'owns', pg_catalog.pg_has_role({r}, c.relowner, 'USAGE'),
                    'usage', pg_catalog.has_sequence_privilege({r}, c.oid, 'USAGE'),
                    'select', pg_catalog.has_sequence_privilege({r}, c.oid, 'SELECT'),
                    'update', pg_catalog.has_sequence_privilege({r}, c.oid, 'UPDATE'))
                ELSE json_build_object(
                    'owns', pg_catalog.pg_has_role({r}, c.relowner, 'USAGE'),
                    'select', pg_catalog.has_table_privilege({r}, c.oid, 'SELECT'),
                    'insert', pg_catalog.has_table_privilege({r}, c.oid, 'INSERT'),
                    'update', pg_catalog.has_table_privilege({r}, c.oid, 'UPDATE'),
                    'delete', pg_catalog.has_table_privilege({r}, c.oid, 'DELETE'),
                    'truncate', pg_catalog.has_table_privilege({r}, c.oid, 'TRUNCATE'),
                    'references', pg_catalog.has_table_privilege({r}, c.oid, 'REFERENCES'),
                    'trigger', pg_catalog.has_table_privilege({r}, c.oid, 'TRIGGER')) END END,
            'vacuum', CASE WHEN c.relkind = 'r' AND EXISTS (
                    SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = {m})
                THEN (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = {m})
                  OR pg_catalog.pg_has_role({m}, c.relowner, 'USAGE')
                  OR (pg_catalog.current_setting('server_version_num')::integer >= 170000
                      AND pg_catalog.has_table_privilege({m}, c.oid, 'MAINTAIN')) END,
            'replica_identity', c.relreplident::text,
            'identity_index', EXISTS (SELECT 1 FROM pg_catalog.pg_index x
                                      WHERE x.indrelid = c.oid AND x.indisreplident),
            'primary_key', EXISTS (SELECT 1 FROM pg_catalog.pg_index x
                                   WHERE x.indrelid = c.oid AND x.indisprimary),
            'publications', (SELECT json_agg(p.pubname ORDER BY p.pubname)
                             FROM pg_catalog.pg_publication p
                             WHERE (p.pubupdate OR p.pubdelete)
                               AND EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables t
                                           WHERE t.pubname = p.pubname
                                             AND t.schemaname = n.nspname
                                             AND t.tablename = c.relname))
        ) ORDER BY c.relname)
        FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = {s} AND c.relkind IN ('r', 'p', 'S')), '[]'::json)
)::text"
    )
}

#[derive(Debug, Deserialize)]
struct Answer {
    runtime: Option<RoleFlags>,
    maintenance_exists: bool,
    schema: Option<SchemaAnswer>,
    relations: Vec<RelationAnswer>,
}

#[derive(Debug, Deserialize)]
struct RoleFlags {
    superuser: bool,
    bypass_rls: bool,
}

#[derive(Debug, Deserialize)]
struct SchemaAnswer {
    usage: bool,
    create: bool,
    owner: bool,
    maintenance_usage: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct RelationAnswer {
    name: String,
    kind: String,
    owner: String,
    privileges: Option<serde_json::Map<String, serde_json::Value>>,
    vacuum: Option<bool>,
    replica_identity: String,
    identity_index: bool,
    primary_key: bool,
    publications: Option<Vec<String>>,
}

/// The gaps between what the roles may do and what the [`Matrix`] of
/// `layout` says (missing privileges, and any privilege beyond it), and the
/// readiness conditions the statements need, each a
/// [`Difference::RoleGap`]; an answer that does not decode is one gap
/// saying so.
pub fn gaps(answer: &str, schema: &SchemaName, layout: Layout, roles: &Roles) -> Vec<Difference> {
    let r = &roles.runtime;
    let gap = |gap: String, fix: String| Difference::RoleGap {
        role: r.clone(),
        gap,
        fix,
    };
    let answer: Answer = match serde_json::from_str(answer) {
        Ok(answer) => answer,
        Err(err) => {
            return vec![gap(
                format!("the privileges could not be read ({err})"),
                "run check again".to_owned(),
            )];
        }
    };
    let Some(flags) = &answer.runtime else {
        return vec![gap(
            format!("role {r} does not exist"),
            format!(
                "CREATE ROLE {} LOGIN, then run `schema-gen grants`",
                quote_ident(r)
            ),
        )];
    };
    let Some(on_schema) = &answer.schema else {
        return Vec::new();
    };
    let matrix = matrix(schema, layout);
    let s = quote_ident(schema.as_str());
    let qr = quote_ident(r);
    let mut out = Vec::new();
    if flags.superuser {
        out.push(gap(
            format!("{r} is a superuser: no grant limits what it can do to the family"),
            format!("ALTER ROLE {qr} NOSUPERUSER"),
        ));
    } else if flags.bypass_rls {
        out.push(gap(
            format!("{r} bypasses row-level security"),
            format!("ALTER ROLE {qr} NOBYPASSRLS"),
        ));
    }
    if on_schema.owner {
        out.push(gap(
            format!(
                "{r} owns schema {schema} (or is a member of its owner): it can drop any table of it"
            ),
            format!("ALTER SCHEMA {s} OWNER TO <the family's owner>"),
        ));
    }
    if !on_schema.usage {
        out.push(gap(
            format!("{r} lacks USAGE on schema {schema}: it cannot open the family"),
            format!("GRANT USAGE ON SCHEMA {s} TO {qr}"),
        ));
    }
    if on_schema.create {
        out.push(gap(
            format!("{r} may CREATE in schema {schema}: a runtime role needs no DDL"),
            format!("REVOKE CREATE ON SCHEMA {s} FROM {qr}"),
        ));
    }
    for relation in &answer.relations {
        relation_gaps(&mut out, &matrix, relation, &s, r, &gap);
    }
    readiness(&mut out, &matrix, &answer, on_schema, &s, roles, &gap);
    out
}

fn relation_gaps(
    out: &mut Vec<Difference>,
    matrix: &Matrix,
    relation: &RelationAnswer,
    s: &str,
    r: &str,
    gap: &dyn Fn(String, String) -> Difference,
) {
    let Some(privileges) = &relation.privileges else {
        return;
    };
    let has = |name: &str| privileges.get(name).and_then(|v| v.as_bool()) == Some(true);
    let t = &relation.name;
    let qt = format!("{s}.{}", quote_ident(t));
    let qr = quote_ident(r);
    if has("owns") {
        out.push(gap(
            format!(
                "{r} owns {t} (or is a member of its owner, {}): it can alter, drop and truncate it",
                relation.owner
            ),
            "give the family an owner of its own and run `schema-gen grants` for the runtime role"
                .to_owned(),
        ));
        return;
    }
    if relation.kind == "S" {
        let extra: Vec<&str> = ["usage", "select", "update"]
            .into_iter()
            .filter(|p| has(p))
            .collect();
        if !extra.is_empty() {
            out.push(gap(
                format!(
                    "{r} has {} on sequence {t}: with UPDATE it can setval ids and fences \
                     backwards; the engine needs none",
                    extra.join(", ").to_uppercase()
                ),
                format!("REVOKE ALL ON SEQUENCE {qt} FROM {qr}"),
            ));
        }
        return;
    }
    let needed = matrix.needs(t);
    let missing: Vec<Privilege> = needed
        .iter()
        .copied()
        .filter(|p| !has(&p.keyword().to_lowercase()))
        .collect();
    if !missing.is_empty() {
        let mut users: Vec<&str> = Vec::new();
        for user in missing
            .iter()
            .flat_map(|p| matrix.tables[t][p].iter().copied())
        {
            if !users.contains(&user) {
                users.push(user);
            }
        }
        out.push(gap(
            format!(
                "{r} lacks {} on {t}, which {} need",
                grant_list(&missing),
                users.join(", ")
            ),
            format!("GRANT {} ON TABLE {qt} TO {qr}", grant_list(&missing)),
        ));
    }
    let mut extra: Vec<&str> = Privilege::ALL
        .iter()
        .filter(|p| !needed.contains(p) && has(&p.keyword().to_lowercase()))
        .map(|p| p.keyword())
        .collect();
    extra.extend(
        ["TRUNCATE", "REFERENCES", "TRIGGER"]
            .into_iter()
            .filter(|p| has(&p.to_lowercase())),
    );
    if !extra.is_empty() {
        let why = if *t == SchemaVersions::table_name() {
            "a role that writes the version rows can make check trust a forged version"
        } else {
            "no statement of the engine needs it"
        };
        out.push(gap(
            format!("{r} may {} on {t}: {why}", extra.join(", ")),
            format!("REVOKE {} ON TABLE {qt} FROM {qr}", extra.join(", ")),
        ));
    }
}

/// What the statements need besides privileges: every published table
/// that they update or delete from has a replica identity, and the vacuum
/// role may vacuum what the engine vacuums.
fn readiness(
    out: &mut Vec<Difference>,
    matrix: &Matrix,
    answer: &Answer,
    on_schema: &SchemaAnswer,
    s: &str,
    roles: &Roles,
    gap: &dyn Fn(String, String) -> Difference,
) {
    for relation in &answer.relations {
        let t = &relation.name;
        let mut writers: Vec<&str> = Vec::new();
        for writer in matrix.tables.get(t).into_iter().flat_map(|p| {
            [Privilege::Update, Privilege::Delete]
                .iter()
                .filter_map(|k| p.get(k))
                .flatten()
                .copied()
        }) {
            if !writers.contains(&writer) {
                writers.push(writer);
            }
        }
        let publications = relation.publications.clone().unwrap_or_default();
        let identified = match relation.replica_identity.as_str() {
            "f" => true,
            "d" => relation.primary_key,
            "i" => relation.identity_index,
            _ => false,
        };
        if !writers.is_empty() && !publications.is_empty() && !identified {
            out.push(gap(
                format!(
                    "publication {} publishes updates and deletes of {t}, which has no replica \
                     identity: every {} fails",
                    publications.join(", "),
                    writers.join(", ")
                ),
                format!(
                    "ALTER TABLE {s}.{} REPLICA IDENTITY DEFAULT",
                    quote_ident(t)
                ),
            ));
        }
    }
    let m = roles.vacuums();
    let qm = quote_ident(m);
    if !answer.maintenance_exists {
        out.push(gap(
            format!("maintenance role {m} does not exist"),
            format!("CREATE ROLE {qm} LOGIN, then run `schema-gen grants --maintenance-role`"),
        ));
        return;
    }
    if on_schema.maintenance_usage == Some(false) {
        out.push(gap(
            format!(
                "{m} lacks USAGE on schema {}: the engine's vacuum cannot name its tables",
                s.trim_matches('"')
            ),
            format!("GRANT USAGE ON SCHEMA {s} TO {qm}"),
        ));
    }
    for table in &matrix.vacuumed {
        let Some(relation) = answer.relations.iter().find(|r| r.name == *table) else {
            continue;
        };
        if relation.vacuum == Some(false) {
            out.push(gap(
                format!(
                    "{m} may not vacuum {table}: the engine's vacuum (jobs::vacuum) is skipped with \
                     a WARNING and the claim index fills with dead entries"
                ),
                format!(
                    "on PostgreSQL 17 and later GRANT MAINTAIN ON TABLE {s}.{} TO {qm}; before \
                     17 run the vacuum as {} (the owner)",
                    quote_ident(table),
                    relation.owner
                ),
            ));
        }
    }
}
