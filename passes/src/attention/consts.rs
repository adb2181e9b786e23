//! Values attention recognition reads at compile time: constants, parameters that do not
//! train (an export's scalar initializers: the scale, the mask's 0 and −f32::MAX), and small
//! cones of them evaluated with the CPU reference.

use fp8c_ir::{Graph, Op, Tensor, Value};
use globset::GlobSet;
use std::collections::HashMap;

/// Reads compile-time values of one graph.
pub(super) struct Consts<'a> {
    /// Parameters named by `--train GLOB` train: they are not constants.
    trained: Option<&'a GlobSet>,
}

impl<'a> Consts<'a> {
    /// A reader; `trained` names the parameters that train (`--train`), if the run says.
    pub fn new(trained: Option<&'a GlobSet>) -> Self {
        Consts { trained }
    }

    /// The value of a `constant` node, or the data of a parameter that does not train.
    pub fn value<'g>(&self, g: &'g Graph, v: Value) -> Option<&'g Tensor> {
        match &g.node(v.node).op {
            Op::Constant { value } => Some(value),
            Op::Param { name } if !self.trained.is_some_and(|t| t.is_match(name)) => {
                g.weights().get(name)
            }
            _ => None,
        }
    }

    /// `v` evaluated at compile time, when its cone reads no graph input or state and no
    /// value in it has more than `limit` elements.
    pub fn eval(&self, g: &Graph, v: Value, limit: u64) -> Option<Tensor> {
        let mut memo = HashMap::new();
        self.eval_in(g, v, limit, &mut memo, 0)
    }

    fn eval_in(
        &self,
        g: &Graph,
        v: Value,
        limit: u64,
        memo: &mut HashMap<Value, Tensor>,
        depth: usize,
    ) -> Option<Tensor> {
        if let Some(t) = self.value(g, v) {
            return Some(t.clone());
        }
        if let Some(t) = memo.get(&v) {
            return Some(t.clone());
        }
        let n = g.node(v.node);
        // Mask cones are a few dozen nodes; a deep one is not a mask.
        if depth > 64
            || n.op.is_interface()
            || n.op.props().scaling
            || n.outputs
                .iter()
                .any(|t| t.num_elements().is_none_or(|e| e > limit))
        {
            return None;
        }
        let ins = n.inputs().to_vec();
        let vals: Vec<Tensor> = ins
            .iter()
            .map(|&i| self.eval_in(g, i, limit, memo, depth + 1))
            .collect::<Option<_>>()?;
        let refs: Vec<&Tensor> = vals.iter().collect();
        let outs = fp8c_eval::eval_op(&n.op, &refs).ok()?;
        for (slot, t) in outs.into_iter().enumerate() {
            memo.insert(Value::new(v.node, slot as u32), t);
        }
        memo.get(&v).cloned()
    }
}

/// The one value of a one-element float tensor, widened to f64.
pub(super) fn scalar_f64(t: Option<&Tensor>) -> Option<f64> {
    match t?.to_f64_vec().ok()?.as_slice() {
        [x] => Some(*x),
        _ => None,
    }
}
