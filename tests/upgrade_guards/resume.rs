//! An upgrade or a contract stopped after any step completes when run again.

use super::*;

/// Runs `phase` again and again, ending the upgrader's session right after
/// each step is done (before the next is looked at, or the phase recorded),
/// until a run completes; returns how many runs were stopped.
async fn stop_after_each_step(client: &Client, schema: &SchemaName, contract: bool) -> usize {
    let mut stopped = 0;
    // Each step is stopped after once (a backfill runs again on every run).
    let stopped_after: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    // The steps done in an earlier run, and those a later run started again
    // instead of finding them done (a backfill always runs again).
    let finished: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let again: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    loop {
        let mut upgrader = harness::connect().await;
        let pid = backend_pid(&upgrader).await;
        let side = SideSession::start();
        let mut ended = false;
        let stopped_after = stopped_after.clone();
        let (finished, again_now) = (finished.clone(), again.clone());
        let mut progress = move |event: &Progress| {
            if let Progress::StepStarted { step, .. } = event
                && !matches!(step.action, Action::Backfill { .. })
                && finished.lock().is_ok_and(|f| f.contains(&step.describe()))
                && let Ok(mut again) = again_now.lock()
            {
                again.push(step.describe());
            }
            let Progress::StepDone { step, .. } = event else {
                return;
            };
            if let Ok(mut finished) = finished.lock() {
                finished.push(step.describe());
            }
            let Ok(mut stopped_after) = stopped_after.lock() else {
                return;
            };
            if !ended && !stopped_after.contains(&step.describe()) {
                ended = true;
                stopped_after.push(step.describe());
                side.exec(&format!("SELECT pg_terminate_backend({pid}, 10000)"));
            }
        };
        let options = short();
        let run = async {
            if contract {
                upgrade::contract(&mut upgrader, schema, &options, &mut progress).await
            } else {
                upgrade::upgrade(&mut upgrader, schema, &options, &mut progress).await
            }
        };
        match within(RUN_LIMIT, "a run stopped after a step", run).await {
            Ok(_) => {
                let again = again.lock().map(|a| a.clone()).unwrap_or_default();
                assert!(
                    again.is_empty(),
                    "a rerun ran again steps the catalog shows done: {again:?}"
                );
                return stopped;
            }
            Err(err) => {
                stopped += 1;
                let found = status(client, schema).await;
                let expected = if contract {
                    VersionState::ContractPending
                } else {
                    VersionState::Upgrading
                };
                assert_eq!(
                    found.state, expected,
                    "after {stopped} stops: {}",
                    found.message
                );
                assert!(stopped < 20, "no end in sight: {err}; {}", found.message);
            }
        }
    }
}

/// An upgrade (and a contract) stopped right after any of its steps, with
/// the step done but not recorded, completes when run again: each rerun
/// finds the steps done so far in the catalog and skips them (a swap or a
/// check added once must not be tried twice), keeping every row.
#[tokio::test]
async fn an_upgrade_stopped_after_any_step_completes_when_run_again() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = version_1(&client, "upg_each_step").await;
    let before = dump_rows(&client, &schema).await;
    let expand_steps = stop_after_each_step(&client, &schema, false).await;
    assert!(expand_steps >= 6, "{expand_steps}");
    let found = status(&client, &schema).await;
    assert_eq!(
        found.state,
        VersionState::ContractPending,
        "{}",
        found.message
    );
    assert!(found.passes(), "{:?}", found.differences);
    ready_is_derived_from_run_at(&client, &schema, false).await;
    let contract_steps = stop_after_each_step(&client, &schema, true).await;
    assert!(contract_steps >= 5, "{contract_steps}");
    let found = status(&client, &schema).await;
    assert_eq!(found.state, VersionState::Current, "{}", found.message);
    assert!(found.passes(), "{:?}", found.differences);
    ready_is_derived_from_run_at(&client, &schema, true).await;
    assert_eq!(
        restricted(&before, &dump_rows(&client, &schema).await),
        before
    );
}
