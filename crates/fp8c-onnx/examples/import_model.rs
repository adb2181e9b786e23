//! Imports an ONNX model and prints a one-line summary, or the error.
//!
//! `cargo run -p fp8c-onnx --example import_model -- MODEL.onnx [INPUT=D1,D2,...]...`

use fp8c_onnx::{ImportOptions, load_model};
use std::path::Path;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: import_model MODEL.onnx [INPUT=D1,D2,...]...");
        std::process::exit(2);
    };
    let mut opts = ImportOptions::default();
    for a in args {
        let Some((name, dims)) = a.split_once('=') else {
            eprintln!("bad input shape `{a}` (expected NAME=D1,D2,...)");
            std::process::exit(2);
        };
        let dims: Result<Vec<u64>, _> = dims.split(',').map(str::parse).collect();
        match dims {
            Ok(d) => {
                opts.input_shapes.insert(name.to_string(), d);
            }
            Err(e) => {
                eprintln!("bad input shape `{a}`: {e}");
                std::process::exit(2);
            }
        }
    }
    match load_model(Path::new(&path), &opts) {
        Ok(imp) => {
            let g = &imp.graph;
            println!(
                "{path}: opset {}, {} nodes, {} params, {} outputs",
                imp.opset,
                g.node_count(),
                g.params().len(),
                g.outputs().len()
            );
            if std::env::var_os("FP8C_TRACE").is_some() {
                for id in g.topo_order().unwrap_or_default() {
                    let n = g.node(id);
                    let tys: Vec<String> = n.outputs.iter().map(|t| t.to_string()).collect();
                    println!("  {} = {} {}", tys.join(", "), n.op.name(), n.name);
                }
            }
            for o in g.outputs() {
                println!("  output {}: {}", o.name, g.value_type(o.value));
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
