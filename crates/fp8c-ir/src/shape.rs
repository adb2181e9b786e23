//! Tensor shapes with symbolic dimensions, and tensor types.

use crate::DType;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One dimension of a shape: a known size, a named symbol (`batch`, `seq`) or unknown.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Dim {
    /// A concrete size.
    Known(u64),
    /// A named symbolic size, equal wherever the same name appears.
    Sym(String),
    /// A size nothing is known about (printed `?`).
    Unknown,
}

impl Dim {
    /// The size if it is known.
    pub fn known(&self) -> Option<u64> {
        match self {
            Dim::Known(n) => Some(*n),
            _ => None,
        }
    }
}

impl From<u64> for Dim {
    fn from(n: u64) -> Self {
        Dim::Known(n)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

/// A shape: one [`Dim`] per axis. Rank 0 is a scalar.
pub type Shape = Vec<Dim>;

/// Builds a fully known shape from sizes.
pub fn shape_of(dims: &[u64]) -> Shape {
    dims.iter().map(|&d| Dim::Known(d)).collect()
}

/// The type of an IR value: element type and shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Shape (rank = length).
    pub shape: Shape,
}

impl TensorType {
    /// A type with the given dtype and shape.
    pub fn new(dtype: DType, shape: Shape) -> Self {
        TensorType { dtype, shape }
    }

    /// A type whose every dimension is known.
    pub fn fixed(dtype: DType, dims: &[u64]) -> Self {
        TensorType::new(dtype, shape_of(dims))
    }

    /// A rank-0 type.
    pub fn scalar(dtype: DType) -> Self {
        TensorType::new(dtype, Vec::new())
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The concrete sizes if every dimension is known.
    pub fn known_dims(&self) -> Option<Vec<u64>> {
        self.shape.iter().map(Dim::known).collect()
    }

    /// Number of elements if every dimension is known (saturating at u64::MAX).
    pub fn num_elements(&self) -> Option<u64> {
        self.known_dims()
            .map(|d| d.iter().fold(1u64, |a, &b| a.saturating_mul(b)))
    }

    /// Size in bytes if every dimension is known.
    pub fn num_bytes(&self) -> Option<u64> {
        self.num_elements()
            .map(|n| n.saturating_mul(self.dtype.size() as u64))
    }

    /// True if every dimension is known.
    pub fn is_static(&self) -> bool {
        self.shape.iter().all(|d| matches!(d, Dim::Known(_)))
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}
