//! The CPU backend's conv epilogues: a conv step and the elementwise steps right after it
//! that each take the previous step's result, where that result dies there (`relu(conv)`,
//! `relu(conv + shortcut)` in a ResNet), run as one `fp8c_eval::eval_conv_epilogue` call.
//! Each output row of the conv then goes through the chain while it is still in cache,
//! where one pass over the whole tensor per step cost ResNet-50 5% of its run; the values
//! between the steps are never stored. The bits are those of the steps run one by one
//! (fp8c-eval's `epilogue.rs`).
//!
//! Chains are found once, at prepare ([`plan`]), from the program's buffer types and
//! liveness; a run without an observer takes them (an observer sees every step's own
//! inputs and outputs, so it gets the steps one by one).

use crate::backend::RuntimeError;
use crate::program::{BufId, Program};
use fp8c_ir::{ConvOp, DType, OpView, Tensor};
use std::borrow::Cow;

/// Steps a chain takes after its conv, at most.
const MAX_STEPS: usize = 4;

/// The elementwise steps fused into the conv step that starts a chain.
#[derive(Clone, Debug)]
pub(crate) struct Chain {
    links: Vec<Link>,
}

/// One step of a chain: its index, its other input (binary ops) and whether the running
/// value is its input 0.
#[derive(Clone, Copy, Debug)]
struct Link {
    step: usize,
    other: Option<BufId>,
    acc_left: bool,
}

impl Chain {
    /// The indices of the chain's elementwise steps, in order.
    pub(crate) fn steps(&self) -> impl Iterator<Item = usize> + '_ {
        self.links.iter().map(|l| l.step)
    }

    /// The index of the chain's last step.
    pub(crate) fn last(&self) -> usize {
        self.links.last().map_or(0, |l| l.step)
    }
}

/// Per step: the chain that starts at it, for a forward f32 conv computed at run time
/// (`hoisted[i]` false) followed by elementwise steps `fp8c_eval::epilogue_arity` accepts,
/// each reading the previous result once, where it dies, with a same-shape f32 operand if
/// binary and a same-shape f32 result.
pub(crate) fn plan(p: &Program, hoisted: &[bool]) -> Vec<Option<Chain>> {
    let steps = p.steps();
    let f32_like = |b: BufId, dims: &[u64]| {
        let buf = p.buffer(b);
        buf.ty.dtype == DType::F32 && buf.dims == dims
    };
    let mut chains = vec![None; steps.len()];
    for (i, step) in steps.iter().enumerate() {
        if hoisted[i]
            || step.outputs.len() != 1
            || !matches!(step.op.view(), OpView::Conv(ConvOp::Conv { .. }))
        {
            continue;
        }
        let mut cur = step.outputs[0];
        let dims = p.buffer(cur).dims.clone();
        if !f32_like(cur, &dims) {
            continue;
        }
        let mut links = Vec::new();
        for (k, s) in steps.iter().enumerate().skip(i + 1).take(MAX_STEPS) {
            let Some(arity) = fp8c_eval::epilogue_arity(&s.op) else {
                break;
            };
            let Some(pos) = s.inputs.iter().position(|b| *b == cur) else {
                break;
            };
            let other = s.inputs.get(1 - pos).copied();
            let fits = !hoisted[k]
                && s.inputs.len() == arity
                && s.outputs.len() == 1
                && other != Some(cur)
                && p.frees_after(k).contains(&cur)
                && f32_like(s.outputs[0], &dims)
                && other.is_none_or(|o| f32_like(o, &dims));
            if !fits {
                break;
            }
            links.push(Link {
                step: k,
                other,
                acc_left: pos == 0,
            });
            cur = s.outputs[0];
        }
        if !links.is_empty() {
            chains[i] = Some(Chain { links });
        }
    }
    chains
}

/// Runs the chain starting at conv step `i` over `slots`: the last step's result, or None
/// where `fp8c_eval::eval_conv_epilogue` does not take it (the caller then runs the steps
/// one by one). Frees nothing: the caller frees after each of the chain's steps.
pub(crate) fn run(
    p: &Program,
    i: usize,
    chain: &Chain,
    slots: &[Option<Cow<'_, Tensor>>],
) -> Result<Option<Tensor>, RuntimeError> {
    let step = &p.steps()[i];
    let get = |b: &BufId| slots[b.index()].as_deref();
    let Some(ins) = step
        .inputs
        .iter()
        .map(get)
        .collect::<Option<Vec<&Tensor>>>()
    else {
        return Ok(None);
    };
    let mut eps = Vec::with_capacity(chain.links.len());
    for l in &chain.links {
        let other = match &l.other {
            Some(b) => match get(b) {
                Some(t) => Some(t),
                None => return Ok(None),
            },
            None => None,
        };
        eps.push(fp8c_eval::EpilogueStep {
            op: &p.steps()[l.step].op,
            other,
            acc_left: l.acc_left,
        });
    }
    let fail = |m: String| RuntimeError::node(&step.node, step.op.name(), m);
    let Some(t) =
        fp8c_eval::eval_conv_epilogue(&step.op, &ins, &eps).map_err(|e| fail(e.message))?
    else {
        return Ok(None);
    };
    let last = &p.steps()[chain.last()];
    let want = p.buffer(last.outputs[0]);
    if t.dtype() != want.ty.dtype || !crate::cpu_backend::same_dims(t.shape(), &want.dims) {
        return Err(fail(format!(
            "internal: the conv epilogue produced {}, type inference planned {} for {}",
            t.ty(),
            want.ty,
            last.node
        )));
    }
    Ok(Some(t))
}
