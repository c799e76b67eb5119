//! On Linux, `cargo xtask setup` points these variables at the MLX wheel and Debian's OpenBLAS.
//! OpenBLAS becomes a direct dependency of the worker's binaries, so the dynamic loader finds its
//! BLAS symbols before those of the wheel's reference BLAS (a dependency of libmlx): fp32 matrix
//! products run about fifty times faster. `--no-as-needed` keeps it although no Rust code calls it.

fn main() {
    println!("cargo::rerun-if-env-changed=CORRAL_MLX_LIB_DIR");
    println!("cargo::rerun-if-env-changed=CORRAL_OPENBLAS");
    if let Ok(openblas) = std::env::var("CORRAL_OPENBLAS") {
        println!("cargo::rustc-link-arg=-Wl,--push-state,--no-as-needed,{openblas},--pop-state");
    }
    if let Ok(mlx_lib_dir) = std::env::var("CORRAL_MLX_LIB_DIR") {
        println!("cargo::rustc-link-arg=-Wl,-rpath,{mlx_lib_dir}");
    }
}
