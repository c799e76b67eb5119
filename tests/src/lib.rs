//! Helpers for the end-to-end tests in `tests/`: the built binaries and generated fixture models;
//! `bench` holds what the benches in `benches/` share.

pub mod bench;
pub mod server;

use std::path::{Path, PathBuf};

use corral_fixture::{Arch, Dtype, FixtureOptions, Size};

/// A binary of this workspace, next to the test executable's `deps/` directory.
/// `cargo xtask test` builds every binary before the tests run.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable is in target/<profile>/deps");
    let path = profile_dir.join(name);
    assert!(
        path.exists(),
        "{} is not built; run the tests with `cargo xtask test`",
        path.display()
    );
    path
}

/// A tiny fixture model in a fresh temporary directory (removed when the guard drops).
pub fn tiny_model(arch: Arch) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    let options = FixtureOptions {
        size: Size::Tiny,
        arch,
        dtype: Dtype::F32,
        quantize: None,
    };
    corral_fixture::generate(&options, dir.path()).expect("generating the fixture");
    dir
}
