//! The registry's tests: every statement declared is registered, and every
//! registered call binds exactly what its statement binds.

use std::collections::BTreeSet;
use std::path::Path;

use sea_query_postgres::PostgresValues;

use super::*;
use crate::statements::binder::value_fits;
use crate::statements::{RowsAffected, jobs};

/// Every entry of the registry and of the maintenance list.
fn every_entry() -> impl Iterator<Item = &'static Entry> {
    REGISTRY.iter().chain(MAINTENANCE)
}

/// What disagrees between the values `call` lists alone (the values-only
/// pass, what a session binds) and the statement it builds (the text pass):
/// empty when they agree. The sample values must differ from each other,
/// so that two values listed in each other's places show as a difference.
fn disagreements(call: &dyn AnyCall) -> Vec<String> {
    let statement = call.statement(&SchemaName::default());
    let name = call.name();
    let mut found = Vec::new();
    if statement.name() != name {
        found.push(format!(
            "{name}: the statement is named {}",
            statement.name()
        ));
    }
    let listed = call.values();
    if &listed != statement.values() {
        found.push(format!(
            "{name}: the values listed alone {:?} are not the statement's {:?}",
            listed.0,
            statement.values().0
        ));
    }
    let bound = &statement.values().0;
    if bound.len() != statement.params().len() {
        found.push(format!(
            "{name}: {} values for {} placeholders",
            bound.len(),
            statement.params().len()
        ));
    }
    for (param, value) in statement.params().iter().zip(bound) {
        if !value_fits(param, &value.0) {
            found.push(format!(
                "{name}: {} is a {} placeholder bound to {:?}",
                param.name,
                param.type_name(),
                value.0
            ));
        }
    }
    for (i, first) in bound.iter().enumerate() {
        for (j, second) in bound.iter().enumerate().skip(i + 1) {
            if first == second {
                found.push(format!(
                    "{name}: the sample values of ${} and ${} are equal ({:?}): \
                     two values listed in each other's places would pass unseen",
                    i + 1,
                    j + 1,
                    first.0
                ));
            }
        }
    }
    found
}

/// Every registered call (every layout, and maintenance) binds, from the
/// values it lists alone, exactly its statement's values, in order, each of
/// its placeholder's wire type; the samples are all different, so a value
/// in another's place cannot pass.
#[test]
fn every_call_binds_what_its_statement_binds() {
    let mut checked = 0;
    let mut values = 0;
    for entry in every_entry() {
        let call = entry.sample();
        let found = disagreements(call.as_ref());
        assert!(found.is_empty(), "{found:#?}");
        checked += 1;
        values += call.values().0.len();
    }
    assert_eq!(checked, REGISTRY.len() + MAINTENANCE.len());
    // Not vacuous: the registry holds the statements, and their values.
    assert!(
        checked >= 30 && values >= 80,
        "{checked} calls, {values} values"
    );
}

/// The check above fails on a call whose values are listed in another
/// order than its text binds them, on one that lists a value too few, and
/// on samples that cannot tell two values apart.
#[test]
fn the_check_catches_calls_that_disagree_with_their_statement() {
    struct Swapped;
    impl Call for Swapped {
        const NAME: &'static str = "claim";
        type Returns = RowsAffected;
        fn statement(&self, schema: &SchemaName) -> Statement {
            jobs::claim(schema, "queue", "worker", 50, 7)
        }
        fn values(&self) -> PostgresValues {
            let mut values = Call::statement(self, &SchemaName::default()).values;
            values.0.swap(0, 2);
            values
        }
    }
    struct Short;
    impl Call for Short {
        const NAME: &'static str = "claim";
        type Returns = RowsAffected;
        fn statement(&self, schema: &SchemaName) -> Statement {
            jobs::claim(schema, "queue", "worker", 50, 7)
        }
        fn values(&self) -> PostgresValues {
            let mut values = Call::statement(self, &SchemaName::default()).values;
            values.0.pop();
            values
        }
    }
    let swapped = disagreements(&Swapped);
    assert!(
        swapped.iter().any(|d| d.contains("values listed alone")),
        "{swapped:?}"
    );
    let short = disagreements(&Short);
    assert!(
        short.iter().any(|d| d.contains("values listed alone")),
        "{short:?}"
    );
    let alike = disagreements(&jobs::Claim {
        queue: "same",
        worker_id: "same",
        now: 50,
        limit: 7,
    });
    assert!(
        alike.len() == 1 && alike[0].contains("$1 and $3 are equal"),
        "{alike:?}"
    );
}

/// The names of the statements declared with `statement!` in `dir`'s
/// files (and its subdirectories').
fn declared(dir: &Path, names: &mut BTreeSet<String>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        if path.is_dir() {
            declared(&path, names);
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        let mut lines = text.lines().map(str::trim);
        while lines.any(|line| line == "statement! {") {
            let name = lines
                .next()
                .and_then(|line| line.strip_prefix("name: \""))
                .and_then(|rest| rest.strip_suffix("\","))
                .unwrap_or_else(|| {
                    panic!(
                        "{}: `statement! {{` not followed by its name",
                        path.display()
                    )
                });
            assert!(
                names.insert(name.to_owned()),
                "statement {name} is declared twice"
            );
        }
    }
}

/// Every statement declared is in the registry or the maintenance list
/// (so the tests above, `prepare_all` and the hot-path proofs reach it),
/// exactly once, and runs on some layout.
#[test]
fn every_declared_statement_is_registered() {
    let mut names = BTreeSet::new();
    declared(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/statements"),
        &mut names,
    );
    assert!(names.len() >= 30, "{names:?}");
    let registered: Vec<&str> = every_entry().map(Entry::name).collect();
    let unique: BTreeSet<String> = registered.iter().map(|n| (*n).to_owned()).collect();
    assert_eq!(
        unique.len(),
        registered.len(),
        "registered twice: {registered:?}"
    );
    assert_eq!(unique, names, "declared and registered differ");
    for entry in every_entry() {
        assert!(!entry.layouts().is_empty(), "{} runs nowhere", entry.name());
    }
}

#[test]
fn every_statement_has_one_param_per_placeholder() {
    for layout in Layout::ALL {
        for statement in all_for(&SchemaName::default(), layout) {
            let count = statement.params().len();
            assert_eq!(statement.values().0.len(), count, "{}", statement.name());
            for n in 1..=count {
                assert!(
                    statement.sql().contains(&format!("${n}")),
                    "{}: no ${n} in {}",
                    statement.name(),
                    statement.sql()
                );
            }
            assert!(
                !statement.sql().contains(&format!("${}", count + 1)),
                "{}: more placeholders than params",
                statement.name()
            );
        }
    }
}

#[test]
fn each_name_is_one_placeholder() {
    for entry in every_entry() {
        let statement = entry.statement(&SchemaName::default());
        let mut names = statement.param_names();
        names.sort_unstable();
        let count = names.len();
        names.dedup();
        assert_eq!(
            names.len(),
            count,
            "{}: a name binds two placeholders: {:?}",
            statement.name(),
            statement.param_names()
        );
    }
}

/// The layouts' lists: the Citus forms replace the two single-server
/// statements in place, everything else is shared, in family order.
#[test]
fn the_citus_registry_replaces_two_statements_in_place() {
    let names = |layout| registry(layout).map(Entry::name).collect::<Vec<_>>();
    let single = names(Layout::SingleServer);
    let citus = names(Layout::CitusSchemaSharding);
    let replaced: Vec<&str> = single
        .iter()
        .flat_map(|name| match *name {
            "stream_read_in_commit_order" => {
                vec!["commit_horizon", "stream_read_in_commit_order_below"]
            }
            "lock_acquire" => vec!["lock_clear_lapsed", "lock_acquire_free"],
            other => vec![other],
        })
        .collect();
    assert_eq!(citus, replaced);
}
