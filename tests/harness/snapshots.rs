//! insta settings shared by every snapshot test: all snapshots live in the
//! top-level `snapshots/` folder, named by the test alone, so reviewers find
//! every generated artefact in one place.

/// The top-level `snapshots/` folder.
pub const SNAPSHOT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../snapshots");

/// Settings that write snapshots to [`SNAPSHOT_DIR`] without a module prefix.
pub fn settings() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(SNAPSHOT_DIR);
    settings.set_prepend_module_to_snapshot(false);
    settings
}
