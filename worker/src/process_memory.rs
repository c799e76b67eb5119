//! The worker process's memory, as the kernel accounts it, and giving freed memory back to it.

use nix::sys::resource::{UsageWho, getrusage};

/// Peak resident set size in bytes, or `None` if the kernel will not say.
pub fn peak_resident_bytes() -> Option<u64> {
    let usage = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let max_rss = u64::try_from(usage.max_rss()).ok()?;
    // Linux reports kilobytes, macOS bytes.
    Some(if cfg!(target_os = "macos") {
        max_rss
    } else {
        max_rss * 1024
    })
}

/// Returns memory freed while loading to the system: MLX's buffer cache, then glibc's free heap
/// pages. Stacking a Hugging Face checkpoint's per-expert tensors frees the parts, which glibc
/// otherwise keeps in the heap for good: a 797 MiB checkpoint of 128 experts per layer stayed at
/// twice its size resident. MLX's cache is emptied even when this fails to count.
pub fn release_freed_memory() {
    if let Err(error) = mlx_rs::memory::clear_cache() {
        tracing::debug!(%error, "MLX could not clear its buffer cache");
    }
    trim_heap();
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() {
    // SAFETY: malloc_trim only returns free heap pages to the kernel; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other allocators (macOS's, musl's) return freed pages on their own.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}
