//! Reductions: axes, keepdims and their errors.

use super::*;

#[test]
fn reductions() {
    let mean = |axes: Option<Vec<i64>>, keepdims| Op::ReduceMean { axes, keepdims };
    assert_eq!(ok(mean(None, false), vec![T("f32[2,3,4]")]), "f32[]");
    assert_eq!(ok(mean(None, true), vec![T("f32[2,3,4]")]), "f32[1,1,1]");
    assert_eq!(
        ok(mean(Some(vec![]), false), vec![T("f32[2,3,4]")]),
        "f32[]"
    );
    assert_eq!(
        ok(mean(Some(vec![1]), true), vec![T("f32[2,3,4]")]),
        "f32[2,1,4]"
    );
    assert_eq!(
        ok(
            Op::ReduceSum {
                axes: Some(vec![-1, 0]),
                keepdims: false
            },
            vec![T("f32[b,3,4]")]
        ),
        "f32[3]"
    );
    assert_eq!(
        ok(
            Op::ReduceMax {
                axes: Some(vec![1]),
                keepdims: false
            },
            vec![T("i64[b,3]")]
        ),
        "i64[b]"
    );
    assert!(
        err(mean(Some(vec![1, -2]), false), vec![T("f32[2,3,4]")])
            .contains("axes [1,-2] names axis 1 twice")
    );
    assert!(
        err(mean(Some(vec![3]), false), vec![T("f32[2,3,4]")]).contains("axes=3 is out of range")
    );
}
