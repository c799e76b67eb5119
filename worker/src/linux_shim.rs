//! mlx-rs seeds its default random state with `mach_approximate_time`, a macOS function; Linux
//! binaries that link mlx-rs must provide it. Only the seed depends on it, so wall-clock
//! nanoseconds serve as well as a monotonic clock.

use std::time::{SystemTime, UNIX_EPOCH};

#[unsafe(no_mangle)]
pub extern "C" fn mach_approximate_time() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64)
}
