//! fp8c-passes
