//! Compiles the vendored `proto/onnx.proto` with prost-build, using the protoc binary from
//! `protoc-bin-vendored` so that no system protoc is needed.

fn main() -> std::io::Result<()> {
    let protoc = protoc_bin_vendored::protoc_bin_path().map_err(std::io::Error::other)?;
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc);
    config.compile_protos(&["proto/onnx.proto"], &["proto/"])?;
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    Ok(())
}
