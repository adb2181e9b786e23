//! The window geometry of `fp8c_ir::window`, with its errors as kernel failures.

use crate::error::{ErrorKind, Fail, KResult};
use fp8c_ir::window::WindowError;
pub(crate) use fp8c_ir::window::{Axis, Tap, WindowAttrs};

fn fail(e: WindowError) -> Fail {
    let kind = match e {
        WindowError::Attribute(_) => ErrorKind::Attribute,
        WindowError::Shape(_) => ErrorKind::Shape,
        WindowError::TooLarge(_) => ErrorKind::TooLarge,
    };
    Fail::new(kind, e.to_string())
}

/// [`fp8c_ir::window::axes`].
pub(crate) fn axes(spatial: &[usize], kernel: &[usize], w: &WindowAttrs<'_>) -> KResult<Vec<Axis>> {
    fp8c_ir::window::axes(spatial, kernel, w).map_err(fail)
}

/// [`fp8c_ir::window::taps`].
pub(crate) fn taps(axes: &[Axis]) -> KResult<Vec<Tap>> {
    fp8c_ir::window::taps(axes).map_err(fail)
}
