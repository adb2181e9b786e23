//! Convolutions with the elementwise steps that follow them applied as each output row is
//! finished (a conv epilogue): `relu(conv(x, w, b))`, `relu(conv(x, w, b) + r)` and any
//! other chain of unary ops and same-shape binary ops over f32.
//!
//! The CPU runtime fuses such a chain when the values between its steps die inside it
//! (`fp8c-runtime`'s `conv_epilogue.rs`): each row of the conv's output is then updated while
//! it is still in cache, instead of one pass over the whole tensor per step (in ResNet-50
//! the ReLUs and residual adds were 5% of the run). Every step is the elementwise table's
//! scalar function over the conv's f32 result, in the chain's order, as `eval_in_place`
//! computes it, so the bits are those of the steps run one by one.

use crate::conv;
use crate::error::EvalError;
use crate::in_place;
use fp8c_ir::{DType, Op, OpView, Tensor};

/// One elementwise step of an epilogue: its op, its other operand for a binary op (a tensor
/// of the conv output's shape), and whether the running value is the op's first input.
#[derive(Clone, Copy, Debug)]
pub struct EpilogueStep<'a> {
    /// The elementwise op.
    pub op: &'a Op,
    /// The op's other input (binary ops), the same shape as the conv's output.
    pub other: Option<&'a Tensor>,
    /// Whether the running value is the op's input 0 (else input 1).
    pub acc_left: bool,
}

/// How many inputs `op` takes as an epilogue step (1 or 2), or None when it cannot be one:
/// elementwise ops with an f32 table function, as `eval_in_place` handles them.
pub fn epilogue_arity(op: &Op) -> Option<usize> {
    in_place::run_op(op).map(|(_, n)| n)
}

/// Evaluates the conv `op` on `inputs` followed by `steps`, the result of the last step.
/// `Ok(None)` where this does not apply: `op` is not a forward conv, the conv is not f32, or
/// a step's op or operand does not fit (the caller then runs the steps one by one).
pub fn eval_conv_epilogue(
    op: &Op,
    inputs: &[&Tensor],
    steps: &[EpilogueStep<'_>],
) -> Result<Option<Tensor>, EvalError> {
    let OpView::Conv(c) = op.view() else {
        return Ok(None);
    };
    if inputs.iter().any(|t| t.dtype() != DType::F32) {
        return Ok(None);
    }
    let mut others: Vec<Option<&[f32]>> = Vec::with_capacity(steps.len());
    for s in steps {
        let other = match (epilogue_arity(s.op), s.other) {
            (Some(1), None) => None,
            (Some(2), Some(t)) if t.dtype() == DType::F32 => match t.as_slice::<f32>() {
                Ok(v) => Some(v),
                Err(_) => return Ok(None),
            },
            _ => return Ok(None),
        };
        others.push(other);
    }
    let rows = |row: &mut [f32], at: usize| {
        for (s, other) in steps.iter().zip(&others) {
            let o = other.map(|v| &v[at..at + row.len()]);
            // Every step is one `apply_run` handles (checked above).
            let applied = in_place::apply_run(s.op, row, o, s.acc_left);
            debug_assert!(applied, "epilogue step {} refused", s.op.name());
        }
    };
    // Each binary step's operand has exactly the conv output's shape.
    let fits = |shape: &[u64]| {
        steps
            .iter()
            .filter_map(|s| s.other)
            .all(|t| t.shape() == shape)
    };
    crate::check_inputs(inputs)
        .and_then(|()| conv::conv_with_rows(c, inputs, &fits, &rows))
        .map_err(|f| f.at(op.name()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8c_ir::AutoPad;

    fn conv_op(kernel: i64, stride: i64, pad: i64, group: i64) -> Op {
        Op::Conv {
            kernel_shape: vec![kernel, kernel],
            strides: vec![stride, stride],
            pads: vec![pad; 4],
            dilations: vec![1, 1],
            group,
            auto_pad: AutoPad::NotSet,
        }
    }

    /// Values spread over both signs, with NaN, ±inf and −0.0 among them.
    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| match (i * 31 + seed) % 97 {
                0 => f32::NAN,
                1 => -0.0,
                2 => f32::INFINITY,
                3 => f32::NEG_INFINITY,
                v => (v as f32 - 48.0) * 0.173,
            })
            .collect()
    }

    fn t(dims: &[u64], seed: usize) -> Tensor {
        let n = dims.iter().product::<u64>() as usize;
        Tensor::from_f32(dims.to_vec(), &values(n, seed))
    }

    /// The same bits, where a NaN matches any NaN: which operand's payload and sign an
    /// operation on two NaNs returns is not specified (LLVM may swap `a + b`), so no two
    /// kernels are held to it.
    fn same(a: &Tensor, b: &Tensor) -> bool {
        let (a, b) = (a.to_f32_vec().unwrap(), b.to_f32_vec().unwrap());
        a.len() == b.len()
            && a.iter()
                .zip(&b)
                .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
    }

    /// The chain run one op at a time, as the runtime does without an epilogue.
    fn one_by_one(conv: &Op, ins: &[&Tensor], steps: &[EpilogueStep<'_>]) -> Tensor {
        let mut y = crate::eval_op(conv, ins).unwrap().remove(0);
        for s in steps {
            let args: Vec<&Tensor> = match (s.other, s.acc_left) {
                (None, _) => vec![&y],
                (Some(o), true) => vec![&y, o],
                (Some(o), false) => vec![o, &y],
            };
            y = crate::eval_op(s.op, &args).unwrap().remove(0);
        }
        y
    }

    /// The fused chain gives the bits of the ops run one by one: 3×3 with padding, strided,
    /// pointwise, grouped and depthwise convs, with and without a bias, running value on
    /// either side of a non-commutative op.
    #[test]
    fn a_conv_epilogue_gives_the_bits_of_its_steps_one_by_one() {
        let (relu, add, sub, tanh) = (Op::Relu, Op::Add, Op::Sub, Op::Tanh);
        // (x dims, w dims, [kernel, stride, pad, group])
        let cases: [([u64; 4], [u64; 4], [i64; 4]); 5] = [
            ([2, 3, 9, 7], [5, 3, 3, 3], [3, 1, 1, 1]),
            ([1, 4, 11, 11], [6, 4, 3, 3], [3, 2, 0, 1]),
            ([1, 8, 5, 6], [16, 8, 1, 1], [1, 1, 0, 1]),
            ([1, 4, 6, 6], [6, 2, 3, 3], [3, 1, 1, 2]),
            ([2, 3, 8, 8], [3, 1, 3, 3], [3, 1, 1, 3]),
        ];
        for (xd, wd, [k, s, p, g]) in cases {
            let op = conv_op(k, s, p, g);
            let (x, w, b) = (t(&xd, 1), t(&wd, 2), t(&[wd[0]], 3));
            let out = crate::eval_op(&op, &[&x, &w]).unwrap().remove(0);
            let r = t(out.shape(), 4);
            let chains: Vec<Vec<EpilogueStep<'_>>> = vec![
                vec![EpilogueStep {
                    op: &relu,
                    other: None,
                    acc_left: true,
                }],
                vec![
                    EpilogueStep {
                        op: &add,
                        other: Some(&r),
                        acc_left: false,
                    },
                    EpilogueStep {
                        op: &relu,
                        other: None,
                        acc_left: true,
                    },
                ],
                vec![
                    EpilogueStep {
                        op: &sub,
                        other: Some(&r),
                        acc_left: false,
                    },
                    EpilogueStep {
                        op: &tanh,
                        other: None,
                        acc_left: true,
                    },
                    EpilogueStep {
                        op: &sub,
                        other: Some(&r),
                        acc_left: true,
                    },
                ],
            ];
            for ins in [vec![&x, &w], vec![&x, &w, &b]] {
                for steps in &chains {
                    let want = one_by_one(&op, &ins, steps);
                    let got = eval_conv_epilogue(&op, &ins, steps).unwrap().unwrap();
                    assert_eq!(got.shape(), want.shape());
                    assert!(
                        same(&got, &want),
                        "x {xd:?} w {wd:?}, {} steps",
                        steps.len()
                    );
                }
            }
        }
    }

    /// What it does not take is left to the caller: another dtype, an operand of another
    /// shape (even one that would broadcast), an op without a run kernel, a missing operand.
    #[test]
    fn cases_it_does_not_take_answer_none() {
        let op = conv_op(3, 1, 1, 1);
        let (x, w) = (t(&[1, 2, 4, 4], 1), t(&[3, 2, 3, 3], 2));
        let row = t(&[4], 5);
        let (add, erf, relu) = (Op::Add, Op::Erf, Op::Relu);
        let step = |op, other| EpilogueStep {
            op,
            other,
            acc_left: true,
        };
        for steps in [
            vec![step(&add, Some(&row))],
            vec![step(&erf, None)],
            vec![step(&add, None)],
            vec![step(&relu, Some(&row))],
        ] {
            assert!(
                eval_conv_epilogue(&op, &[&x, &w], &steps)
                    .unwrap()
                    .is_none()
            );
        }
        let x64 = Tensor::from_f64(vec![1, 2, 4, 4], &[0.5; 32]);
        let w64 = Tensor::from_f64(vec![3, 2, 3, 3], &[0.5; 54]);
        let relu_only = [step(&relu, None)];
        assert!(
            eval_conv_epilogue(&op, &[&x64, &w64], &relu_only)
                .unwrap()
                .is_none()
        );
        assert!(
            eval_conv_epilogue(&Op::Relu, &[&x], &relu_only)
                .unwrap()
                .is_none()
        );
        // A conv that fails names the op, as `eval_op` does.
        let bad = eval_conv_epilogue(&op, &[&x, &row], &relu_only).unwrap_err();
        assert_eq!(bad.op, "conv", "{bad}");
    }
}
