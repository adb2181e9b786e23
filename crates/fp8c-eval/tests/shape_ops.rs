//! Shape and data-movement ops, and the i64 arithmetic constant folding relies on.
//! Expected values are worked out by hand in the comments.

mod common;

use common::*;
use fp8c_eval::ErrorKind;
use fp8c_ir::{DType, Op, PadMode};

#[test]
fn shape_slices_with_clamping() {
    let x = f32s(&[2, 3, 4, 5], &[0.0; 120]);
    assert_eq!(
        vi64(&eval1(
            Op::Shape {
                start: 0,
                end: None
            },
            &[&x]
        )),
        [2, 3, 4, 5]
    );
    // start −3 → 1, end −1 → 3: dims 1..3.
    assert_eq!(
        vi64(&eval1(
            Op::Shape {
                start: -3,
                end: Some(-1)
            },
            &[&x]
        )),
        [3, 4]
    );
    // start 10 clamps to 4 → empty; start > end → empty.
    let e = eval1(
        Op::Shape {
            start: 10,
            end: None,
        },
        &[&x],
    );
    assert_eq!(e.shape(), [0]);
    assert_eq!(
        eval1(
            Op::Shape {
                start: 3,
                end: Some(1)
            },
            &[&x]
        )
        .shape(),
        [0]
    );
    assert_eq!(e.dtype(), DType::I64);
}

#[test]
fn shape_subgraph_folds_like_onnx_exporters_emit_it() {
    // The classic `x.view(x.size(0), -1)` subgraph: Shape → Gather(0) → Unsqueeze → Concat
    // with [-1] → Reshape.
    let x = f32s(&[2, 3, 4], &(0..24).map(|i| i as f32).collect::<Vec<_>>());
    let shape = eval1(
        Op::Shape {
            start: 0,
            end: None,
        },
        &[&x],
    );
    let batch = eval1(Op::Gather { axis: 0 }, &[&shape, &Tensor0::i64(0)]);
    assert_eq!(batch.shape(), [] as [u64; 0]);
    let b1 = eval1(Op::Unsqueeze { axes: vec![0] }, &[&batch]);
    let target = eval1(Op::Concat { axis: 0 }, &[&b1, &list(&[-1])]);
    assert_eq!(vi64(&target), [2, -1]);
    let y = eval1(Op::Reshape { allowzero: false }, &[&x, &target]);
    assert_eq!(y.shape(), [2, 12]);
    assert_eq!(y.bytes(), x.bytes());
}

/// Scalar constructors.
struct Tensor0;
impl Tensor0 {
    fn i64(v: i64) -> fp8c_ir::Tensor {
        fp8c_ir::Tensor::scalar_i64(v)
    }
}

#[test]
fn i64_arithmetic_truncates_and_wraps() {
    let a = list(&[7, -7, 7, -7, i64::MIN, i64::MAX]);
    let b = list(&[2, 2, -2, -2, -1, 1]);
    // C division truncates toward zero: 7/2 = 3, −7/2 = −3, 7/−2 = −3, −7/−2 = 3;
    // MIN / −1 overflows and wraps to MIN (numpy's wraparound).
    assert_eq!(
        vi64(&eval1(Op::Div, &[&a, &b])),
        [3, -3, -3, 3, i64::MIN, i64::MAX]
    );
    // MAX + 1 wraps to MIN.
    assert_eq!(vi64(&eval1(Op::Add, &[&a, &b]))[5], i64::MIN);
    assert_eq!(vi64(&eval1(Op::Sub, &[&a, &b]))[..4], [5, -9, 9, -5]);
    assert_eq!(vi64(&eval1(Op::Mul, &[&a, &b]))[..4], [14, -14, -14, 14]);
    // Python-style mod takes the divisor's sign: 7 % 2 = 1, −7 % 2 = 1, 7 % −2 = −1, −7 % −2 = −1.
    assert_eq!(
        vi64(&eval1(Op::Mod { fmod: false }, &[&a, &b]))[..4],
        [1, 1, -1, -1]
    );
    // C fmod takes the dividend's: 1, −1, 1, −1.
    assert_eq!(
        vi64(&eval1(Op::Mod { fmod: true }, &[&a, &b]))[..4],
        [1, -1, 1, -1]
    );
    assert_eq!(
        fails(Op::Div, &[&a, &list(&[1, 0, 1, 1, 1, 1])]),
        ErrorKind::Value
    );
    assert_eq!(
        fails(Op::Mod { fmod: false }, &[&a, &list(&[0; 6])]),
        ErrorKind::Value
    );
}

#[test]
fn i32_and_u8_arithmetic_stays_in_type() {
    let a = i32s(&[3], &[i32::MAX, -9, 100]);
    let b = i32s(&[1], &[2]);
    // MAX·2 wraps to −2; −9/2 = −4 (toward zero); 100·2 = 200.
    assert_eq!(vi64(&eval1(Op::Mul, &[&a, &b])), [-2, -18, 200]);
    assert_eq!(
        vi64(&eval1(Op::Div, &[&a, &b])),
        [i64::from(i32::MAX / 2), -4, 50]
    );
    let u = typed(DType::U8, &[2], &[250.0, 3.0]);
    let v = typed(DType::U8, &[2], &[10.0, 5.0]);
    // 250 + 10 = 260 wraps to 4; 3 − 5 wraps to 254.
    assert_eq!(vi64(&eval1(Op::Add, &[&u, &v])), [4, 8]);
    assert_eq!(vi64(&eval1(Op::Sub, &[&u, &v])), [240, 254]);
}

#[test]
fn comparisons_and_where_broadcast() {
    let a = i64s(&[2, 1], &[1, 5]);
    let b = list(&[1, 3, 5]);
    // [[1],[5]] vs [1,3,5] → [[1==1, 1==3, 1==5], [5==1, 5==3, 5==5]].
    assert_eq!(
        vbool(&eval1(Op::Equal, &[&a, &b])),
        [true, false, false, false, false, true]
    );
    assert_eq!(
        vbool(&eval1(Op::Less, &[&a, &b])),
        [false, true, true, false, false, false]
    );
    assert_eq!(
        vbool(&eval1(Op::GreaterOrEqual, &[&a, &b])),
        [true, false, false, true, true, true]
    );
    let cond = bools(&[3], &[true, false, true]);
    let w = eval1(Op::Where, &[&cond, &a, &b]);
    // where(c, a, b): c broadcast over rows; a = [[1],[5]]; b = [1,3,5] → [[1,3,1],[5,3,5]].
    assert_eq!(w.shape(), [2, 3]);
    assert_eq!(vi64(&w), [1, 3, 1, 5, 3, 5]);
    // Bools compare too (Equal on bool is ONNX).
    let p = bools(&[2], &[true, false]);
    assert_eq!(
        vbool(&eval1(Op::Equal, &[&p, &bools(&[1], &[false])])),
        [false, true]
    );
}

#[test]
fn bool_logic() {
    let p = bools(&[4], &[true, true, false, false]);
    let q = bools(&[4], &[true, false, true, false]);
    assert_eq!(
        vbool(&eval1(Op::And, &[&p, &q])),
        [true, false, false, false]
    );
    assert_eq!(vbool(&eval1(Op::Or, &[&p, &q])), [true, true, true, false]);
    assert_eq!(
        vbool(&eval1(Op::Xor, &[&p, &q])),
        [false, true, true, false]
    );
    assert_eq!(vbool(&eval1(Op::Not, &[&p])), [false, false, true, true]);
    assert_eq!(
        fails(Op::And, &[&p, &list(&[1, 0, 1, 0])]),
        ErrorKind::DType
    );
}

#[test]
fn cast_between_integer_float_and_bool() {
    let x = f32s(&[6], &[-2.7, -0.5, 0.5, 2.7, f32::NAN, 1e10]);
    // Float → int truncates toward zero; NaN → 0 and out-of-range saturates (undefined in ONNX).
    assert_eq!(
        vi64(&eval1(
            Op::Cast {
                to: DType::I32,
                saturate: true
            },
            &[&x]
        )),
        [-2, 0, 0, 2, 0, i64::from(i32::MAX)]
    );
    // Float → bool is x != 0 (NaN is true).
    assert_eq!(
        vbool(&eval1(
            Op::Cast {
                to: DType::Bool,
                saturate: true
            },
            &[&x]
        )),
        [true; 6]
    );
    // i64 → i8 wraps: 200 → −56, −129 → 127.
    let i = list(&[200, -129, 5]);
    assert_eq!(
        vi64(&eval1(
            Op::Cast {
                to: DType::I8,
                saturate: true
            },
            &[&i]
        )),
        [-56, 127, 5]
    );
    // f32 → f16 rounds to nearest even: 1 + 2^-11 is a tie between 1 and 1 + 2^-10 → 1.
    let h = eval1(
        Op::Cast {
            to: DType::F16,
            saturate: true,
        },
        &[&f32s(
            &[2],
            &[1.0 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-11)],
        )],
    );
    assert_eq!(vf64(&h), [1.0, 1.0 + 2.0 * 2f64.powi(-10)]);
    // bool → f32 is 0/1; identity cast returns the input.
    assert_eq!(
        vf32(&eval1(
            Op::Cast {
                to: DType::F32,
                saturate: true
            },
            &[&bools(&[2], &[true, false])]
        )),
        [1.0, 0.0]
    );
    assert_eq!(
        eval1(
            Op::Cast {
                to: DType::I64,
                saturate: true
            },
            &[&i]
        ),
        i
    );
}

#[test]
fn gather_with_negative_and_nested_indices() {
    let x = i64s(&[3, 2], &[10, 11, 20, 21, 30, 31]);
    // Rows −1 (= 2) and 0.
    let g = eval1(Op::Gather { axis: 0 }, &[&x, &list(&[-1, 0])]);
    assert_eq!(
        (g.shape(), vi64(&g)),
        (&[2u64, 2][..], vec![30, 31, 10, 11])
    );
    // Axis 1 with a [2,2] index: out [3, 2, 2], out[i, j, k] = x[i, idx[j, k]].
    let idx = i32s(&[2, 2], &[1, 0, -1, -2]);
    let g = eval1(Op::Gather { axis: -1 }, &[&x, &idx]);
    assert_eq!(g.shape(), [3, 2, 2]);
    assert_eq!(vi64(&g), [11, 10, 11, 10, 21, 20, 21, 20, 31, 30, 31, 30]);
    // A scalar index drops the axis.
    let g = eval1(
        Op::Gather { axis: 1 },
        &[&x, &fp8c_ir::Tensor::scalar_i64(1)],
    );
    assert_eq!((g.shape(), vi64(&g)), (&[3u64][..], vec![11, 21, 31]));
    assert_eq!(
        fails(Op::Gather { axis: 0 }, &[&x, &list(&[3])]),
        ErrorKind::Value
    );
    assert_eq!(
        fails(Op::Gather { axis: 0 }, &[&x, &list(&[-4])]),
        ErrorKind::Value
    );
    assert_eq!(
        fails(Op::Gather { axis: 2 }, &[&x, &list(&[0])]),
        ErrorKind::Attribute
    );
}

#[test]
fn slice_clamps_and_steps_backwards() {
    let x = i64s(&[10], &(0..10).collect::<Vec<_>>());
    let s = |start: i64, end: i64, step: i64| {
        vi64(&eval1(
            Op::Slice,
            &[
                &x,
                &list(&[start]),
                &list(&[end]),
                &list(&[0]),
                &list(&[step]),
            ],
        ))
    };
    assert_eq!(s(2, 8, 3), [2, 5]);
    // Reverse everything: start −1 → 9, end i64::MIN clamps to −1.
    assert_eq!(s(-1, i64::MIN, -1), [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
    // start i64::MAX clamps to 9 for a negative step; step −3: 9, 6, 3, 0.
    assert_eq!(s(i64::MAX, i64::MIN, -3), [9, 6, 3, 0]);
    // end beyond the axis clamps to 10; start −100 clamps to 0.
    assert_eq!(s(-100, 1 << 40, 4), [0, 4, 8]);
    assert_eq!(s(5, 2, 1), [] as [i64; 0]);
    // 2-D with axes [1, 0] and mixed steps: x2[0..2:1, 3..0:-2] of a 3×4 → rows 0,1, cols 3,1.
    let x2 = i64s(&[3, 4], &(0..12).collect::<Vec<_>>());
    let y = eval1(
        Op::Slice,
        &[
            &x2,
            &list(&[3, 0]),
            &list(&[0, 2]),
            &list(&[1, 0]),
            &list(&[-2, 1]),
        ],
    );
    assert_eq!((y.shape(), vi64(&y)), (&[2u64, 2][..], vec![3, 1, 7, 5]));
    assert_eq!(
        fails(
            Op::Slice,
            &[&x, &list(&[0]), &list(&[1]), &list(&[0]), &list(&[0])]
        ),
        ErrorKind::Value
    );
    assert_eq!(
        fails(
            Op::Slice,
            &[
                &x2,
                &list(&[0, 0]),
                &list(&[1, 1]),
                &list(&[0, -2]),
                &list(&[1, 1])
            ]
        ),
        ErrorKind::Attribute
    );
}

#[test]
fn concat_split_transpose() {
    let a = i64s(&[2, 1], &[1, 2]);
    let b = i64s(&[2, 2], &[3, 4, 5, 6]);
    let e = i64s(&[2, 0], &[]);
    let c = eval1(Op::Concat { axis: -1 }, &[&a, &e, &b]);
    // Row-wise: [1 | 3 4], [2 | 5 6].
    assert_eq!(
        (c.shape(), vi64(&c)),
        (&[2u64, 3][..], vec![1, 3, 4, 2, 5, 6])
    );
    let parts = fp8c_eval::eval_op(
        &Op::Split {
            axis: 1,
            split: vec![2, 0, 1],
        },
        &[&c],
    )
    .unwrap();
    assert_eq!(parts.len(), 3);
    assert_eq!(vi64(&parts[0]), [1, 3, 2, 5]);
    assert_eq!(parts[1].shape(), [2, 0]);
    assert_eq!(vi64(&parts[2]), [4, 6]);
    assert_eq!(
        fails(
            Op::Split {
                axis: 1,
                split: vec![1, 1]
            },
            &[&c]
        ),
        ErrorKind::Shape
    );
    assert_eq!(fails(Op::Concat { axis: 0 }, &[&a, &b]), ErrorKind::Shape);
    // Transpose of [2,3] = [[1,3,4],[2,5,6]] → [[1,2],[3,5],[4,6]].
    let t = eval1(Op::Transpose { perm: vec![] }, &[&c]);
    assert_eq!(
        (t.shape(), vi64(&t)),
        (&[3u64, 2][..], vec![1, 2, 3, 5, 4, 6])
    );
    // perm [1, 2, 0] on [2,3,4]: out[i,j,k] = x[k,i,j].
    let x = i64s(&[2, 3, 4], &(0..24).collect::<Vec<_>>());
    let t = eval1(
        Op::Transpose {
            perm: vec![1, 2, 0],
        },
        &[&x],
    );
    assert_eq!(t.shape(), [3, 4, 2]);
    assert_eq!(vi64(&t)[..4], [0, 12, 1, 13]);
    assert_eq!(
        fails(
            Op::Transpose {
                perm: vec![0, 0, 1]
            },
            &[&x]
        ),
        ErrorKind::Attribute
    );
}

#[test]
fn reshape_squeeze_unsqueeze_flatten() {
    let x = f32s(&[2, 3, 4], &[0.0; 24]);
    let r = |t: &[i64], allowzero| {
        eval1(Op::Reshape { allowzero }, &[&x, &list(t)])
            .shape()
            .to_vec()
    };
    assert_eq!(r(&[0, -1], false), [2, 12]); // 0 copies dim 0, −1 = 24 / 2
    assert_eq!(r(&[-1, 0, 2], false), [4, 3, 2]); // 0 copies dim 1 = 3; −1 = 24 / 6
    assert_eq!(
        fails(Op::Reshape { allowzero: false }, &[&x, &list(&[5, -1])]),
        ErrorKind::Shape
    );
    assert_eq!(
        fails(Op::Reshape { allowzero: false }, &[&x, &list(&[-1, -1])]),
        ErrorKind::Value
    );
    // allowzero: a literal 0 dim (only valid for empty tensors).
    let z = f32s(&[0, 3], &[]);
    assert_eq!(
        eval1(Op::Reshape { allowzero: true }, &[&z, &list(&[3, 0])]).shape(),
        [3, 0]
    );
    assert_eq!(
        fails(Op::Reshape { allowzero: true }, &[&z, &list(&[0, -1])]),
        ErrorKind::Attribute
    );
    let u = eval1(Op::Unsqueeze { axes: vec![0, -1] }, &[&x]);
    assert_eq!(u.shape(), [1, 2, 3, 4, 1]);
    assert_eq!(eval1(Op::Squeeze { axes: None }, &[&u]).shape(), [2, 3, 4]);
    assert_eq!(
        eval1(
            Op::Squeeze {
                axes: Some(vec![-1])
            },
            &[&u]
        )
        .shape(),
        [1, 2, 3, 4]
    );
    assert_eq!(
        fails(
            Op::Squeeze {
                axes: Some(vec![1])
            },
            &[&u]
        ),
        ErrorKind::Shape
    );
    assert_eq!(eval1(Op::Flatten { axis: 0 }, &[&x]).shape(), [1, 24]);
    assert_eq!(eval1(Op::Flatten { axis: 3 }, &[&x]).shape(), [24, 1]);
    assert_eq!(eval1(Op::Flatten { axis: -2 }, &[&x]).shape(), [2, 12]);
    assert_eq!(fails(Op::Flatten { axis: 4 }, &[&x]), ErrorKind::Attribute);
}

#[test]
fn expand_constant_of_shape_range_tile() {
    // [3,1] expanded to [2,1,4]: numpy broadcast gives [2,3,4] (the 1 in the target keeps 3).
    let x = i64s(&[3, 1], &[1, 2, 3]);
    let e = eval1(Op::Expand, &[&x, &list(&[2, 1, 4])]);
    assert_eq!(e.shape(), [2, 3, 4]);
    assert_eq!(vi64(&e)[..8], [1, 1, 1, 1, 2, 2, 2, 2]);
    assert_eq!(fails(Op::Expand, &[&x, &list(&[2, 2])]), ErrorKind::Shape); // 3 vs 2
    let c = eval1(
        Op::ConstantOfShape {
            value: fp8c_ir::Tensor::from_i32(vec![1], &[7]),
        },
        &[&list(&[2, 2])],
    );
    assert_eq!((c.dtype(), vi64(&c)), (DType::I32, vec![7; 4]));
    // An empty shape gives a scalar.
    let c = eval1(
        Op::ConstantOfShape {
            value: fp8c_ir::Tensor::from_f32(vec![1], &[0.5]),
        },
        &[&list(&[])],
    );
    assert_eq!((c.shape(), vf32(&c)), (&[] as &[u64], vec![0.5]));
    // range(10, −3, −4) = 10, 6, 2, −2 (ceil(13/4) = 4 elements).
    let s = |v: i64| fp8c_ir::Tensor::scalar_i64(v);
    assert_eq!(
        vi64(&eval1(Op::Range, &[&s(10), &s(-3), &s(-4)])),
        [10, 6, 2, -2]
    );
    assert_eq!(eval1(Op::Range, &[&s(3), &s(1), &s(1)]).shape(), [0]);
    assert_eq!(fails(Op::Range, &[&s(0), &s(1), &s(0)]), ErrorKind::Value);
    // f32: range(0.5, 2, 0.5) = 0.5, 1, 1.5 (ceil(1.5/0.5) = 3).
    let f = |v: f32| scalar_f32(v);
    assert_eq!(
        vf32(&eval1(Op::Range, &[&f(0.5), &f(2.0), &f(0.5)])),
        [0.5, 1.0, 1.5]
    );
    // Tile [[1,2]] by [2, 2] → [[1,2,1,2],[1,2,1,2]].
    let t = eval1(Op::Tile, &[&i64s(&[1, 2], &[1, 2]), &list(&[2, 2])]);
    assert_eq!(
        (t.shape(), vi64(&t)),
        (&[2u64, 4][..], vec![1, 2, 1, 2, 1, 2, 1, 2])
    );
    assert_eq!(fails(Op::Tile, &[&x, &list(&[1, -1])]), ErrorKind::Value);
}

#[test]
fn pad_modes() {
    let x = i64s(&[4], &[1, 2, 3, 4]);
    let pad = |mode, b: i64, e: i64| {
        vi64(&eval1(
            Op::Pad { mode },
            &[&x, &list(&[b, e]), &fp8c_ir::Tensor::scalar_i64(0)],
        ))
    };
    assert_eq!(pad(PadMode::Constant, 2, 1), [0, 0, 1, 2, 3, 4, 0]);
    assert_eq!(pad(PadMode::Edge, 2, 1), [1, 1, 1, 2, 3, 4, 4]);
    // Reflect mirrors without repeating the edge: ... 3 2 | 1 2 3 4 | 3 ...
    assert_eq!(pad(PadMode::Reflect, 2, 1), [3, 2, 1, 2, 3, 4, 3]);
    assert_eq!(pad(PadMode::Wrap, 2, 1), [3, 4, 1, 2, 3, 4, 1]);
    // Pads wider than the axis repeat periodically, as numpy: reflect has period 2·(4−1) = 6,
    // so 5 to the left gives indices 5,4,3,2,1 → mirrored 1,2,3,2,1 → values 2,3,4,3,2.
    assert_eq!(pad(PadMode::Reflect, 5, 0), [2, 3, 4, 3, 2, 1, 2, 3, 4]);
    assert_eq!(pad(PadMode::Wrap, 5, 0), [4, 1, 2, 3, 4, 1, 2, 3, 4]);
    // Negative pads crop.
    assert_eq!(pad(PadMode::Constant, -1, 2), [2, 3, 4, 0, 0]);
    // A custom constant, in 2-D: pads [1, 0, 0, 1] on [[1,2]] → [[9,9,9],[1,2,9]].
    let y = eval1(
        Op::Pad {
            mode: PadMode::Constant,
        },
        &[
            &i64s(&[1, 2], &[1, 2]),
            &list(&[1, 0, 0, 1]),
            &fp8c_ir::Tensor::scalar_i64(9),
        ],
    );
    assert_eq!(
        (y.shape(), vi64(&y)),
        (&[2u64, 3][..], vec![9, 9, 9, 1, 2, 9])
    );
    assert_eq!(
        fails(
            Op::Pad {
                mode: PadMode::Constant
            },
            &[&x, &list(&[-3, -2])]
        ),
        ErrorKind::Value
    );
    let empty = i64s(&[0], &[]);
    assert_eq!(
        fails(
            Op::Pad {
                mode: PadMode::Reflect
            },
            &[&empty, &list(&[1, 0])]
        ),
        ErrorKind::Value
    );
}

#[test]
fn data_movement_carries_fp8_bytes_unchanged() {
    let q = fp8(DType::F8E4M3, &[2, 2], &[0x01, 0x7F, 0x80, 0xFE]);
    let t = eval1(Op::Transpose { perm: vec![1, 0] }, &[&q]);
    assert_eq!(
        (t.dtype(), t.bytes()),
        (DType::F8E4M3, &[0x01, 0x80, 0x7F, 0xFE][..])
    );
    let g = eval1(Op::Gather { axis: 1 }, &[&q, &list(&[1])]);
    assert_eq!(g.bytes(), [0x7F, 0xFE]);
    let w = eval1(
        Op::Where,
        &[
            &bools(&[2], &[true, false]),
            &q,
            &fp8(DType::F8E4M3, &[1], &[0x33]),
        ],
    );
    assert_eq!(w.bytes(), [0x01, 0x33, 0x80, 0x33]);
    assert_eq!(fails(Op::Add, &[&q, &q]), ErrorKind::DType);
}

#[test]
fn huge_outputs_are_refused_before_allocating() {
    let x = f32s(&[1], &[1.0]);
    // 2^20 · 2^20 elements > MAX_ELEMENTS (2^34).
    assert_eq!(
        fails(Op::Expand, &[&x, &list(&[1 << 20, 1 << 20])]),
        ErrorKind::TooLarge
    );
    assert_eq!(
        fails(Op::Tile, &[&x, &list(&[i64::MAX])]),
        ErrorKind::TooLarge
    );
    let big = fp8c_ir::Tensor::from_f32(vec![1], &[0.0]);
    assert_eq!(
        fails(Op::ConstantOfShape { value: big }, &[&list(&[1 << 40])]),
        ErrorKind::TooLarge
    );
    let s = |v: i64| fp8c_ir::Tensor::scalar_i64(v);
    assert_eq!(
        fails(Op::Range, &[&s(0), &s(i64::MAX), &s(1)]),
        ErrorKind::TooLarge
    );
    assert_eq!(
        fails(
            Op::Pad {
                mode: PadMode::Edge
            },
            &[&x, &list(&[0, 1 << 40])]
        ),
        ErrorKind::TooLarge
    );
}

#[test]
fn arity_and_interface_errors() {
    let x = f32s(&[1], &[1.0]);
    assert_eq!(fails(Op::Add, &[&x]), ErrorKind::Arity);
    assert_eq!(fails(Op::Relu, &[&x, &x]), ErrorKind::Arity);
    assert_eq!(
        fails(Op::Input { name: "x".into() }, &[]),
        ErrorKind::Interface
    );
    assert_eq!(fails(Op::Slice, &[&x, &list(&[0])]), ErrorKind::Arity);
    let e = fp8c_eval::eval_op(&Op::MatMul, &[&x]).unwrap_err();
    assert_eq!(e.to_string(), "`matmul`: expects 2 inputs, got 1");
}
