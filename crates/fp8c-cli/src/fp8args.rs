//! The compile flags shared by `compile`, `run` and `train`, by the same names everywhere:
//! input shapes, precision policy, FP8 recipe, pass-manager switches. The session resolves
//! them (`fp8c_session::CompileSettings`), reading `--config` once.

use clap::Args;
use fp8c_session::{CompileSettings, PrecisionMode, RecipeOptions};
use std::path::PathBuf;

/// The shared compile flags.
#[derive(Args, Debug, Clone)]
pub struct Fp8Args {
    /// Concrete shape of an input, e.g. `input_ids=2x64` (repeatable). Symbols it binds
    /// (`batch`, `sequence`) are applied to the other inputs too.
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub input_shape: Vec<String>,
    /// Overall precision: fp8 (GEMMs in FP8 where the policy allows), or the bf16 / f32 baselines.
    #[arg(long, default_value = "fp8", value_name = "f32|bf16|fp8")]
    pub precision: PrecisionMode,
    /// Scaling recipe: current (amax of the tensor itself) or delayed (amax history of past
    /// steps), one scale per tensor; or current scaling per tile: rowwise (torchao: per row of
    /// the activation and column of the weight), block (TE's Float8BlockScaling: 1×128
    /// activation tiles, 128×128 weight blocks) or mxfp8 (1×32 blocks, E8M0 scales); TE's and
    /// torchao's names work too (Float8BlockScaling, MXFP8BlockScaling, tensorwise,
    /// rowwise_with_gw_hp: rowwise with the weight gradient in f32 when training, ...).
    /// Per-tile recipes train too (backward GEMMs re-tiled along their own contraction axis)
    /// and run on CPU and CUDA. [default: current for compile
    /// and run; delayed for train, and for run with --calibrate or a delayed-only flag]
    #[arg(long, value_name = "delayed|current|rowwise|block|mxfp8")]
    pub recipe: Option<String>,
    /// FP8 format: hybrid (E4M3 forward, E5M2 gradients) or e4m3.
    #[arg(long, value_name = "hybrid|e4m3")]
    pub format: Option<String>,
    /// Amax history length for delayed scaling [default: 1024].
    #[arg(long = "amax-history", value_name = "N")]
    pub amax_history: Option<usize>,
    /// How delayed scaling reads the history [default: max].
    #[arg(long = "amax-algo", value_name = "max|most-recent")]
    pub amax_algo: Option<String>,
    /// Scale margin: scale = fp8_max / amax / 2^margin [default: 0].
    #[arg(long, value_name = "M", allow_negative_numbers = true, value_parser = crate::args::f32_in_range)]
    pub margin: Option<f32>,
    /// Current scaling: lower bound on amax [default: 0].
    #[arg(long = "amax-epsilon", value_name = "E", allow_negative_numbers = true, value_parser = crate::args::f32_in_range)]
    pub amax_epsilon: Option<f32>,
    /// Round scales down to powers of two (current, delayed and calibrated scaling): an
    /// exported FP8 Q/DQ model then quantizes to fp8c's very codes in any engine.
    #[arg(long = "power-2-scale")]
    pub power_2_scale: bool,
    /// FP8 GEMMs that use Hopper's fast accumulation on a CUDA device (about 14 significant
    /// bits in the tensor cores); the others accumulate in f32. The host devices (cpu, mlir,
    /// cuda-emulated) sum them in f32 too, unless --hopper-accum. A comma list of fprop,
    /// dgrad, wgrad, or none [default: fprop, as TransformerEngine; none for --emit onnx,
    /// whose Q/DQ MatMuls accumulate in f32].
    #[arg(long = "fast-accum", value_name = "GEMMS")]
    pub fast_accum: Option<String>,
    /// On a host device (cpu, mlir, cuda-emulated; and for --emit mlir), sum the
    /// fast-accumulation GEMMs as Hopper's narrow accumulator does (a model within 4e-5 of an
    /// H100), not in f32: the host reference of a --device cuda run, several times slower.
    #[arg(long = "hopper-accum")]
    pub hopper_accum: bool,
    /// TOML file with a [recipe] table (TransformerEngine's field names) and, for train, a
    /// [train] table (the train flags' names, or Hugging Face's: learning_rate,
    /// gradient_accumulation_steps, max_grad_norm, ...); flags given override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Keep GEMMs whose node name matches GLOB in high precision (repeatable), e.g. 'lm_head*'.
    #[arg(long = "keep-high", value_name = "GLOB")]
    pub keep_high: Vec<String>,
    /// Per-GEMM scaling granularity under current scaling: GEMMs whose node name matches
    /// GLOB use NAME (tensorwise, rowwise, block or mxfp8), the others the recipe's
    /// (repeatable, first match wins, before a config's [[gemms]] entries), e.g.
    /// '*mlp*=block'.
    #[arg(long = "granularity", value_name = "GLOB=NAME")]
    pub granularity: Vec<String>,
    /// Put GEMMs whose node name matches GLOB in FP8 regardless of size or attention rules.
    #[arg(long = "force-fp8", value_name = "GLOB")]
    pub force_fp8: Vec<String>,
    /// Keep the first and last GEMM in high precision.
    #[arg(long = "keep-first-last")]
    pub keep_first_last: bool,
    /// Allow attention's activation×activation matmuls (QKᵀ, PV) in FP8.
    #[arg(long = "fp8-attention")]
    pub fp8_attention: bool,
    /// Pad GEMM dims to multiples of 16 instead of keeping misaligned GEMMs high.
    #[arg(long = "pad-to-16")]
    pub pad_to_16: bool,
    /// Do not run the fusion pass (every amax/scale/quantize node stays its own kernel).
    #[arg(long = "no-fuse")]
    pub no_fuse: bool,
    /// Keep attention as the model spells it (matmul, softmax, matmul: a T×T score tensor
    /// per head) instead of one fused `attention` op, to compare the two.
    #[arg(long = "no-fuse-attention")]
    pub no_fuse_attention: bool,
    /// GEMMs with fewer FLOPs (2·M·N·K) stay high; 0 puts every eligible GEMM in FP8.
    /// Replaces the default size rules: convolutions and attention below 2^24 FLOPs stay
    /// high; in training, linear layers follow torchao's H100 filter for the recipe
    /// (tensorwise and delayed: high when K ≤ 4096 and N ≤ 1024; rowwise, block, mxfp8,
    /// rowwise_with_gw_hp: high when N ≤ 2048, K ≤ 1024, or N ≤ 4096 and K ≤ 2048); at
    /// inference linear layers have no size rule. The reason printed names the rule.
    #[arg(long = "min-fp8-flops", value_name = "N")]
    pub min_fp8_flops: Option<u64>,
    /// Print the IR to stderr after this pass (repeatable; see `fp8c compile --help` for the
    /// pass list).
    #[arg(long = "print-after", value_name = "PASS")]
    pub print_after: Vec<String>,
    /// Stop after this pass and emit the IR as it is then (compile only).
    #[arg(long = "stop-after", value_name = "PASS")]
    pub stop_after: Option<String>,
    /// Do not run the IR verifier after each pass.
    #[arg(long)]
    pub no_verify: bool,
}

impl Fp8Args {
    /// The settings these flags give, for the session to resolve.
    pub fn settings(&self) -> CompileSettings {
        CompileSettings {
            precision: self.precision,
            recipe: RecipeOptions {
                kind: self.recipe.clone(),
                format: self.format.clone(),
                amax_history: self.amax_history,
                amax_algo: self.amax_algo.clone(),
                margin: self.margin,
                amax_epsilon: self.amax_epsilon,
                power_2_scale: self.power_2_scale,
                fast_accum: self.fast_accum.clone(),
                config: None,
            },
            config: self.config.clone(),
            keep_high: self.keep_high.clone(),
            granularity: self.granularity.clone(),
            force_fp8: self.force_fp8.clone(),
            keep_first_last: self.keep_first_last,
            fp8_attention: self.fp8_attention,
            pad_to_16: self.pad_to_16,
            no_fuse: self.no_fuse,
            no_fuse_attention: self.no_fuse_attention,
            min_fp8_flops: self.min_fp8_flops,
            hopper_accum: self.hopper_accum,
            input_shapes: self.input_shape.clone(),
            print_after: self.print_after.clone(),
            stop_after: self.stop_after.clone(),
            no_verify: self.no_verify,
        }
    }
}
