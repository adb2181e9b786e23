//! GEMMs through cuBLASLt's raw API (cudarc's `cublaslt::result` layer: its safe API has no
//! FP8).
//!
//! A [`GemmSpec`] states a GEMM in fp8c's row-major terms: `D[b] = α·op(A[b])·op(B[b]) + β·D[b]`
//! with `A` `[m, k]` (stored `[k, m]` when `trans_a`), `B` `[k, n]` (stored `[n, k]` when
//! `trans_b`). cuBLASLt is column-major, so the spec is planned as `Dᵀ = op(B)ᵀ·op(A)ᵀ`: cuBLAS's
//! "A" is our B and its "B" our A. Hopper's FP8 kernels take only the TN layout, which in our
//! terms is `trans_b = true, trans_a = false`: B stored `[n, k]`, the transposed copy the
//! cast_transpose kernels make (as TransformerEngine's weights are stored).
//!
//! FP8 extras (all device pointers, so nothing waits for the host): the scale_inv of A and B
//! (`A_SCALE_POINTER` / `B_SCALE_POINTER`, swapped with the operands), an FP8 output's scale
//! (`D_SCALE_POINTER`), amax of D (`AMAX_D_POINTER`), and fast accumulation where the IR's
//! `scaled_matmul { fast_accum }` asks for it (the recipe's TE-style per-GEMM choice).
//! Epilogues: bias, GELU (cuBLASLt's is the tanh approximation) and both. Every request is
//! first checked against cuBLASLt's documented FP8 rules (`gemm_rules.rs`); the lowering
//! falls back to the unfused route when a fused FP8 output is refused.
//!
//! Planning (descriptors, layouts and the heuristic's algorithm) happens in `prepare`, so a
//! GEMM cuBLASLt cannot do is an error before the first step runs.

use crate::backend::RuntimeError;
use crate::cuda::device::Device;
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;
use fp8c_ir::DType;
use std::ffi::c_void;

/// Bytes of cuBLASLt workspace (Hopper's kernels want up to 32 MiB).
pub const WORKSPACE_BYTES: u64 = 32 << 20;

/// cuBLASLt's handle and workspace for one device.
pub(crate) struct Lt {
    /// Null on the emulated device, whose GEMMs `emu_gemm.rs` computes.
    handle: sys::cublasLtHandle_t,
    workspace: u64,
    /// A device f32 zero, β for device-pointer-mode GEMMs.
    zero: u64,
}

impl Lt {
    /// Opens cuBLASLt on `dev` (the library must be present: `libs::require_cublaslt`).
    pub fn new(dev: &Device) -> Result<Lt, RuntimeError> {
        if dev.is_emulated() {
            return Ok(Lt {
                handle: std::ptr::null_mut(),
                workspace: 0,
                zero: 0,
            });
        }
        let handle = lt::create_handle()
            .map_err(|e| RuntimeError::Other(format!("cublasLtCreate failed: {e}")))?;
        let workspace = dev.alloc(WORKSPACE_BYTES)?;
        let zero = dev.alloc(4)?;
        dev.memset8(zero, 0, 4)?;
        Ok(Lt {
            handle,
            workspace,
            zero,
        })
    }
}

impl Drop for Lt {
    fn drop(&mut self) {
        if self.handle.is_null() {
            return;
        }
        // SAFETY: created in `new`, destroyed once.
        unsafe {
            let _ = lt::destroy_handle(self.handle);
        }
    }
}

/// Epilogue fused into the GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epilogue {
    /// None.
    None,
    /// `+ bias[n]` (broadcast over rows).
    Bias,
    /// tanh-GELU of the result.
    Gelu,
    /// tanh-GELU of `result + bias[n]`.
    GeluBias,
}

/// How an FP8 operand's scale pointer is read (cuBLASLt's `cublasLtMatmulMatrixScale_t`),
/// stated for the operand as cuBLASLt reads it: rows × K with K contiguous (our A `[m, k]`,
/// our B stored `[n, k]`). The block modes need cuBLASLt 12.9+ on Hopper (sm_90):
/// [`Lt::has_block_scaling`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScaleMode {
    /// One f32 for the whole operand.
    #[default]
    Scalar,
    /// One f32 per row (`OUTER_VEC_32F`): f32[rows].
    OuterVec,
    /// One f32 per row and 128 K elements (`VEC128_32F`): element (row, kb) at `kb·rows + row`.
    Vec128,
    /// One f32 per 128×128 block (`BLK128x128_32F`): element (rb, kb) at `rb·KB + kb`, KB =
    /// K/128 (fp8c keeps KB a multiple of 4, where cuBLASLt's documented layouts agree).
    Blk128,
}

impl ScaleMode {
    /// cuBLASLt's enumerator value.
    fn raw(self) -> i32 {
        use sys::cublasLtMatmulMatrixScale_t::*;
        (match self {
            ScaleMode::Scalar => CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
            ScaleMode::OuterVec => CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
            ScaleMode::Vec128 => CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
            ScaleMode::Blk128 => CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
        }) as i32
    }
}

/// A GEMM in row-major terms (module docs).
#[derive(Clone, Debug)]
pub struct GemmSpec {
    /// Rows of D.
    pub m: u64,
    /// Columns of D.
    pub n: u64,
    /// The reduction size.
    pub k: u64,
    /// Number of matrices (1: not batched).
    pub batch: u64,
    /// Device pointers of A, B and D.
    pub a: u64,
    /// B.
    pub b: u64,
    /// D.
    pub d: u64,
    /// Element types.
    pub a_type: DType,
    /// B's type.
    pub b_type: DType,
    /// D's type.
    pub d_type: DType,
    /// A is stored `[k, m]`.
    pub trans_a: bool,
    /// B is stored `[n, k]`.
    pub trans_b: bool,
    /// Element strides between batch entries (0: the same matrix for every entry).
    pub stride_a: u64,
    /// B's batch stride.
    pub stride_b: u64,
    /// D's batch stride.
    pub stride_d: u64,
    /// α (host value; ignored when `alpha_ptr` is set).
    pub alpha: f32,
    /// β: non-zero accumulates into D (C = D in place).
    pub beta: f32,
    /// α from device memory (f32[]); β is then 0.
    pub alpha_ptr: Option<u64>,
    /// FP8: scale_inv of A (f32[]).
    pub a_scale: Option<u64>,
    /// FP8: scale_inv of B.
    pub b_scale: Option<u64>,
    /// FP8 output: the scale D is multiplied by before its cast.
    pub d_scale: Option<u64>,
    /// amax of D (f32[]), written by cuBLASLt.
    pub amax_d: Option<u64>,
    /// Bias pointer and type, for `Bias` / `GeluBias`.
    pub bias: Option<(u64, DType)>,
    /// The epilogue.
    pub epilogue: Epilogue,
    /// FP8 fast accumulation.
    pub fast_accum: bool,
    /// How `a_scale` is read.
    pub a_scale_mode: ScaleMode,
    /// How `b_scale` is read.
    pub b_scale_mode: ScaleMode,
}

impl GemmSpec {
    /// `D [m, n] = A [m, k] · B [k, n]` at device addresses `a`, `b`, `d`, operands of type
    /// `t` and D of type `out`, row-major, not batched, α = 1, β = 0, no scales, no epilogue;
    /// callers change the fields they need.
    #[allow(clippy::too_many_arguments)]
    pub fn plain(m: u64, n: u64, k: u64, a: u64, b: u64, d: u64, t: DType, out: DType) -> Self {
        GemmSpec {
            m,
            n,
            k,
            batch: 1,
            a,
            b,
            d,
            a_type: t,
            b_type: t,
            d_type: out,
            trans_a: false,
            trans_b: false,
            stride_a: 0,
            stride_b: 0,
            stride_d: 0,
            alpha: 1.0,
            beta: 0.0,
            alpha_ptr: None,
            a_scale: None,
            b_scale: None,
            d_scale: None,
            amax_d: None,
            bias: None,
            epilogue: Epilogue::None,
            fast_accum: false,
            a_scale_mode: ScaleMode::Scalar,
            b_scale_mode: ScaleMode::Scalar,
        }
    }
}

fn data_type(d: DType) -> Result<sys::cudaDataType, String> {
    Ok(match d {
        DType::F32 => sys::cudaDataType::CUDA_R_32F,
        DType::BF16 => sys::cudaDataType::CUDA_R_16BF,
        DType::F16 => sys::cudaDataType::CUDA_R_16F,
        DType::F8E4M3 => sys::cudaDataType::CUDA_R_8F_E4M3,
        DType::F8E5M2 => sys::cudaDataType::CUDA_R_8F_E5M2,
        other => return Err(format!("cuBLASLt GEMMs do not take {other}")),
    })
}

/// A planned GEMM: descriptors, layouts and algorithm; destroyed on drop.
pub(crate) struct GemmCall {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: [sys::cublasLtMatrixLayout_t; 4], // cuBLAS A (our B), cuBLAS B (our A), C, D
    algo: sys::cublasLtMatmulAlgo_t,
    ptrs: [u64; 3], // cuBLAS A, cuBLAS B, D (C = D)
    alpha: f32,
    beta: f32,
    alpha_ptr: Option<u64>,
    workspace_bytes: usize,
    /// On the emulated device: the checked request, computed by `emu_gemm`.
    emulated: Option<Box<GemmSpec>>,
}

impl Drop for GemmCall {
    fn drop(&mut self) {
        // SAFETY: created in `plan`, destroyed once.
        unsafe {
            for l in self.layouts {
                if !l.is_null() {
                    let _ = lt::destroy_matrix_layout(l);
                }
            }
            if !self.desc.is_null() {
                let _ = lt::destroy_matmul_desc(self.desc);
            }
        }
    }
}

impl std::fmt::Debug for GemmCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GemmCall")
            .field("ptrs", &self.ptrs)
            .finish_non_exhaustive()
    }
}

fn st(what: &'static str) -> impl Fn(lt::CublasError) -> String {
    move |e| format!("cuBLASLt {what}: {e}")
}

unsafe fn set_desc<T: Copy>(
    desc: sys::cublasLtMatmulDesc_t,
    attr: sys::cublasLtMatmulDescAttributes_t,
    v: T,
) -> Result<(), String> {
    // SAFETY: the caller passes a live descriptor and the attribute's documented type.
    unsafe {
        lt::set_matmul_desc_attribute(
            desc,
            attr,
            (&v as *const T).cast::<c_void>(),
            std::mem::size_of::<T>(),
        )
    }
    .map_err(|e| format!("cuBLASLt cannot set {attr:?}: {e}"))
}

/// A column-major layout of `rows × cols` with leading dimension `ld`, batched.
fn layout(
    t: DType,
    rows: u64,
    cols: u64,
    ld: u64,
    batch: u64,
    stride: u64,
) -> Result<sys::cublasLtMatrixLayout_t, String> {
    let l = lt::create_matrix_layout(data_type(t)?, rows, cols, ld as i64).map_err(st("layout"))?;
    if batch > 1 {
        let count = i32::try_from(batch).map_err(|_| format!("batch {batch} is too large"))?;
        let stride = stride as i64;
        // SAFETY: a live layout; BATCH_COUNT is int32, STRIDED_BATCH_OFFSET int64.
        unsafe {
            lt::set_matrix_layout_attribute(
                l,
                sys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                (&count as *const i32).cast::<c_void>(),
                4,
            )
            .map_err(st("batch count"))?;
            lt::set_matrix_layout_attribute(
                l,
                sys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                (&stride as *const i64).cast::<c_void>(),
                8,
            )
            .map_err(st("batch stride"))?;
        }
    }
    Ok(l)
}

impl Lt {
    /// Whether cuBLASLt has the block-scaled FP8 modes ([`ScaleMode`]'s `OuterVec`, `Vec128`,
    /// `Blk128`) on a device of compute capability `cc`: cuBLASLt 12.9 or newer on Hopper
    /// (sm_90; Blackwell has the MX modes instead). The emulated device describes an H100
    /// with CUDA 13.
    pub fn has_block_scaling(&self, cc: (i32, i32)) -> bool {
        if cc.0 != 9 {
            return false;
        }
        if self.handle.is_null() {
            return true;
        }
        // SAFETY: a plain query of the loaded library.
        unsafe { sys::cublasLtGetVersion() >= 120_900 }
    }

    /// Plans `s` (module docs); an `Err` says why cuBLASLt cannot run it.
    pub fn plan(&self, s: &GemmSpec) -> Result<GemmCall, String> {
        let fp8 = s.a_type.is_fp8() || s.b_type.is_fp8();
        crate::cuda::gemm_rules::check(s)?;
        let emulated = self.handle.is_null();
        let mut call = GemmCall {
            desc: std::ptr::null_mut(),
            layouts: [std::ptr::null_mut(); 4],
            // SAFETY: an all-zero algo is a valid placeholder (overwritten by the heuristic;
            // never read by an emulated call).
            algo: unsafe { std::mem::zeroed() },
            ptrs: [s.b, s.a, s.d],
            alpha: s.alpha,
            beta: s.beta,
            alpha_ptr: s.alpha_ptr,
            workspace_bytes: if emulated {
                0
            } else {
                WORKSPACE_BYTES as usize
            },
            emulated: emulated.then(|| Box::new(s.clone())),
        };
        if emulated {
            return Ok(call);
        }
        call.desc = lt::create_matmul_desc(
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cudaDataType::CUDA_R_32F,
        )
        .map_err(st("matmul descriptor"))?;
        use sys::cublasLtMatmulDescAttributes_t::*;
        let op = |t: bool| -> i32 { i32::from(t) }; // CUBLAS_OP_N = 0, CUBLAS_OP_T = 1
        // SAFETY (every set_desc below): a live descriptor and each attribute's documented type.
        unsafe {
            set_desc(call.desc, CUBLASLT_MATMUL_DESC_TRANSA, op(s.trans_b))?;
            set_desc(call.desc, CUBLASLT_MATMUL_DESC_TRANSB, op(s.trans_a))?;
            if s.alpha_ptr.is_some() {
                set_desc(
                    call.desc,
                    CUBLASLT_MATMUL_DESC_POINTER_MODE,
                    sys::cublasLtPointerMode_t::CUBLASLT_POINTER_MODE_DEVICE as i32,
                )?;
            }
            if let Some(p) = s.b_scale {
                set_desc(call.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, p)?;
            }
            if let Some(p) = s.a_scale {
                set_desc(call.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, p)?;
            }
            if let Some(p) = s.d_scale {
                set_desc(call.desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, p)?;
            }
            if let Some(p) = s.amax_d {
                set_desc(call.desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, p)?;
            }
            if fp8 {
                set_desc(
                    call.desc,
                    CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                    i8::from(s.fast_accum),
                )?;
            }
            // cuBLAS's A is our B (and the other way round), like the scale pointers.
            if s.b_scale_mode != ScaleMode::Scalar {
                set_desc(
                    call.desc,
                    CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                    s.b_scale_mode.raw(),
                )?;
            }
            if s.a_scale_mode != ScaleMode::Scalar {
                set_desc(
                    call.desc,
                    CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                    s.a_scale_mode.raw(),
                )?;
            }
            let epi = match s.epilogue {
                Epilogue::None => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT,
                Epilogue::Bias => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
                Epilogue::Gelu => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU,
                Epilogue::GeluBias => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS,
            };
            if s.epilogue != Epilogue::None {
                set_desc(call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epi as u32)?;
            }
            if matches!(s.epilogue, Epilogue::Bias | Epilogue::GeluBias) {
                let (ptr, t) = s.bias.ok_or("a bias epilogue needs a bias")?;
                set_desc(call.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, ptr)?;
                set_desc(
                    call.desc,
                    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                    data_type(t)? as i32,
                )?;
            }
        }
        // Column-major: cuBLAS A = our B as stored, cuBLAS B = our A as stored, D = our Dᵀ.
        let (b_rows, b_cols) = if s.trans_b { (s.k, s.n) } else { (s.n, s.k) };
        let (a_rows, a_cols) = if s.trans_a { (s.m, s.k) } else { (s.k, s.m) };
        call.layouts[0] = layout(s.b_type, b_rows, b_cols, b_rows, s.batch, s.stride_b)?;
        call.layouts[1] = layout(s.a_type, a_rows, a_cols, a_rows, s.batch, s.stride_a)?;
        // C shares D's memory; an FP8 D takes a 16-bit C of the bias's type (never read: β
        // is 0 then), as cuBLASLt's type table requires.
        let c_type = crate::cuda::gemm_rules::c_type(s);
        call.layouts[2] = layout(c_type, s.n, s.m, s.n, s.batch, s.stride_d)?;
        call.layouts[3] = layout(s.d_type, s.n, s.m, s.n, s.batch, s.stride_d)?;
        let pref = lt::create_matmul_pref().map_err(st("preference"))?;
        let ws = WORKSPACE_BYTES;
        // SAFETY: a live preference; MAX_WORKSPACE_BYTES is uint64.
        let heuristic = unsafe {
            let r = lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&ws as *const u64).cast::<c_void>(),
                8,
            )
            .map_err(st("workspace preference"))
            .and_then(|()| {
                use sys::cublasLtMatmulPreferenceAttributes_t::*;
                let attrs = [
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                ];
                for (attr, align) in attrs
                    .into_iter()
                    .zip(crate::cuda::gemm_rules::min_alignments(s))
                {
                    lt::set_matmul_pref_attribute(
                        pref,
                        attr,
                        (&align as *const u32).cast::<c_void>(),
                        4,
                    )
                    .map_err(st("alignment preference"))?;
                }
                Ok(())
            })
            .and_then(|()| {
                lt::get_matmul_algo_heuristic(
                    self.handle,
                    call.desc,
                    call.layouts[0],
                    call.layouts[1],
                    call.layouts[2],
                    call.layouts[3],
                    pref,
                )
                .map_err(|e| {
                    format!(
                        "cuBLASLt has no algorithm for {}×{} · {}×{} -> {} (m={} n={} k={} batch={}): {e}",
                        s.a_type, if s.trans_a { "T" } else { "N" }, s.b_type,
                        if s.trans_b { "T" } else { "N" }, s.d_type, s.m, s.n, s.k, s.batch
                    )
                })
            });
            let _ = lt::destroy_matmul_pref(pref);
            r?
        };
        call.algo = heuristic.algo;
        call.workspace_bytes = heuristic.workspaceSize.min(WORKSPACE_BYTES as usize);
        Ok(call)
    }

    /// Enqueues a planned GEMM on `dev`'s stream.
    pub(crate) fn run(&self, c: &GemmCall, dev: &Device) -> Result<(), RuntimeError> {
        if let Some(s) = &c.emulated {
            let s = s.clone();
            return dev.emu_enqueue(move || {
                // SAFETY: the spec's pointers are emulated allocations sized from the plan,
                // alive while the executable that recorded this call is.
                unsafe { crate::cuda::emu_gemm::run(&s) }
                    .map_err(|e| format!("emulated cuBLASLt: {e}"))
            });
        }
        let stream = dev.stream;
        let (alpha, beta): (*const c_void, *const c_void) = match c.alpha_ptr {
            Some(p) => (p as *const c_void, self.zero as *const c_void),
            None => (
                (&c.alpha as *const f32).cast::<c_void>(),
                (&c.beta as *const f32).cast::<c_void>(),
            ),
        };
        let [a, b, d] = c.ptrs;
        // SAFETY: descriptors and layouts are live (owned by `c`); the pointers come from the
        // program's buffers, sized for these layouts; the workspace is WORKSPACE_BYTES long.
        unsafe {
            lt::matmul(
                self.handle,
                c.desc,
                alpha,
                beta,
                a as *const c_void,
                c.layouts[0],
                b as *const c_void,
                c.layouts[1],
                d as *const c_void,
                c.layouts[2],
                d as *mut c_void,
                c.layouts[3],
                &c.algo,
                self.workspace as *mut c_void,
                c.workspace_bytes,
                stream as sys::cudaStream_t,
            )
        }
        .map_err(|e| RuntimeError::Other(format!("cublasLtMatmul failed: {e}")))
    }
}
