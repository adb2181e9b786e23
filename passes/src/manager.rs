//! The `Pass` trait, the ordered pipeline and the manager that runs it.

use fp8c_ir::{Graph, IrError};
use thiserror::Error;

/// One transformation of the graph.
pub trait Pass {
    /// The name users type in `--print-after` / `--stop-after`.
    fn name(&self) -> &'static str;
    /// One-line description for `--help`.
    fn about(&self) -> &'static str;
    /// Rewrites `g` in place; returns whether anything changed.
    fn run(&self, g: &mut Graph, cx: &mut PassCx) -> Result<bool, IrError>;
}

/// Options every pass can read.
#[derive(Clone, Debug, Default)]
pub struct PassOptions {
    /// Skip the verifier that otherwise runs after every pass (it is cheap: one type
    /// inference per node).
    pub skip_verify: bool,
    /// Pass names after which to record the IR text.
    pub print_after: Vec<String>,
    /// Stop after this pass.
    pub stop_after: Option<String>,
    /// The precision policy.
    pub policy: crate::precision::PolicyOptions,
    /// The FP8 scaling recipe.
    pub recipe: fp8c_core::Recipe,
    /// Skip the fusion pass (`--no-fuse`).
    pub no_fuse: bool,
    /// Leave attention chains unfused (`--no-fuse-attention`; see `crate::attention`).
    pub no_fuse_attention: bool,
    /// Keep inference weights in f32 and quantize them at run time (skips `freeze-weights`;
    /// `fp8c run --stats` measures every quantization, the weights' included).
    pub keep_weights: bool,
    /// Build a training step (the autodiff pass runs only when this is set).
    pub train: Option<crate::autodiff::TrainSpec>,
}

/// Mutable context handed to every pass: options, and what passes record for the user.
#[derive(Debug, Default)]
pub struct PassCx {
    /// Options.
    pub options: PassOptions,
    /// `(pass name, IR text)` recorded after the passes named in `print_after`.
    pub dumps: Vec<(String, String)>,
    /// Human-readable notes passes leave (shown with `-v`).
    pub notes: Vec<String>,
    /// The precision pass's decisions, one per GEMM-like node.
    pub decisions: Vec<crate::precision::Decision>,
    /// Every other computing node, with why it stays high (`--report-all`).
    pub others: Vec<crate::precision::Decision>,
    /// What the scaling pass inserted.
    pub scaling: crate::scaling::ScalingStats,
    /// What the fusion pass did (None when it did not run).
    pub fusion: Option<crate::fusion::FusionStats>,
    /// What the autodiff pass did (None when it did not run).
    pub train: Option<crate::autodiff::TrainInfo>,
    /// `freeze-weights`: bytes of the f32 params it dropped, and of the params it added.
    pub frozen_weight_bytes: (u64, u64),
}

impl PassCx {
    /// A context with the given options.
    pub fn new(options: PassOptions) -> Self {
        PassCx {
            options,
            ..Default::default()
        }
    }
}

/// A pass failed (or broke the graph); carries the last IR that verified.
#[derive(Debug, Error)]
pub enum PassError {
    /// The pass returned an error, or the graph failed verification after it.
    #[error("pass `{pass}` failed: {source}")]
    Failed {
        /// The pass name.
        pass: &'static str,
        /// What went wrong.
        #[source]
        source: IrError,
        /// The graph as it was before the pass ran, with the data of every weight still
        /// held when the pass failed (a pass may release a weight it has used for the last
        /// time: `freeze-weights` lets each f32 weight go once its FP8 copy is made).
        last_good: Box<Graph>,
    },
    /// A pass name given on the command line does not exist.
    #[error("unknown pass `{0}`; passes are: {1}")]
    UnknownPass(String, String),
}

/// The passes, in the order they run: one list for inference and training. Order matters:
/// canonicalize first so every later pass sees a static, folded graph.
pub fn pipeline() -> Vec<Box<dyn Pass>> {
    vec![
        Box::new(crate::canonicalize::Canonicalize),
        // Precision reads static shapes, so it runs after canonicalize.
        Box::new(crate::precision::PrecisionPass),
        // Inference only, after precision: it folds into the convolutions left in high
        // precision (a folded FP8 weight would share one scale across channels).
        Box::new(crate::fold_batch_norm::FoldBatchNorm),
        // Scaling materialises the precision decisions.
        Box::new(crate::scaling::ScalingPass),
        // Inference only, after scaling: the norms after FP8 convolutions fold behind the
        // weights' dequantize, the FP8 codes untouched.
        Box::new(crate::fold_batch_norm::FoldBatchNormFp8),
        // Training only (`PassOptions::train`): after scaling, so the backward GEMMs read the
        // forward FP8 copies (ARCHITECTURE.md, "Training"); before fusion, so the whole step fuses.
        Box::new(crate::autodiff::AutodiffPass),
        // Inference only: weights quantized once, at compile time (FP8 params).
        Box::new(crate::freeze::FreezeWeights),
        // Fusion rewrites what scaling (and autodiff) inserted (skipped with `no_fuse`).
        Box::new(crate::fusion::FusionPass),
    ]
}

/// `(name, about)` of every pass, in pipeline order (for `--help` and validation).
pub fn pass_names() -> Vec<(&'static str, &'static str)> {
    pipeline().iter().map(|p| (p.name(), p.about())).collect()
}

/// Runs a pipeline over a graph.
pub struct PassManager {
    passes: Vec<Box<dyn Pass>>,
}

impl Default for PassManager {
    fn default() -> Self {
        PassManager { passes: pipeline() }
    }
}

impl PassManager {
    /// A manager over a custom list of passes (tests, or other compilers).
    pub fn with_passes(passes: Vec<Box<dyn Pass>>) -> Self {
        PassManager { passes }
    }

    /// Checks that every pass name in the options exists.
    pub fn check_options(&self, o: &PassOptions) -> Result<(), PassError> {
        let known: Vec<&str> = self.passes.iter().map(|p| p.name()).collect();
        for n in o.print_after.iter().chain(o.stop_after.iter()) {
            if !known.contains(&n.as_str()) {
                return Err(PassError::UnknownPass(n.clone(), known.join(", ")));
            }
        }
        Ok(())
    }

    /// Runs the passes in order, honouring `print_after`, `stop_after` and verification.
    pub fn run(&self, g: &mut Graph, cx: &mut PassCx) -> Result<(), PassError> {
        self.check_options(&cx.options)?;
        let verify = !cx.options.skip_verify;
        for pass in &self.passes {
            let before = Backup::of(g);
            let _span = tracing::info_span!("pass", name = pass.name()).entered();
            let started = std::time::Instant::now();
            let fail = |source: IrError, before: Backup| PassError::Failed {
                pass: pass.name(),
                source,
                last_good: Box::new(before.restore()),
            };
            let changed = match pass.run(g, cx) {
                Ok(c) => c,
                Err(e) => return Err(fail(e, before)),
            };
            if verify && let Err(e) = fp8c_ir::verify(g) {
                return Err(fail(e, before));
            }
            tracing::info!(
                changed,
                elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
                "pass done"
            );
            if cx.options.print_after.iter().any(|n| n == pass.name()) {
                cx.dumps
                    .push((pass.name().to_string(), fp8c_ir::text::print(g)));
            }
            if cx.options.stop_after.as_deref() == Some(pass.name()) {
                break;
            }
        }
        Ok(())
    }
}

/// The graph before a pass, kept for [`PassError::Failed`] without keeping its weights'
/// bytes alive: the structure is copied and each weight is held by a [`StorageHandle`], so a
/// pass can free a weight it has used for the last time (a model's f32 weights and their
/// FP8 copies are then never all resident at once).
struct Backup {
    graph: Graph,
    weights: Vec<(String, fp8c_ir::DType, Vec<u64>, fp8c_ir::StorageHandle)>,
}

impl Backup {
    fn of(g: &Graph) -> Backup {
        let weights = g
            .weights()
            .iter()
            .map(|(n, t)| {
                (
                    n.clone(),
                    t.dtype(),
                    t.shape().to_vec(),
                    t.storage().handle(),
                )
            })
            .collect();
        Backup {
            graph: g.clone_without_weights(),
            weights,
        }
    }

    /// The graph with every weight whose bytes are still held somewhere.
    fn restore(self) -> Graph {
        let mut g = self.graph;
        for (name, dtype, shape, h) in self.weights {
            if let Some(t) = h
                .upgrade()
                .and_then(|s| fp8c_ir::Tensor::from_storage(dtype, shape, s).ok())
            {
                // The declaration is the backup's own, so the type matches.
                let _ = g.set_weight(&name, t);
            }
        }
        g
    }
}
