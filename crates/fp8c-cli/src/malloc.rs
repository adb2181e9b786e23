//! The CLI's memory: the malloc settings, and the process's peak resident set (what
//! `fp8c train --profile` prints next to the planned peak).
//!
//! The malloc settings. Each op of a CPU run allocates its outputs and frees its dead
//! inputs, so the same few sizes come and go thousands of times a second. glibc's defaults
//! serve blocks from 128 KiB up (a threshold that drifts with what was freed) as fresh
//! `mmap`s and trims the heap's free top back to the kernel, so an op's output often lands
//! on pages the kernel must fault in and zero again: SqueezeNet took ~1,700 page faults a
//! run, and a ReLU over fresh pages cost ~4× one over reused memory. Keeping blocks up to
//! 32 MiB (glibc's largest allowed threshold on 64-bit) on the heap and never trimming it
//! lets each run reuse the memory the last op freed; the heap stays at its peak, which
//! the run reaches anyway. Weights and other larger blocks are still `mmap`ped.

/// Sets the thresholds above; a no-op off glibc.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const MMAP_THRESHOLD: libc::c_int = 32 << 20;
        const TRIM_THRESHOLD: libc::c_int = libc::c_int::MAX;
        // SAFETY: mallopt only changes the allocator's tunables; it is called before this
        // process starts any thread.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
        }
    }
}

/// The largest resident set the process has had, in bytes (None off Linux).
pub fn peak_rss() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes a `rusage` into the pointer it is given, which points at
        // one; RUSAGE_SELF is always valid.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        // SAFETY: getrusage returned 0, so it filled the struct (zeroed before anyway).
        let usage = unsafe { usage.assume_init() };
        // Linux reports ru_maxrss in KiB.
        u64::try_from(usage.ru_maxrss).ok().map(|k| k * 1024)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}
