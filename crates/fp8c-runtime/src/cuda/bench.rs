//! Measurements behind `fp8c bench`: GEMM throughput through cuBLASLt (FP8 vs BF16), the
//! bandwidth of the quantize kernels against a device-to-device copy, timed with CUDA events.
//!
//! Method (the device library's METHOD.md): inputs are random, never zeros; warm-up runs keep
//! module loading and cuBLASLt's first-call costs out; each figure is the median of repeated
//! timed runs, each run timing a batch of launches between two events.

use crate::backend::RuntimeError;
use crate::cuda::device::{Device, KernelArgs, Launch, drv_err};
use crate::cuda::gemm::{GemmCall, GemmSpec, Lt};
use crate::cuda::{DeviceInfo, kernels, libs};
use cudarc::driver::result as drv;
use cudarc::driver::sys;
use fp8c_ir::DType;

/// One timed figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    /// Median milliseconds per operation.
    pub ms: f64,
    /// Operations timed per sample, and samples.
    pub reps: u32,
    /// Samples.
    pub samples: u32,
}

/// A benchmarking session on one device.
pub struct Bench {
    lt: Option<Lt>,
    dev: Device,
}

struct Event(sys::CUevent);

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by event::create, destroyed once.
        unsafe {
            let _ = drv::event::destroy(self.0);
        }
    }
}

fn event() -> Result<Event, RuntimeError> {
    drv::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
        .map(Event)
        .map_err(drv_err("cuEventCreate"))
}

impl Bench {
    /// Opens device `ordinal` with cuBLASLt and NVRTC (clean errors without a GPU).
    pub fn open(ordinal: usize) -> Result<Bench, RuntimeError> {
        libs::require_driver()?;
        libs::require_nvrtc()?;
        libs::require_cublaslt()?;
        let dev = Device::open(ordinal)?;
        dev.bind()?;
        let lt = Some(Lt::new(&dev)?);
        Ok(Bench { lt, dev })
    }

    /// The device.
    pub fn device(&self) -> &DeviceInfo {
        &self.dev.info
    }

    /// Median time of `f` (which enqueues `reps` operations) over `samples` samples, after
    /// `warmup` untimed calls.
    fn time(
        &self,
        warmup: u32,
        reps: u32,
        samples: u32,
        mut f: impl FnMut() -> Result<(), RuntimeError>,
    ) -> Result<Timing, RuntimeError> {
        for _ in 0..warmup {
            f()?;
        }
        self.dev.sync()?;
        let (start, stop) = (event()?, event()?);
        let mut ms = Vec::with_capacity(samples as usize);
        for _ in 0..samples {
            // SAFETY: live events and stream.
            unsafe { drv::event::record(start.0, self.dev.stream) }
                .map_err(drv_err("cuEventRecord"))?;
            for _ in 0..reps {
                f()?;
            }
            // SAFETY: as above.
            unsafe { drv::event::record(stop.0, self.dev.stream) }
                .map_err(drv_err("cuEventRecord"))?;
            // SAFETY: a recorded event.
            unsafe { drv::event::synchronize(stop.0) }.map_err(drv_err("cuEventSynchronize"))?;
            // SAFETY: both events completed.
            let t = unsafe { drv::event::elapsed(start.0, stop.0) }
                .map_err(drv_err("cuEventElapsedTime"))?;
            ms.push(f64::from(t) / f64::from(reps));
        }
        ms.sort_by(f64::total_cmp);
        Ok(Timing {
            ms: ms[ms.len() / 2],
            reps,
            samples,
        })
    }

    /// Fills `bytes` at `ptr` with random values of `dtype` (f32 / bf16 in [-2, 2), FP8 codes
    /// of finite values), from a fixed seed.
    fn random(&self, ptr: u64, dtype: DType, count: u64, seed: u64) -> Result<(), RuntimeError> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let unit = |r: u64| ((r >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0;
        let bytes: Vec<u8> = match dtype {
            DType::F32 => (0..count)
                .flat_map(|_| unit(next()).to_le_bytes())
                .collect(),
            DType::BF16 => (0..count)
                .flat_map(|_| half::bf16::from_f32(unit(next())).to_le_bytes())
                .collect(),
            DType::F8E4M3 => (0..count)
                .map(|_| {
                    fp8c_core::encode_f32(fp8c_core::Fp8Format::E4M3, unit(next()) * 100.0, true)
                })
                .collect(),
            DType::F8E5M2 => (0..count)
                .map(|_| {
                    fp8c_core::encode_f32(fp8c_core::Fp8Format::E5M2, unit(next()) * 100.0, true)
                })
                .collect(),
            other => return Err(RuntimeError::Other(format!("no random fill for {other}"))),
        };
        self.dev.upload(ptr, &bytes)
    }

    /// TFLOP/s of `D[m×n] = A[m×k]·B[k×n]` with inputs of `input` (FP8 in TN layout with unit
    /// scales and fast accumulation, as TE's forward GEMMs; bf16 otherwise) and a bf16 output.
    pub fn gemm(
        &self,
        m: u64,
        n: u64,
        k: u64,
        input: DType,
    ) -> Result<(Timing, f64), RuntimeError> {
        let lt = self
            .lt
            .as_ref()
            .ok_or_else(|| RuntimeError::Other("no cuBLASLt".into()))?;
        let es = input.size() as u64;
        // Several operand sets rotate so that repeated runs do not measure the L2 cache.
        const SETS: usize = 3;
        let mut calls = Vec::with_capacity(SETS);
        let one = self.dev.alloc(4)?;
        self.dev.upload(one, &1f32.to_le_bytes())?;
        for set in 0..SETS {
            let a = self.dev.alloc(m * k * es)?;
            let b = self.dev.alloc(k * n * es)?;
            let d = self.dev.alloc(m * n * 2)?;
            self.random(a, input, m * k, 1 + 2 * set as u64)?;
            self.random(b, input, k * n, 2 + 2 * set as u64)?;
            let fp8 = input.is_fp8();
            let spec = GemmSpec {
                trans_b: fp8,
                a_scale: fp8.then_some(one),
                b_scale: fp8.then_some(one),
                fast_accum: fp8,
                ..GemmSpec::plain(m, n, k, a, b, d, input, DType::BF16)
            };
            calls.push(lt.plan(&spec).map_err(RuntimeError::Other)?);
        }
        self.time_gemms(lt, &calls, m * n * k)
    }

    /// Times planned GEMMs of `mnk` multiply-adds each, rotating through `calls` so that
    /// repeated runs do not measure the L2 cache: the timing and TFLOP/s.
    fn time_gemms(
        &self,
        lt: &Lt,
        calls: &[GemmCall],
        mnk: u64,
    ) -> Result<(Timing, f64), RuntimeError> {
        let mut i = 0usize;
        let t = self.time(3, 10, 7, || {
            i += 1;
            lt.run(&calls[i % calls.len()], &self.dev)
        })?;
        let tflops = 2.0 * mnk as f64 / (t.ms * 1e-3) / 1e12;
        Ok((t, tflops))
    }

    /// TFLOP/s of the block-scaled FP8 GEMM DeepSeek-V3 and TE's `Float8BlockScaling` use
    /// (E4M3 A with 1×128 scales, B with 128×128 scales, no fast accumulation, bf16 output),
    /// or the reason cuBLASLt cannot run it here (not Hopper, cuBLASLt before 12.9, shape).
    pub fn block_gemm(
        &self,
        m: u64,
        n: u64,
        k: u64,
    ) -> Result<Result<(Timing, f64), String>, RuntimeError> {
        use crate::cuda::gemm::ScaleMode;
        let lt = self
            .lt
            .as_ref()
            .ok_or_else(|| RuntimeError::Other("no cuBLASLt".into()))?;
        if !lt.has_block_scaling(self.dev.info.compute_capability) {
            return Ok(Err(
                "cuBLASLt's block-scaled FP8 modes need Hopper (sm_90) and cuBLASLt 12.9+".into(),
            ));
        }
        let (kb, nb) = (k.div_ceil(128), n.div_ceil(128));
        let ones = |count: u64| -> Result<u64, RuntimeError> {
            let p = self.dev.alloc(count * 4)?;
            let bytes: Vec<u8> = (0..count).flat_map(|_| 1f32.to_le_bytes()).collect();
            self.dev.upload(p, &bytes)?;
            Ok(p)
        };
        const SETS: usize = 3;
        let mut calls = Vec::with_capacity(SETS);
        for set in 0..SETS {
            let a = self.dev.alloc(m * k)?;
            let b = self.dev.alloc(k * n)?;
            let d = self.dev.alloc(m * n * 2)?;
            self.random(a, DType::F8E4M3, m * k, 11 + 2 * set as u64)?;
            self.random(b, DType::F8E4M3, k * n, 12 + 2 * set as u64)?;
            let spec = GemmSpec {
                trans_b: true,
                a_scale: Some(ones(m * kb)?),
                b_scale: Some(ones(nb * kb)?),
                a_scale_mode: ScaleMode::Vec128,
                b_scale_mode: ScaleMode::Blk128,
                ..GemmSpec::plain(m, n, k, a, b, d, DType::F8E4M3, DType::BF16)
            };
            match lt.plan(&spec) {
                Ok(c) => calls.push(c),
                Err(why) => return Ok(Err(why)),
            }
        }
        Ok(Ok(self.time_gemms(lt, &calls, m * n * k)?))
    }

    /// GB/s (bytes read + written) of a device-to-device copy of `bytes` bytes.
    pub fn copy(&self, bytes: u64) -> Result<(Timing, f64), RuntimeError> {
        let src = self.dev.alloc(bytes)?;
        let dst = self.dev.alloc(bytes)?;
        self.random(src, DType::F32, bytes / 4, 7)?;
        let t = self.time(3, 10, 7, || self.dev.copy(dst, src, bytes))?;
        Ok((t, 2.0 * bytes as f64 / (t.ms * 1e-3) / 1e9))
    }

    /// GB/s of quantizing `n` elements of `input` to E4M3 (`amax`: with the amax reduction;
    /// `transpose`: cast+transpose of an [n/cols, cols] matrix, q and qᵀ written).
    pub fn quantize(
        &self,
        n: u64,
        input: DType,
        amax: bool,
        transpose: Option<u64>,
    ) -> Result<(Timing, f64), RuntimeError> {
        let es = input.size() as u64;
        let x = self.dev.alloc(n * es)?;
        self.random(x, input, n, 11)?;
        let q = self.dev.alloc(n)?;
        let qt = self.dev.alloc(n)?;
        let scale = self.dev.alloc(4)?;
        self.dev.upload(scale, &64f32.to_le_bytes())?;
        let m = self.dev.alloc(4)?;
        let w = kernels::dtype_word(input)
            .ok_or_else(|| RuntimeError::Other(format!("cannot quantize {input}")))?;
        let mut launch = match transpose {
            Some(cols) => {
                let rows = n / cols;
                let f = self.dev.kernel(
                    kernels::CAST_TRANSPOSE,
                    &format!("fp8c_cast_transpose_{w}_e4m3_sat"),
                )?;
                let mut a = KernelArgs::new();
                a.ptr(x)
                    .ptr(scale)
                    .ptr(q)
                    .ptr(qt)
                    .ptr(if amax { m } else { 0 })
                    .u64(1)
                    .u64(rows)
                    .u64(cols);
                let tiles = rows.div_ceil(64) * cols.div_ceil(64);
                Launch {
                    func: f,
                    grid: (
                        tiles.min(u64::from(self.dev.info.sm_count) * 8) as u32,
                        1,
                        1,
                    ),
                    block: (256, 1, 1),
                    shared: 0,
                    args: a,
                }
            }
            None => {
                let f = self
                    .dev
                    .kernel(kernels::QUANTIZE, &format!("fp8c_quantize_{w}_e4m3_sat"))?;
                let mut a = KernelArgs::new();
                a.ptr(x)
                    .ptr(scale)
                    .ptr(q)
                    .ptr(if amax { m } else { 0 })
                    .u64(n);
                Launch {
                    func: f,
                    grid: (self.dev.grid_for(n, 16, 256), 1, 1),
                    block: (256, 1, 1),
                    shared: 0,
                    args: a,
                }
            }
        };
        let t = self.time(3, 20, 7, || {
            if amax {
                self.dev.memset8(m, 0, 4)?;
            }
            self.dev.launch(&mut launch)
        })?;
        let written = if transpose.is_some() { 2 * n } else { n };
        Ok((t, (n * es + written) as f64 / (t.ms * 1e-3) / 1e9))
    }
}

/// One queued piece of a layer step.
enum Work {
    Gemm(crate::cuda::gemm::GemmCall),
    Kernel(Launch, Option<u64>),
}

impl Bench {
    /// A planned GEMM on fresh random operands: `D[m×n] (bf16) = A[m×k]·B[k×n]`, B stored
    /// `[n, k]` for FP8 (TN), `[k, n]` for bf16.
    fn gemm_work(
        &self,
        m: u64,
        n: u64,
        k: u64,
        ta: DType,
        tb: DType,
        seed: u64,
    ) -> Result<Work, RuntimeError> {
        let lt = self
            .lt
            .as_ref()
            .ok_or_else(|| RuntimeError::Other("no cuBLASLt".into()))?;
        let a = self.dev.alloc(m * k * ta.size() as u64)?;
        let b = self.dev.alloc(k * n * tb.size() as u64)?;
        let d = self.dev.alloc(m * n * 2)?;
        self.random(a, ta, m * k, seed)?;
        self.random(b, tb, k * n, seed + 1)?;
        let one = self.dev.alloc(4)?;
        self.dev.upload(one, &1f32.to_le_bytes())?;
        let fp8 = ta.is_fp8();
        let spec = GemmSpec {
            b_type: tb,
            trans_b: fp8,
            a_scale: fp8.then_some(one),
            b_scale: fp8.then_some(one),
            // TE: fast accumulation in the forward GEMM (E4M3 × E4M3) only.
            fast_accum: ta == DType::F8E4M3 && tb == DType::F8E4M3,
            ..GemmSpec::plain(m, n, k, a, b, d, ta, DType::BF16)
        };
        Ok(Work::Gemm(lt.plan(&spec).map_err(RuntimeError::Other)?))
    }

    /// A cast+transpose (with amax) of a bf16 `[rows, cols]` tensor to `to`.
    fn cast_transpose_work(
        &self,
        rows: u64,
        cols: u64,
        to: DType,
        seed: u64,
    ) -> Result<Work, RuntimeError> {
        let x = self.dev.alloc(rows * cols * 2)?;
        self.random(x, DType::BF16, rows * cols, seed)?;
        let (q, qt) = (self.dev.alloc(rows * cols)?, self.dev.alloc(rows * cols)?);
        let scale = self.dev.alloc(4)?;
        self.dev.upload(scale, &1f32.to_le_bytes())?;
        let amax = self.dev.alloc(4)?;
        let fmt = if to == DType::F8E5M2 { "e5m2" } else { "e4m3" };
        let f = self.dev.kernel(
            kernels::CAST_TRANSPOSE,
            &format!("fp8c_cast_transpose_bf16_{fmt}_sat"),
        )?;
        let mut a = KernelArgs::new();
        a.ptr(x)
            .ptr(scale)
            .ptr(q)
            .ptr(qt)
            .ptr(amax)
            .u64(1)
            .u64(rows)
            .u64(cols);
        let tiles = rows.div_ceil(64) * cols.div_ceil(64);
        Ok(Work::Kernel(
            Launch {
                func: f,
                grid: (
                    tiles.min(u64::from(self.dev.info.sm_count) * 8) as u32,
                    1,
                    1,
                ),
                block: (256, 1, 1),
                shared: 0,
                args: a,
            },
            Some(amax),
        ))
    }

    /// The GEMMs of one training step of a transformer layer (hidden size `h`, `tokens`
    /// tokens, MLP 4h): for each of its four linear layers (QKV h→3h, projection h→h, FC1
    /// h→4h, FC2 4h→h) the forward, dgrad and wgrad GEMMs, and with `fp8` also the
    /// cast+transpose (+amax) of the input, the weight and the output gradient that feed them,
    /// as TransformerEngine runs them (E4M3 forward, E5M2 gradients). Attention's batched
    /// matmuls, norms, softmax and the optimizer are not included. Returns the median step time
    /// and the GEMMs' TFLOP/s over it.
    pub fn layer_step(
        &self,
        tokens: u64,
        h: u64,
        fp8: bool,
    ) -> Result<(Timing, f64), RuntimeError> {
        let lt = self
            .lt
            .as_ref()
            .ok_or_else(|| RuntimeError::Other("no cuBLASLt".into()))?;
        let (fwd, grad) = if fp8 {
            (DType::F8E4M3, DType::F8E5M2)
        } else {
            (DType::BF16, DType::BF16)
        };
        let mut work = Vec::new();
        let mut flops = 0u64;
        for (i, (din, dout)) in [(h, 3 * h), (h, h), (h, 4 * h), (4 * h, h)]
            .into_iter()
            .enumerate()
        {
            let seed = 100 + 10 * i as u64;
            if fp8 {
                work.push(self.cast_transpose_work(tokens, din, fwd, seed)?); // X
                work.push(self.cast_transpose_work(dout, din, fwd, seed + 1)?); // W
                work.push(self.cast_transpose_work(tokens, dout, grad, seed + 2)?); // dY
            }
            // forward Y = X·Wᵀ, dgrad dX = dY·W, wgrad dW = dYᵀ·X
            work.push(self.gemm_work(tokens, dout, din, fwd, fwd, seed + 3)?);
            work.push(self.gemm_work(tokens, din, dout, grad, fwd, seed + 4)?);
            work.push(self.gemm_work(dout, din, tokens, grad, fwd, seed + 5)?);
            flops += 3 * 2 * tokens * din * dout;
        }
        let t = self.time(2, 5, 7, || {
            for w in &mut work {
                match w {
                    Work::Gemm(c) => lt.run(c, &self.dev)?,
                    Work::Kernel(l, amax) => {
                        if let Some(m) = amax {
                            self.dev.memset8(*m, 0, 4)?;
                        }
                        self.dev.launch(l)?;
                    }
                }
            }
            Ok(())
        })?;
        Ok((t, flops as f64 / (t.ms * 1e-3) / 1e12))
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        // cuBLASLt goes before the device frees its workspace.
        self.lt = None;
    }
}
