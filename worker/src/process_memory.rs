//! The worker process's peak resident memory, as the kernel accounts it.

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
