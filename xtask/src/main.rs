//! `cargo xtask ship-version`: the release steps of a schema version, so
//! that shipping one is a command and a handful of reviewed files (the
//! recipe is in `schema_model::history`'s docs).
//!
//! It freezes the model as the version it is (`MODEL_VERSION`, say N):
//!
//! 1. writes `schema-model/history/vN/{schema.sql, describe.json,
//!    statements.json}` from this build's `schema-gen sql`, `describe
//!    --format json` and `statements --format json`;
//! 2. lists version N as shipped in `schema-model/src/history/mod.rs`
//!    (`shipped!(N, "<release>")`), which makes the model version N + 1,
//!    and pins its three files (the pin test's line);
//! 3. starts version N + 1's hints (`schema-model/src/history/vN+1.rs`,
//!    registered in the same file);
//! 4. bumps the workspace's release (minor) in `Cargo.toml` and lets cargo
//!    update `Cargo.lock`.
//!
//! Then change the model, declare the new version's hints, run the tests
//! and review the snapshot diffs. `--root DIR` works on another checkout;
//! `--no-lock` leaves `Cargo.lock` alone.

mod ship;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut root = manifest_dir.parent().unwrap_or(&manifest_dir).to_owned();
    let mut lock = true;
    let mut command = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--root" => match rest.next() {
                Some(dir) => root = PathBuf::from(dir),
                None => return usage("--root needs a directory"),
            },
            "--no-lock" => lock = false,
            "ship-version" if command.is_none() => command = Some(arg.as_str()),
            other => return usage(&format!("unknown argument `{other}`")),
        }
    }
    if command.is_none() {
        return usage("no command");
    }
    let texts = match ship::Texts::of_this_build() {
        Ok(texts) => texts,
        Err(err) => return fail(&err),
    };
    match ship::ship(&root, &texts) {
        Ok(touched) => {
            println!(
                "froze the model as version {}; the model is now version {}:",
                texts.number,
                texts.number + 1
            );
            for file in touched {
                println!("  {}", file.display());
            }
        }
        Err(err) => return fail(&err),
    }
    if lock {
        let updated = std::process::Command::new(env!("CARGO"))
            .args(["update", "--workspace", "--offline"])
            .current_dir(&root)
            .status();
        match updated {
            Ok(status) if status.success() => println!("  Cargo.lock"),
            Ok(status) => return fail(&format!("cargo update --workspace: {status}")),
            Err(err) => return fail(&format!("cargo update --workspace: {err}")),
        }
    }
    println!(
        "next: change the model, declare version {}'s hints in its file, run `cargo test \
         --workspace` and review the snapshot diffs",
        texts.number + 1
    );
    ExitCode::SUCCESS
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("xtask: {problem}\nusage: cargo xtask ship-version [--root DIR] [--no-lock]");
    ExitCode::from(2)
}

fn fail(problem: &str) -> ExitCode {
    eprintln!("xtask: {problem}");
    ExitCode::FAILURE
}
