//! One CUDA device as the backend uses it: the primary context, one stream, device memory,
//! loaded modules and kernel launches, over cudarc's thin `result` / `sys` layers (the safe
//! layer's per-allocation event tracking would fight the arena and graph capture).
//!
//! Every allocation and module is owned by the [`Device`] and released when it drops, after a
//! final synchronisation. Callers make the context current ([`Device::bind`]) at the top of
//! every public entry point, since CUDA contexts are per thread.
//!
//! The device seam of the emulated device (issue #15, ARCHITECTURE.md): [`Device::emulated`]
//! is a device whose memory is host memory (256-byte aligned, as `cuMemAlloc`'s), whose
//! modules are the same kernel sources compiled for the host (`emu.rs`) and whose launches
//! run there in order; everything above this file (lowering, argument packing, launch
//! geometry, the run loop) is unchanged. Stream capture is emulated as CUDA does it: while a
//! capture is open, stream work is recorded (kernel arguments copied at enqueue time), not
//! run; synchronous calls (allocation, pageable copies, synchronisation) are refused and
//! invalidate the capture; a graph launch replays the record. [`EmuFaults`] makes the
//! emulated device fail on request (a capture, device-to-host copies), so the backend's
//! failure paths have tests.

use crate::backend::RuntimeError;
use crate::cuda::emu::{self, HostModule};
use crate::cuda::{kernels, nvrtc, unavailable};
use cudarc::driver::result::{self as drv, DriverError};
use cudarc::driver::sys;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What the backend knows about a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Its ordinal.
    pub ordinal: usize,
    /// Its name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// Compute capability (9, 0 on Hopper).
    pub compute_capability: (i32, i32),
    /// Global memory in bytes.
    pub total_memory: u64,
    /// Multiprocessors.
    pub sm_count: u32,
    /// The driver's CUDA version (13000 for 13.0).
    pub driver_version: i32,
}

impl DeviceInfo {
    /// The NVRTC architecture to compile for (`sm_90`).
    pub fn arch(&self) -> String {
        format!(
            "sm_{}{}",
            self.compute_capability.0, self.compute_capability.1
        )
    }

    /// Whether the device has FP8 tensor cores (Ada 8.9 and Hopper 9.0 onwards).
    pub fn has_fp8(&self) -> bool {
        self.compute_capability >= (8, 9)
    }

    /// Whether fp8c's kernels can run here: compute capability 8.0 or newer (the kernels use
    /// sm_80 instructions such as `__reduce_max_sync`) and a driver for CUDA 13.0 or newer
    /// (the CUDA 13.0 bindings fp8c is built with; see [`MIN_DRIVER_VERSION`]).
    pub fn check_supported(&self) -> Result<(), String> {
        check_driver_version(self.driver_version)?;
        if self.compute_capability < MIN_COMPUTE_CAPABILITY {
            return Err(format!(
                "device {} ({}) has compute capability {}.{}; fp8c's kernels need {}.{} or newer (8.9+ for FP8 GEMMs)",
                self.ordinal,
                self.name,
                self.compute_capability.0,
                self.compute_capability.1,
                MIN_COMPUTE_CAPABILITY.0,
                MIN_COMPUTE_CAPABILITY.1
            ));
        }
        Ok(())
    }
}

/// The oldest compute capability fp8c's kernels compile for (sm_80 instructions).
pub const MIN_COMPUTE_CAPABILITY: (i32, i32) = (8, 0);

/// The oldest driver fp8c's CUDA bindings work with, as `cuDriverGetVersion` reports it:
/// CUDA 13.0 (driver 580). cudarc's `cuda-13000` bindings call entry points older drivers
/// lack, which its loader reports by panicking, so the version is checked first.
pub const MIN_DRIVER_VERSION: i32 = 13000;

/// `Err` naming both versions when `version` (`cuDriverGetVersion`'s 1000·major + 10·minor)
/// is older than [`MIN_DRIVER_VERSION`].
pub fn check_driver_version(version: i32) -> Result<(), String> {
    if version >= MIN_DRIVER_VERSION {
        return Ok(());
    }
    Err(format!(
        "the NVIDIA driver supports CUDA {}.{}; fp8c needs CUDA {}.{} (driver 580 or newer)",
        version / 1000,
        version % 1000 / 10,
        MIN_DRIVER_VERSION / 1000,
        MIN_DRIVER_VERSION % 1000 / 10
    ))
}

/// A driver call's error as a runtime error naming the call.
pub(crate) fn drv_err(what: &str) -> impl Fn(DriverError) -> RuntimeError + '_ {
    move |e| RuntimeError::Other(format!("CUDA {what} failed: {e}"))
}

/// Initialises the driver and describes device `ordinal`. The driver library must be present
/// (`libs::require_driver`).
pub(crate) fn probe_device(ordinal: usize) -> Result<DeviceInfo, RuntimeError> {
    drv::init().map_err(|e| {
        unavailable(format!(
            "the NVIDIA driver is installed but cannot start ({e}); is there a GPU on this machine?"
        ))
    })?;
    let count = drv::device::get_count().map_err(drv_err("cuDeviceGetCount"))?;
    if count <= 0 {
        return Err(unavailable("the NVIDIA driver sees no GPU"));
    }
    if ordinal >= count as usize {
        return Err(unavailable(format!(
            "device {ordinal} does not exist ({count} GPU(s) found)"
        )));
    }
    let dev = drv::device::get(ordinal as i32).map_err(drv_err("cuDeviceGet"))?;
    let attr = |a: sys::CUdevice_attribute| {
        // SAFETY: a valid device and attribute.
        unsafe { drv::device::get_attribute(dev, a) }.map_err(drv_err("cuDeviceGetAttribute"))
    };
    use sys::CUdevice_attribute::*;
    let major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let sms = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let name = drv::device::get_name(dev).map_err(drv_err("cuDeviceGetName"))?;
    // SAFETY: a valid device.
    let total = unsafe { drv::device::total_mem(dev) }.map_err(drv_err("cuDeviceTotalMem"))?;
    let mut version = 0;
    // SAFETY: a valid out-pointer.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(drv_err("cuDriverGetVersion"))?;
    Ok(DeviceInfo {
        ordinal,
        name,
        compute_capability: (major, minor),
        total_memory: total as u64,
        sm_count: sms.max(1) as u32,
        driver_version: version,
    })
}

/// Launch arguments: each argument's bytes in its own 8-byte-aligned slot, as
/// `cuLaunchKernel`'s `kernelParams` wants them (a pointer per argument).
#[derive(Clone, Debug, Default)]
pub(crate) struct KernelArgs {
    slots: Vec<Vec<u64>>,
}

impl KernelArgs {
    pub fn new() -> Self {
        KernelArgs::default()
    }

    /// Appends a plain-old-data argument (a scalar, a device pointer as u64, a `#[repr(C)]`
    /// struct mirrored from the kernel source).
    pub fn push<T: Copy>(&mut self, v: T) -> &mut Self {
        let words = std::mem::size_of::<T>().div_ceil(8).max(1);
        let mut slot = vec![0u64; words];
        // SAFETY: the slot has at least size_of::<T>() bytes, 8-byte aligned (T's alignment
        // is at most 8 for every argument type used here), and T is Copy.
        unsafe { std::ptr::write_unaligned(slot.as_mut_ptr().cast::<T>(), v) };
        self.slots.push(slot);
        self
    }

    pub fn ptr(&mut self, p: u64) -> &mut Self {
        self.push(p)
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.push(v)
    }

    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.push(v)
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.push(v)
    }

    pub fn f32(&mut self, v: f32) -> &mut Self {
        self.push(v)
    }

    /// Appends every argument of `other`, in order.
    pub fn extend(&mut self, other: &KernelArgs) -> &mut Self {
        self.slots.extend(other.slots.iter().cloned());
        self
    }

    /// The `kernelParams` array; valid while `self` is neither moved nor changed.
    fn pointers(&mut self) -> Vec<*mut c_void> {
        self.slots
            .iter_mut()
            .map(|s| s.as_mut_ptr().cast::<c_void>())
            .collect()
    }
}

/// A loaded module: a cubin on the GPU, or the host build of the emulated device.
#[derive(Clone, Debug)]
pub(crate) enum ModuleRef {
    Cuda(sys::CUmodule),
    Emu(Arc<HostModule>),
}

/// A kernel entry point.
#[derive(Clone, Debug)]
pub(crate) enum KernelRef {
    Cuda(sys::CUfunction),
    Emu(Arc<HostModule>, String),
}

/// Faults the emulated device injects when asked, so tests reach the backend's failure paths
/// (a capture the driver rejects, a device-to-host copy that fails) without a GPU. A clone
/// shares its switches: a test keeps one and flips it while the executable runs. It also
/// counts the stream captures begun. No effect on a real GPU.
#[derive(Clone, Debug, Default)]
pub struct EmuFaults(Arc<FaultState>);

#[derive(Debug, Default)]
struct FaultState {
    fail_captures: AtomicBool,
    fail_downloads: AtomicBool,
    captures: AtomicU64,
}

impl EmuFaults {
    /// From now on, ending a stream capture fails (as `cuStreamEndCapture` does when the
    /// capture was invalidated).
    pub fn fail_captures(&self, on: bool) {
        self.0.fail_captures.store(on, Ordering::SeqCst);
    }

    /// From now on, every device-to-host copy fails (as after a sticky device error).
    pub fn fail_downloads(&self, on: bool) {
        self.0.fail_downloads.store(on, Ordering::SeqCst);
    }

    /// How many stream captures were begun on devices with these faults.
    pub fn captures(&self) -> u64 {
        self.0.captures.load(Ordering::SeqCst)
    }
}

/// Recorded stream work of the emulated device.
type EmuOp = Box<dyn Fn() -> Result<(), String>>;

/// The emulated device's memory, modules, open capture and faults.
#[derive(Default)]
struct Emulated {
    allocs: RefCell<Vec<(*mut u8, std::alloc::Layout)>>,
    modules: RefCell<HashMap<String, Arc<HostModule>>>,
    /// The work recorded by the open stream capture, or why the capture was invalidated.
    capture: RefCell<Option<Result<Vec<EmuOp>, String>>>,
    faults: EmuFaults,
}

impl Emulated {
    /// Runs stream work now, or records it while a capture is open.
    fn enqueue(&self, op: EmuOp) -> Result<(), RuntimeError> {
        match &mut *self.capture.borrow_mut() {
            Some(Ok(ops)) => {
                ops.push(op);
                Ok(())
            }
            Some(Err(_)) => Err(RuntimeError::Other(
                "the stream capture was invalidated by an earlier call".into(),
            )),
            None => op().map_err(RuntimeError::Other),
        }
    }

    /// Refuses a call CUDA does not allow while the stream is captured (and invalidates the
    /// capture, as CUDA does).
    fn not_while_capturing(&self, call: &str) -> Result<(), RuntimeError> {
        let mut c = self.capture.borrow_mut();
        if c.is_none() {
            return Ok(());
        }
        let m = format!(
            "{call} while the stream is being captured (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)"
        );
        *c = Some(Err(m.clone()));
        Err(RuntimeError::Other(m))
    }
}

/// A captured and instantiated CUDA graph of stream work, or the emulated device's record.
pub(crate) enum DeviceGraph {
    Cuda {
        graph: sys::CUgraph,
        exec: sys::CUgraphExec,
    },
    Emu(Vec<EmuOp>),
}

impl Drop for DeviceGraph {
    fn drop(&mut self) {
        if let DeviceGraph::Cuda { graph, exec } = self {
            // SAFETY: created by end_capture / instantiate, destroyed once.
            unsafe {
                let _ = drv::graph::exec_destroy(*exec);
                let _ = drv::graph::destroy(*graph);
            }
        }
    }
}

/// A kernel launch, ready to replay.
#[derive(Clone, Debug)]
pub(crate) struct Launch {
    pub func: KernelRef,
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared: u32,
    pub args: KernelArgs,
}

/// The device, its context and stream, and everything allocated or loaded on it.
pub(crate) struct Device {
    pub info: DeviceInfo,
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    pub stream: sys::CUstream,
    allocs: RefCell<Vec<sys::CUdeviceptr>>,
    modules: RefCell<HashMap<String, sys::CUmodule>>,
    emu: Option<Emulated>,
}

impl Device {
    /// Opens device `ordinal` (the driver must be present: `libs::require_driver`).
    pub fn open(ordinal: usize) -> Result<Device, RuntimeError> {
        let info = probe_device(ordinal)?;
        let dev = drv::device::get(ordinal as i32).map_err(drv_err("cuDeviceGet"))?;
        // SAFETY: a valid device; released in Drop.
        let ctx = unsafe { drv::primary_ctx::retain(dev) }
            .map_err(drv_err("cuDevicePrimaryCtxRetain"))?;
        // SAFETY: a live context.
        unsafe { drv::ctx::set_current(ctx) }.map_err(drv_err("cuCtxSetCurrent"))?;
        let stream = drv::stream::create(drv::stream::StreamKind::NonBlocking)
            .map_err(drv_err("cuStreamCreate"))?;
        Ok(Device {
            info,
            dev,
            ctx,
            stream,
            allocs: RefCell::new(Vec::new()),
            modules: RefCell::new(HashMap::new()),
            emu: None,
        })
    }

    /// The emulated device: an H100-like description (compute capability 9.0, CUDA 13.0) with
    /// 4 multiprocessors, so grid-stride kernels get a few blocks and stay quick on a CPU.
    pub fn emulated(faults: EmuFaults) -> Device {
        Device {
            info: DeviceInfo {
                ordinal: 0,
                name: "emulated device (host)".into(),
                compute_capability: (9, 0),
                total_memory: 16 << 30,
                sm_count: 4,
                driver_version: super::device::MIN_DRIVER_VERSION,
            },
            dev: 0,
            ctx: std::ptr::null_mut(),
            stream: std::ptr::null_mut(),
            allocs: RefCell::new(Vec::new()),
            modules: RefCell::new(HashMap::new()),
            emu: Some(Emulated {
                faults,
                ..Emulated::default()
            }),
        }
    }

    /// Whether this is the emulated device.
    pub fn is_emulated(&self) -> bool {
        self.emu.is_some()
    }

    /// Makes the device's context current on this thread.
    pub fn bind(&self) -> Result<(), RuntimeError> {
        if self.emu.is_some() {
            return Ok(());
        }
        // SAFETY: the context lives as long as `self`.
        unsafe { drv::ctx::set_current(self.ctx) }.map_err(drv_err("cuCtxSetCurrent"))
    }

    /// Allocates `bytes` (at least 256, so every buffer has a distinct, aligned address); freed
    /// with the device.
    pub fn alloc(&self, bytes: u64) -> Result<u64, RuntimeError> {
        let size = bytes.max(256) as usize;
        if let Some(e) = &self.emu {
            e.not_while_capturing("cuMemAlloc")?;
            let layout = std::alloc::Layout::from_size_align(size, 256).map_err(|err| {
                RuntimeError::Other(format!("cannot allocate {bytes} bytes: {err}"))
            })?;
            // SAFETY: a non-zero size; freed with the device.
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            if p.is_null() {
                return Err(RuntimeError::Other(format!(
                    "cannot allocate {bytes} bytes on the emulated device"
                )));
            }
            e.allocs.borrow_mut().push((p, layout));
            return Ok(p as u64);
        }
        // SAFETY: a current context; the allocation is freed in Drop.
        let p = unsafe { drv::malloc_sync(size) }.map_err(|e| {
            RuntimeError::Other(format!(
                "cannot allocate {bytes} bytes on {} ({e})",
                self.info.name
            ))
        })?;
        self.allocs.borrow_mut().push(p);
        Ok(p)
    }

    /// Copies host bytes to the device (stream-ordered).
    pub fn upload(&self, dst: u64, src: &[u8]) -> Result<(), RuntimeError> {
        if src.is_empty() {
            return Ok(());
        }
        if let Some(e) = &self.emu {
            e.not_while_capturing("cuMemcpyHtoDAsync from pageable memory")?;
            // SAFETY: `dst` is an emulated allocation of at least src.len() bytes.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
            return Ok(());
        }
        // SAFETY: `dst` holds at least src.len() bytes (buffers are sized from the plan);
        // pageable host memory is staged by the driver before this returns.
        unsafe { drv::memcpy_htod_async(dst, src, self.stream) }
            .map_err(drv_err("cuMemcpyHtoDAsync"))
    }

    /// Copies device bytes to the host and waits for them.
    pub fn download(&self, dst: &mut [u8], src: u64) -> Result<(), RuntimeError> {
        if dst.is_empty() {
            return Ok(());
        }
        if let Some(e) = &self.emu {
            e.not_while_capturing("cuMemcpyDtoHAsync")?;
            if e.faults.0.fail_downloads.load(Ordering::SeqCst) {
                return Err(RuntimeError::Other(
                    "CUDA cuMemcpyDtoHAsync failed: an illegal memory access was encountered (fault injected on the emulated device)".into(),
                ));
            }
            // SAFETY: `src` is an emulated allocation of at least dst.len() bytes.
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
            return Ok(());
        }
        // SAFETY: `src` holds at least dst.len() bytes; we synchronise before `dst` is read.
        unsafe { drv::memcpy_dtoh_async(dst, src, self.stream) }
            .map_err(drv_err("cuMemcpyDtoHAsync"))?;
        self.sync()
    }

    /// Device-to-device copy (stream-ordered).
    pub fn copy(&self, dst: u64, src: u64, bytes: u64) -> Result<(), RuntimeError> {
        if bytes == 0 || dst == src {
            return Ok(());
        }
        if let Some(e) = &self.emu {
            return e.enqueue(Box::new(move || {
                // SAFETY: both ranges lie in live emulated allocations (a recorded copy runs
                // while the executable that owns them lives).
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes as usize) };
                Ok(())
            }));
        }
        // SAFETY: both ranges lie in live allocations.
        unsafe { drv::memcpy_dtod_async(dst, src, bytes as usize, self.stream) }
            .map_err(drv_err("cuMemcpyDtoDAsync"))
    }

    /// Sets `bytes` bytes to `value` (stream-ordered).
    pub fn memset8(&self, dst: u64, value: u8, bytes: u64) -> Result<(), RuntimeError> {
        if bytes == 0 {
            return Ok(());
        }
        if let Some(e) = &self.emu {
            return e.enqueue(Box::new(move || {
                // SAFETY: the range lies in a live emulated allocation.
                unsafe { std::ptr::write_bytes(dst as *mut u8, value, bytes as usize) };
                Ok(())
            }));
        }
        // SAFETY: the range lies in a live allocation.
        unsafe { drv::memset_d8_async(dst, value, bytes as usize, self.stream) }
            .map_err(drv_err("cuMemsetD8Async"))
    }

    /// Sets `count` 32-bit words to `value` (stream-ordered; `dst` 4-byte aligned).
    pub fn memset32(&self, dst: u64, value: u32, count: u64) -> Result<(), RuntimeError> {
        if count == 0 {
            return Ok(());
        }
        if let Some(e) = &self.emu {
            return e.enqueue(Box::new(move || {
                for i in 0..count {
                    // SAFETY: the range lies in a live emulated allocation.
                    unsafe { std::ptr::write_unaligned((dst + 4 * i) as *mut u32, value) };
                }
                Ok(())
            }));
        }
        // SAFETY: the range lies in a live allocation.
        unsafe { sys::cuMemsetD32Async(dst, value, count as usize, self.stream) }
            .result()
            .map_err(drv_err("cuMemsetD32Async"))
    }

    /// Waits for the stream.
    pub fn sync(&self) -> Result<(), RuntimeError> {
        if let Some(e) = &self.emu {
            return e.not_while_capturing("cuStreamSynchronize");
        }
        // SAFETY: a live stream.
        unsafe { drv::stream::synchronize(self.stream) }.map_err(|e| {
            RuntimeError::Other(format!(
                "a kernel failed on {} ({e}); rerun with CUDA_LAUNCH_BLOCKING=1 to find which",
                self.info.name
            ))
        })
    }

    /// The module compiled from `file` with `headers` (compiled once per process and cached on
    /// disk, loaded once per device).
    pub fn module(
        &self,
        file: &str,
        source: &str,
        headers: &[(&str, &str)],
    ) -> Result<ModuleRef, RuntimeError> {
        let arch = self.info.arch();
        let mut parts: Vec<&[u8]> = vec![source.as_bytes()];
        for (n, t) in headers {
            parts.push(n.as_bytes());
            parts.push(t.as_bytes());
        }
        let key = format!("{file}:{:016x}", nvrtc::stable_hash(&parts));
        if let Some(e) = &self.emu {
            if let Some(m) = e.modules.borrow().get(&key) {
                return Ok(ModuleRef::Emu(m.clone()));
            }
            let m = Arc::new(emu::compile(file, source, headers).map_err(|err| {
                RuntimeError::Other(format!(
                    "cannot compile {file} for the emulated device: {err}"
                ))
            })?);
            e.modules.borrow_mut().insert(key, m.clone());
            return Ok(ModuleRef::Emu(m));
        }
        if let Some(m) = self.modules.borrow().get(&key) {
            return Ok(ModuleRef::Cuda(*m));
        }
        let cubin = nvrtc::compile_cached(file, source, headers, &arch)?;
        // SAFETY: a complete cubin image for this device's architecture; unloaded in Drop.
        let m =
            unsafe { drv::module::load_data(cubin.as_ptr().cast::<c_void>()) }.map_err(|e| {
                RuntimeError::Other(format!("cannot load the kernels of {file} for {arch}: {e}"))
            })?;
        self.modules.borrow_mut().insert(key, m);
        Ok(ModuleRef::Cuda(m))
    }

    /// A kernel of a fixed `kernels/` file.
    pub fn kernel(&self, file: kernels::KernelFile, name: &str) -> Result<KernelRef, RuntimeError> {
        let m = self.module(file.name, file.source, &kernels::fixed_headers())?;
        self.function(&m, file.name, name)
    }

    /// The entry point `name` of a loaded module.
    pub fn function(
        &self,
        m: &ModuleRef,
        file: &str,
        name: &str,
    ) -> Result<KernelRef, RuntimeError> {
        let m = match m {
            ModuleRef::Cuda(m) => *m,
            ModuleRef::Emu(h) => {
                if !h.names().iter().any(|n| n == name) {
                    return Err(RuntimeError::Other(format!(
                        "kernel {name} is not in {file}"
                    )));
                }
                return Ok(KernelRef::Emu(h.clone(), name.to_string()));
            }
        };
        let cname = CString::new(name)
            .map_err(|_| RuntimeError::Other(format!("bad kernel name {name:?}")))?;
        // SAFETY: a loaded module and a NUL-terminated name.
        unsafe { drv::module::get_function(m, cname) }
            .map(KernelRef::Cuda)
            .map_err(|e| RuntimeError::Other(format!("kernel {name} is not in {file} ({e})")))
    }

    /// Launches `l` on the stream.
    pub fn launch(&self, l: &mut Launch) -> Result<(), RuntimeError> {
        let mut params = l.args.pointers();
        let func = match &l.func {
            KernelRef::Cuda(f) => *f,
            KernelRef::Emu(m, name) => {
                if l.shared != 0 {
                    return Err(RuntimeError::Other(format!(
                        "{name}: dynamic shared memory is not emulated"
                    )));
                }
                let (g, b) = (l.grid, l.block);
                let emu = self
                    .emu
                    .as_ref()
                    .expect("an emulated kernel on the emulated device");
                // The arguments are copied now, as cuLaunchKernel copies `kernelParams`.
                let (m, name, args) = (m.clone(), name.clone(), l.args.clone());
                return emu.enqueue(Box::new(move || {
                    let mut args = args.clone();
                    let mut params = args.pointers();
                    // SAFETY: as for cuLaunchKernel below: the arguments match the kernel's
                    // signature and every pointer is a live emulated allocation.
                    unsafe { m.launch(&name, [g.0, g.1, g.2], [b.0, b.1, b.2], &mut params) }
                        .map_err(|e| format!("kernel {name} on the emulated device: {e}"))
                }));
            }
        };
        // SAFETY: `func` comes from a loaded module, and the argument list matches its
        // signature (built by the op family's lowering in lower/, next to the kernel's name);
        // device pointers in it point into live allocations.
        unsafe { drv::launch_kernel(func, l.grid, l.block, l.shared, self.stream, &mut params) }
            .map_err(drv_err("cuLaunchKernel"))
    }

    /// Enqueues work of the emulated device (a cuBLASLt call computed on the host): run now,
    /// or recorded by an open capture.
    pub fn emu_enqueue(
        &self,
        op: impl Fn() -> Result<(), String> + 'static,
    ) -> Result<(), RuntimeError> {
        match &self.emu {
            Some(e) => e.enqueue(Box::new(op)),
            None => Err(RuntimeError::Other(
                "internal: emulated work on a real device".into(),
            )),
        }
    }

    /// Starts capturing the stream's work into a graph (thread-local mode).
    pub fn begin_capture(&self) -> Result<(), RuntimeError> {
        if let Some(e) = &self.emu {
            e.faults.0.captures.fetch_add(1, Ordering::SeqCst);
            let mut c = e.capture.borrow_mut();
            if c.is_some() {
                return Err(RuntimeError::Other(
                    "CUDA cuStreamBeginCapture failed: the stream is already being captured".into(),
                ));
            }
            *c = Some(Ok(Vec::new()));
            return Ok(());
        }
        // SAFETY: a live stream not already capturing.
        unsafe {
            drv::stream::begin_capture(
                self.stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        }
        .map_err(drv_err("cuStreamBeginCapture"))
    }

    /// Ends the capture (always needed once begun, even after a failure) and instantiates
    /// the graph.
    pub fn end_capture(&self) -> Result<DeviceGraph, RuntimeError> {
        if let Some(e) = &self.emu {
            let ops = e.capture.borrow_mut().take().ok_or_else(|| {
                RuntimeError::Other("CUDA cuStreamEndCapture failed: no capture is open".into())
            })?;
            let ops = ops.map_err(|m| {
                RuntimeError::Other(format!(
                    "CUDA cuStreamEndCapture failed: the capture was invalidated ({m})"
                ))
            })?;
            if e.faults.0.fail_captures.load(Ordering::SeqCst) {
                return Err(RuntimeError::Other(
                    "CUDA cuStreamEndCapture failed: operation not permitted when stream is capturing (fault injected on the emulated device)".into(),
                ));
            }
            return Ok(DeviceGraph::Emu(ops));
        }
        // SAFETY: the stream is capturing.
        let graph = unsafe { drv::stream::end_capture(self.stream) }
            .map_err(drv_err("cuStreamEndCapture"))?;
        // SAFETY: a complete graph from the capture.
        match unsafe { drv::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) } {
            Ok(exec) => Ok(DeviceGraph::Cuda { graph, exec }),
            Err(e) => {
                // SAFETY: destroying the graph we own.
                unsafe {
                    let _ = drv::graph::destroy(graph);
                }
                Err(drv_err("cuGraphInstantiate")(e))
            }
        }
    }

    /// Launches a graph from [`Device::end_capture`] on the stream.
    pub fn launch_graph(&self, g: &DeviceGraph) -> Result<(), RuntimeError> {
        match g {
            // SAFETY: an instantiated graph over live buffers.
            DeviceGraph::Cuda { exec, .. } => {
                unsafe { drv::graph::launch(*exec, self.stream) }.map_err(drv_err("cuGraphLaunch"))
            }
            DeviceGraph::Emu(ops) => {
                let e = self.emu.as_ref().ok_or_else(|| {
                    RuntimeError::Other("internal: an emulated graph on a real device".into())
                })?;
                e.not_while_capturing("cuGraphLaunch of an emulated graph")?;
                ops.iter()
                    .try_for_each(|op| op().map_err(RuntimeError::Other))
            }
        }
    }

    /// Blocks for a grid-stride kernel over `work` items of `per_thread` items per thread:
    /// enough to fill the machine several times over, never more than the work needs.
    pub fn grid_for(&self, work: u64, per_thread: u64, block: u32) -> u32 {
        let per_block = per_thread.max(1) * u64::from(block);
        let need = work.div_ceil(per_block).max(1);
        let cap = u64::from(self.info.sm_count) * 16;
        need.min(cap) as u32
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Some(e) = &self.emu {
            for (p, layout) in e.allocs.borrow_mut().drain(..) {
                // SAFETY: allocated in `alloc` with this layout, freed once.
                unsafe { std::alloc::dealloc(p, layout) };
            }
            return;
        }
        // Errors are ignored: there is nobody to report them to, and the process keeps going.
        // SAFETY: everything below was created by this Device and is released once.
        unsafe {
            let _ = drv::ctx::set_current(self.ctx);
            let _ = drv::stream::synchronize(self.stream);
            for p in self.allocs.borrow_mut().drain(..) {
                let _ = drv::free_sync(p);
            }
            for (_, m) in self.modules.borrow_mut().drain() {
                let _ = drv::module::unload(m);
            }
            let _ = drv::stream::destroy(self.stream);
            let _ = drv::primary_ctx::release(self.dev);
        }
    }
}
