//! The machine's total and available memory, through `sysinfo`. Only the memory table is read
//! (on Linux one pass over `/proc/meminfo`), so this is cheap enough to call after every reap.

use sysinfo::{MemoryRefreshKind, System};

/// Physical memory of the machine, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemMemory {
    /// Installed RAM.
    pub total: u64,
    /// What the OS could hand out now without swapping (Linux `MemAvailable`; on macOS free
    /// plus reclaimable pages), so it counts the page cache as free.
    pub available: u64,
}

/// Reads the system's memory now.
pub fn system_memory() -> SystemMemory {
    // `System::new` loads nothing; refreshing RAM alone skips processes, CPUs and swap.
    let mut system = System::new();
    system.refresh_memory_specifics(MemoryRefreshKind::nothing().with_ram());
    SystemMemory {
        total: system.total_memory(),
        available: system.available_memory(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_memory_reports_some_available_memory_within_the_total() {
        let memory = system_memory();
        assert!(memory.total > 0);
        assert!(memory.available > 0);
        assert!(memory.available <= memory.total, "{memory:?}");
    }
}
