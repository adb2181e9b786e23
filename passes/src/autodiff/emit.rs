//! Small graph-building helpers the gradient rules share: typed constants, elementwise
//! arithmetic, layout changes and `sum_to` (the reduction of a broadcast gradient back to an
//! operand's shape). Every helper adds ordinary IR ops; names are the caller's base name plus
//! a suffix, made unique by the graph.

use fp8c_ir::{DType, Graph, IrError, Op, Tensor, TensorType, Value};

/// A graph being extended with backward nodes.
pub(crate) struct Emit<'g> {
    pub g: &'g mut Graph,
}

type R<T> = Result<T, IrError>;

impl<'g> Emit<'g> {
    /// Wraps `g`.
    pub fn new(g: &'g mut Graph) -> Self {
        Emit { g }
    }

    /// Adds a single-output node.
    pub fn op(&mut self, name: &str, op: Op, inputs: &[Value]) -> R<Value> {
        Ok(self.g.add_node(name, op, inputs)?[0])
    }

    /// Adds a node and returns all its outputs.
    pub fn ops(&mut self, name: &str, op: Op, inputs: &[Value]) -> R<Vec<Value>> {
        self.g.add_node(name, op, inputs)
    }

    /// The type of `v`.
    pub fn ty(&self, v: Value) -> TensorType {
        self.g.value_type(v).clone()
    }

    /// The dtype of `v`.
    pub fn dtype(&self, v: Value) -> DType {
        self.g.value_type(v).dtype
    }

    /// The static dims of `v` (autodiff runs on graphs whose shapes are all known).
    pub fn dims(&self, v: Value) -> R<Vec<u64>> {
        let t = self.g.value_type(v);
        t.known_dims().ok_or_else(|| {
            let n = self.g.node(v.node);
            IrError::node(
                n.name.clone(),
                n.op.name(),
                format!(
                    "training needs static shapes, but this value is {t} (give every input's shape)"
                ),
            )
        })
    }

    /// A constant tensor.
    pub fn constant(&mut self, name: &str, value: Tensor) -> R<Value> {
        self.op(name, Op::Constant { value }, &[])
    }

    /// A scalar constant of `dtype`.
    pub fn scalar(&mut self, name: &str, dtype: DType, v: f64) -> R<Value> {
        let t = Tensor::from_f64_as(dtype, vec![], &[v]).map_err(IrError::Other)?;
        self.constant(name, t)
    }

    /// A 1-D i64 constant (shapes, axes, pads).
    pub fn i64s(&mut self, name: &str, v: &[i64]) -> R<Value> {
        self.constant(name, Tensor::from_i64(vec![v.len() as u64], v))
    }

    /// Zeros of a static type.
    pub fn zeros(&mut self, name: &str, dtype: DType, dims: &[u64]) -> R<Value> {
        let t = Tensor::zeros(dtype, dims.to_vec()).map_err(IrError::Other)?;
        self.constant(name, t)
    }

    /// `a + b`.
    pub fn add(&mut self, name: &str, a: Value, b: Value) -> R<Value> {
        self.op(name, Op::Add, &[a, b])
    }

    /// `a − b`.
    pub fn sub(&mut self, name: &str, a: Value, b: Value) -> R<Value> {
        self.op(name, Op::Sub, &[a, b])
    }

    /// `a · b`.
    pub fn mul(&mut self, name: &str, a: Value, b: Value) -> R<Value> {
        self.op(name, Op::Mul, &[a, b])
    }

    /// `a / b`.
    pub fn div(&mut self, name: &str, a: Value, b: Value) -> R<Value> {
        self.op(name, Op::Div, &[a, b])
    }

    /// `−a`.
    pub fn neg(&mut self, name: &str, a: Value) -> R<Value> {
        self.op(name, Op::Neg, &[a])
    }

    /// `a · c` for a scalar constant `c` of `a`'s dtype (no node when `c` is 1).
    pub fn scale(&mut self, name: &str, a: Value, c: f64) -> R<Value> {
        if c == 1.0 {
            return Ok(a);
        }
        let k = self.scalar(&format!("{name}.c"), self.dtype(a), c)?;
        self.mul(name, a, k)
    }

    /// `cast(v, to)`, or `v` itself when it already has that dtype.
    pub fn cast(&mut self, name: &str, v: Value, to: DType) -> R<Value> {
        if self.dtype(v) == to {
            return Ok(v);
        }
        self.op(
            name,
            Op::Cast {
                to,
                saturate: false,
            },
            &[v],
        )
    }

    /// `reshape(v, dims)`, or `v` when it already has them.
    pub fn reshape(&mut self, name: &str, v: Value, dims: &[u64]) -> R<Value> {
        if self.dims(v)? == dims {
            return Ok(v);
        }
        let s: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let shape = self.i64s(&format!("{name}.shape"), &s)?;
        self.op(name, Op::Reshape { allowzero: true }, &[v, shape])
    }

    /// `transpose(v, perm)`.
    pub fn transpose(&mut self, name: &str, v: Value, perm: Vec<i64>) -> R<Value> {
        self.op(name, Op::Transpose { perm }, &[v])
    }

    /// Swaps the last two axes of `v` (rank ≥ 2).
    pub fn swap_last2(&mut self, name: &str, v: Value) -> R<Value> {
        let r = self.dims(v)?.len() as i64;
        let mut perm: Vec<i64> = (0..r).collect();
        perm.swap(r as usize - 2, r as usize - 1);
        self.transpose(name, v, perm)
    }

    /// `reduce_sum(v, axes, keepdims)`.
    pub fn reduce_sum(&mut self, name: &str, v: Value, axes: Vec<i64>, keepdims: bool) -> R<Value> {
        self.op(
            name,
            Op::ReduceSum {
                axes: Some(axes),
                keepdims,
            },
            &[v],
        )
    }

    /// `expand(v, dims)`, or `v` when it already has them.
    pub fn expand(&mut self, name: &str, v: Value, dims: &[u64]) -> R<Value> {
        if self.dims(v)? == dims {
            return Ok(v);
        }
        let s: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let shape = self.i64s(&format!("{name}.shape"), &s)?;
        self.op(name, Op::Expand, &[v, shape])
    }

    /// Sums a gradient of a broadcast result back to an operand's dims: over the leading axes
    /// the operand lacks and over the axes where it has size 1.
    pub fn sum_to(&mut self, name: &str, v: Value, target: &[u64]) -> R<Value> {
        let src = self.dims(v)?;
        if src == target {
            return Ok(v);
        }
        let lead = src.len().checked_sub(target.len()).ok_or_else(|| {
            IrError::Other(format!(
                "autodiff: cannot sum a gradient of shape {src:?} to the larger shape {target:?}"
            ))
        })?;
        let axes: Vec<i64> = (0..src.len())
            .filter(|&i| i < lead || (target[i - lead] == 1 && src[i] != 1))
            .map(|i| i as i64)
            .collect();
        let r = if axes.is_empty() {
            v
        } else {
            self.reduce_sum(name, v, axes, true)?
        };
        self.reshape(&format!("{name}.reshape"), r, target)
    }
}
