//! SmolLM2-135M-Instruct as llama.cpp's own quantizer writes it for the recipes people download
//! (`Q4_K_M`, `Q5_K_M`, `Q6_K`), made from the Q4_1 test model into `build/models/`.
//!
//! Only package registries are reachable from CI, so llama.cpp comes from the sdist of
//! llama-cpp-python on PyPI (the version the reference step pins, by sha256), and only its
//! `llama-quantize` is built. The quantizer's reference C code decides every output byte; the
//! build keeps that code from being compiled differently from machine to machine (no `-march`,
//! no fused multiply-adds, which GCC contracts by default on arm64), and each output is pinned by
//! sha256. As for the Q4_1 model, a file only appears by a rename after its hash matched, so later
//! runs check sizes alone.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::paths::Paths;
use crate::sha256;
use crate::wheel::{fetch_once, path_str, python};

const SDIST_URL: &str = "https://files.pythonhosted.org/packages/ec/e9/\
    e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz";
const SDIST_SHA256: &str = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e";
const SOURCE_DIR: &str = "llama_cpp_python-0.3.36/vendor/llama.cpp";

/// One output: llama-quantize's type name, the file, its size and sha256.
pub struct Recipe {
    pub name: &'static str,
    pub file: &'static str,
    size: u64,
    sha256: &'static str,
}

pub const RECIPES: [Recipe; 3] = [
    Recipe {
        name: "Q4_K_M",
        file: "SmolLM2-135M-Instruct.Q4_K_M.gguf",
        size: 105_454_144,
        sha256: "dc0f3a02e821146247a0af6895adf9872124f368682cb110cb9ed09ff2a9f9f1",
    },
    Recipe {
        name: "Q5_K_M",
        file: "SmolLM2-135M-Instruct.Q5_K_M.gguf",
        size: 112_103_488,
        sha256: "8170c7ef444692b3b2fe63459c326def0358807ef9be6e3cb020efb86a71015e",
    },
    Recipe {
        name: "Q6_K",
        file: "SmolLM2-135M-Instruct.Q6_K.gguf",
        size: 138_382_912,
        sha256: "a969ae2086dd4945a7c61594bf72b2bcc3b7df8571c92aed8f213918673a7f80",
    },
];

/// Makes sure every recipe's file is in place, quantizing from `source` (the Q4_1 model) what is
/// missing; returns their paths in [`RECIPES`] order.
pub fn ensure(paths: &Paths, source: &Path) -> Result<Vec<PathBuf>> {
    let models = source.parent().context("the model path has no parent")?;
    let mut files = Vec::with_capacity(RECIPES.len());
    for recipe in &RECIPES {
        let path = models.join(recipe.file);
        let expected = recipe.size;
        fetch_once(
            &path,
            |path| has_size(path, expected),
            |models, path| quantize(paths, models, source, recipe, path),
        )?;
        files.push(path);
    }
    Ok(files)
}

fn has_size(path: &Path, expected: u64) -> Result<bool> {
    match std::fs::metadata(path) {
        Ok(metadata) => Ok(metadata.len() == expected),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error).with_context(|| format!("reading {}", path.display())),
    }
}

/// Quantizes `source` by `recipe` into a scratch file, checks its hash and renames it to `out`.
fn quantize(
    paths: &Paths,
    models: &Path,
    source: &Path,
    recipe: &Recipe,
    out: &Path,
) -> Result<()> {
    let tool = built_tool(paths)?;
    let scratch = models.join(format!("{}.partial", recipe.file));
    eprintln!(
        "xtask: quantizing SmolLM2-135M-Instruct to {} with llama.cpp",
        recipe.name
    );
    let output = Command::new(&tool)
        .arg("--allow-requantize")
        .arg(source)
        .arg(&scratch)
        .arg(recipe.name)
        .arg(
            std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .to_string(),
        )
        .output()
        .with_context(|| format!("running {}", tool.display()))?;
    if !output.status.success() {
        bail!(
            "{} failed with {}: {}",
            tool.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    sha256::verify(&scratch, recipe.sha256)?;
    std::fs::rename(&scratch, out).with_context(|| format!("moving the model to {}", out.display()))
}

/// Builds `llama-quantize` once into `build/llama-quantize/`, from the pinned sdist.
fn built_tool(paths: &Paths) -> Result<PathBuf> {
    let work = paths.root.join("build/llama-quantize");
    let tool = work.join("build/bin/llama-quantize");
    if tool.exists() {
        return Ok(tool);
    }
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let sdist = work.join("llama_cpp_python-0.3.36.tar.gz");
    eprintln!("xtask: downloading llama-cpp-python 0.3.36's sources (llama.cpp, 77 MB) from PyPI");
    python(&[
        "-c",
        "import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])",
        SDIST_URL,
        path_str(&sdist)?,
    ])?;
    sha256::verify(&sdist, SDIST_SHA256)?;
    python(&["-m", "tarfile", "-e", path_str(&sdist)?, path_str(&work)?])?;
    let build = work.join("build");
    eprintln!("xtask: building llama.cpp's llama-quantize (minutes)");
    // The CPU only; the quantizer's code compiled the same everywhere: not for this CPU, and
    // without contracting a * b + c into one rounding. -O1: quantizing a 135M model takes
    // seconds at any level, while compiling llama.cpp at -O3 takes most of this step's time.
    // Shared libraries: llama-cpp-python can run on them (LLAMA_CPP_LIB_PATH).
    run(Command::new("cmake")
        .arg("-S")
        .arg(work.join(SOURCE_DIR))
        .arg("-B")
        .arg(&build)
        .args([
            "-DCMAKE_BUILD_TYPE=Release",
            "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG",
            "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG",
            "-DCMAKE_C_FLAGS=-ffp-contract=off",
            "-DCMAKE_CXX_FLAGS=-ffp-contract=off",
            "-DBUILD_SHARED_LIBS=ON",
            "-DGGML_NATIVE=OFF",
            "-DGGML_OPENMP=OFF",
            "-DGGML_METAL=OFF",
            "-DLLAMA_OPENSSL=OFF",
            "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DLLAMA_BUILD_SERVER=OFF",
            "-DLLAMA_BUILD_APP=OFF",
        ]))?;
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    run(Command::new("cmake")
        .arg("--build")
        .arg(&build)
        .args(["--target", "llama-quantize", "--parallel"])
        .arg(jobs.to_string()))?;
    if !tool.exists() {
        bail!("the llama.cpp build left no {}", tool.display());
    }
    Ok(tool)
}

/// Builds llama.cpp's multimodal library (`libmtmd.so`) beside `llama-quantize`, once, in the
/// same build: the vision references run llama.cpp's own image path through it
/// (`scripts/reference/llama_cpp_mtmd.py`); the tests never load it.
pub fn ensure_mtmd(paths: &Paths) -> Result<()> {
    let work = paths.root.join("build/llama-quantize");
    if work.join("build/bin/libmtmd.so").exists() {
        return Ok(());
    }
    built_tool(paths)?;
    let build = work.join("build");
    eprintln!("xtask: building llama.cpp's mtmd (minutes)");
    run(Command::new("cmake")
        .arg("-S")
        .arg(work.join(SOURCE_DIR))
        .arg("-B")
        .arg(&build)
        .arg("-DLLAMA_BUILD_MTMD=ON"))?;
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    run(Command::new("cmake")
        .arg("--build")
        .arg(&build)
        .args(["--target", "mtmd", "--parallel"])
        .arg(jobs.to_string()))?;
    if !work.join("build/bin/libmtmd.so").exists() {
        bail!(
            "the llama.cpp build left no libmtmd.so in {}",
            build.display()
        );
    }
    Ok(())
}

fn run(command: &mut Command) -> Result<()> {
    let output = command
        .output()
        .with_context(|| format!("running {command:?}; are cmake and a C++ compiler installed?"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed with {}:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}
