//! The cargo configuration that replaces mlx-sys's build script on Linux (`links = "mlx"`).

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::mlx_c::BuiltMlxC;
use crate::paths::{Paths, rust_target};
use crate::system_packages::openblas_library;
use crate::wheel::{Wheel, path_str};

pub fn write(paths: &Paths, wheel: &Wheel, built: &BuiltMlxC) -> Result<PathBuf> {
    let target = rust_target();
    let lib_dir = path_str(&built.lib_dir)?;
    let wheel_lib = wheel.lib_dir();
    let wheel_lib = path_str(&wheel_lib)?;
    let bindings = path_str(&built.bindings_dir)?;
    let openblas = openblas_library();
    // The worker's build script reads the [env] values: it links OpenBLAS ahead of the wheel's
    // reference BLAS and sets the rpath, on the worker's binaries only (the supervisor never links
    // MLX, and link arguments of a dependency do not reach its dependents anyway).
    let openblas = path_str(&openblas)?;
    let config = format!(
        r#"# Written by `cargo xtask setup`; do not edit.
[target.{target}.mlx]
rustc-link-lib = ["static=mlxc", "dylib=mlx", "dylib=stdc++"]
rustc-link-search = ["native={lib_dir}", "native={wheel_lib}"]
rustc-env = {{ OUT_DIR = "{bindings}" }}

[env]
CORRAL_MLX_LIB_DIR = "{wheel_lib}"
CORRAL_OPENBLAS = "{openblas}"
"#
    );
    let file = paths.mlx.join("cargo-config.toml");
    let unchanged = std::fs::read_to_string(&file).is_ok_and(|old| old == config);
    if !unchanged {
        std::fs::write(&file, config).with_context(|| format!("writing {}", file.display()))?;
    }
    Ok(file)
}
