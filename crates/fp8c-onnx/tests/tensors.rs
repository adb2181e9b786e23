//! TensorProto decoding (raw and typed fields, per the ONNX spec) and the backend-test `.pb`
//! tensor files.

use fp8c_ir::{DType, Tensor};
use fp8c_onnx::proto::TensorProto;
use fp8c_onnx::{
    decode_tensor_pb, load_tensor_pb, save_tensor_pb, tensor_from_proto, tensor_pb_bytes,
    tensor_to_proto,
};
use half::{bf16, f16};
use prost::Message;
use std::path::PathBuf;

fn proto(data_type: i32, dims: &[i64]) -> TensorProto {
    TensorProto {
        name: Some("t".into()),
        data_type: Some(data_type),
        dims: dims.to_vec(),
        ..Default::default()
    }
}

fn decode(t: &TensorProto) -> Tensor {
    tensor_from_proto(t, None).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn typed_fields_decode_per_the_spec() {
    let t = decode(&TensorProto {
        float_data: vec![1.0, -2.0],
        ..proto(1, &[2])
    });
    assert_eq!(
        (t.dtype(), t.to_f32_vec().unwrap()),
        (DType::F32, vec![1.0, -2.0])
    );

    let t = decode(&TensorProto {
        double_data: vec![0.25],
        ..proto(11, &[])
    });
    assert_eq!(
        (t.dtype(), t.shape().len(), t.to_f64_vec().unwrap()),
        (DType::F64, 0, vec![0.25])
    );

    let t = decode(&TensorProto {
        int64_data: vec![i64::MIN, 7],
        ..proto(7, &[2, 1])
    });
    assert_eq!(t.to_i64_vec().unwrap(), [i64::MIN, 7]);

    let t = decode(&TensorProto {
        int32_data: vec![-5, 9],
        ..proto(6, &[2])
    });
    assert_eq!(
        (t.dtype(), t.to_i64_vec().unwrap()),
        (DType::I32, vec![-5, 9])
    );

    let t = decode(&TensorProto {
        int32_data: vec![-3, 100],
        ..proto(3, &[2])
    });
    assert_eq!(
        (t.dtype(), t.to_i64_vec().unwrap()),
        (DType::I8, vec![-3, 100])
    );

    let t = decode(&TensorProto {
        int32_data: vec![255, 0],
        ..proto(2, &[2])
    });
    assert_eq!(
        (t.dtype(), t.to_i64_vec().unwrap()),
        (DType::U8, vec![255, 0])
    );

    let t = decode(&TensorProto {
        int32_data: vec![-300],
        ..proto(5, &[1])
    });
    assert_eq!(
        (t.dtype(), t.to_i64_vec().unwrap()),
        (DType::I16, vec![-300])
    );

    let t = decode(&TensorProto {
        int32_data: vec![1, 0, 1],
        ..proto(9, &[3])
    });
    assert_eq!((t.dtype(), t.bytes()), (DType::Bool, &[1u8, 0, 1][..]));

    // f16 / bf16: bit patterns in int32_data.
    let bits = f16::from_f32(1.5).to_bits() as i32;
    let t = decode(&TensorProto {
        int32_data: vec![bits],
        ..proto(10, &[1])
    });
    assert_eq!(
        (t.dtype(), t.to_f32_vec().unwrap()),
        (DType::F16, vec![1.5])
    );
    let bits = bf16::from_f32(-0.5).to_bits() as i32;
    let t = decode(&TensorProto {
        int32_data: vec![bits],
        ..proto(16, &[1])
    });
    assert_eq!(
        (t.dtype(), t.to_f32_vec().unwrap()),
        (DType::BF16, vec![-0.5])
    );

    // FP8: bit patterns in int32_data, kept as raw bytes.
    let t = decode(&TensorProto {
        int32_data: vec![0x38, 0x7e],
        ..proto(17, &[2])
    });
    assert_eq!((t.dtype(), t.bytes()), (DType::F8E4M3, &[0x38u8, 0x7e][..]));
    let t = decode(&TensorProto {
        raw_data: Some(vec![0x3c]),
        ..proto(19, &[1])
    });
    assert_eq!((t.dtype(), t.bytes()), (DType::F8E5M2, &[0x3cu8][..]));
}

#[test]
fn raw_data_wins_and_empty_tensors_need_no_data() {
    let t = decode(&TensorProto {
        raw_data: Some(3.0f32.to_le_bytes().to_vec()),
        ..proto(1, &[1])
    });
    assert_eq!(t.to_f32_vec().unwrap(), [3.0]);
    let t = decode(&proto(1, &[0, 4]));
    assert_eq!((t.shape(), t.len()), (&[0u64, 4][..], 0));
}

#[test]
fn proto_round_trip_every_dtype() {
    for dtype in DType::ALL {
        let t = Tensor::from_bytes(dtype, vec![2, 1], vec![1u8; 2 * dtype.size()]).unwrap();
        assert_eq!(decode(&tensor_to_proto("t", &t)), t, "{dtype}");
    }
}

fn scratch() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fp8c-onnx-tensors");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn tensor_pb_files_round_trip() {
    let path = scratch().join("input_0.pb");
    let t = Tensor::from_f32(vec![2, 2], &[1.0, 2.0, 3.0, 4.0]);
    save_tensor_pb(&path, "x", &t).unwrap();
    assert_eq!(load_tensor_pb(&path).unwrap(), t);
    let fp8 = Tensor::from_bytes(DType::F8E4M3, vec![3], vec![0x00, 0x38, 0xff]).unwrap();
    save_tensor_pb(&path, "x", &fp8).unwrap();
    assert_eq!(load_tensor_pb(&path).unwrap(), fp8);
}

#[test]
fn tensor_pb_errors() {
    // FNUZ and FP4 decode (FP4 packed two per byte, low nibble first); complex numbers do not.
    let fnuz = TensorProto {
        raw_data: Some(vec![0x80]),
        ..proto(18, &[1])
    }
    .encode_to_vec();
    let t = decode_tensor_pb(&fnuz).unwrap();
    assert_eq!((t.dtype(), t.bytes()), (DType::F8E4M3Fnuz, &[0x80u8][..]));
    let fp4 = TensorProto {
        raw_data: Some(vec![0x21, 0x0F]),
        ..proto(23, &[3])
    }
    .encode_to_vec();
    let t = decode_tensor_pb(&fp4).unwrap();
    assert_eq!((t.dtype(), t.bytes()), (DType::F4E2M1, &[1u8, 2, 15][..]));
    assert_eq!(decode_tensor_pb(&tensor_pb_bytes("t", &t)).unwrap(), t);
    let short = TensorProto {
        raw_data: Some(vec![0x21]),
        ..proto(23, &[3])
    }
    .encode_to_vec();
    assert_eq!(
        decode_tensor_pb(&short).unwrap_err().to_string(),
        r#"tensor "t": raw_data has 1 bytes, but f4e2m1 dims [3] need 2"#
    );
    let complex = TensorProto {
        raw_data: Some(vec![0; 8]),
        ..proto(14, &[1])
    }
    .encode_to_vec();
    assert_eq!(
        decode_tensor_pb(&complex).unwrap_err().to_string(),
        r#"tensor "t": unsupported element type COMPLEX64"#
    );
    let strings = TensorProto {
        string_data: vec![b"a".to_vec()],
        ..proto(8, &[1])
    }
    .encode_to_vec();
    assert_eq!(
        decode_tensor_pb(&strings).unwrap_err().to_string(),
        r#"tensor "t": unsupported element type STRING"#
    );
    let msg = decode_tensor_pb(&[0xff, 0xff, 0xff])
        .unwrap_err()
        .to_string();
    assert!(msg.starts_with("not a valid ONNX tensor: "), "{msg}");

    let path = scratch().join("bad.pb");
    std::fs::write(&path, &complex).unwrap();
    assert_eq!(
        load_tensor_pb(&path).unwrap_err().to_string(),
        format!(
            r#"{}: tensor "t": unsupported element type COMPLEX64"#,
            path.display()
        )
    );
}

/// ONNX INT4 (22) and UINT4 (21) pack two elements per byte, the first in the low nibble (in
/// raw_data, or one byte per int32_data value); the IR holds them one per byte as I8 (sign
/// extended) and U8, an odd count leaving the last high nibble unused. Onnxruntime's
/// weight-only quantizer writes such initializers behind DequantizeLinear.
#[test]
fn four_bit_integers_unpack_to_one_byte_each() {
    // -8, 7, -1, 0, 5 in raw_data: bytes (lo | hi << 4).
    let t = decode(&TensorProto {
        raw_data: Some(vec![0x78, 0x0f, 0x05]),
        ..proto(22, &[5])
    });
    assert_eq!(
        (t.dtype(), t.to_i64_vec().unwrap()),
        (DType::I8, vec![-8, 7, -1, 0, 5])
    );
    let t = decode(&TensorProto {
        int32_data: vec![0x78, 0x0f],
        ..proto(21, &[2, 2])
    });
    assert_eq!(
        (t.dtype(), t.shape(), t.to_i64_vec().unwrap()),
        (DType::U8, &[2u64, 2][..], vec![8, 7, 15, 0])
    );
    let short = TensorProto {
        raw_data: Some(vec![0x78]),
        ..proto(22, &[3])
    };
    let err = tensor_from_proto(&short, None).unwrap_err().to_string();
    assert!(
        err.contains("raw_data has 1 bytes, but int4 dims [3] need 2"),
        "{err}"
    );
    let none = tensor_from_proto(&proto(21, &[3]), None)
        .unwrap_err()
        .to_string();
    assert!(
        none.contains("uint4 needs raw_data or int32_data with 2 values"),
        "{none}"
    );
}
