//! Benchmark: bootstrap of a fresh schema, bootstrap at steady state, and the
//! plain idempotent script run again, in one run against the harness's
//! throwaway cluster (or `ALKSTORE_TEST_DATABASE_URL`).
//!
//! ```text
//! cargo bench -p alkstore-schema-tests --bench bootstrap
//! ```
//!
//! Round trips are counted on the wire by `harness::wire::CountingProxy`
//! (frontend `Query` and `Sync` messages); timings are taken on direct
//! connections, without the proxy. Without `--bench` (as under
//! `cargo test --benches`) it runs a few rounds only, as a smoke test.

use std::time::{Duration, Instant};

use schema_gen::render;
use schema_gen::{Outcome, bootstrap};
use schema_model::SchemaName;
use tokio_postgres::Client;

struct Rounds {
    fresh: usize,
    steady: usize,
    script: usize,
    under_load: bool,
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let rounds = if full {
        Rounds {
            fresh: 30,
            steady: 500,
            script: 50,
            under_load: true,
        }
    } else {
        Rounds {
            fresh: 2,
            steady: 5,
            script: 2,
            under_load: false,
        }
    };
    if harness::skip_db_tests() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    runtime.block_on(run(&rounds));
}

/// Median, 10th and 90th percentile of `samples`.
fn summary(samples: &mut [Duration]) -> (Duration, Duration, Duration) {
    samples.sort();
    let at = |q: f64| {
        let index = ((samples.len() - 1) as f64 * q).round() as usize;
        samples[index]
    };
    (at(0.5), at(0.1), at(0.9))
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

async fn run(rounds: &Rounds) {
    let url = harness::database_url();
    let mut client = harness::connect().await;
    let version: String = client
        .query_one("SHOW server_version", &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .get(0);
    let mut made = Vec::new();

    // Round trips, on the wire.
    let proxy = harness::wire::CountingProxy::start(&url).await;
    let mut counted = proxy.connect(&url).await;
    let fresh = harness::unique_schema_name("bench_rt");
    proxy.reset();
    expect_created(bootstrap(&mut counted, &fresh).await);
    let fresh_trips = proxy.round_trips();
    proxy.reset();
    expect_current(bootstrap(&mut counted, &fresh).await);
    let steady_trips = proxy.round_trips();
    proxy.reset();
    run_script(&counted, &fresh).await;
    let script_trips = proxy.round_trips();
    let psql_trips = psql_round_trips(&proxy, &fresh).await;
    made.push(fresh);

    // Timings, on a direct connection.
    let mut fresh_times = Vec::new();
    for _ in 0..rounds.fresh {
        let s = harness::unique_schema_name("bench_fresh");
        let started = Instant::now();
        expect_created(bootstrap(&mut client, &s).await);
        fresh_times.push(started.elapsed());
        made.push(s);
    }
    let steady = harness::unique_schema_name("bench_steady");
    expect_created(bootstrap(&mut client, &steady).await);
    let mut steady_times = Vec::new();
    for _ in 0..rounds.steady {
        let started = Instant::now();
        expect_current(bootstrap(&mut client, &steady).await);
        steady_times.push(started.elapsed());
    }
    let mut script_times = Vec::new();
    for _ in 0..rounds.script {
        let started = Instant::now();
        run_script(&client, &steady).await;
        script_times.push(started.elapsed());
    }

    let (fresh_median, fresh_p10, fresh_p90) = summary(&mut fresh_times);
    let (steady_median, steady_p10, steady_p90) = summary(&mut steady_times);
    let (script_median, script_p10, script_p90) = summary(&mut script_times);
    let ratio = |d: Duration| d.as_secs_f64() / steady_median.as_secs_f64();

    println!(
        "\nalkstore-schema bootstrap benchmark (PostgreSQL {version}, {} mode)\n",
        if rounds.under_load { "full" } else { "quick" }
    );
    println!("| case | runs | round trips | median | p10 .. p90 | median / steady-state median |");
    println!("|---|---:|---:|---:|---|---:|");
    println!(
        "| bootstrap, fresh schema | {} | {fresh_trips} | {} | {} .. {} | {:.1}x |",
        fresh_times.len(),
        ms(fresh_median),
        ms(fresh_p10),
        ms(fresh_p90),
        ratio(fresh_median)
    );
    println!(
        "| bootstrap, steady state | {} | {steady_trips} | {} | {} .. {} | 1.0x |",
        steady_times.len(),
        ms(steady_median),
        ms(steady_p10),
        ms(steady_p90),
    );
    println!(
        "| idempotent script again (one batch) | {} | {script_trips} | {} | {} .. {} | {:.1}x |",
        script_times.len(),
        ms(script_median),
        ms(script_p10),
        ms(script_p90),
        ratio(script_median)
    );
    println!(
        "\nThe same script through `psql -f` (one statement at a time): {psql_trips} round trips."
    );

    if rounds.under_load {
        under_load(&mut client, &steady).await;
    }

    for s in made.iter().chain([&steady]) {
        let _ = client
            .batch_execute(&format!("DROP SCHEMA {s} CASCADE"))
            .await;
    }
}

/// One open write transaction on `jobs`: steady-state bootstrap against the
/// script, each with the script's own `lock_timeout`.
async fn under_load(client: &mut Client, schema: &SchemaName) {
    let writer = harness::connect().await;
    writer
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE {schema}.jobs IN ROW EXCLUSIVE MODE;"
        ))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    expect_current(bootstrap(client, schema).await);
    let steady = started.elapsed();
    let started = Instant::now();
    let script = client.batch_execute(&render::script(schema)).await;
    let waited = started.elapsed();
    let _ = writer.batch_execute("ROLLBACK").await;
    // A failed script leaves its transaction open (aborted) on `client`.
    let _ = client.batch_execute("ROLLBACK").await;
    let script = match script {
        Ok(()) => "completed".to_owned(),
        Err(e) => format!(
            "failed: {}",
            e.as_db_error()
                .map_or_else(|| e.to_string(), |d| d.message().to_owned())
        ),
    };
    println!(
        "\nWith one open write transaction on jobs: steady-state bootstrap {}; the script \
         {script} after {:.2} s (lock_timeout {}).",
        ms(steady),
        waited.as_secs_f64(),
        schema_gen::Options::default().lock_timeout_setting()
    );

    // A VACUUM FULL or ALTER TABLE in progress: the open gives up within its
    // bound, the time it takes to say who holds the lock included.
    writer
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE {schema}.jobs IN ACCESS EXCLUSIVE MODE;"
        ))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let bound = schema_gen::Options {
        lock_timeout: Duration::from_millis(300),
        ..schema_gen::Options::default()
    };
    let started = Instant::now();
    let blocked = schema_gen::bootstrap_with(client, schema, &bound).await;
    let gave_up = started.elapsed();
    let _ = writer.batch_execute("ROLLBACK").await;
    let blocked = match blocked {
        Err(e) if matches!(e.kind(), schema_gen::ErrorKind::LockTimeout { .. }) => {
            "a lock timeout naming the holder".to_owned()
        }
        other => format!("{other:?}"),
    };
    println!(
        "With ACCESS EXCLUSIVE held on jobs: steady-state bootstrap with lock_timeout 300ms \
         returned {blocked} after {}.",
        ms(gave_up)
    );
}

async fn run_script(client: &Client, schema: &SchemaName) {
    client
        .batch_execute(&render::script(schema))
        .await
        .unwrap_or_else(|e| panic!("the idempotent script failed: {e}"));
}

/// Runs the script with `psql -f -` through the proxy and counts its round trips.
async fn psql_round_trips(proxy: &harness::wire::CountingProxy, schema: &SchemaName) -> usize {
    let url = proxy.url(&harness::database_url());
    let script = render::script(schema);
    proxy.reset();
    let out = tokio::task::spawn_blocking(move || harness::psql_script(&url, &script))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "psql failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    proxy.round_trips()
}

fn expect_created(result: Result<Outcome, schema_gen::Error>) {
    match result {
        Ok(outcome) if outcome.created() => {}
        other => panic!("expected a creating bootstrap, got {other:?}"),
    }
}

fn expect_current(result: Result<Outcome, schema_gen::Error>) {
    match result {
        Ok(outcome) if !outcome.created() => {}
        other => panic!("expected a steady-state bootstrap, got {other:?}"),
    }
}
