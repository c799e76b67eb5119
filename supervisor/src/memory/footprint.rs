//! The memory a process holds, as the pool counts it against the ceiling.
//!
//! On macOS that is `phys_footprint` from `proc_pid_rusage`: the resident size misses the Metal
//! (IOAccelerator) buffers that hold a model's weights on Apple silicon, and the footprint is also
//! the number the kernel's memory-pressure handling judges a process by. On Linux it is the
//! resident set from `/proc/<pid>/statm`, where MLX's CPU backend keeps everything in ordinary
//! pages.

use std::io;

/// Bytes held by process `pid`. A pid that does not exist is an error of kind `NotFound`; every
/// error names the pid.
#[cfg(target_os = "linux")]
pub fn process_footprint(pid: u32) -> io::Result<u64> {
    use nix::unistd::{SysconfVar, sysconf};

    let path = format!("/proc/{pid}/statm");
    let context = |kind: io::ErrorKind, what: String| {
        io::Error::new(kind, format!("pid {pid}: {path}: {what}"))
    };
    let statm = std::fs::read_to_string(&path).map_err(|e| context(e.kind(), e.to_string()))?;
    // statm is "size resident shared text lib data dt", all in pages.
    let resident: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .ok_or_else(|| context(io::ErrorKind::InvalidData, format!("malformed: {statm:?}")))?;
    let page_size = match sysconf(SysconfVar::PAGE_SIZE) {
        Ok(Some(size)) => u64::try_from(size).ok(),
        _ => None,
    }
    .ok_or_else(|| context(io::ErrorKind::Other, "sysconf(PAGE_SIZE) failed".to_owned()))?;
    Ok(resident.saturating_mul(page_size))
}

/// Bytes held by process `pid` (its `phys_footprint`). A pid that does not exist is an error of
/// kind `NotFound`; every error names the pid.
#[cfg(target_os = "macos")]
pub fn process_footprint(pid: u32) -> io::Result<u64> {
    use std::mem::MaybeUninit;

    let c_pid = libc::c_int::try_from(pid).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("pid {pid}: out of range"),
        )
    })?;
    let mut info = MaybeUninit::<libc::rusage_info_v2>::zeroed();
    // SAFETY: with flavor RUSAGE_INFO_V2 the call writes one `rusage_info_v2`, which is exactly
    // the buffer passed; libc types the buffer as `*mut rusage_info_t` for every flavor.
    let rc = unsafe {
        libc::proc_pid_rusage(
            c_pid,
            libc::RUSAGE_INFO_V2,
            info.as_mut_ptr().cast::<libc::rusage_info_t>(),
        )
    };
    if rc != 0 {
        let error = io::Error::last_os_error();
        // ESRCH would otherwise surface as an uncategorized error; callers test for NotFound.
        let kind = match error.raw_os_error() {
            Some(libc::ESRCH) => io::ErrorKind::NotFound,
            _ => error.kind(),
        };
        return Err(io::Error::new(
            kind,
            format!("pid {pid}: proc_pid_rusage: {error}"),
        ));
    }
    // SAFETY: the call succeeded, so it filled the struct (which was zeroed before anyway, and
    // every field is an integer).
    let info = unsafe { info.assume_init() };
    Ok(info.ri_phys_footprint)
}

/// Other platforms have no implementation; the supervisor targets macOS and Linux.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn process_footprint(pid: u32) -> io::Result<u64> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!("pid {pid}: process footprint is only measured on Linux and macOS"),
    ))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::hint::black_box;

    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn own_footprint_grows_by_about_a_touched_allocation() {
        let before = process_footprint(std::process::id()).unwrap();
        assert!(before > 0);

        let size = 64 * MIB;
        // Non-zero bytes, so every page is written rather than left to calloc's zero mapping.
        let block = black_box(vec![1u8; size as usize]);
        let after = process_footprint(std::process::id()).unwrap();
        drop(block);

        let grown = after.saturating_sub(before);
        // Generous bounds: other tests in this process allocate and free concurrently.
        assert!(
            grown >= size / 2 && grown <= size * 4,
            "grew by {grown} bytes after touching {size}"
        );
    }

    #[test]
    fn a_missing_process_is_not_found_and_named() {
        // Above the kernel's pid_max limit (2^22), so no process can have it.
        let pid = 999_999_999;
        let error = process_footprint(pid).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert!(error.to_string().contains("999999999"), "{error}");
    }
}
