//! Block-scaled FP8 GEMMs (issue #16): how the scaling pass rewrites one GEMM under a
//! per-tile current-scaling recipe (`granularity` rowwise, block or mxfp8).
//!
//! `matmul(a [..., M, K], w [K, N])` becomes
//! ```text
//! qa, sa    = block_quantize(a)   tiles a_rows × k_block  (1×128, 1×K, 1×32)
//! qa, sa    = reshape(qa, [-1, K]), reshape(sa, [-1, KB]) # when a has batch dims
//!                                  (tiles of several rows: a is flattened before instead)
//! qw, sw    = block_quantize(w)   tiles k_block × b_cols  (128×128, K×1, 32×1)
//! y2        = block_scaled_matmul(qa, qw, sa, sw)
//! y         = reshape(y2, [..., M, N])
//! ```
//! and ONNX Gemm the same around its transposes (a weight stored `[N, K]` is tiled `b_cols` ×
//! `k_block` as stored, then its codes and scales are transposed: FP8 data movement the
//! freeze pass folds for inference), then alpha and beta·C as per-tensor scaling does.
//!
//! Where the shapes do not allow it the GEMM keeps per-tensor scaling and the reason is
//! returned (the pass prints it): a GEMM whose second operand has batch dims (attention),
//! shapes not known at compile time, K not a multiple of the K block (cuBLASLt's block-scaled
//! GEMMs need it; TE's recipes state the same rule), and convolutions.

use fp8c_core::{CurrentScaling, Tiling};
use fp8c_ir::{BlockScaling, DType, Graph, IrError, Node, Op, Tensor, Value};

/// What the block path needs to know besides the node.
struct Emit<'a> {
    nm: &'a str,
    fmt: DType,
    scaling: BlockScaling,
    epsilon: f32,
}

impl Emit<'_> {
    fn quantize(
        &self,
        g: &mut Graph,
        v: Value,
        t: &str,
        (rows, cols): (i64, i64),
    ) -> Result<(Value, Value), IrError> {
        let op = Op::BlockQuantize {
            to: self.fmt,
            saturate: true,
            rows,
            cols,
            scaling: self.scaling,
            epsilon: self.epsilon,
        };
        let out = g.add_node(&format!("{t}.block_quantize"), op, &[v])?;
        Ok((out[0], out[1]))
    }

    fn transpose(&self, g: &mut Graph, v: Value, what: &str) -> Result<Value, IrError> {
        Ok(g.add_node(
            &format!("{}.{what}.t", self.nm),
            Op::Transpose { perm: vec![1, 0] },
            &[v],
        )?[0])
    }

    fn reshape(&self, g: &mut Graph, v: Value, dims: &[i64], what: &str) -> Result<Value, IrError> {
        let shape = g.add_node(
            &format!("{}.{what}.shape", self.nm),
            Op::Constant {
                value: Tensor::from_i64(vec![dims.len() as u64], dims),
            },
            &[],
        )?[0];
        Ok(g.add_node(
            &format!("{}.{what}", self.nm),
            Op::Reshape { allowzero: false },
            &[v, shape],
        )?[0])
    }
}

/// Rewrites GEMM node `n` with block scaling; `Ok(Err(why))` when its shapes do not allow it.
/// `names`: the operands' tensor names (`fc1.x`, `fc1.w`).
pub(crate) fn rewrite(
    g: &mut Graph,
    n: &Node,
    t: Tiling,
    fmt: DType,
    r: &CurrentScaling,
    names: (&str, &str),
) -> Result<Result<Value, String>, IrError> {
    let ins = n.inputs().to_vec();
    let e = Emit {
        nm: &n.name,
        fmt,
        scaling: if t.e8m0 {
            BlockScaling::E8m0
        } else if r.power_2_scale {
            BlockScaling::Pow2
        } else {
            BlockScaling::Fp32
        },
        epsilon: r.amax_epsilon,
    };
    let dims = |g: &Graph, v: Value| g.value_type(v).known_dims();
    let (trans_a, trans_b) = match &n.op {
        Op::MatMul => (false, false),
        Op::Gemm {
            trans_a, trans_b, ..
        } => (*trans_a, *trans_b),
        Op::Conv { .. } => {
            return Ok(Err(
                "convolutions keep per-tensor scaling under per-tile recipes".into(),
            ));
        }
        other => return Err(IrError::node(&n.name, other.name(), "not a GEMM-like op")),
    };
    let (Some(ad), Some(bd)) = (dims(g, ins[0]), dims(g, ins[1])) else {
        return Ok(Err(
            "its operand shapes are not known at compile time".into()
        ));
    };
    if bd.len() != 2 || ad.len() < 2 {
        return Ok(Err(format!(
            "block scaling takes a matrix [K, N] as second operand (got {bd:?}; attention-like \
             GEMMs of two activations keep one scale per tensor)"
        )));
    }
    let k = if trans_a {
        ad[ad.len() - 2]
    } else {
        ad[ad.len() - 1]
    };
    let n_out = if trans_b { bd[0] } else { bd[1] };
    if t.k_block > 0 && !k.is_multiple_of(t.k_block as u64) {
        return Ok(Err(format!(
            "K = {k} is not a multiple of its {}-element K blocks (block-scaled GEMMs need it)",
            t.k_block
        )));
    }
    let (a_name, b_name) = names;
    // A as [M', K].
    let mut a = ins[0];
    if trans_a {
        a = e.transpose(g, a, "x")?;
    }
    let lead: Vec<u64> = ad[..ad.len() - 2].to_vec();
    let m = if trans_a {
        ad[ad.len() - 1]
    } else {
        ad[ad.len() - 2]
    };
    // Tiles of one row are the same in A [..., M, K] and in its 2-D view, so such A is
    // quantized as it comes (its producer can then emit the tiles: fusion's
    // `elementwise-block-quantize`) and its codes and scales are flattened, views both.
    let (qa, sa) = if lead.is_empty() {
        e.quantize(g, a, a_name, (t.a_rows, t.k_block))?
    } else if t.a_rows == 1 && !trans_a {
        let (q, s) = e.quantize(g, a, a_name, (1, t.k_block))?;
        let kb = if t.k_block == 0 {
            1
        } else {
            k.div_ceil(t.k_block as u64) as i64
        };
        (
            e.reshape(g, q, &[-1, k as i64], "x.q.2d")?,
            e.reshape(g, s, &[-1, kb], "x.scale_inv.2d")?,
        )
    } else {
        a = e.reshape(g, a, &[-1, k as i64], "x.2d")?;
        e.quantize(g, a, a_name, (t.a_rows, t.k_block))?
    };
    // B as [K, N] codes and [KB, NB] scales.
    let (qb, sb) = if trans_b {
        let (q, s) = e.quantize(g, ins[1], b_name, (t.b_cols, t.k_block))?;
        (e.transpose(g, q, "w.q")?, e.transpose(g, s, "w.scale_inv")?)
    } else {
        e.quantize(g, ins[1], b_name, (t.k_block, t.b_cols))?
    };
    let out = n.outputs[0].dtype;
    let mm = Op::BlockScaledMatMul {
        out,
        k_block: t.k_block,
        a_rows: t.a_rows,
        b_cols: t.b_cols,
    };
    let mut y = g.add_node(&format!("{}.fp8", n.name), mm, &[qa, qb, sa, sb])?[0];
    if !lead.is_empty() {
        let mut full: Vec<i64> = lead.iter().map(|&d| d as i64).collect();
        full.extend([m as i64, n_out as i64]);
        y = e.reshape(g, y, &full, "y")?;
    }
    if let Op::Gemm { alpha, beta, .. } = &n.op {
        y = crate::gemm_tail::gemm_tail(g, &n.name, y, (*alpha, *beta), ins.get(2).copied())?;
    }
    Ok(Ok(y))
}
