//! The weights sidecar: round trips, and bad files are refused without panicking.

use super::*;

pub(super) fn with_weights() -> Graph {
    let mut g = Graph::new("w");
    let x = g.add_input("x", f32t(&[2, 3])).unwrap();
    let w = g
        .add_param(
            "fc.w",
            f32t(&[3, 2]),
            Some(Tensor::from_f32(
                vec![3, 2],
                &[1.0, -0.0, f32::NAN, 4.0, 5.5, -6.0],
            )),
        )
        .unwrap();
    let b = g
        .add_param(
            "fc.b",
            TensorType::fixed(DType::F16, &[2]),
            Some(Tensor::from_f64_as(DType::F16, vec![2], &[0.5, -1.0]).unwrap()),
        )
        .unwrap();
    let q = g
        .add_param(
            "q",
            TensorType::fixed(DType::F8E4M3, &[]),
            Some(Tensor::from_bytes(DType::F8E4M3, vec![], vec![0x7e]).unwrap()),
        )
        .unwrap();
    let _empty = g
        .add_param("empty", f32t(&[0]), Some(Tensor::from_f32(vec![0], &[])))
        .unwrap();
    let _nodata = g.add_param("no data", f32t(&[1]), None).unwrap();
    let y = g
        .add_node_typed("fc", Op::MatMul, &[x, w], vec![f32t(&[2, 2])])
        .unwrap()[0];
    let y = g
        .add_node_typed("bias", Op::Add, &[y, b], vec![f32t(&[2, 2])])
        .unwrap()[0];
    g.add_node_typed(
        "q.use",
        Op::Identity,
        &[q],
        vec![TensorType::fixed(DType::F8E4M3, &[])],
    )
    .unwrap();
    g.set_output("y", y).unwrap();
    g
}

#[test]
fn weights_sidecar_round_trips() {
    let g = with_weights();
    let mut file = Vec::new();
    write_weights(&g, &mut file).unwrap();
    // A safetensors file: an 8-byte header length, then a JSON header.
    let header_len = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    assert_eq!(file[8], b'{');
    let header = std::str::from_utf8(&file[8..8 + header_len]).unwrap();
    assert!(header.contains("\"F8_E4M3\""), "{header}");
    let mut back = parse(&print(&g)).unwrap();
    assert!(back.weights().is_empty());
    assert!(back != g);
    read_weights(&mut back, &mut file.as_slice()).unwrap();
    assert!(back == g);
    assert_eq!(back.weights().len(), 4);
}

#[test]
fn weights_sidecar_rejects_bad_files_without_panicking() {
    let g = with_weights();
    let mut file = Vec::new();
    write_weights(&g, &mut file).unwrap();
    let text = print(&g);
    let fresh = || parse(&text).unwrap();
    let try_read = |bytes: &[u8]| {
        let mut h = fresh();
        let r = read_weights(&mut h, &mut &bytes[..]);
        if r.is_err() {
            assert!(
                h.weights().is_empty(),
                "a failed read must leave the graph unchanged"
            );
        }
        r.map_err(|e| e.to_string())
    };
    // Every truncation fails.
    for len in 0..file.len() {
        let err = try_read(&file[..len]).unwrap_err();
        assert!(err.contains("not a valid safetensors file"), "{len}: {err}");
    }
    // Trailing data.
    let mut long = file.clone();
    long.push(0);
    assert!(try_read(&long).is_err());
    // fp8c's old format is refused, naming the new one.
    let mut old = b"FP8CW001".to_vec();
    old.extend_from_slice(&[0; 8]);
    let err = try_read(&old).unwrap_err();
    assert!(
        err.contains("old weights format") && err.contains("safetensors"),
        "{err}"
    );
    // A huge header length: a clean error, no huge allocation.
    let mut bad = file.clone();
    bad[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(try_read(&bad).is_err());
    // Every single-byte corruption is an error or a valid read, never a panic.
    for i in 0..file.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut bad = file.clone();
            bad[i] ^= flip;
            let _ = try_read(&bad);
        }
    }
    // Names and types are checked against the graph.
    let mut other = Graph::new("other");
    other.add_param("fc.w", f32t(&[2, 3]), None).unwrap();
    let err = read_weights(&mut other, &mut file.as_slice())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("weight \"empty\", which is not a param of graph @other"),
        "{err}"
    );
    let mut other = Graph::new("other");
    for name in ["empty", "fc.b", "q"] {
        let ty = g.node(g.find_interface(name).unwrap()).outputs[0].clone();
        other.add_param(name, ty, None).unwrap();
    }
    other.add_param("fc.w", f32t(&[2, 3]), None).unwrap();
    let err = read_weights(&mut other, &mut file.as_slice())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("weight \"fc.w\": the file has f32[3,2], the graph declares f32[2,3]"),
        "{err}"
    );
}

/// Every single-bit flip in the tensor data of a sidecar is caught by its checksum (issue #13:
/// 19 of 2,000 flips were accepted by the old format).
#[test]
fn weights_sidecar_bit_flips_in_data_are_refused() {
    let g = with_weights();
    let mut file = Vec::new();
    write_weights(&g, &mut file).unwrap();
    let header = 8 + u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let text = print(&g);
    let mut accepted = 0;
    for i in header..file.len() {
        for bit in 0..8 {
            let mut bad = file.clone();
            bad[i] ^= 1 << bit;
            let mut h = parse(&text).unwrap();
            if read_weights(&mut h, &mut &bad[..]).is_ok() {
                accepted += 1;
            }
        }
    }
    assert_eq!(accepted, 0, "bit flips in the data accepted");
}
