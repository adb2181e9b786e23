//! The precision policy: decides, for every GEMM-like node, whether it runs in FP8 or in high
//! precision, and why. Every other op computes in high precision (only GEMM operands are
//! quantized), as in TransformerEngine.
//!
//! Rules, first match wins (the reason string says which one fired):
//! 1. `--precision f32|bf16`: no FP8 at all (the high-precision baselines).
//! 2. `--keep-high GLOB` on the node name → high ("user: --keep-high").
//! 3. `--force-fp8 GLOB` → FP8 ("user: --force-fp8"), padded with `--pad-to-16`, else
//!    unpadded even when dims are not multiples of 16.
//! 4. `--keep-first-last` → the first and last GEMM in topological order stay high.
//! 5. Both operands are activations (attention's QKᵀ and PV) → high unless `--fp8-attention`
//!    (TE's `fp8_dpa=False` default).
//! 6. GEMM dims (M, N, K; for Conv the channel counts) not multiples of 16 (Hopper's
//!    cuBLASLt FP8 rule) → high, unless `--pad-to-16`.
//! 7. Too small to gain on an H100 → high ("too small to gain"): with `--min-fp8-flops N`,
//!    fewer than N FLOPs; otherwise, in training, the recipe's rule for linear layers
//!    ([`size_rule`]: torchao's auto-filter), and for convolutions and attention an FLOP
//!    threshold ([`DEFAULT_MIN_FP8_FLOPS`]); at inference linear layers have no size rule.
//! 8. Otherwise FP8.
//!
//! In bf16 mode the pass also rewrites each GEMM to compute in bf16 (casts in, cast out), so
//! the bf16 baseline is a real graph, not a flag.

use crate::{Pass, PassCx};
use fp8c_core::{Granularity, Recipe};
use fp8c_ir::{DType, Graph, IrError, NodeId, Op, Value};
use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Serialize;

/// FLOP threshold for the GEMMs no published filter covers (convolutions, and attention's
/// activation×activation products under `--fp8-attention`): 2^24 ≈ 16.8 MFLOP. Below it a GEMM
/// takes a few microseconds on an H100 even in BF16, so the extra amax/scale/quantize launches
/// cost more than FP8 saves. fp8c's own estimate (neither TransformerEngine nor torchao puts
/// convolutions in FP8); linear layers use torchao's measured rules instead ([`size_rule`]).
pub const DEFAULT_MIN_FP8_FLOPS: u64 = 1 << 24;

/// The precision mode of a whole compile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PrecisionMode {
    /// Everything in f32.
    F32,
    /// GEMMs in bf16, the rest in f32.
    Bf16,
    /// GEMMs in FP8 where the policy allows.
    #[default]
    Fp8,
}

impl std::str::FromStr for PrecisionMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(PrecisionMode::F32),
            "bf16" => Ok(PrecisionMode::Bf16),
            "fp8" => Ok(PrecisionMode::Fp8),
            _ => Err(format!(
                "unknown precision `{s}`; expected f32, bf16 or fp8"
            )),
        }
    }
}

/// What the user asked of the policy.
#[derive(Clone, Debug)]
pub struct PolicyOptions {
    /// Overall mode.
    pub mode: PrecisionMode,
    /// Node-name globs forced to high precision.
    pub keep_high: Vec<String>,
    /// Node-name globs forced to FP8.
    pub force_fp8: Vec<String>,
    /// Keep the first and last GEMM high.
    pub keep_first_last: bool,
    /// Allow activation×activation GEMMs (attention) in FP8.
    pub fp8_attention: bool,
    /// Pad GEMM dims to multiples of 16 instead of falling back to high precision.
    pub pad_to_16: bool,
    /// GEMMs below this many FLOPs stay high (`--min-fp8-flops`); `None`: the recipe's size
    /// rule ([`size_rule`]), `Some(0)`: no size rule at all.
    pub min_fp8_flops: Option<u64>,
    /// Per-GEMM scaling granularity under current scaling (issue #16): node-name glob and
    /// the granularity for the FP8 GEMMs it matches, first match winning (`--granularity
    /// GLOB=NAME`, a config's `[gemms]` table); the others use the recipe's.
    pub granularity: Vec<(String, fp8c_core::Granularity)>,
}

impl Default for PolicyOptions {
    fn default() -> Self {
        PolicyOptions {
            mode: PrecisionMode::Fp8,
            keep_high: Vec::new(),
            force_fp8: Vec::new(),
            keep_first_last: false,
            fp8_attention: false,
            pad_to_16: false,
            min_fp8_flops: None,
            granularity: Vec::new(),
        }
    }
}

/// Compiles a list of globs, naming the flag and pattern on error.
pub fn compile_globs(flag: &str, pats: &[String]) -> Result<GlobSet, String> {
    let mut b = GlobSetBuilder::new();
    for p in pats {
        let g = Glob::new(p).map_err(|e| format!("{flag} '{p}': invalid pattern: {e}"))?;
        b.add(g);
    }
    b.build().map_err(|e| format!("{flag}: {e}"))
}

impl PolicyOptions {
    /// Checks the globs (so a bad pattern fails before any work).
    pub fn validate(&self) -> Result<(), String> {
        compile_globs("--keep-high", &self.keep_high)?;
        compile_globs("--force-fp8", &self.force_fp8)?;
        for (glob, _) in &self.granularity {
            compile_globs("--granularity", std::slice::from_ref(glob))?;
        }
        Ok(())
    }
}

/// The decided precision of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Operands quantized to FP8, f32 accumulation.
    Fp8,
    /// bf16 compute.
    Bf16,
    /// f32 compute.
    F32,
    /// Integer or f64 operands: the GEMM computes in its own type (`Rule::OwnType`).
    Own,
}

/// GEMM dimensions of a GEMM-like node (Conv as implicit GEMM).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GemmDims {
    /// Rows of the output (batch dims folded in when the second operand is 2-D).
    pub m: Option<u64>,
    /// Columns of the output.
    pub n: Option<u64>,
    /// Reduction length.
    pub k: Option<u64>,
    /// Independent GEMMs (batched matmul).
    pub batch: Option<u64>,
}

impl GemmDims {
    /// 2·batch·M·N·K, if every dim is known.
    pub fn flops(&self) -> Option<u64> {
        [self.batch?, self.m?, self.n?, self.k?]
            .iter()
            .try_fold(2u64, |a, &b| a.checked_mul(b))
    }
}

/// Which rule of the policy decided a node (typed: passes read this, never the reason text).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// Both operands are already dequantized FP8 (the model or an earlier pass quantized it).
    AlreadyFp8,
    /// `--precision f32|bf16`: nothing goes to FP8.
    Mode,
    /// `--keep-high GLOB` matched.
    KeepHigh,
    /// `--force-fp8 GLOB` matched.
    ForceFp8,
    /// `--keep-first-last`.
    KeepFirstLast,
    /// Both operands are activations (attention's QKᵀ and PV) and `--fp8-attention` is off.
    Attention,
    /// A mixture-of-experts router: a GEMM whose logits choose experts (they reach a `top_k`
    /// through layout ops, softmax, sigmoid or a bias add); kept high, as the
    /// router is in TransformerEngine and torchao recipes (`--force-fp8 NAME` overrides).
    Router,
    /// A language model's head: the GEMM producing a graph output (through views) in a model
    /// with a token embedding; kept high as torchao (`filter_fqns=["lm_head"]`) and
    /// TransformerEngine recipes do (`--force-fp8 NAME` overrides).
    LmHead,
    /// A dim is not a multiple of 16 and the GEMM cannot be padded.
    Misaligned,
    /// Too small for FP8 to gain: below `--min-fp8-flops`, or the recipe's size rule
    /// ([`size_rule`]).
    TooSmall,
    /// FP8 with a weight operand (the default), padded to multiples of 16 if `pad` is set.
    Fp8Gemm,
    /// A mixture-of-experts expert GEMM in FP8: one operand is gathered from a table of
    /// weights by the router's indices ([`is_gathered_weight`]), so it is a weight GEMM, as
    /// DeepSeek-V3 and TransformerEngine run expert GEMMs.
    ExpertGemm,
    /// FP8 attention (`--fp8-attention`).
    Fp8Attention,
    /// Not a GEMM: computes in high precision (norms, softmax, reductions, elementwise).
    NotGemm,
    /// The operands are integers or f64 (e.g. ONNX MatMulInteger/ConvInteger, imported as
    /// i32 and f64 GEMMs): the model asks for exact arithmetic, so the GEMM keeps its type in
    /// every mode (`--force-fp8` included).
    OwnType,
}

/// How the report says that `--pad-to-16` pads a GEMM.
const PADDED_REASON: &str = "padded to multiples of 16";

/// One row of the explain report.
#[derive(Clone, Debug, Serialize)]
pub struct Decision {
    /// Node name.
    pub name: String,
    /// ONNX-level op (`matmul`, `gemm`, `conv`).
    pub op: String,
    /// GEMM dims.
    #[serde(flatten)]
    pub dims: GemmDims,
    /// 2·M·N·K·batch.
    pub flops: Option<u64>,
    /// The decision.
    pub precision: Precision,
    /// The rule that decided it.
    #[serde(skip)]
    pub rule: Rule,
    /// The scaling pass zero-pads the operands to multiples of 16 (`--pad-to-16`).
    #[serde(skip)]
    pub pad: bool,
    /// Why, for people (no code reads it).
    pub reason: String,
    /// Set by the scaling pass when an FP8 GEMM does not get the scaling its recipe asks
    /// for, saying what it got and why (`per-tensor scaling instead of block: K = 64 ...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scaling_fallback: Option<String>,
    /// The type the node computes in when it is not quantized (its first output's; f16 for an
    /// f16 model's GEMMs, which keep it), for the report's wording.
    #[serde(skip)]
    pub dtype: DType,
}

/// The precision pass.
pub struct PrecisionPass;

impl Pass for PrecisionPass {
    fn name(&self) -> &'static str {
        "precision"
    }

    fn about(&self) -> &'static str {
        "per-GEMM FP8 / high-precision decision with a reason (--report shows them)"
    }

    fn run(&self, g: &mut Graph, cx: &mut PassCx) -> Result<bool, IrError> {
        let training = cx.options.train.is_some();
        let decisions =
            decide(g, &cx.options.policy, &cx.options.recipe, training).map_err(IrError::Other)?;
        let mut changed = false;
        if cx.options.policy.mode == PrecisionMode::Bf16 {
            for d in decisions.iter().filter(|d| d.rule != Rule::OwnType) {
                if let Some(id) = g.find_node(&d.name) {
                    changed |= compute_in(g, id, DType::BF16)?;
                }
            }
        }
        cx.others = other_nodes(g, &cx.options.policy);
        cx.decisions = decisions;
        Ok(changed)
    }
}

/// Is `v` a weight: a value that no graph input or state reaches — params and constants, and
/// whatever is computed from them alone (layout ops, casts, dequantized FP8 weights, and the
/// tensors exporters build from constants, such as `constant_of_shape` fills that canonicalize
/// leaves unfolded because they are large). Such a value is the same at every step, so the
/// policy treats it as a weight, never as the activation side of an attention product.
pub fn is_weight(g: &Graph, v: Value) -> bool {
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![v.node];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        let n = g.node(id);
        match &n.op {
            Op::Input { .. } | Op::State { .. } => return false,
            _ => stack.extend(n.inputs().iter().map(|i| i.node)),
        }
    }
    true
}

/// Is `v` a weight gathered per token from a weight table — a mixture-of-experts expert's
/// weights picked by the router's indices: `v` is reached, through layout ops and casts only,
/// from a `gather`, `gather_nd` or `gather_elements` whose data operand is a weight
/// ([`is_weight`]) and whose indices are not. Only the indices depend on the inputs; every
/// value the GEMM reads is a weight's.
pub fn is_gathered_weight(g: &Graph, v: Value) -> bool {
    let mut v = v;
    // Layout chains in exports are short (unsqueeze, reshape, transpose, expand).
    for _ in 0..16 {
        let n = g.node(v.node);
        match &n.op {
            Op::Gather { .. } | Op::GatherNd { .. } | Op::GatherElements { .. } => {
                let ins = n.inputs();
                return ins.len() == 2 && is_weight(g, ins[0]) && !is_weight(g, ins[1]);
            }
            Op::Transpose { .. } | Op::Cast { .. } | Op::Expand => {}
            op if op.props().view => {}
            _ => return false,
        }
        // The data operand of a layout op is its first; the others (shapes, axes) are constants.
        let Some(&first) = n.inputs().first() else {
            return false;
        };
        if n.inputs()[1..].iter().any(|&x| !is_weight(g, x)) {
            return false;
        }
        v = first;
    }
    false
}

/// GEMM dims of a MatMul / Gemm / Conv node.
pub fn gemm_dims(g: &Graph, id: NodeId) -> GemmDims {
    let n = g.node(id);
    let dim = |v: Value, i: isize| -> Option<u64> {
        let s = &g.value_type(v).shape;
        let idx = if i < 0 { s.len() as isize + i } else { i };
        s.get(usize::try_from(idx).ok()?)?.known()
    };
    let prod = |v: Value, range: std::ops::Range<usize>| -> Option<u64> {
        g.value_type(v)
            .shape
            .get(range)?
            .iter()
            .try_fold(1u64, |a, d| a.checked_mul(d.known()?))
    };
    let ins = n.inputs();
    match &n.op {
        Op::MatMul if ins.len() == 2 => {
            let (a, b) = (ins[0], ins[1]);
            let (ra, rb) = (g.value_type(a).rank(), g.value_type(b).rank());
            let k = dim(a, -1);
            let nn = if rb >= 2 { dim(b, -1) } else { Some(1) };
            if rb <= 2 {
                // A weight-like right operand: fold every leading dim of A into M.
                GemmDims {
                    m: prod(a, 0..ra.saturating_sub(1)),
                    n: nn,
                    k,
                    batch: Some(1),
                }
            } else {
                let out = &g.node(id).outputs[0];
                let batch = out
                    .shape
                    .get(..out.rank().saturating_sub(2))
                    .and_then(|s| s.iter().try_fold(1u64, |a, d| a.checked_mul(d.known()?)));
                let m = if ra >= 2 { dim(a, -2) } else { Some(1) };
                GemmDims { m, n: nn, k, batch }
            }
        }
        Op::Gemm {
            trans_a, trans_b, ..
        } if ins.len() >= 2 => {
            let (a, b) = (ins[0], ins[1]);
            let (m, k) = if *trans_a {
                (dim(a, 1), dim(a, 0))
            } else {
                (dim(a, 0), dim(a, 1))
            };
            let nn = if *trans_b { dim(b, 0) } else { dim(b, 1) };
            GemmDims {
                m,
                n: nn,
                k,
                batch: Some(1),
            }
        }
        Op::Conv { group, .. } if ins.len() >= 2 => {
            let (w, out) = (ins[1], &g.node(id).outputs[0]);
            let m = out.shape.first().and_then(|d| d.known()).and_then(|b| {
                out.shape
                    .get(2..)?
                    .iter()
                    .try_fold(b, |a, d| a.checked_mul(d.known()?))
            });
            let k = prod(w, 1..g.value_type(w).rank());
            let _ = group;
            GemmDims {
                m,
                n: dim(w, 0),
                k,
                batch: Some(1),
            }
        }
        // Fused attention: its Q·Kᵀ per head (P·V has the same FLOPs when Dv = D).
        Op::Attention { .. } if ins.len() >= 2 => GemmDims {
            m: dim(ins[0], 2),
            n: dim(ins[1], 2),
            k: dim(ins[0], 3),
            batch: prod(ins[0], 0..2),
        },
        _ => GemmDims::default(),
    }
}

/// The shape rule of an FP8 GEMM on Hopper; returns the offending dims as text if it fails.
///
/// cuBLASLt runs FP8 only in the "TN" layout: both FP8 operands are K-major, so K is their
/// leading dimension and must keep every row 16-byte aligned: K % 16 (cuBLAS docs,
/// `cublasLtMatmul`, "FP8 requirements"). PyTorch's `torch._scaled_mm` (the kernel torchao.float8
/// calls) checks exactly K % 16 and N % 16 and no longer M (pytorch/pytorch#108308: "if
/// mat1.size(-1) % 16 == 0 and the matrix is row major the leading dimension can be any
/// value"); N % 16 keeps the output's rows aligned for every output type. TransformerEngine's
/// `check_dim_for_fp8_exec` is stricter on M (rows % 8); fp8c follows what the hardware needs,
/// so M — the token count, which changes with every batch — is free.
fn misaligned(g: &Graph, id: NodeId, d: &GemmDims) -> Option<String> {
    let n = g.node(id);
    let bad = |name: &str, v: Option<u64>| match v {
        Some(x) if !x.is_multiple_of(16) => Some(format!("{name}={x}")),
        None => Some(format!("{name}=?")),
        _ => None,
    };
    let list: Vec<String> = match &n.op {
        // Convolutions: the channel counts (per group) are the GEMM's K and N dims.
        Op::Conv { group, .. } => {
            let w = g.value_type(n.inputs()[1]);
            let cin_g = w.shape.get(1).and_then(|d| d.known());
            let cout = w.shape.first().and_then(|d| d.known());
            let cout_g = cout.map(|c| c / (*group).max(1) as u64);
            [bad("C_in/group", cin_g), bad("C_out/group", cout_g)]
                .into_iter()
                .flatten()
                .collect()
        }
        // K and N come from the weight; M is free (see above).
        _ => [bad("N", d.n), bad("K", d.k)]
            .into_iter()
            .flatten()
            .collect(),
    };
    (!list.is_empty()).then(|| list.join(", "))
}

/// The LM head of a language model, if the graph is one: the last GEMM whose result reaches a
/// graph output through views, transposes and casts only, in a graph with a token embedding
/// (a `gather` from a float weight of rank 2). Classifiers without an embedding (MLPs, CNNs)
/// and encoders whose outputs come from a norm have none.
fn lm_head(g: &Graph, gemms: &[NodeId]) -> Option<NodeId> {
    let has_embedding = g.node_ids().into_iter().any(|id| {
        let n = g.node(id);
        matches!(n.op, Op::Gather { .. })
            && n.inputs().first().is_some_and(|&d| {
                let t = g.value_type(d);
                t.dtype.is_float() && t.rank() == 2 && is_weight(g, d)
            })
    });
    if !has_embedding {
        return None;
    }
    let &last = gemms.last()?;
    // Follow the GEMM's single-consumer chain of layout-only ops to a graph output.
    let mut v = fp8c_ir::Value::new(last, 0);
    loop {
        if g.is_graph_result(v) {
            return Some(last);
        }
        let users = g.users(v);
        let [(u, _)] = users.as_slice() else {
            return None;
        };
        let n = g.node(*u);
        let layout = n.op.props().view || matches!(n.op, Op::Transpose { .. } | Op::Cast { .. });
        if !layout || n.outputs.len() != 1 {
            return None;
        }
        v = fp8c_ir::Value::new(*u, 0);
    }
}

/// Is GEMM `id` a mixture-of-experts router: do its logits reach a `top_k` within a few steps of layout ops, softmax, sigmoid, casts or a bias add?
fn is_router(g: &Graph, id: NodeId) -> bool {
    let mut frontier = vec![fp8c_ir::Value::new(id, 0)];
    for _ in 0..6 {
        let mut next = Vec::new();
        for v in frontier {
            for (u, _) in g.users(v) {
                let n = g.node(u);
                match n.op {
                    // (arg_max is a classifier head's, not a router's: not counted.)
                    Op::TopK { .. } => return true,
                    Op::Softmax { .. }
                    | Op::LogSoftmax { .. }
                    | Op::Sigmoid
                    | Op::Cast { .. }
                    | Op::Transpose { .. }
                    | Op::Add => next.push(fp8c_ir::Value::new(u, 0)),
                    _ if n.op.props().view => next.push(fp8c_ir::Value::new(u, 0)),
                    _ => {}
                }
            }
        }
        if next.is_empty() {
            return false;
        }
        frontier = next;
    }
    false
}

/// The size rule a recipe brings for the linear layers (MatMul / Gemm with a weight operand)
/// of `granularity`, from torchao's auto-filter (`torchao.float8._auto_filter_for_recipe`,
/// torchao/float8/float8_linear_utils.py), whose thresholds come from its H100 roofline
/// tables of a training linear (forward, dgrad and wgrad; torchao/float8/README.md,
/// "Performance"): below them FP8 is no faster than BF16 once the casts are paid for.
///
/// - tensorwise (and delayed scaling, also one scale per tensor): skipped when K ≤ 4096 and
///   N ≤ 1024 (`_auto_filter_for_tensorwise`);
/// - rowwise: skipped when N ≤ 2048, or K ≤ 1024, or N ≤ 4096 and K ≤ 2048
///   (`_auto_filter_for_rowwise`);
/// - block and mxfp8, which torchao's filter does not cover, and `rowwise_with_gw_hp`, for
///   which it raises NotImplementedError: the rowwise rule, since their casts cost at least
///   what rowwise's do (a scale per row or tile) — fp8c's choice, not a measurement.
///
/// K is the reduction length and N the output features, as in the README's M, K, N tables.
/// (torchao's code unpacks `K, N = weight.shape`, i.e. out × in features of an `nn.Linear`,
/// the other way round; the tables it cites are in GEMM terms, which fp8c follows.)
///
/// Returns why a GEMM of `k` × `n` is too small, or `None` when FP8 may gain.
pub fn size_rule(granularity: Granularity, k: u64, n: u64) -> Option<String> {
    const SEE: &str = "--force-fp8 NAME or --min-fp8-flops 0 overrides";
    match granularity {
        Granularity::Tensorwise => (k <= 4096 && n <= 1024).then(|| {
            format!("K={k} ≤ 4096 and N={n} ≤ 1024 (torchao's H100 tensorwise filter; {SEE})")
        }),
        g => {
            let which = if g == Granularity::Rowwise {
                "torchao's H100 rowwise filter".to_string()
            } else {
                format!("torchao's H100 rowwise filter, which fp8c applies to {g}")
            };
            let fired = if n <= 2048 {
                format!("N={n} ≤ 2048")
            } else if k <= 1024 {
                format!("K={k} ≤ 1024")
            } else if n <= 4096 && k <= 2048 {
                format!("N={n} ≤ 4096 and K={k} ≤ 2048")
            } else {
                return None;
            };
            Some(format!("{fired} ({which}; {SEE})"))
        }
    }
}

/// Why a GEMM is too small for FP8 to gain, if it is: below `--min-fp8-flops` when the user
/// gave it; otherwise, for a linear layer being trained, the recipe's [`size_rule`]; for a
/// linear layer at inference, never (below); for convolutions and activation×activation
/// products, the [`DEFAULT_MIN_FP8_FLOPS`] threshold. Unknown dims never make a GEMM too small.
///
/// At inference no size rule applies to linear layers, as in TransformerEngine's and
/// torchao's inference paths (`fp8_autocast`, `Float8DynamicActivationFloat8WeightConfig`),
/// which quantize every linear: torchao's thresholds come from a training roofline (forward,
/// dgrad and wgrad, each paying its operands' casts), while an inference GEMM reads weights
/// quantized once and gains from their halved bytes even where it is memory-bound.
fn too_small(
    min_flops: Option<u64>,
    linear: bool,
    training: bool,
    granularity: Granularity,
    dims: &GemmDims,
) -> Option<String> {
    let below = |min: u64, whose: &str| {
        let f = dims.flops()?;
        (f < min).then(|| format!("{f} FLOP < {whose}"))
    };
    match (min_flops, linear, training, dims.k, dims.n) {
        (Some(min), ..) => below(min, &format!("--min-fp8-flops {min}")),
        (None, true, true, Some(k), Some(n)) => size_rule(granularity, k, n),
        (None, true, ..) => None,
        (None, false, ..) => below(
            DEFAULT_MIN_FP8_FLOPS,
            "2^24, fp8c's threshold for convolutions and attention, which torchao's filter does \
             not cover; --force-fp8 NAME or --min-fp8-flops N overrides",
        ),
    }
}

/// Decides every GEMM-like node (in topological order) for `recipe`, whose granularity
/// (or the GEMM's `--granularity` override under current scaling) picks the size rule of a
/// `training` compile.
pub fn decide(
    g: &Graph,
    o: &PolicyOptions,
    recipe: &Recipe,
    training: bool,
) -> Result<Vec<Decision>, String> {
    let keep_high = compile_globs("--keep-high", &o.keep_high)?;
    let force_fp8 = compile_globs("--force-fp8", &o.force_fp8)?;
    let granularity = o
        .granularity
        .iter()
        .map(|(glob, gran)| {
            compile_globs("--granularity", std::slice::from_ref(glob)).map(|set| (set, *gran))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let order = g.topo_order().map_err(|e| e.to_string())?;
    let gemms: Vec<NodeId> = order
        .iter()
        .copied()
        .filter(|&id| g.node(id).op.is_gemm_like())
        .collect();
    let high = match o.mode {
        PrecisionMode::Bf16 => Precision::Bf16,
        _ => Precision::F32,
    };
    let lm_head = lm_head(g, &gemms);
    let mut out = Vec::new();
    for (i, &id) in gemms.iter().enumerate() {
        let n = g.node(id);
        let dims = gemm_dims(g, id);
        let flops = dims.flops();
        let both_activations =
            n.inputs().len() >= 2 && !is_weight(g, n.inputs()[0]) && !is_weight(g, n.inputs()[1]);
        // An expert GEMM: one operand gathered from a weight table (on either side: batched
        // experts often compute W·x per token). It is a weight GEMM, so the alignment rule
        // reads it in the weight's frame: a left weight's rows are the N of (W·x)ᵀ = xᵀ·Wᵀ.
        let expert_side = (both_activations && matches!(n.op, Op::MatMul))
            .then(|| (0..2).find(|&i| is_gathered_weight(g, n.inputs()[i])))
            .flatten();
        let both_activations = both_activations && expert_side.is_none();
        let mis = if expert_side == Some(0) {
            let frame = GemmDims {
                m: dims.n,
                n: dims.m,
                ..dims
            };
            misaligned(g, id, &frame)
        } else {
            misaligned(g, id, &dims)
        };
        // The scaling pass pads matmuls and gemms; convolutions it cannot pad.
        let can_pad = o.pad_to_16 && !matches!(n.op, Op::Conv { .. });
        let already_fp8 = n
            .inputs()
            .iter()
            .take(2)
            .all(|&v| matches!(g.node(v.node).op, Op::Dequantize { .. }));
        let padded = mis.is_some() && can_pad;
        let operand_type = n.inputs().first().map(|&v| g.value_type(v).dtype);
        let own_type = operand_type.filter(|t| !matches!(t, DType::F32 | DType::F16 | DType::BF16));
        let (precision, rule, reason) = if let Some(t) = own_type {
            (
                Precision::Own,
                Rule::OwnType,
                format!("{t} operands: the GEMM computes exactly in its own type"),
            )
        } else if already_fp8 {
            (
                Precision::Fp8,
                Rule::AlreadyFp8,
                "FP8 from the model (operands dequantized from FP8)".to_string(),
            )
        } else if o.mode != PrecisionMode::Fp8 {
            (
                high,
                Rule::Mode,
                format!(
                    "--precision {}",
                    if o.mode == PrecisionMode::Bf16 {
                        "bf16"
                    } else {
                        "f32"
                    }
                ),
            )
        } else if keep_high.is_match(&n.name) {
            (high, Rule::KeepHigh, "user: --keep-high".to_string())
        } else if force_fp8.is_match(&n.name) {
            let reason = match (&mis, can_pad) {
                (None, _) => "user: --force-fp8".to_string(),
                (Some(_), true) => format!("user: --force-fp8 ({PADDED_REASON})"),
                // The user insists: the CPU reference computes it unpadded; the CUDA backend
                // falls back to an exact bf16 GEMM of the FP8 values for such shapes.
                (Some(m), false) => {
                    format!("user: --force-fp8, unpadded (dims not multiples of 16: {m})")
                }
            };
            (Precision::Fp8, Rule::ForceFp8, reason)
        } else if o.keep_first_last && (i == 0 || i + 1 == gemms.len()) {
            (
                high,
                Rule::KeepFirstLast,
                format!(
                    "user: --keep-first-last ({} GEMM)",
                    if i == 0 { "first" } else { "last" }
                ),
            )
        } else if lm_head == Some(id) {
            (
                high,
                Rule::LmHead,
                "LM head: logits stay high precision, as in practice (--force-fp8 NAME overrides)"
                    .to_string(),
            )
        } else if is_router(g, id) {
            (
                high,
                Rule::Router,
                "MoE router: routing logits stay high precision, as in practice (--force-fp8 NAME overrides)"
                    .to_string(),
            )
        } else if both_activations && !o.fp8_attention {
            (
                high,
                Rule::Attention,
                "attention (use --fp8-attention)".to_string(),
            )
        } else if let Some(m) = mis.as_ref().filter(|_| !can_pad) {
            let hint = if matches!(n.op, Op::Conv { .. }) {
                "convolutions are not padded"
            } else if o.pad_to_16 {
                "--pad-to-16 pads matmul and gemm only"
            } else {
                "use --pad-to-16"
            };
            (
                high,
                Rule::Misaligned,
                format!("dims not multiples of 16 ({m}); {hint}"),
            )
        } else if let Some(why) = {
            let granularity = match recipe {
                Recipe::Delayed(_) => Granularity::Tensorwise,
                Recipe::Current(r) => granularity
                    .iter()
                    .find(|(set, _)| set.is_match(&n.name))
                    .map_or(r.granularity, |(_, g)| *g),
            };
            let linear = !both_activations && !matches!(n.op, Op::Conv { .. });
            too_small(o.min_fp8_flops, linear, training, granularity, &dims)
        } {
            (high, Rule::TooSmall, format!("too small to gain: {why}"))
        } else if mis.is_some() {
            (
                Precision::Fp8,
                Rule::Fp8Gemm,
                format!("gemm ({PADDED_REASON})"),
            )
        } else if both_activations {
            (
                Precision::Fp8,
                Rule::Fp8Attention,
                "attention in fp8 (--fp8-attention)".to_string(),
            )
        } else if expert_side.is_some() {
            (
                Precision::Fp8,
                Rule::ExpertGemm,
                "expert GEMM: weights gathered from an expert table by the router's indices"
                    .to_string(),
            )
        } else {
            (
                Precision::Fp8,
                Rule::Fp8Gemm,
                "gemm with a weight operand".to_string(),
            )
        };
        let pad = precision == Precision::Fp8 && rule != Rule::AlreadyFp8 && padded;
        out.push(Decision {
            name: n.name.clone(),
            op: n.op.name().to_string(),
            dims,
            flops,
            precision,
            rule,
            pad,
            reason,
            scaling_fallback: None,
            dtype: n.outputs.first().map_or(DType::F32, |t| t.dtype),
        });
    }
    // Fused attention's two products stay high like the unfused ones: `--fp8-attention`
    // leaves attention unfused (canonicalize), so a fused one never goes to FP8. Its row
    // takes its place in topological order.
    let attention: Vec<Decision> = order
        .iter()
        .filter(|&&id| matches!(g.node(id).op, Op::Attention { .. }))
        .map(|&id| {
            let n = g.node(id);
            let dims = gemm_dims(g, id);
            Decision {
                name: n.name.clone(),
                op: n.op.name().to_string(),
                flops: dims.flops(),
                dims,
                precision: high,
                rule: Rule::Attention,
                pad: false,
                reason: "attention (use --fp8-attention)".to_string(),
                scaling_fallback: None,
                dtype: n.outputs.first().map_or(DType::F32, |t| t.dtype),
            }
        })
        .collect();
    if !attention.is_empty() {
        let pos: std::collections::HashMap<&str, usize> = order
            .iter()
            .enumerate()
            .map(|(i, &id)| (g.node(id).name.as_str(), i))
            .collect();
        out.extend(attention);
        out.sort_by_key(|d| pos.get(d.name.as_str()).copied());
    }
    Ok(out)
}

/// Makes node `id` compute in `dt`: float inputs are cast to `dt`, and each float output is
/// cast back to its original type for the readers. Returns whether anything changed.
pub fn compute_in(g: &mut Graph, id: NodeId, dt: DType) -> Result<bool, IrError> {
    let n = g.node(id).clone();
    if n.outputs.iter().all(|t| t.dtype == dt) {
        return Ok(false);
    }
    for (i, &v) in n.inputs().iter().enumerate() {
        let ty = g.value_type(v).clone();
        if ty.dtype.is_float() && ty.dtype != dt {
            let c = g.add_node(
                &format!("{}.in{i}.{}", n.name, dt.name()),
                Op::Cast {
                    to: dt,
                    saturate: false,
                },
                &[v],
            )?;
            g.set_input(id, i, c[0])?;
        }
    }
    let new_outs = g.infer_node(&n.name, &n.op, g.node(id).inputs())?;
    g.set_op(id, n.op.clone(), new_outs.clone());
    for (slot, (old, new)) in n.outputs.iter().zip(&new_outs).enumerate() {
        if old.dtype != new.dtype {
            let v = Value::new(id, slot as u32);
            let back = g.add_node(
                &format!("{}.out.{}", n.name, old.dtype.name()),
                Op::Cast {
                    to: old.dtype,
                    saturate: false,
                },
                &[v],
            )?;
            let users = g.users(v);
            for (u, idx) in users {
                if u != back[0].node {
                    g.set_input(u, idx, back[0])?;
                }
            }
            // Graph outputs and state updates read the cast-back value too.
            let tmp = back[0];
            let outputs: Vec<_> = g
                .outputs()
                .iter()
                .filter(|o| o.value == v)
                .map(|o| o.name.clone())
                .collect();
            for name in outputs {
                g.set_output(&name, tmp)?;
            }
        }
    }
    Ok(true)
}

/// Rows for every non-GEMM computing node: they all stay in high precision.
pub fn other_nodes(g: &Graph, o: &PolicyOptions) -> Vec<Decision> {
    let high = if o.mode == PrecisionMode::Bf16 {
        Precision::Bf16
    } else {
        Precision::F32
    };
    let Ok(order) = g.topo_order() else {
        return Vec::new();
    };
    order
        .into_iter()
        .filter_map(|id| {
            let n = g.node(id);
            if n.op.is_interface()
                || n.op.is_gemm_like()
                || matches!(n.op, Op::Constant { .. } | Op::Attention { .. })
            {
                return None;
            }
            let reason = match &n.op {
                Op::LayerNormalization { .. } | Op::BatchNormalization { .. } => {
                    "blacklist: normalization stays high"
                }
                Op::Softmax { .. } | Op::LogSoftmax { .. } => "blacklist: softmax stays high",
                Op::Exp | Op::Log | Op::Pow | Op::Sqrt | Op::Reciprocal => {
                    "blacklist: numerically sensitive math stays high"
                }
                Op::ReduceMean { .. }
                | Op::ReduceSum { .. }
                | Op::ReduceMax { .. }
                | Op::ReduceMin { .. }
                | Op::ReduceProd { .. } => "blacklist: reductions stay high",
                _ => "not a GEMM: computes in high precision (only GEMM operands are quantized)",
            };
            let high = if n.outputs.iter().all(|t| t.dtype.is_float()) {
                high
            } else {
                Precision::F32
            };
            Some(Decision {
                name: n.name.clone(),
                op: n.op.name().to_string(),
                dims: GemmDims::default(),
                flops: None,
                precision: high,
                rule: Rule::NotGemm,
                pad: false,
                reason: reason.into(),
                scaling_fallback: None,
                dtype: n.outputs.first().map_or(DType::F32, |t| t.dtype),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8c_ir::{Tensor, TensorType};

    /// torchao's auto-filter thresholds, at and just past each boundary (K, N multiples of 16).
    #[test]
    fn size_rules_follow_torchaos_filter_at_its_boundaries() {
        use Granularity::*;
        let small = |g, k, n| size_rule(g, k, n).is_some();
        // Tensorwise: skipped when K ≤ 4096 and N ≤ 1024.
        assert!(small(Tensorwise, 4096, 1024));
        assert!(!small(Tensorwise, 4112, 1024) && !small(Tensorwise, 4096, 1040));
        assert!(!small(Tensorwise, 64, 8192));
        // Rowwise: skipped when N ≤ 2048, or K ≤ 1024, or N ≤ 4096 and K ≤ 2048.
        assert!(small(Rowwise, 8192, 2048) && small(Rowwise, 1024, 8192));
        assert!(small(Rowwise, 2048, 4096));
        assert!(!small(Rowwise, 2064, 4096) && !small(Rowwise, 1040, 4112));
        // The per-tile recipes use rowwise's rule, and say so.
        for g in [Block, Mxfp8] {
            assert_eq!(small(g, 2048, 4096), small(Rowwise, 2048, 4096));
            assert!(
                size_rule(g, 1024, 1024)
                    .unwrap()
                    .contains("fp8c applies to")
            );
        }
        let why = size_rule(Tensorwise, 384, 384).unwrap();
        assert!(why.contains("K=384 ≤ 4096 and N=384 ≤ 1024") && why.contains("torchao"));
    }

    /// A linear layer (256×256) and a small convolution: in training the linear follows the
    /// recipe's torchao rule (tensorwise for delayed scaling, the GEMM's own `--granularity`
    /// under current scaling); at inference it goes to FP8; the convolution, below 2^24 FLOPs,
    /// stays high in both; `--min-fp8-flops 0` turns every size rule off.
    #[test]
    fn training_applies_the_recipe_size_rule_to_linears_only() {
        let mut g = Graph::new("net");
        let x = g
            .add_input("x", TensorType::fixed(DType::F32, &[64, 256]))
            .unwrap();
        let img = g
            .add_input("img", TensorType::fixed(DType::F32, &[1, 16, 8, 8]))
            .unwrap();
        let param = |g: &mut Graph, name: &str, shape: &[u64]| {
            let n = shape.iter().product::<u64>() as usize;
            let t = Tensor::from_f32(shape.to_vec(), &vec![0.01; n]);
            g.add_param(name, t.ty(), Some(t)).unwrap()
        };
        let w = param(&mut g, "fc.weight", &[256, 4096]);
        let y = g.add_node("fc", Op::MatMul, &[x, w]).unwrap()[0];
        g.set_output("y", y).unwrap();
        let cw = param(&mut g, "conv.weight", &[16, 16, 3, 3]);
        let conv = Op::Conv {
            kernel_shape: vec![3, 3],
            strides: vec![1, 1],
            pads: vec![1, 1, 1, 1],
            dilations: vec![1, 1],
            group: 1,
            auto_pad: fp8c_ir::AutoPad::NotSet,
        };
        let c = g.add_node("conv", conv, &[img, cw]).unwrap()[0];
        g.set_output("c", c).unwrap();
        let o = PolicyOptions::default();
        let rules = |o: &PolicyOptions, recipe: &Recipe, training: bool| {
            let d = decide(&g, o, recipe, training).unwrap();
            let rule = |n: &str| d.iter().find(|r| r.name == n).unwrap().rule;
            (rule("fc"), rule("conv"))
        };
        let delayed = Recipe::default();
        // fc: K=256, N=4096 passes tensorwise's rule, fails rowwise's (K ≤ 1024).
        assert_eq!(rules(&o, &delayed, true), (Rule::Fp8Gemm, Rule::TooSmall));
        let rowwise = Recipe::Current(fp8c_core::CurrentScaling::tiled(Granularity::Rowwise));
        assert_eq!(rules(&o, &rowwise, true), (Rule::TooSmall, Rule::TooSmall));
        assert_eq!(rules(&o, &rowwise, false), (Rule::Fp8Gemm, Rule::TooSmall));
        let per_gemm = PolicyOptions {
            granularity: vec![("fc".into(), Granularity::Tensorwise)],
            ..o.clone()
        };
        assert_eq!(rules(&per_gemm, &rowwise, true).0, Rule::Fp8Gemm);
        let off = PolicyOptions {
            min_fp8_flops: Some(0),
            ..o
        };
        assert_eq!(rules(&off, &rowwise, true), (Rule::Fp8Gemm, Rule::Fp8Gemm));
    }

    /// A mixture-of-experts block: the gate's logits go through softmax to top_k (the router
    /// stays high, with its reason); the expert GEMM goes to FP8.
    #[test]
    fn the_moe_router_stays_high_and_experts_go_fp8() {
        let mut g = Graph::new("moe");
        let x = g
            .add_input("x", TensorType::fixed(DType::F32, &[64, 64]))
            .unwrap();
        let w = |g: &mut Graph, name: &str, n: u64| {
            let t = Tensor::from_f32(vec![64, n], &vec![0.01; (64 * n) as usize]);
            g.add_param(name, t.ty(), Some(t)).unwrap()
        };
        let (wg, we) = (w(&mut g, "gate.weight", 16), w(&mut g, "expert.weight", 64));
        let logits = g.add_node("gate", Op::MatMul, &[x, wg]).unwrap()[0];
        let p = g
            .add_node("probs", Op::Softmax { axis: -1 }, &[logits])
            .unwrap()[0];
        let k = g
            .add_node(
                "k",
                Op::Constant {
                    value: Tensor::from_i64(vec![1], &[2]),
                },
                &[],
            )
            .unwrap()[0];
        let top = g
            .add_node(
                "route",
                Op::TopK {
                    axis: -1,
                    largest: true,
                    sorted: true,
                },
                &[p, k],
            )
            .unwrap();
        let y = g.add_node("expert", Op::MatMul, &[x, we]).unwrap()[0];
        g.set_output("y", y).unwrap();
        g.set_output("weights", top[0]).unwrap();
        let o = PolicyOptions {
            min_fp8_flops: Some(0),
            ..PolicyOptions::default()
        };
        let d = decide(&g, &o, &Recipe::default(), false).unwrap();
        let by = |n: &str| d.iter().find(|r| r.name == n).unwrap();
        assert_eq!(
            (by("gate").precision, by("gate").rule),
            (Precision::F32, Rule::Router)
        );
        assert!(
            by("gate").reason.contains("router"),
            "{}",
            by("gate").reason
        );
        assert_eq!(by("expert").precision, Precision::Fp8);
        let forced = PolicyOptions {
            force_fp8: vec!["gate".into()],
            ..o
        };
        assert_eq!(
            decide(&g, &forced, &Recipe::default(), false).unwrap()[0].precision,
            Precision::Fp8
        );
    }
}
