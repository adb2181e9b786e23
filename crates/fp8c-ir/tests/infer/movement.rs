//! Shape and data movement: `shape`, `reshape` (constant and symbolic), `transpose`,
//! `(un)squeeze`, `flatten`, `concat`, `split`, `slice`, `gather`, `expand`,
//! `constant_of_shape`, `range`, `pad`, `tile`, `gather_elements`, `scatter_elements`,
//! `scatter_nd`, `trilu`.

use super::*;

#[test]
fn shape_op_slices_the_rank() {
    let shape = |start, end| Op::Shape { start, end };
    assert_eq!(ok(shape(0, None), vec![T("f32[batch,3,4]")]), "i64[3]");
    assert_eq!(ok(shape(-2, None), vec![T("f32[batch,3,4]")]), "i64[2]");
    assert_eq!(ok(shape(1, Some(-1)), vec![T("f32[batch,3,4]")]), "i64[1]");
    assert_eq!(ok(shape(5, None), vec![T("f32[batch,3,4]")]), "i64[0]");
    assert_eq!(ok(shape(-10, Some(10)), vec![T("f32[2,3]")]), "i64[2]");
    assert_eq!(ok(shape(2, Some(1)), vec![T("f32[2,3,4]")]), "i64[0]");
}

#[test]
fn reshape_with_constant_shapes() {
    let r = || Op::Reshape { allowzero: false };
    assert_eq!(ok(r(), vec![T("f32[2,3,4]"), i64s(&[0, -1])]), "f32[2,12]");
    assert_eq!(ok(r(), vec![T("f32[2,3,4]"), i64s(&[-1])]), "f32[24]");
    assert_eq!(
        ok(r(), vec![T("f32[2,3,4]"), i64s(&[4, -1, 2])]),
        "f32[4,3,2]"
    );
    assert_eq!(ok(r(), vec![T("f32[2,3,4]"), i64s(&[6, 4])]), "f32[6,4]");
    assert_eq!(ok(r(), vec![T("f32[0,3]"), i64s(&[-1, 3])]), "f32[0,3]");
    assert_eq!(
        ok(
            r(),
            vec![T("f32[2,3]"), C(Tensor::from_i32(vec![2], &[3, 2]))]
        ),
        "f32[3,2]"
    );
    // allowzero: 0 is a real zero size.
    assert_eq!(
        ok(
            Op::Reshape { allowzero: true },
            vec![T("f32[0,3]"), i64s(&[0, 5])]
        ),
        "f32[0,5]"
    );
}

#[test]
fn reshape_with_symbolic_dims() {
    let r = || Op::Reshape { allowzero: false };
    // 0 copies the symbol; heads split: [batch, seq, 768] → [batch, seq, 12, 64].
    assert_eq!(
        ok(r(), vec![T("f32[batch,seq,768]"), i64s(&[0, 0, 12, 64])]),
        "f32[batch,seq,12,64]"
    );
    // -1 recovers a symbol when the other dims cancel it exactly.
    assert_eq!(
        ok(r(), vec![T("f32[batch,768]"), i64s(&[-1, 12, 64])]),
        "f32[batch,12,64]"
    );
    assert_eq!(
        ok(r(), vec![T("f32[batch,12,64]"), i64s(&[0, -1])]),
        "f32[batch,768]"
    );
    assert_eq!(
        ok(r(), vec![T("f32[batch,seq,768]"), i64s(&[0, -1, 768])]),
        "f32[batch,seq,768]"
    );
    // batch·seq is not one dim; seq·768 neither.
    assert_eq!(
        ok(r(), vec![T("f32[batch,seq,768]"), i64s(&[-1, 768])]),
        "f32[?,768]"
    );
    assert_eq!(
        ok(r(), vec![T("f32[batch,seq,768]"), i64s(&[0, -1])]),
        "f32[batch,?]"
    );
    assert_eq!(ok(r(), vec![T("f32[?,768]"), i64s(&[-1, 64])]), "f32[?,64]");
    // A shape that is not a constant: rank from its static length, sizes unknown.
    assert_eq!(
        ok(r(), vec![T("f32[batch,768]"), T("i64[3]")]),
        "f32[?,?,?]"
    );
}

#[test]
fn reshape_errors() {
    let r = || Op::Reshape { allowzero: false };
    let e = err(r(), vec![T("f32[2,3,4]"), i64s(&[5, -1])]);
    assert!(e.contains("input 0 (data) f32[2,3,4] cannot be reshaped to [5,-1]: 24 elements cannot be split into a multiple of 5"), "{e}");
    let e = err(r(), vec![T("f32[2,3,4]"), i64s(&[5, 5])]);
    assert!(
        e.contains("cannot be reshaped to [5,5]: 24 elements vs 25"),
        "{e}"
    );
    assert!(err(r(), vec![T("f32[2,3,4]"), i64s(&[-1, -1])]).contains("at most one -1"));
    assert!(err(r(), vec![T("f32[2,3,4]"), i64s(&[-2, 12])]).contains("sizes must be ≥ -1"));
    assert!(
        err(r(), vec![T("f32[6]"), i64s(&[6, 0])])
            .contains("its 0 at position 1 copies a dim that input 0 (data) f32[6] does not have")
    );
    assert!(
        err(
            Op::Reshape { allowzero: true },
            vec![T("f32[6]"), i64s(&[0, -1])]
        )
        .contains("cannot hold both 0 and -1")
    );
    let e = err(r(), vec![T("f32[6]"), T("f32[2]")]);
    assert!(
        e.contains("input 1 (shape) has type f32[2], expected i64 or i32 (a 1-D list)"),
        "{e}"
    );
    assert!(
        err(r(), vec![T("f32[6]"), T("i64[2,2]")])
            .contains("input 1 (shape) has shape i64[2,2], expected a 1-D list")
    );
    assert!(err(r(), vec![T("f32[6]"), T("i64[n]")]).contains("its length is not known"));
    assert!(err(r(), vec![T("f32[6]"), T("i64[100]")]).contains("exceeds the maximum"));
}

#[test]
fn transpose_unsqueeze_squeeze_flatten() {
    assert_eq!(
        ok(
            Op::Transpose {
                perm: vec![0, 2, 1]
            },
            vec![T("f32[b,3,4]")]
        ),
        "f32[b,4,3]"
    );
    assert_eq!(
        ok(Op::Transpose { perm: vec![] }, vec![T("f32[b,3,4]")]),
        "f32[4,3,b]"
    );
    let e = err(
        Op::Transpose {
            perm: vec![0, 0, 1],
        },
        vec![T("f32[b,3,4]")],
    );
    assert!(
        e.contains("attribute perm=[0,0,1] is not a permutation of 0..3"),
        "{e}"
    );
    assert!(
        err(Op::Transpose { perm: vec![1, 0] }, vec![T("f32[b,3,4]")])
            .contains("not a permutation")
    );
    assert!(
        err(
            Op::Transpose {
                perm: vec![0, -1, 1]
            },
            vec![T("f32[b,3,4]")]
        )
        .contains("not a permutation")
    );

    // Unsqueeze axes count in the output (rank 4 here): 0 and -1 = 3.
    assert_eq!(
        ok(Op::Unsqueeze { axes: vec![0, -1] }, vec![T("f32[3,4]")]),
        "f32[1,3,4,1]"
    );
    assert_eq!(
        ok(Op::Unsqueeze { axes: vec![2, 0] }, vec![T("f32[3,4]")]),
        "f32[1,3,1,4]"
    );
    assert_eq!(
        ok(Op::Unsqueeze { axes: vec![0] }, vec![T("i64[]")]),
        "i64[1]"
    );
    assert!(
        err(Op::Unsqueeze { axes: vec![4] }, vec![T("f32[3,4]")])
            .contains("out of range for the output rank 3")
    );
    assert!(
        err(Op::Unsqueeze { axes: vec![1, 1] }, vec![T("f32[3,4]")])
            .contains("names output axis 1 twice")
    );

    assert_eq!(
        ok(Op::Squeeze { axes: None }, vec![T("f32[1,batch,1,4]")]),
        "f32[batch,4]"
    );
    assert_eq!(
        ok(
            Op::Squeeze {
                axes: Some(vec![1])
            },
            vec![T("f32[1,batch]")]
        ),
        "f32[1]"
    );
    assert_eq!(
        ok(
            Op::Squeeze {
                axes: Some(vec![-1, 0])
            },
            vec![T("f32[1,3,?]")]
        ),
        "f32[3]"
    );
    let e = err(
        Op::Squeeze {
            axes: Some(vec![1]),
        },
        vec![T("f32[1,4]")],
    );
    assert!(
        e.contains("axis 1 has size 4, only size-1 axes can be squeezed"),
        "{e}"
    );

    assert_eq!(
        ok(Op::Flatten { axis: 1 }, vec![T("f32[2,3,4]")]),
        "f32[2,12]"
    );
    assert_eq!(
        ok(Op::Flatten { axis: 0 }, vec![T("f32[2,3,4]")]),
        "f32[1,24]"
    );
    assert_eq!(
        ok(Op::Flatten { axis: 3 }, vec![T("f32[2,3,4]")]),
        "f32[24,1]"
    );
    assert_eq!(
        ok(Op::Flatten { axis: -1 }, vec![T("f32[2,3,4]")]),
        "f32[6,4]"
    );
    assert_eq!(
        ok(Op::Flatten { axis: 1 }, vec![T("f32[batch,3,4]")]),
        "f32[batch,12]"
    );
    assert_eq!(
        ok(Op::Flatten { axis: 2 }, vec![T("f32[batch,3,4]")]),
        "f32[?,4]"
    );
    assert_eq!(
        ok(Op::Flatten { axis: 1 }, vec![T("f32[batch,0,4]")]),
        "f32[batch,0]"
    );
    assert!(
        err(Op::Flatten { axis: 4 }, vec![T("f32[2,3,4]")])
            .contains("axis=4 is out of range [-3, 3]")
    );
}

#[test]
fn concat_and_split() {
    assert_eq!(
        ok(
            Op::Concat { axis: 0 },
            vec![T("f32[2,3]"), T("f32[4,3]"), T("f32[1,3]")]
        ),
        "f32[7,3]"
    );
    assert_eq!(
        ok(
            Op::Concat { axis: -1 },
            vec![T("f32[batch,3]"), T("f32[batch,5]")]
        ),
        "f32[batch,8]"
    );
    assert_eq!(
        ok(Op::Concat { axis: 0 }, vec![T("f32[n,3]"), T("f32[2,3]")]),
        "f32[?,3]"
    );
    assert_eq!(
        ok(Op::Concat { axis: 1 }, vec![T("f32[?,3]"), T("f32[4,2]")]),
        "f32[4,5]"
    );
    assert_eq!(ok(Op::Concat { axis: 0 }, vec![T("i64[2]")]), "i64[2]");
    let e = err(Op::Concat { axis: 0 }, vec![T("f32[2,3]"), T("f32[2,4]")]);
    assert!(e.contains("input 1 has shape f32[2,4], its dim 1 (4) must equal the other inputs' (3); only axis 0 may differ"), "{e}");
    assert!(
        err(Op::Concat { axis: 0 }, vec![T("f32[2,3]"), T("f32[2]")])
            .contains("input 1 has shape f32[2], expected rank 2")
    );
    assert!(err(Op::Concat { axis: 0 }, vec![]).contains("at least 1 input"));

    let split = |axis, split: &[i64]| Op::Split {
        axis,
        split: split.to_vec(),
    };
    assert_eq!(
        ok(split(0, &[3, 7]), vec![T("f32[10,4]")]),
        "f32[3,4], f32[7,4]"
    );
    assert_eq!(
        ok(split(-1, &[2, 2, 0]), vec![T("f32[b,4]")]),
        "f32[b,2], f32[b,2], f32[b,0]"
    );
    assert_eq!(
        ok(split(0, &[3, 7]), vec![T("f32[n,4]")]),
        "f32[3,4], f32[7,4]"
    );
    let e = err(split(0, &[3, 6]), vec![T("f32[10,4]")]);
    assert!(
        e.contains("attribute split=[3,6] sums to 9, but axis 0 has size 10"),
        "{e}"
    );
    assert!(err(split(0, &[]), vec![T("f32[10,4]")]).contains("split is empty"));
}

fn slice_of(
    data: &'static str,
    starts: &[i64],
    ends: &[i64],
    axes: &[i64],
    steps: &[i64],
) -> Result<String, String> {
    node(
        Op::Slice,
        vec![T(data), i64s(starts), i64s(ends), i64s(axes), i64s(steps)],
    )
}

#[test]
fn slice_with_constants() {
    let big = i64::MAX;
    // Axis 0: 1..8 by 2 → 1,3,5,7 (4); axis 2: −5 → 25..30 (5).
    assert_eq!(
        slice_of("f32[10,20,30]", &[1, -5], &[8, big], &[0, 2], &[2, 1]).unwrap(),
        "f32[4,20,5]"
    );
    // Reversal: start −1, end −∞, step −1 → 20; step −2 from the end → 10.
    assert_eq!(
        slice_of("f32[10,20]", &[-1], &[i64::MIN], &[1], &[-1]).unwrap(),
        "f32[10,20]"
    );
    assert_eq!(
        slice_of("f32[10,20]", &[big], &[i64::MIN], &[-1], &[-2]).unwrap(),
        "f32[10,10]"
    );
    // Clamping: start past the end gives 0; end before start gives 0.
    assert_eq!(
        slice_of("f32[10]", &[12], &[20], &[0], &[1]).unwrap(),
        "f32[0]"
    );
    assert_eq!(
        slice_of("f32[10]", &[5], &[2], &[0], &[1]).unwrap(),
        "f32[0]"
    );
    // A symbolic dim survives a whole-range slice only.
    assert_eq!(
        slice_of("f32[batch,seq]", &[0, 1], &[big, 5], &[0, 1], &[1, 1]).unwrap(),
        "f32[batch,?]"
    );
    assert_eq!(
        slice_of("f32[batch]", &[-1], &[i64::MIN], &[0], &[-1]).unwrap(),
        "f32[batch]"
    );
}

#[test]
fn slice_without_constants_and_errors() {
    let (s, e, a, st) = (i64s(&[0]), i64s(&[2]), i64s(&[1]), i64s(&[1]));
    assert_eq!(
        ok(Op::Slice, vec![T("f32[4,5,6]"), T("i64[1]"), e, a, st]),
        "f32[4,?,6]"
    );
    assert_eq!(
        ok(
            Op::Slice,
            vec![T("f32[4,5,6]"), s, i64s(&[2]), T("i64[1]"), i64s(&[1])]
        ),
        "f32[?,?,?]"
    );
    let e = slice_of("f32[10]", &[0], &[5], &[0], &[0]).unwrap_err();
    assert!(e.contains("input 4 (steps) holds a 0 step"), "{e}");
    let e = slice_of("f32[10]", &[0, 1], &[5], &[0], &[1]).unwrap_err();
    assert!(
        e.contains("input 2 (ends) has shape i64[1], it has 1 entries but input 1 (starts) has 2"),
        "{e}"
    );
    assert!(
        slice_of("f32[10]", &[0], &[5], &[1], &[1])
            .unwrap_err()
            .contains("axes=1 is out of range")
    );
    assert!(
        slice_of("f32[10,3]", &[0, 0], &[5, 5], &[0, -2], &[1, 1])
            .unwrap_err()
            .contains("names axis 0 twice")
    );
}

#[test]
fn gather_expand_constant_of_shape() {
    assert_eq!(
        ok(Op::Gather { axis: 0 }, vec![T("f32[5,6]"), T("i64[]")]),
        "f32[6]"
    );
    assert_eq!(
        ok(Op::Gather { axis: 1 }, vec![T("f32[5,6]"), T("i32[2,3]")]),
        "f32[5,2,3]"
    );
    assert_eq!(
        ok(
            Op::Gather { axis: 0 },
            vec![T("f32[vocab,768]"), T("i64[batch,seq]")]
        ),
        "f32[batch,seq,768]"
    );
    // Gather on a shape-like i64 vector keeps its dtype.
    assert_eq!(
        ok(
            Op::Gather { axis: 0 },
            vec![T("i64[4]"), C(Tensor::scalar_i64(-1))]
        ),
        "i64[]"
    );
    let e = err(
        Op::Gather { axis: 0 },
        vec![T("f32[5,6]"), C(Tensor::scalar_i64(5))],
    );
    assert!(
        e.contains("input 1 (indices) holds index 5, out of range for axis 0 of size 5"),
        "{e}"
    );
    assert!(
        err(Op::Gather { axis: 0 }, vec![T("f32[5,6]"), T("f32[2]")])
            .contains("input 1 (indices) has type f32[2], expected i64 or i32")
    );

    assert_eq!(
        ok(Op::Expand, vec![T("f32[3,1]"), i64s(&[2, 1, 4])]),
        "f32[2,3,4]"
    );
    assert_eq!(
        ok(Op::Expand, vec![T("f32[batch,1]"), i64s(&[1, 5])]),
        "f32[batch,5]"
    );
    assert_eq!(
        ok(Op::Expand, vec![T("f32[3,1]"), T("i64[3]")]),
        "f32[?,3,?]"
    );
    let e = err(Op::Expand, vec![T("f32[3,2]"), i64s(&[4, 4])]);
    assert!(e.contains("input 1 (shape) is [4,4], which does not broadcast with input 0 (input) f32[3,2] (4 vs 3)"), "{e}");
    assert!(err(Op::Expand, vec![T("f32[1]"), i64s(&[1 << 40])]).contains("too large"));

    let cos = |value| Op::ConstantOfShape { value };
    assert_eq!(
        ok(cos(Tensor::scalar_f32(0.0)), vec![i64s(&[2, 3])]),
        "f32[2,3]"
    );
    assert_eq!(
        ok(cos(Tensor::from_i64(vec![1], &[7])), vec![i64s(&[])]),
        "i64[]"
    );
    assert_eq!(
        ok(cos(Tensor::scalar_f32(0.0)), vec![T("i64[2]")]),
        "f32[?,?]"
    );
    assert!(err(cos(Tensor::scalar_f32(0.0)), vec![i64s(&[2, -3])]).contains("sizes must be ≥ 0"));
    assert!(
        err(
            cos(Tensor::from_f32(vec![2], &[0.0, 1.0])),
            vec![i64s(&[2])]
        )
        .contains("expected one element")
    );
}

#[test]
fn range_pad_tile() {
    let i = |v| C(Tensor::scalar_i64(v));
    let f = |v| C(Tensor::scalar_f32(v));
    // ceil((10 − 0) / 3) = 4; ceil((0 − 1) / −0.5) = 2; ceil((0 − 5) / 1) < 0 → 0.
    assert_eq!(ok(Op::Range, vec![i(0), i(10), i(3)]), "i64[4]");
    assert_eq!(ok(Op::Range, vec![f(1.0), f(0.0), f(-0.5)]), "f32[2]");
    assert_eq!(ok(Op::Range, vec![i(5), i(0), i(1)]), "i64[0]");
    assert_eq!(ok(Op::Range, vec![T("i64[]"), i(10), i(1)]), "i64[?]");
    assert!(err(Op::Range, vec![i(0), i(10), i(0)]).contains("input 2 (delta) is 0"));
    assert!(
        err(Op::Range, vec![i(0), f(10.0), i(1)])
            .contains("input 1 (limit) has type f32[], expected i64 like input 0 (start)")
    );
    assert!(err(Op::Range, vec![f(0.0), f(f32::INFINITY), f(1.0)]).contains("no finite length"));
    assert!(err(Op::Range, vec![i(0), i(i64::MAX), i(1)]).contains("more than the maximum"));

    let pad = || Op::Pad {
        mode: PadMode::Constant,
    };
    // [begin_0, begin_1, end_0, end_1] = [1, 0, 1, 2]: 2+1+1 = 4, 3+0+2 = 5.
    assert_eq!(
        ok(pad(), vec![T("f32[2,3]"), i64s(&[1, 0, 1, 2]), T("f32[]")]),
        "f32[4,5]"
    );
    assert_eq!(
        ok(pad(), vec![T("f32[b,3]"), i64s(&[0, -1, 0, 0]), T("f32[]")]),
        "f32[b,2]"
    );
    assert_eq!(
        ok(pad(), vec![T("f32[b,3]"), i64s(&[1, 0, 0, 0]), T("f32[]")]),
        "f32[?,3]"
    );
    assert_eq!(
        ok(pad(), vec![T("f32[b,3]"), T("i64[4]"), T("f32[]")]),
        "f32[?,?]"
    );
    assert!(
        err(pad(), vec![T("f32[2,3]"), i64s(&[1, 0]), T("f32[]")])
            .contains("input 1 (pads) has shape i64[2], expected 4 entries")
    );
    assert!(
        err(pad(), vec![T("f32[2,3]"), i64s(&[-3, 0, 0, 0]), T("f32[]")])
            .contains("would have size -1")
    );
    assert!(
        err(pad(), vec![T("f32[2,3]"), i64s(&[0, 0, 0, 0]), T("f16[]")])
            .contains("input 2 (constant_value) has type f16[]")
    );

    assert_eq!(
        ok(Op::Tile, vec![T("f32[2,batch]"), i64s(&[3, 1])]),
        "f32[6,batch]"
    );
    assert_eq!(
        ok(Op::Tile, vec![T("f32[2,batch]"), i64s(&[1, 2])]),
        "f32[2,?]"
    );
    assert_eq!(ok(Op::Tile, vec![T("f32[2,3]"), T("i64[2]")]), "f32[?,?]");
    assert!(err(Op::Tile, vec![T("f32[2,3]"), i64s(&[2])]).contains("expected 2 entries"));
    assert!(err(Op::Tile, vec![T("f32[2,3]"), i64s(&[2, -1])]).contains("repeats must be ≥ 0"));
}

#[test]
fn gather_and_scatter_elements() {
    use fp8c_ir::ScatterReduction as R;
    let g = |axis| Op::GatherElements { axis };
    assert_eq!(ok(g(1), vec![T("f32[3,4]"), T("i64[3,7]")]), "f32[3,7]");
    assert_eq!(ok(g(-2), vec![T("f16[n,4]"), T("i32[2,4]")]), "f16[2,4]");
    let e = err(g(0), vec![T("f32[3,4]"), T("i64[3]")]);
    assert!(e.contains("expected the rank of input 0 (data)"), "{e}");
    let e = err(g(1), vec![T("f32[3,4]"), T("i64[5,4]")]);
    assert!(e.contains("its dim 0 (5) exceeds"), "{e}");
    let e = err(
        g(1),
        vec![T("f32[3,4]"), C(Tensor::from_i64(vec![1, 1], &[4]))],
    );
    assert!(
        e.contains("index 4, out of range for axis 1 of size 4"),
        "{e}"
    );
    let s = |axis, reduction| Op::ScatterElements { axis, reduction };
    assert_eq!(
        ok(
            s(0, R::None),
            vec![T("bool[3,4]"), T("i64[5,2]"), T("bool[5,2]")]
        ),
        "bool[3,4]"
    );
    assert_eq!(
        ok(
            s(1, R::Max),
            vec![T("i32[3,4]"), T("i32[2,2]"), T("i32[2,2]")]
        ),
        "i32[3,4]"
    );
    let e = err(
        s(1, R::Add),
        vec![T("bool[3,4]"), T("i64[2,2]"), T("bool[2,2]")],
    );
    assert!(e.contains("(reduction=add)"), "{e}");
    let e = err(
        s(1, R::None),
        vec![T("f32[3,4]"), T("i64[2,2]"), T("f32[2,3]")],
    );
    assert!(
        e.contains("input 2 (updates) has shape f32[2,3], expected the shape"),
        "{e}"
    );
    let e = err(
        s(1, R::None),
        vec![T("f32[3,4]"), T("i64[2,2]"), T("f16[2,2]")],
    );
    assert!(e.contains("expected f32 like input 0 (data)"), "{e}");
}

#[test]
fn scatter_nd_and_trilu() {
    use fp8c_ir::ScatterReduction as R;
    let s = |reduction| Op::ScatterNd { reduction };
    assert_eq!(
        ok(
            s(R::None),
            vec![T("f32[4,5,6]"), T("i64[3,2]"), T("f32[3,6]")]
        ),
        "f32[4,5,6]"
    );
    assert_eq!(
        ok(s(R::Mul), vec![T("f32[b,5]"), T("i64[2,1]"), T("f32[2,5]")]),
        "f32[b,5]"
    );
    let e = err(
        s(R::None),
        vec![T("f32[4,5,6]"), T("i64[3,2]"), T("f32[3,5]")],
    );
    assert!(
        e.contains("expected indices.shape[..-1] ++ data.shape[2..] = f32[3,6]"),
        "{e}"
    );
    let e = err(s(R::None), vec![T("f32[4,5]"), T("i64[3,3]"), T("f32[3]")]);
    assert!(
        e.contains("its last dim (3) must be at most the rank"),
        "{e}"
    );
    let e = err(
        s(R::None),
        vec![T("f32[4,5]"), T("i32[3,1]"), T("f32[3,5]")],
    );
    assert!(
        e.contains("input 1 (indices) has type i32[3,1], expected i64"),
        "{e}"
    );
    let idx = C(Tensor::from_i64(vec![1, 1], &[-5]));
    let e = err(s(R::None), vec![T("f32[4,5]"), idx, T("f32[1,5]")]);
    assert!(
        e.contains("index -5, out of range for axis 0 of size 4"),
        "{e}"
    );
    let t = |upper| Op::Trilu { upper };
    assert_eq!(ok(t(true), vec![T("f32[2,3,4]")]), "f32[2,3,4]");
    assert_eq!(
        ok(t(false), vec![T("i64[3,n]"), C(Tensor::scalar_i64(-1))]),
        "i64[3,n]"
    );
    let e = err(t(true), vec![T("f32[4]")]);
    assert!(e.contains("expected rank ≥ 2"), "{e}");
    let e = err(t(true), vec![T("f32[4,4]"), T("i64[2]")]);
    assert!(
        e.contains("input 1 (k) has shape i64[2], expected a scalar"),
        "{e}"
    );
}
