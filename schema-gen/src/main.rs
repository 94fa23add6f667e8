//! The `schema-gen` binary: a thin shell over [`schema_gen::cli::run`].

use std::process::ExitCode;

fn main() -> ExitCode {
    schema_gen::cli::run(
        std::env::args_os(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )
}
