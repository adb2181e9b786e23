//! Constants and the interface ops.

use super::*;
use fp8c_ir::infer::{InferInput, infer};

#[test]
fn constants_and_interface_ops() {
    assert_eq!(
        ok(
            Op::Constant {
                value: Tensor::from_f32(vec![2], &[1.0, 2.0])
            },
            vec![]
        ),
        "f32[2]"
    );
    let t = TensorType::scalar(DType::F32);
    assert!(
        infer(&Op::Input { name: "x".into() }, &[])
            .unwrap_err()
            .contains("declared types")
    );
    assert!(
        infer(
            &Op::Constant {
                value: Tensor::scalar_f32(1.0)
            },
            &[InferInput::new(&t)]
        )
        .unwrap_err()
        .contains("expects no inputs, got 1")
    );
}
