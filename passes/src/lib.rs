//! fp8c's compiler passes and the pass manager that runs them in one fixed order.
//!
//! Each pass is a small struct implementing [`Pass`]. The whole pipeline is the list in
//! [`pipeline`]; the [`PassManager`] runs it, verifies the graph after every pass (in debug
//! builds and tests, or when asked), records IR dumps for `--print-after`, stops early for
//! `--stop-after`, and on failure reports the pass name with the last IR that verified.

pub mod attention;
pub mod autodiff;
mod block_scaling;
pub mod canonicalize;
pub mod fold_batch_norm;
pub mod freeze;
pub mod fusion;
mod gemm_tail;
mod manager;
pub mod precision;
pub mod report;
pub mod scaling;
pub mod shapes;

pub use autodiff::differentiability;
pub use manager::{Pass, PassCx, PassError, PassManager, PassOptions, pass_names, pipeline};
