//! fp8c-onnx
