//! fp8c-session: the library front door. Load a model, compile it through the pass pipeline,
//! run it on a backend, calibrate its scaling state, train it; read and write `.npz` arrays,
//! checkpoints and loss plots. The `fp8c` CLI and the examples are thin users of this crate.

mod error;
pub mod npy;
pub mod plot;
pub mod train;

pub use error::{Context, Error, Result};
pub use train::{StepReport, TrainError, Trainer};
