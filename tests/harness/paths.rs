//! Where the tests keep what they build or download outside the repository's
//! sources: under the cargo target directory, wherever it is.

use std::path::{Path, PathBuf};

/// The cargo target directory this test binary was built into: the nearest
/// ancestor of the running executable (`<target>/debug/deps/NAME-HASH`, or
/// `<target>/<triple>/debug/deps/...`) that holds cargo's `CACHEDIR.TAG`, so
/// `CARGO_TARGET_DIR`, `--target-dir` and `build.target-dir` are all
/// honoured; else `CARGO_TARGET_DIR`; else the workspace's `target/`.
pub fn cargo_target_dir() -> PathBuf {
    let from_exe = std::env::current_exe().ok().and_then(|exe| {
        exe.ancestors()
            .skip(1)
            .find(|dir| dir.join("CACHEDIR.TAG").is_file())
            .map(Path::to_path_buf)
    });
    from_exe
        .or_else(|| std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from))
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .unwrap_or(Path::new(env!("CARGO_MANIFEST_DIR")))
                .join("target")
        })
}
