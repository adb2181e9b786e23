//! What the planned peak of a program holds: the live bytes at the peak step, and the
//! resident bytes, by role (weights, gradients, optimizer state, saved activations,
//! workspace, other), so that a user sees what each training option buys
//! (`fp8c train --profile`, `fp8c train --report`, `fp8c compile --report`).
//!
//! Roles come from the program's structure, not from names:
//! - **optimizer steps** (`sgd_update`, `adamw_update`) say which state is a trained weight
//!   (input 0) and which a moment (AdamW's inputs 2 and 3, SGD's 2), read directly or through
//!   a `cast`/`dequantize` (moments kept in bf16 or FP8);
//! - **gradients** are the optimizer's gradient inputs and every backward result that only
//!   feeds them through reshapes, transposes, sums, casts and scalings (a weight gradient's
//!   GEMM output, a bias's sum, the add of a tied weight's two gradients), reductions to a
//!   few bytes (the non-finite check, the global norm) not counting as other readers; a
//!   state read into a gradient (an accumulator) is one too;
//! - **saved activations** are the arena values made up to the step computing the `loss`
//!   output (the forward pass, the graph inputs included) and still live at the peak: what
//!   the forward keeps for backward;
//! - **workspace** is every other live arena value: backward temporaries, values recomputed
//!   or widened for backward, the optimizer's results;
//! - **other** is constants, scaling state and counters.
//!
//! A program without a `loss` output (inference) has no backward: its arena values are
//! activations. The sizes are the plan's (aligned buffers, views counted as buffers, as the
//! CUDA backend allocates them); the CPU backend shares a view's storage with its source.

use crate::program::{ARENA_ALIGN, BufId, BufferKind, Program};
use fp8c_ir::Op;
use serde::Serialize;
use std::collections::HashSet;

/// Bytes by role, at the planned peak.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemoryBreakdown {
    /// Step index at which the live arena bytes peak.
    pub peak_step: usize,
    /// That step's node.
    pub peak_node: String,
    /// Steps of the program.
    pub steps: usize,
    /// Whether the program trains (has a `loss` output).
    pub training: bool,
    /// Trained weights and frozen params (resident), and the new weights live at the peak.
    pub weights: u64,
    /// Parameter gradients live at the peak, and gradient accumulators.
    pub gradients: u64,
    /// Optimizer moments (resident), and their new values live at the peak.
    pub optimizer_state: u64,
    /// Forward results (and graph inputs) live at the peak: kept for backward.
    pub saved_activations: u64,
    /// Other live arena values.
    pub workspace: u64,
    /// Constants, scaling state, counters.
    pub other: u64,
}

impl MemoryBreakdown {
    /// The sum of every role: resident bytes plus the live arena bytes at the peak.
    pub fn total(&self) -> u64 {
        self.weights
            + self.gradients
            + self.optimizer_state
            + self.saved_activations
            + self.workspace
            + self.other
    }
}

fn aligned(bytes: u64) -> u64 {
    bytes.div_ceil(ARENA_ALIGN) * ARENA_ALIGN
}

/// Results this small (a norm, a flag) do not make their inputs something else than
/// gradients.
const TINY: u64 = 4096;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Weight,
    Gradient,
    Moment,
    Other,
}

/// The breakdown of `p`'s planned peak (see the module docs).
pub fn breakdown(p: &Program) -> MemoryBreakdown {
    let n = p.buffers().len();
    let mut writer: Vec<Option<usize>> = vec![None; n];
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, s) in p.steps().iter().enumerate() {
        for &o in &s.outputs {
            writer[o.index()] = Some(i);
        }
        for &b in &s.inputs {
            if readers[b.index()].last() != Some(&i) {
                readers[b.index()].push(i);
            }
        }
    }
    // The state (or param) a value was read from, through casts and dequantizes.
    let origin = |mut b: BufId| -> BufId {
        while let Some(w) = writer[b.index()] {
            let s = &p.steps()[w];
            match s.op {
                Op::Cast { .. } | Op::Dequantize { .. } => b = s.inputs[0],
                _ => break,
            }
        }
        b
    };
    let mut role = vec![Role::Other; n];
    let mut gradient = vec![false; n];
    for s in p.steps() {
        let (weight, moments): (usize, &[usize]) = match s.op {
            Op::AdamwUpdate { .. } => (0, &[2, 3]),
            Op::SgdUpdate { .. } => (0, &[2]),
            _ => continue,
        };
        role[origin(s.inputs[weight]).index()] = Role::Weight;
        for &m in moments {
            role[origin(s.inputs[m]).index()] = Role::Moment;
        }
        gradient[s.inputs[1].index()] = true;
        // The new weight and moments (state updates live to the end).
        role[s.outputs[0].index()] = Role::Weight;
        for o in &s.outputs[1..] {
            role[o.index()] = Role::Moment;
        }
    }
    // What becomes of the new weights and moments: kept in another dtype (a cast or
    // quantize of the optimizer's result), or chosen by the non-finite guard's `where`.
    for s in p.steps() {
        let from = match s.op {
            Op::Cast { .. } | Op::Quantize { .. } => s.inputs[0],
            Op::Where => s.inputs[1],
            _ => continue,
        };
        let r = role[from.index()];
        if matches!(r, Role::Weight | Role::Moment) && writer[from.index()].is_some() {
            role[s.outputs[0].index()] = r;
        }
    }
    for (name, b) in p.outputs() {
        if name.starts_with("grad.") {
            gradient[b.index()] = true;
        }
    }
    let loss_step = p
        .outputs()
        .iter()
        .find(|(name, _)| name == "loss")
        .and_then(|(_, b)| writer[b.index()]);
    // Backward results that only feed gradients through reshapes, transposes, sums, casts
    // and scalings (a weight gradient's GEMM output, its bias's sum, a tied weight's two
    // gradients' add), last step first (readers come after writers). A GEMM or a scatter
    // reading a value makes it an activation gradient.
    let plumbing = |op: &Op| {
        matches!(
            op,
            Op::Reshape { .. }
                | Op::Transpose { .. }
                | Op::ReduceSum { .. }
                | Op::Cast { .. }
                | Op::Add
                | Op::Mul
                | Op::Div
                | Op::Where
                | Op::Squeeze { .. }
                | Op::Unsqueeze { .. }
                | Op::Flatten { .. }
                | Op::Identity
                | Op::Expand
        )
    };
    let tiny = |i: usize| {
        p.steps()[i]
            .outputs
            .iter()
            .map(|o| p.buffer(*o).bytes)
            .sum::<u64>()
            <= TINY
    };
    for i in (0..p.steps().len()).rev() {
        for &o in &p.steps()[i].outputs {
            let rs = &readers[o.index()];
            let backward = loss_step.is_some_and(|l| i > l);
            if gradient[o.index()] || rs.is_empty() || role[o.index()] != Role::Other || !backward {
                continue;
            }
            let feeds = |r: usize| {
                let s = &p.steps()[r];
                (matches!(s.op, Op::AdamwUpdate { .. } | Op::SgdUpdate { .. }) && s.inputs[1] == o)
                    || (plumbing(&s.op) && s.outputs.iter().all(|x| gradient[x.index()]))
            };
            let only_gradients = rs.iter().all(|&r| tiny(r) || feeds(r));
            let some_gradient = rs.iter().any(|&r| !tiny(r) && feeds(r));
            if only_gradients && some_gradient {
                gradient[o.index()] = true;
            }
        }
    }
    // A state read into a gradient (an accumulator) is gradient memory.
    for b in p.buffers() {
        if let BufferKind::State(_) = b.kind
            && role[b.id.index()] == Role::Other
            && readers[b.id.index()]
                .iter()
                .any(|&r| p.steps()[r].outputs.iter().any(|x| gradient[x.index()]))
        {
            role[b.id.index()] = Role::Gradient;
        }
    }
    for (i, g) in gradient.iter().enumerate() {
        if *g && role[i] == Role::Other {
            role[i] = Role::Gradient;
        }
    }

    let steps = p.steps().len();
    // The peak step: the largest sum of aligned sizes live there.
    let mut delta = vec![0i128; steps + 2];
    for b in p.buffers() {
        if let Some((d, l)) = b.live {
            delta[d] += i128::from(aligned(b.bytes));
            delta[l + 1] -= i128::from(aligned(b.bytes));
        }
    }
    let (mut cur, mut best, mut peak_step) = (0i128, -1i128, 0usize);
    for (i, d) in delta.iter().enumerate().take(steps.max(1)) {
        cur += d;
        if cur > best {
            best = cur;
            peak_step = i;
        }
    }
    let mut out = MemoryBreakdown {
        peak_step,
        peak_node: p
            .steps()
            .get(peak_step)
            .map(|s| s.node.clone())
            .unwrap_or_default(),
        steps,
        training: loss_step.is_some(),
        ..Default::default()
    };
    let live_at_peak: HashSet<BufId> = p
        .buffers()
        .iter()
        .filter(|b| {
            b.live
                .is_some_and(|(d, l)| d <= peak_step && peak_step <= l)
        })
        .map(|b| b.id)
        .collect();
    for b in p.buffers() {
        let i = b.id.index();
        let bytes = if b.kind.in_arena() {
            if !live_at_peak.contains(&b.id) {
                continue;
            }
            aligned(b.bytes)
        } else {
            b.bytes
        };
        let slot = match (&b.kind, role[i]) {
            (_, Role::Weight) => &mut out.weights,
            (_, Role::Moment) => &mut out.optimizer_state,
            (_, Role::Gradient) => &mut out.gradients,
            (BufferKind::Param(_), _) => &mut out.weights,
            (BufferKind::Input(_), _) => &mut out.saved_activations,
            (BufferKind::Temp, _) => {
                let forward = match (loss_step, writer[i]) {
                    (Some(l), Some(w)) => w <= l,
                    (None, _) => true,
                    (Some(_), None) => false,
                };
                if forward {
                    &mut out.saved_activations
                } else {
                    &mut out.workspace
                }
            }
            _ => &mut out.other,
        };
        *slot += bytes;
    }
    out
}

impl MemoryBreakdown {
    /// `(role, bytes, what it counts)` per role, in the order reports print them; `other`
    /// only when it holds something.
    pub fn rows(&self) -> Vec<(&'static str, u64, &'static str)> {
        let acts = if self.training {
            ("saved activations", "forward results still live")
        } else {
            ("activations", "results still live")
        };
        let mut rows = vec![
            (
                "weights",
                self.weights,
                "trained and frozen weights, new weights",
            ),
            ("gradients", self.gradients, "parameter gradients"),
            (
                "optimizer state",
                self.optimizer_state,
                "moments and their new values",
            ),
            (acts.0, self.saved_activations, acts.1),
            ("workspace", self.workspace, "other live temporaries"),
        ];
        if self.other > 0 {
            rows.push(("other", self.other, "constants, scaling state, counters"));
        }
        rows
    }
}
