//! The CLI's malloc settings. Each op of a CPU run allocates its outputs and frees its dead
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
