//! What the forward pass keeps for backward, and how: the training step's memory options.
//!
//! After the reverse-mode driver has built the backward nodes, every forward value a backward
//! node reads is *saved*: it stays alive from the forward pass to its last backward reader.
//! The FP8 rules already make an FP8 GEMM's dgrad and wgrad read the forward's FP8 codes
//! (`fp8.rs`), so an FP8 GEMM's input is saved as its codes and scale, one byte an element,
//! as TransformerEngine keeps it ([`SavedActivations::Fp8`]). The other options:
//!
//! - [`SavedActivations::High`]: an FP8 GEMM's input is saved as it was before its
//!   quantization and quantized again for the wgrad with the same scale, to the same codes
//!   (TransformerEngine's `save_original_input`): the same losses bit for bit, more memory
//!   (`fp8.rs`, with the gradient quantizer's `save_original_input`).
//! - [`SavedActivations::Bf16`]: every other saved f32 activation is kept in bf16 and widened
//!   back where backward reads it (`narrow.rs`): about half their memory, at bf16 rounding of
//!   what backward reads.
//! - [`Recompute`]: the chosen regions (each layer, or each attention's scores and
//!   probabilities) are computed again in backward from the values at their boundary, so
//!   only those are saved (`recompute.rs`); the recomputation reads the same delayed-scaling
//!   state as the forward did and updates none, so the losses are the same bit for bit.
//!
//! Both rewrites read their sources through `after(x, dep)` (an ordering edge, no step): the
//! widening and the recomputation then wait for a backward value, and fusion, which shares
//! equal expressions, cannot fold a recomputed node back into its forward twin. The runtime's
//! step order (`fp8c_runtime`'s `schedule.rs`) runs a narrowing cast as soon as its source's
//! forward readers are done.

mod narrow;
mod recompute;

use super::TrainInfo;
use fp8c_ir::{Graph, IrError, NodeId, Value};
use std::collections::{HashMap, HashSet};

/// How activations the backward pass reads are kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SavedActivations {
    /// An FP8 GEMM's input as its FP8 codes and scale; the rest as computed.
    #[default]
    Fp8,
    /// Every saved value as computed: an FP8 GEMM's input in high precision, quantized again
    /// in backward (TransformerEngine's `save_original_input`).
    High,
    /// An FP8 GEMM's input as its FP8 codes; every other saved f32 activation in bf16.
    Bf16,
}

/// What the backward pass computes again instead of keeping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Recompute {
    /// Nothing: every saved value is kept.
    #[default]
    None,
    /// Each attention's scores and probabilities (from the scaled Q·Kᵀ to P·V), from Q, K,
    /// V and the mask.
    Attention,
    /// Each layer (the nodes reading one layer's weights, `…layers.N…`), from its input.
    Layer,
}

/// The graph as the driver left it: which nodes are forward, and each value's adjoint.
pub(crate) struct Backward<'a> {
    /// Nodes of the forward graph (and the loss), before any backward node was added.
    pub forward: &'a HashSet<NodeId>,
    /// The adjoint of every forward value that got one.
    pub adjoints: &'a HashMap<Value, Value>,
    /// The loss's adjoint: every node depending on it is backward.
    pub seed: Value,
    /// The loss.
    pub loss: Value,
}

/// Applies the recompute and saved-activation options to the graph `g` just built by the
/// driver; notes what was done in `info`.
pub(crate) fn apply(
    g: &mut Graph,
    b: &Backward<'_>,
    recompute: Recompute,
    saved: SavedActivations,
    info: &mut TrainInfo,
) -> Result<(), IrError> {
    if recompute != Recompute::None {
        let r = recompute::apply(g, b, recompute)?;
        info.recomputed_regions = r.regions;
        info.recomputed_nodes = r.nodes;
        if r.regions > 0 {
            let what = match recompute {
                Recompute::Layer => "layer",
                _ => "attention",
            };
            info.notes.push(format!(
                "--recompute {what}: {} regions computed again in backward ({} forward nodes copied)",
                r.regions, r.nodes
            ));
        }
        info.notes.extend(r.notes);
    }
    if saved == SavedActivations::Bf16 {
        info.bf16_saved = narrow::apply(g, b)?;
        info.notes.push(format!(
            "--activations bf16: {} saved activations kept in bf16",
            info.bf16_saved
        ));
    }
    Ok(())
}

/// Forward nodes whose results backward nodes (nodes not in `forward`) read.
pub(crate) fn backward_readers(
    g: &Graph,
    forward: &HashSet<NodeId>,
    v: Value,
) -> Vec<(NodeId, usize)> {
    g.users(v)
        .into_iter()
        .filter(|(u, _)| !forward.contains(u))
        .collect()
}

/// Every node `v` depends on (its own node included).
pub(crate) fn ancestors(g: &Graph, roots: &[Value]) -> HashSet<NodeId> {
    let mut seen: HashSet<NodeId> = HashSet::new();
    let mut stack: Vec<NodeId> = roots.iter().map(|v| v.node).collect();
    while let Some(n) = stack.pop() {
        if seen.insert(n) {
            stack.extend(g.node(n).inputs().iter().map(|v| v.node));
        }
    }
    seen
}
