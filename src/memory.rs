//! Process-wide memory settings, taken in `main` before the runtime's threads start and
//! allocate. Each is a measured cost removed (docs/benchmarks.md).

/// Turns transparent huge pages off for the process. With them the allocator's memory is
/// faulted in and zeroed 2 MiB at a time and stays resident a whole huge page at a time: under
/// 2x overload that was ~60 MB more peak RSS, and up to a tenth more CPU per call
/// (docs/benchmarks.md, "Transparent huge pages off").
fn disable_huge_pages() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    rustix::thread::disable_transparent_huge_pages(true)?;
    Ok(())
}

/// glibc's malloc thresholds, for the C libraries linked in. Rust code allocates through
/// mimalloc, but librdkafka (which copies every Kafka record it is handed, up to ~900 KB each)
/// and SQLite allocate through glibc. By default glibc maps a block over 128 KiB afresh and
/// unmaps it on free; its threshold rises to the sizes freed, but free memory over twice the
/// threshold is then trimmed off the top of its heaps. Either way each record copy was faulted
/// in and zeroed page by page: half the ingest role's page faults. A fixed mmap threshold of
/// 32 MiB (as high as glibc's own would rise) and 16 MiB of free memory kept at the top of each
/// heap serve the copies from memory already mapped (docs/benchmarks.md, "Record copies from
/// mapped memory"). Returns false when glibc refused.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_c_heap_mapped() -> bool {
    const MMAP_THRESHOLD: libc::c_int = 32 << 20;
    const TRIM_THRESHOLD: libc::c_int = 16 << 20;
    // SAFETY: mallopt only sets allocator parameters, under glibc's own locks; no argument is a
    // pointer.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    }
}

/// Other C libraries' allocators are left as they are.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_c_heap_mapped() -> bool {
    true
}

/// What was set, kept to be reported once logging is up.
pub struct Settings {
    huge_pages_off: std::io::Result<()>,
    c_heap_mapped: bool,
}

impl Settings {
    /// Takes every setting above; call before any other thread starts.
    pub fn apply() -> Settings {
        Settings { huge_pages_off: disable_huge_pages(), c_heap_mapped: keep_c_heap_mapped() }
    }

    pub fn log(&self) {
        if let Err(e) = &self.huge_pages_off {
            tracing::warn!(error = %e, "could not turn transparent huge pages off");
        }
        if !self.c_heap_mapped {
            tracing::warn!(
                "glibc refused a malloc threshold; large C allocations keep its defaults"
            );
        }
    }
}
