//! The element-indexed movement ops (`gather_elements`, `scatter_elements`, `scatter_nd`) and
//! `trilu`: the ONNX operator docs' examples (expected values copied from them), the
//! reductions worked out by hand, errors, and a property test that none of them panics.

mod common;

use common::*;
use fp8c_eval::{ErrorKind, eval_op};
use fp8c_ir::{DType, Op, ScatterReduction, Tensor};
use proptest::prelude::*;

fn scatter_el(axis: i64, reduction: ScatterReduction) -> Op {
    Op::ScatterElements { axis, reduction }
}

#[test]
fn gather_elements_follows_the_onnx_examples() {
    // ONNX docs, example 1: data [[1,2],[3,4]], axis 1, indices [[0,0],[1,0]].
    let data = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let idx = i64s(&[2, 2], &[0, 0, 1, 0]);
    let y = eval1(Op::GatherElements { axis: 1 }, &[&data, &idx]);
    assert_eq!(
        (y.shape(), vf32(&y)),
        (&[2, 2][..], vec![1.0, 1.0, 4.0, 3.0])
    );
    // Example 2: 3×3 data, axis 0, indices [[1,2,0],[2,0,0]] (i32, negative form of 2 too).
    let data = f32s(&[3, 3], &[1., 2., 3., 4., 5., 6., 7., 8., 9.]);
    let idx = i32s(&[2, 3], &[1, -1, 0, 2, 0, 0]);
    let y = eval1(Op::GatherElements { axis: 0 }, &[&data, &idx]);
    assert_eq!(vf32(&y), [4., 8., 3., 7., 2., 3.]);
    // Indices longer than data along the axis, any dtype (FP8 codes move as bytes).
    let data = fp8(DType::F8E4M3, &[1, 2], &[0x38, 0x40]);
    let idx = i64s(&[1, 4], &[1, 1, 0, -2]);
    let y = eval1(Op::GatherElements { axis: 1 }, &[&data, &idx]);
    assert_eq!(y.bytes(), [0x40, 0x40, 0x38, 0x38]);
    let bad = i64s(&[1, 1], &[2]);
    assert_eq!(
        fails(Op::GatherElements { axis: 1 }, &[&data, &bad]),
        ErrorKind::Value
    );
    let wide = i64s(&[2, 1], &[0, 0]);
    assert_eq!(
        fails(Op::GatherElements { axis: 1 }, &[&data, &wide]),
        ErrorKind::Shape
    );
}

#[test]
fn scatter_elements_follows_the_onnx_examples() {
    // ONNX docs, example 1: zeros 3×3, axis 0, indices [[1,0,2],[0,2,1]],
    // updates [[1.0,1.1,1.2],[2.0,2.1,2.2]] → [[2.0,1.1,0],[1.0,0,2.2],[0,2.1,1.2]].
    let data = f32s(&[3, 3], &[0.0; 9]);
    let idx = i64s(&[2, 3], &[1, 0, 2, 0, 2, 1]);
    let upd = f32s(&[2, 3], &[1.0, 1.1, 1.2, 2.0, 2.1, 2.2]);
    let y = eval1(scatter_el(0, ScatterReduction::None), &[&data, &idx, &upd]);
    assert_eq!(vf32(&y), [2.0, 1.1, 0.0, 1.0, 0.0, 2.2, 0.0, 2.1, 1.2]);
    // Example 2: [[1,2,3,4,5]], axis 1, indices [[1,3]], updates [[1.1,2.1]].
    let data = f32s(&[1, 5], &[1., 2., 3., 4., 5.]);
    let idx = i64s(&[1, 2], &[1, 3]);
    let upd = f32s(&[1, 2], &[1.1, 2.1]);
    let y = eval1(scatter_el(1, ScatterReduction::None), &[&data, &idx, &upd]);
    assert_eq!(vf32(&y), [1.0, 1.1, 3.0, 2.1, 5.0]);
    // Repeated index 1 (the backend test with_duplicate_indices): add sums both updates,
    // mul multiplies, max/min keep the extreme, none keeps the last.
    let idx = i64s(&[1, 2], &[1, 1]);
    let want = [
        (ScatterReduction::Add, 2.0 + 1.1 + 2.1),
        (ScatterReduction::Mul, 2.0 * 1.1 * 2.1),
        (ScatterReduction::Max, 2.1),
        (ScatterReduction::Min, 1.1),
        (ScatterReduction::None, 2.1),
    ];
    for (r, v) in want {
        let y = eval1(scatter_el(1, r), &[&data, &idx, &upd]);
        assert_close(&vf32(&y), &[1.0, v, 3.0, 4.0, 5.0], 1e-6);
    }
    // Integers wrap in their own type; bool overwrites but has no arithmetic.
    let d = typed(DType::I8, &[2], &[100.0, 1.0]);
    let u = typed(DType::I8, &[2], &[100.0, -128.0]);
    let i = i64s(&[2], &[0, 1]);
    let y = eval1(scatter_el(0, ScatterReduction::Add), &[&d, &i, &u]);
    assert_eq!(vi64(&y), [-56, -127]);
    let b = bools(&[2], &[false, true]);
    let y = eval1(scatter_el(0, ScatterReduction::None), &[&b, &i, &b]);
    assert_eq!(vbool(&y), [false, true]);
    assert_eq!(
        fails(scatter_el(0, ScatterReduction::Max), &[&b, &i, &b]),
        ErrorKind::DType
    );
    // Max propagates NaN.
    let d = f32s(&[2], &[1.0, f32::NAN]);
    let u = f32s(&[2], &[f32::NAN, 5.0]);
    let y = eval1(scatter_el(0, ScatterReduction::Max), &[&d, &i, &u]);
    assert!(vf32(&y).iter().all(|v| v.is_nan()));
}

#[test]
fn scatter_nd_follows_the_onnx_examples() {
    // ONNX docs, example 1: data [1..8], indices [[4],[3],[1],[7]], updates [9,10,11,12].
    let data = f32s(&[8], &[1., 2., 3., 4., 5., 6., 7., 8.]);
    let idx = i64s(&[4, 1], &[4, 3, 1, 7]);
    let upd = f32s(&[4], &[9., 10., 11., 12.]);
    let op = |reduction| Op::ScatterNd { reduction };
    let y = eval1(op(ScatterReduction::None), &[&data, &idx, &upd]);
    assert_eq!(vf32(&y), [1., 11., 3., 10., 9., 6., 7., 12.]);
    // Example 2: 4×4×4 data, indices [[0],[2]] replace two 4×4 slices.
    let data = f32s(&[4, 2, 2], &[1.0; 16]);
    let idx = i64s(&[2, 1], &[0, -2]);
    let upd = f32s(&[2, 2, 2], &[5., 5., 5., 5., 6., 6., 6., 6.]);
    let y = eval1(op(ScatterReduction::Add), &[&data, &idx, &upd]);
    let mut want = vec![1.0f32; 16];
    want[..4].fill(6.0);
    want[8..12].fill(7.0);
    assert_eq!(vf32(&y), want);
    // Tuples of length 2 address single elements; the same element twice multiplies twice.
    let data = i64s(&[2, 2], &[1, 2, 3, 4]);
    let idx = i64s(&[2, 2], &[1, 0, 1, 0]);
    let upd = i64s(&[2], &[5, 7]);
    let y = eval1(op(ScatterReduction::Mul), &[&data, &idx, &upd]);
    assert_eq!(vi64(&y), [1, 2, 105, 4]);
    let y = eval1(op(ScatterReduction::Min), &[&data, &idx, &upd]);
    assert_eq!(vi64(&y), [1, 2, 3, 4]);
    let wrong = i64s(&[3], &[5, 7, 9]);
    assert_eq!(
        fails(op(ScatterReduction::None), &[&data, &idx, &wrong]),
        ErrorKind::Shape
    );
    let far = i64s(&[1, 2], &[2, 0]);
    let one = i64s(&[1], &[0]);
    assert_eq!(
        fails(op(ScatterReduction::None), &[&data, &far, &one]),
        ErrorKind::Value
    );
}

#[test]
fn trilu_keeps_a_triangle_per_matrix() {
    let x = f32s(
        &[2, 2, 3],
        &[1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12.],
    );
    let upper = eval1(Op::Trilu { upper: true }, &[&x]);
    assert_eq!(
        vf32(&upper),
        [1., 2., 3., 0., 5., 6., 7., 8., 9., 0., 11., 12.]
    );
    let k = Tensor::scalar_i64(-1);
    let lower = eval1(Op::Trilu { upper: false }, &[&x, &k]);
    assert_eq!(
        vf32(&lower),
        [0., 0., 0., 4., 0., 0., 0., 0., 0., 10., 0., 0.]
    );
    // k beyond the matrix: everything (upper, very negative k) or nothing (lower).
    let all = eval1(
        Op::Trilu { upper: true },
        &[&x, &Tensor::scalar_i64(i64::MIN)],
    );
    assert_eq!(vf32(&all), vf32(&x));
    let none = eval1(Op::Trilu { upper: false }, &[&x, &Tensor::scalar_i64(-7)]);
    assert_eq!(vf32(&none), [0.0; 12]);
    assert_eq!(
        fails(Op::Trilu { upper: true }, &[&f32s(&[3], &[1., 2., 3.])]),
        ErrorKind::Shape
    );
}

/// A tensor of `dt` of `shape` from small integer values (FP8: the values as raw codes).
fn of(dt: DType, shape: &[u64], vals: &[i64]) -> Tensor {
    let n = shape.iter().product::<u64>() as usize;
    let v: Vec<i64> = (0..n).map(|i| vals[i % vals.len()]).collect();
    if dt.is_fp8() {
        let codes = v.iter().map(|&x| x as u8).collect();
        return Tensor::from_bytes(dt, shape.to_vec(), codes).expect("one byte each");
    }
    let f: Vec<f64> = v.iter().map(|&x| x as f64).collect();
    Tensor::from_f64_as(dt, shape.to_vec(), &f).expect("small values fit")
}

fn op() -> impl Strategy<Value = Op> {
    let reduction = prop::sample::select(vec![
        ScatterReduction::None,
        ScatterReduction::Add,
        ScatterReduction::Mul,
        ScatterReduction::Max,
        ScatterReduction::Min,
    ]);
    prop_oneof![
        (-3i64..3).prop_map(|axis| Op::GatherElements { axis }),
        (-3i64..3, reduction.clone())
            .prop_map(|(axis, reduction)| Op::ScatterElements { axis, reduction }),
        reduction.prop_map(|reduction| Op::ScatterNd { reduction }),
        any::<bool>().prop_map(|upper| Op::Trilu { upper }),
    ]
}

/// Inputs that are mostly well formed: data of rank 0..=3; indices of data's rank with dims
/// up to one past data's (scatter_nd: tuples of length ≤ rank); index values in -4..4, some
/// out of range; updates of the matching shape; each input's dtype now and then wrong.
fn inputs(op: &Op) -> impl Strategy<Value = Vec<Tensor>> + use<> {
    let scatter_nd = matches!(op, Op::ScatterNd { .. });
    let dtypes = vec![
        DType::F32,
        DType::F64,
        DType::I8,
        DType::Bool,
        DType::F8E5M2,
    ];
    (
        prop::sample::select(dtypes),
        prop::collection::vec(0u64..4, 0..=3),
        prop::collection::vec(0u64..5, 3),
        prop::collection::vec(-4i64..4, 1..16),
        prop::sample::select(vec![DType::I64, DType::I64, DType::I32, DType::F32]),
        0usize..4,
        0usize..4,
    )
        .prop_map(move |(dt, dshape, raw, vals, it, k, arity)| {
            let r = dshape.len();
            let data = of(dt, &dshape, &vals);
            let (ishape, ushape) = if scatter_nd {
                let k = k % (r + 1);
                let t = raw[0] % 3;
                let mut u = vec![t];
                u.extend_from_slice(&dshape[k..]);
                (vec![t, k as u64], u)
            } else {
                let i: Vec<u64> = (0..r).map(|d| raw[d] % (dshape[d] + 2)).collect();
                (i.clone(), i)
            };
            let indices = of(it, &ishape, &vals);
            let updates = of(dt, &ushape, &vals);
            let k = Tensor::scalar_i64(vals[0]);
            match arity {
                0 => vec![data],
                1 => vec![data, k],
                2 => vec![data, indices],
                _ => vec![data, indices, updates],
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4_000, ..ProptestConfig::default() })]

    /// A result or an error naming the op, never a panic.
    #[test]
    fn indexed_ops_never_panic((op, ins) in op().prop_flat_map(|op| (Just(op.clone()), inputs(&op)))) {
        let refs: Vec<&Tensor> = ins.iter().collect();
        if let Err(e) = eval_op(&op, &refs) {
            prop_assert_eq!(e.op, op.name());
        }
    }
}
