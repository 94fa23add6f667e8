//! The connection rules written after libpq (`schema_gen::connect`: the
//! connection string, the `PG*` variables, the password file and its
//! permission rule, `sslmode`) compared with psql on the same inputs, on the
//! same machine: each case runs `psql -w -Atc QUERY` with exactly the case's
//! environment (and home directory), and connects through
//! `ConnectOptions::resolve` + `connect` with the same, then compares who,
//! where and whether over TLS, or that both refused.
//!
//! The servers: the TLS-only one of `harness::tls` and the shared cluster
//! (TLS off, trust). The table of outcomes is printed (`--nocapture`).

mod defaults;
mod rules;

use std::path::{Path, PathBuf};
use std::process::Command;

use harness::tls::{tls_server, write_file};
use schema_gen::connect::{ConnectOptions, Environment};

const QUERY: &str = "SELECT current_user, current_database(), inet_server_port(), \
                     (SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid())";

/// One input: a connection string (maybe empty), variables, a home directory.
struct Case {
    name: &'static str,
    conninfo: String,
    vars: Vec<(&'static str, String)>,
    home: PathBuf,
}

/// `user|db|port|ssl` as psql -At prints it, or `refused`.
fn via_psql(case: &Case) -> String {
    via_psql_at(case, &tls_server().psql_bin())
}

/// [`via_psql`] with the psql binary at `psql`.
fn via_psql_at(case: &Case, psql: &Path) -> String {
    let mut cmd = Command::new(psql);
    cmd.env_clear()
        .env("HOME", &case.home)
        .envs(case.vars.iter().map(|(k, v)| (k, v)))
        .args(["-X", "-w", "-At", "-c", QUERY]);
    if !case.conninfo.is_empty() {
        cmd.args(["-d", &case.conninfo]);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{}: running psql: {e}", case.name));
    if out.status.success() {
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    } else {
        "refused".to_owned()
    }
}

/// The same through schema-gen's connection rules.
fn via_schema_gen(case: &Case, os_user: &str) -> String {
    let mut env = Environment::new()
        .with_home(&case.home)
        .with_os_user(os_user);
    for (k, v) in &case.vars {
        env = env.with_var(k, v);
    }
    let Ok(options) = ConnectOptions::resolve(&case.conninfo, &env) else {
        return "refused".to_owned();
    };
    let runtime = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("runtime: {e}"));
    runtime.block_on(async {
        let Ok(client) = options.connect().await else {
            return "refused".to_owned();
        };
        let row = client
            .query_one(QUERY, &[])
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let port: Option<i32> = row.get(2);
        let ssl: Option<bool> = row.get(3);
        format!(
            "{}|{}|{}|{}",
            row.get::<_, String>(0),
            row.get::<_, String>(1),
            port.map(|p| p.to_string()).unwrap_or_default(),
            match ssl {
                Some(true) => "t",
                Some(false) => "f",
                None => "",
            }
        )
    })
}

fn os_user() -> String {
    let out = Command::new("id")
        .arg("-un")
        .output()
        .unwrap_or_else(|e| panic!("id -un: {e}"));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn home(name: &str) -> PathBuf {
    let dir = tls_server().scratch_dir().join(format!("conninfo-{name}"));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// A home directory whose `~/.pgpass` holds `contents`, with mode `mode`.
fn home_with_pgpass(name: &str, contents: &str, mode: u32) -> PathBuf {
    let dir = home(name);
    write_file(&dir.join(".pgpass"), contents, mode);
    dir
}
