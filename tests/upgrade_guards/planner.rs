//! The planner's refusals and self-check, and when a contract must precede
//! the next expand.

use super::*;

/// A fabricated version for the planner: `tables` as its description.
fn fabricated(
    number: u32,
    tables: &[schema_model::TableDescription],
    hints: schema_model::history::UpgradeHints,
) -> schema_model::history::SchemaVersion {
    let json = serde_json::json!({ "tables": tables }).to_string();
    schema_model::history::SchemaVersion {
        number,
        release: "a test",
        shipped: Some(schema_model::history::Shipped {
            number,
            release: "a test",
            schema_sql: "",
            describe_json: Box::leak(json.into_boxed_str()),
            statements_json: "",
        }),
        hints,
    }
}

/// The planner refuses, naming why, every change it cannot carry online,
/// every hint that names nothing, and a plan whose steps would not reach
/// the new version exactly (its self-check: here an index whose legacy
/// name is already taken, which the contract would then drop as well);
/// the same model on both sides plans nothing.
#[test]
fn the_planner_refuses_what_it_cannot_carry_online_and_checks_its_plan() {
    use schema_model::history::UpgradeHints;
    let model = schema_model::engine_family();
    let edited = |edit: &dyn Fn(&mut Vec<schema_model::TableDescription>)| {
        let mut tables = model.clone();
        edit(&mut tables);
        tables
    };
    let table = |tables: &mut Vec<schema_model::TableDescription>, name: &str| -> usize {
        tables
            .iter()
            .position(|t| t.name == name)
            .unwrap_or_else(|| panic!("no table {name}"))
    };
    let plan = |old: &[schema_model::TableDescription],
                new: &[schema_model::TableDescription],
                hints: UpgradeHints| {
        schema_gen::versions::plan::plan(
            &fabricated(7, old, UpgradeHints::default()),
            &fabricated(8, new, hints),
        )
    };

    let same = plan(&model, &model, UpgradeHints::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        same.expand.is_empty() && same.contract.is_empty(),
        "{same:?}"
    );

    let column = |t: &mut schema_model::TableDescription, name: &str| -> usize {
        t.columns
            .iter()
            .position(|c| c.name == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    let new_column = |nullable: bool, default: Option<&str>, identity: Option<&str>| {
        schema_model::ColumnDescription {
            name: "extra".into(),
            sql_type: "bigint".into(),
            nullable,
            default: default.map(str::to_owned),
            identity: identity.map(str::to_owned),
            generated: None,
            doc: "A test column.".into(),
        }
    };
    let long = "jobs_an_index_whose_name_leaves_no_room_for_a_suffix_of_seven";
    /// What is changed, the old and new tables, the hints, the words expected.
    type Case = (
        &'static str,
        Vec<schema_model::TableDescription>,
        Vec<schema_model::TableDescription>,
        UpgradeHints,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "a changed type",
            model.clone(),
            edited(&|t| {
                let j = table(t, "jobs");
                let c = column(&mut t[j], "priority");
                t[j].columns[c].sql_type = "bigint".into();
            }),
            UpgradeHints::default(),
            "rewrites the table",
        ),
        (
            "a column made NOT NULL",
            model.clone(),
            edited(&|t| {
                let j = table(t, "jobs");
                let c = column(&mut t[j], "expires_at");
                t[j].columns[c].nullable = false;
            }),
            UpgradeHints::default(),
            "becomes NOT NULL",
        ),
        (
            "a changed default",
            model.clone(),
            edited(&|t| {
                let j = table(t, "jobs");
                let c = column(&mut t[j], "attempts");
                t[j].columns[c].default = Some("7".into());
            }),
            UpgradeHints::default(),
            "changes its default",
        ),
        (
            "a new NOT NULL column without a default",
            model.clone(),
            edited(&|t| {
                let j = table(t, "locks");
                t[j].columns.push(new_column(false, None, None));
            }),
            UpgradeHints::default(),
            "new NOT NULL column without a default",
        ),
        (
            "a new column with a default of its own",
            model.clone(),
            edited(&|t| {
                let j = table(t, "locks");
                t[j].columns.push(new_column(true, Some("0"), None));
            }),
            UpgradeHints::default(),
            "default of its own",
        ),
        (
            "a new identity column",
            model.clone(),
            edited(&|t| {
                let j = table(t, "locks");
                t[j].columns.push(new_column(false, None, Some("always")));
            }),
            UpgradeHints::default(),
            "identity or generated",
        ),
        (
            "a changed primary key",
            model.clone(),
            edited(&|t| {
                let j = table(t, "locks");
                t[j].primary_key.definition = "PRIMARY KEY (name, owner)".into();
            }),
            UpgradeHints::default(),
            "primary key changes",
        ),
        (
            "a check deferred to the contract that is not new",
            model.clone(),
            model.clone(),
            UpgradeHints {
                checks_at_contract: vec!["jobs_attempts_not_negative"],
                ..UpgradeHints::default()
            },
            "not a new check",
        ),
        (
            "a replaced index whose legacy name is too long",
            edited(&|t| {
                let j = table(t, "locks");
                t[j].indexes.push(schema_model::IndexDescription {
                    name: long.into(),
                    definition: "USING btree (owner)".into(),
                    doc: String::new(),
                });
            }),
            edited(&|t| {
                let j = table(t, "locks");
                t[j].indexes.push(schema_model::IndexDescription {
                    name: long.into(),
                    definition: "USING btree (owner, name)".into(),
                    doc: String::new(),
                });
            }),
            UpgradeHints::default(),
            "longer than 63 bytes",
        ),
        (
            "a replaced index whose legacy name is taken (the self-check)",
            edited(&|t| {
                let j = table(t, "locks");
                t[j].indexes.push(schema_model::IndexDescription {
                    name: "locks_owner_idx".into(),
                    definition: "USING btree (owner)".into(),
                    doc: String::new(),
                });
                t[j].indexes.push(schema_model::IndexDescription {
                    name: "locks_owner_idx_v7".into(),
                    definition: "USING btree (expires_at, owner)".into(),
                    doc: String::new(),
                });
            }),
            edited(&|t| {
                let j = table(t, "locks");
                t[j].indexes.push(schema_model::IndexDescription {
                    name: "locks_owner_idx".into(),
                    definition: "USING btree (owner, name)".into(),
                    doc: String::new(),
                });
                t[j].indexes.push(schema_model::IndexDescription {
                    name: "locks_owner_idx_v7".into(),
                    definition: "USING btree (expires_at, owner)".into(),
                    doc: String::new(),
                });
            }),
            UpgradeHints::default(),
            "the planned steps leave",
        ),
    ];
    for (what, old, new, hints, words) in cases {
        match plan(&old, &new, hints) {
            Ok(planned) => panic!("{what}: planned {planned:?}"),
            Err(err) => assert!(err.to_string().contains(words), "{what}: {err}"),
        }
    }
}

/// A pending contract must run before the next version's expand when that
/// expand touches what the contract still changes, and only then.
#[test]
fn a_contract_must_precede_an_expand_that_touches_what_it_changes() {
    let step = |phase, action| Step {
        version: 2,
        phase,
        table: "jobs".into(),
        action,
    };
    let pending = schema_gen::versions::VersionPlan {
        from: 1,
        to: 2,
        expand: Vec::new(),
        contract: vec![step(
            Phase::Contract,
            Action::DropIndex {
                index: "jobs_x_idx".into(),
            },
        )],
    };
    let next = |index: &str| schema_gen::versions::VersionPlan {
        from: 2,
        to: 3,
        expand: vec![step(
            Phase::Expand,
            Action::CreateIndex {
                index: index.into(),
                definition: "USING btree (queue)".into(),
            },
        )],
        contract: Vec::new(),
    };
    assert!(pending.contract_must_precede(&next("jobs_x_idx")));
    assert!(!pending.contract_must_precede(&next("jobs_y_idx")));
}
