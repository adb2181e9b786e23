//! fp8c-runtime
