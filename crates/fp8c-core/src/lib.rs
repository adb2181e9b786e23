//! fp8c-core
