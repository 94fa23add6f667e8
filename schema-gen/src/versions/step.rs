//! The vocabulary of an upgrade: its [`Phase`]s, the [`Action`] each
//! [`Step`] takes on one engine table, and how each step runs
//! ([`Execution`]: the lock it takes and how it waits), as data that the
//! executor and the dry-run printer both read.

use serde::Serialize;

use schema_model::ColumnDescription;
use schema_model::history::Backfill;

/// Which phase a step belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Adds what the new version needs; the previous release keeps working.
    Expand,
    /// Removes what only the previous release needed; run once its engines
    /// are gone.
    Contract,
}

impl Phase {
    /// `expand` or `contract`.
    pub fn word(self) -> &'static str {
        match self {
            Self::Expand => "expand",
            Self::Contract => "contract",
        }
    }
}

/// The strongest lock a step takes on an existing engine table, in
/// PostgreSQL's words. Every step's lock is declared, and the tests read
/// `pg_locks` while each step runs to hold it to that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TableLock {
    /// No lock on an existing engine table (a new table, bookkeeping).
    None,
    /// `ROW EXCLUSIVE`: what the engine's own writes take (a backfill
    /// batch); it conflicts with no engine statement, only with row locks
    /// on the rows it changes, which it skips. (A backfill step declares
    /// `SHARE UPDATE EXCLUSIVE`, for the vacuum that follows its batches.)
    RowExclusive,
    /// `SHARE UPDATE EXCLUSIVE`: `CREATE INDEX CONCURRENTLY`, `VALIDATE
    /// CONSTRAINT`, storage parameters, comments, index renames: conflicts
    /// with no engine statement.
    ShareUpdateExclusive,
    /// `ACCESS EXCLUSIVE`, held for a catalog change only (no scan, no
    /// rewrite): the wait for it is bounded by the lock bound and retried,
    /// because while it waits every later statement on the table queues
    /// behind it.
    AccessExclusive,
}

impl TableLock {
    /// The mode as `pg_locks.mode` names it.
    pub fn pg_mode(self) -> Option<&'static str> {
        match self {
            Self::None => None,
            Self::RowExclusive => Some("RowExclusiveLock"),
            Self::ShareUpdateExclusive => Some("ShareUpdateExclusiveLock"),
            Self::AccessExclusive => Some("AccessExclusiveLock"),
        }
    }
}

/// What a step does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Creates a table of the new version with its indexes and comments.
    CreateTable,
    /// `ALTER TABLE ... ADD COLUMN`, with the transitional default if the
    /// column is `NOT NULL` without a default of its own (a constant, so no
    /// rewrite).
    AddColumn {
        /// The column as the new version has it.
        column: ColumnDescription,
        /// The constant it holds until the contract, if any.
        transitional_default: Option<String>,
    },
    /// `ALTER COLUMN ... DROP NOT NULL`: a column the new version no longer
    /// writes.
    DropNotNull {
        /// The column.
        column: String,
    },
    /// `ALTER COLUMN ... DROP DEFAULT`: the contract of a transitional
    /// default.
    DropDefault {
        /// The column.
        column: String,
    },
    /// `ALTER TABLE ... DROP COLUMN`.
    DropColumn {
        /// The column.
        column: String,
    },
    /// `ALTER TABLE ... SET (...)` / `RESET (...)`: the storage parameters
    /// become exactly these.
    SetStorageParameters {
        /// `name=value`, as `reloptions` lists them.
        parameters: Vec<String>,
        /// The names of the parameters to reset.
        reset: Vec<String>,
    },
    /// `COMMENT ON TABLE`, or `COMMENT ON COLUMN` when `column` is set.
    Comment {
        /// The column, or `None` for the table.
        column: Option<String>,
        /// The doc.
        doc: String,
    },
    /// A batched backfill ([`Backfill`]).
    Backfill {
        /// What it sets, on which rows.
        backfill: Backfill,
    },
    /// `CREATE INDEX CONCURRENTLY` (an invalid leftover of an interrupted
    /// build is dropped `CONCURRENTLY` first).
    CreateIndex {
        /// The index's name.
        index: String,
        /// `USING ...`, as `pg_get_indexdef` reports it from `USING` on.
        definition: String,
    },
    /// Puts a replacement index in place of one whose definition changed,
    /// in one short transaction: `index` is renamed to `legacy` (kept for
    /// the previous release until the contract), `replacement` to `index`.
    SwapIndex {
        /// The index's name in both versions.
        index: String,
        /// The new definition's index, built under this name.
        replacement: String,
        /// The name the old definition's index keeps until the contract.
        legacy: String,
    },
    /// `DROP INDEX CONCURRENTLY`.
    DropIndex {
        /// The index's name.
        index: String,
    },
    /// `ALTER TABLE ... ADD CONSTRAINT ... CHECK (...) NOT VALID`: enforced
    /// for new rows at once, existing rows checked by the next step.
    AddCheck {
        /// The constraint's name.
        constraint: String,
        /// `CHECK (...)`, as `pg_get_constraintdef` reports it.
        definition: String,
    },
    /// `ALTER TABLE ... VALIDATE CONSTRAINT`: scans under `SHARE UPDATE
    /// EXCLUSIVE`, writers keep going.
    ValidateConstraint {
        /// The constraint's name.
        constraint: String,
    },
    /// `ALTER TABLE ... DROP CONSTRAINT`.
    DropConstraint {
        /// The constraint's name.
        constraint: String,
    },
    /// `DROP TABLE`.
    DropTable,
}

/// One step of an upgrade.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// The version the step moves the database to.
    pub version: u32,
    /// Its phase.
    pub phase: Phase,
    /// The engine table it changes or creates.
    pub table: String,
    /// What it does.
    #[serde(flatten)]
    pub action: Action,
}

impl Step {
    /// How the step runs: the strongest lock it takes on an existing engine
    /// table, and how it waits for it. The one place both are decided.
    pub fn execution(&self) -> Execution {
        use TableLock::{AccessExclusive, ShareUpdateExclusive};
        let (lock, wait) = match &self.action {
            Action::CreateTable => (TableLock::None, Wait::Brief),
            Action::SetStorageParameters { .. }
            | Action::Comment { .. }
            | Action::SwapIndex { .. } => (ShareUpdateExclusive, Wait::Brief),
            // Blocks no engine statement while it waits or scans.
            Action::CreateIndex { .. }
            | Action::DropIndex { .. }
            | Action::ValidateConstraint { .. } => (ShareUpdateExclusive, Wait::Long),
            // The batches take ROW EXCLUSIVE; the vacuum after them SHARE
            // UPDATE EXCLUSIVE.
            Action::Backfill { .. } => (ShareUpdateExclusive, Wait::Batches),
            Action::AddColumn { .. }
            | Action::DropNotNull { .. }
            | Action::DropDefault { .. }
            | Action::DropColumn { .. }
            | Action::AddCheck { .. }
            | Action::DropConstraint { .. }
            | Action::DropTable => (AccessExclusive, Wait::Brief),
        };
        Execution { lock, wait }
    }

    /// The strongest lock the step takes on an existing engine table
    /// ([`Step::execution`]).
    pub fn lock(&self) -> TableLock {
        self.execution().lock
    }

    /// What the step does, in words: `jobs: add column ready (boolean NOT
    /// NULL, false until the contract)`.
    pub fn describe(&self) -> String {
        let table = &self.table;
        match &self.action {
            Action::CreateTable => format!("create table {table}"),
            Action::AddColumn {
                column,
                transitional_default,
            } => format!(
                "{table}: add column {} ({}{}{})",
                column.name,
                column.sql_type,
                if column.nullable { "" } else { " NOT NULL" },
                transitional_default
                    .as_ref()
                    .map(|d| format!(", {d} until the contract"))
                    .unwrap_or_default()
            ),
            Action::DropNotNull { column } => {
                format!("{table}: let {column} be NULL (the new release does not write it)")
            }
            Action::DropDefault { column } => {
                format!("{table}: drop the transitional default of {column}")
            }
            Action::DropColumn { column } => format!("{table}: drop column {column}"),
            Action::SetStorageParameters { parameters, reset } => {
                let mut words = Vec::new();
                if !parameters.is_empty() {
                    words.push(format!("set {}", parameters.join(", ")));
                }
                if !reset.is_empty() {
                    words.push(format!("reset {}", reset.join(", ")));
                }
                format!("{table}: storage parameters: {}", words.join("; "))
            }
            Action::Comment { column: None, .. } => format!("{table}: comment"),
            Action::Comment {
                column: Some(column),
                ..
            } => format!("{table}.{column}: comment"),
            Action::Backfill { backfill } => format!(
                "{table}: backfill {} = {} in batches",
                backfill.set,
                backfill.value.sql()
            ),
            Action::CreateIndex { index, .. } => {
                format!("{table}: create index {index} concurrently")
            }
            Action::SwapIndex {
                index,
                replacement,
                legacy,
            } => format!(
                "{table}: swap in the new {index} (rename {index} to {legacy}, kept until the \
                 contract, and {replacement} to {index})"
            ),
            Action::DropIndex { index } => format!("{table}: drop index {index} concurrently"),
            Action::AddCheck { constraint, .. } => {
                format!("{table}: add check {constraint} NOT VALID")
            }
            Action::ValidateConstraint { constraint } => {
                format!("{table}: validate {constraint}")
            }
            Action::DropConstraint { constraint } => {
                format!("{table}: drop constraint {constraint}")
            }
            Action::DropTable => format!("drop table {table}"),
        }
    }
}

/// How a step runs, derived once from its action ([`Step::execution`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Execution {
    /// The strongest lock it takes on an existing engine table.
    pub lock: TableLock,
    /// How it waits for that lock.
    pub wait: Wait,
}

/// How a step waits for its lock, which decides its bounds (the upgrade's
/// options turn each into a `lock_timeout` and a `statement_timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Wait {
    /// One transaction whose lock wait queues the engine's statements on the
    /// table behind it: first it waits, without queueing, for sessions that
    /// hold a lock stronger than the engine's to go; then it waits at most
    /// the lock bound, backs off and tries again.
    Brief,
    /// A statement that blocks no engine statement while it waits (`CREATE
    /// INDEX CONCURRENTLY`, `VALIDATE CONSTRAINT`): it may wait long, once.
    Long,
    /// A backfill: one short transaction per window of keys, each waiting
    /// at most the lock bound and tried again; the vacuum after them waits
    /// long.
    Batches,
}
