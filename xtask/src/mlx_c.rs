//! mlx-c built from the sources inside the mlx-sys crate, against the wheel's MLX, and the Rust
//! bindings generated from its headers.
//!
//! Outputs live in a directory keyed by the mlx-sys version and the compatibility header, so a
//! change to either builds anew instead of reusing a stale archive.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::paths::Paths;
use crate::wheel::{Wheel, path_str};

const COMPAT_HEADER: &str = include_str!("../mlx_linux_compat.h");

pub struct MlxSysSource {
    pub version: String,
    pub mlx_c_root: PathBuf,
    /// The MLX release mlx-c fetches on macOS (`GIT_TAG vX.Y.Z` in its CMakeLists.txt).
    pub mlx_version: String,
}

pub struct BuiltMlxC {
    /// Holds `libmlxc.a`.
    pub lib_dir: PathBuf,
    /// Holds `bindings.rs`, mlx-sys's `OUT_DIR`.
    pub bindings_dir: PathBuf,
}

impl MlxSysSource {
    /// Finds the mlx-sys crate that the workspace's lock file resolves to.
    pub fn locate(paths: &Paths) -> Result<Self> {
        let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .args(["metadata", "--format-version", "1"])
            .current_dir(&paths.root)
            .output()
            .context("running cargo metadata")?;
        if !output.status.success() {
            bail!(
                "cargo metadata failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let metadata: serde_json::Value =
            serde_json::from_slice(&output.stdout).context("parsing cargo metadata")?;
        let package = metadata["packages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|package| package["name"] == "mlx-sys")
            .context("mlx-sys is not in the dependency graph")?;
        let version = package["version"].as_str().unwrap_or_default().to_owned();
        let manifest = package["manifest_path"]
            .as_str()
            .context("mlx-sys has no manifest path")?;
        let mlx_c_root = Path::new(manifest)
            .parent()
            .context("mlx-sys manifest has no directory")?
            .join("src")
            .join("mlx-c");
        let cmake_lists = mlx_c_root.join("CMakeLists.txt");
        let cmake = std::fs::read_to_string(&cmake_lists)
            .with_context(|| format!("reading {}", cmake_lists.display()))?;
        let mlx_version = cmake
            .lines()
            .find_map(|line| line.trim().strip_prefix("GIT_TAG v"))
            .map(|tag| tag.trim_end_matches(')').trim().to_owned())
            .with_context(|| format!("no `GIT_TAG v...` in {}", cmake_lists.display()))?;
        Ok(Self {
            version,
            mlx_c_root,
            mlx_version,
        })
    }
}

pub fn ensure_built(paths: &Paths, source: &MlxSysSource, wheel: &Wheel) -> Result<BuiltMlxC> {
    let key = format!("mlx-sys-{}-{:016x}", source.version, fnv1a(COMPAT_HEADER));
    let out = paths.mlx.join(key);
    let built = BuiltMlxC {
        lib_dir: out.join("lib"),
        bindings_dir: out.join("bindings"),
    };
    let header = out.join("mlx_linux_compat.h");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    std::fs::write(&header, COMPAT_HEADER)
        .with_context(|| format!("writing {}", header.display()))?;
    if !built.lib_dir.join("libmlxc.a").exists() {
        build_mlx_c(source, wheel, &header, &out.join("cmake"), &built.lib_dir)?;
    }
    if !built.bindings_dir.join("bindings.rs").exists() {
        generate_bindings(source, &header, &built.bindings_dir)?;
    }
    Ok(built)
}

fn build_mlx_c(
    source: &MlxSysSource,
    wheel: &Wheel,
    header: &Path,
    build_dir: &Path,
    lib_dir: &Path,
) -> Result<()> {
    eprintln!("xtask: building mlx-c {} (about a minute)", source.version);
    let jobs = std::thread::available_parallelism().map_or(2, usize::from);
    run(Command::new("cmake")
        .arg("-S")
        .arg(&source.mlx_c_root)
        .arg("-B")
        .arg(build_dir)
        .arg("-DCMAKE_BUILD_TYPE=Release")
        .arg("-DMLX_C_USE_SYSTEM_MLX=ON")
        .arg("-DMLX_C_BUILD_EXAMPLES=OFF")
        .arg("-DCMAKE_POSITION_INDEPENDENT_CODE=ON")
        .arg(format!("-DMLX_DIR={}", path_str(&wheel.cmake_dir())?))
        .arg(format!("-DCMAKE_CXX_FLAGS=-include {}", path_str(header)?)))?;
    run(Command::new("cmake")
        .arg("--build")
        .arg(build_dir)
        .arg("--parallel")
        .arg(jobs.to_string()))?;
    let archive = build_dir.join("libmlxc.a");
    if !archive.exists() {
        bail!("the mlx-c build left no {}", archive.display());
    }
    std::fs::create_dir_all(lib_dir).with_context(|| format!("creating {}", lib_dir.display()))?;
    std::fs::copy(&archive, lib_dir.join("libmlxc.a"))
        .with_context(|| format!("copying {}", archive.display()))?;
    Ok(())
}

/// Mirrors mlx-sys's own bindgen configuration, plus the compatibility header.
fn generate_bindings(source: &MlxSysSource, header: &Path, out: &Path) -> Result<()> {
    eprintln!("xtask: generating mlx-c bindings");
    let header_dir = source.mlx_c_root.join("mlx").join("c");
    let mut headers: Vec<PathBuf> = std::fs::read_dir(&header_dir)
        .with_context(|| format!("reading {}", header_dir.display()))?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "h"))
        .collect();
    headers.sort();
    let builder = bindgen::Builder::default()
        .rust_target(
            "1.73.0"
                .parse()
                .map_err(|error| anyhow::anyhow!("bindgen rust target: {error:?}"))?,
        )
        .clang_arg(format!("-I{}", path_str(&source.mlx_c_root)?))
        .clang_arg("-include")
        .clang_arg(path_str(header)?)
        .blocklist_function("malloc")
        .blocklist_function("realloc");
    let builder = headers.iter().try_fold(builder, |builder, header| {
        Ok::<_, anyhow::Error>(builder.header(path_str(header)?))
    })?;
    let bindings = builder
        .generate()
        .map_err(|error| anyhow::anyhow!("bindgen over {}: {error}", header_dir.display()))?
        .to_string();
    // mlx-rs reads a float16_t's bits with `.0`, as it gets on macOS where it wraps `__fp16`.
    // On aarch64 half.h declares the real `__fp16` type, which bindgen already wraps that way.
    let float16 = "pub type float16_t = u16;";
    if cfg!(target_arch = "x86_64") && !bindings.contains(float16) {
        bail!("bindgen output has no `{float16}`; the compatibility header did not apply");
    }
    let bindings = bindings.replace(
        float16,
        "#[repr(transparent)]\n#[derive(Debug, Default, Copy, Clone, PartialEq)]\npub struct float16_t(pub u16);",
    );
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let staging = out.join("bindings.rs.tmp");
    std::fs::write(&staging, bindings).with_context(|| format!("writing {}", staging.display()))?;
    std::fs::rename(&staging, out.join("bindings.rs"))
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

fn run(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed with {status}");
    }
    Ok(())
}

/// A stable content hash for the output key (std's hasher may change between Rust releases).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
