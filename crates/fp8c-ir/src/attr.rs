//! Generic attribute values: the bridge between typed op fields and the text form.
//!
//! Every op field converts to an [`Attr`] and back ([`AttrValue`]), so the printer and
//! parser handle every op through one table (`Op::attrs` / `Op::from_parts`).

use crate::{DType, Tensor};
use std::collections::BTreeMap;

/// One attribute value as it appears in the text form.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    /// An integer.
    Int(i64),
    /// A float (printed so that it parses back to the same bits).
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A list of integers.
    Ints(Vec<i64>),
    /// A list of floats.
    Floats(Vec<f64>),
    /// A bare word (enum variants, dtypes).
    Word(String),
    /// A quoted string.
    Str(String),
    /// A constant tensor.
    Tensor(Tensor),
    /// An absent optional value (printed `none`).
    None,
}

/// Conversion of a typed op field to and from [`Attr`].
pub trait AttrValue: Sized {
    /// The attribute form of this value.
    fn to_attr(&self) -> Attr;
    /// Reads a value back; the error says what was expected.
    fn from_attr(a: Attr) -> Result<Self, String>;
    /// Some valid value (for `Op::examples`, which coverage tests walk).
    fn example() -> Self;
}

impl AttrValue for i64 {
    fn to_attr(&self) -> Attr {
        Attr::Int(*self)
    }
    fn from_attr(a: Attr) -> Result<Self, String> {
        match a {
            Attr::Int(v) => Ok(v),
            other => Err(format!("expected an integer, got {other:?}")),
        }
    }
    fn example() -> Self {
        0
    }
}

impl AttrValue for f32 {
    fn to_attr(&self) -> Attr {
        Attr::Float(*self as f64)
    }
    fn from_attr(a: Attr) -> Result<Self, String> {
        match a {
            Attr::Float(v) => Ok(v as f32),
            Attr::Int(v) => Ok(v as f32),
            other => Err(format!("expected a float, got {other:?}")),
        }
    }
    fn example() -> Self {
        0.0
    }
}

impl AttrValue for f64 {
    fn to_attr(&self) -> Attr {
        Attr::Float(*self)
    }
    fn from_attr(a: Attr) -> Result<Self, String> {
        match a {
            Attr::Float(v) => Ok(v),
            Attr::Int(v) => Ok(v as f64),
            other => Err(format!("expected a float, got {other:?}")),
        }
    }
    fn example() -> Self {
        0.0
    }
}

impl AttrValue for bool {
    fn to_attr(&self) -> Attr {
        Attr::Bool(*self)
    }
    fn from_attr(a: Attr) -> Result<Self, String> {
        match a {
            Attr::Bool(v) => Ok(v),
            other => Err(format!("expected true or false, got {other:?}")),
        }
    }
    fn example() -> Self {
        false
    }
}

impl AttrValue for Vec<i64> {
    fn to_attr(&self) -> Attr {
        Attr::Ints(self.clone())
    }
    fn from_attr(a: Attr) -> Result<Self, String> {
        match a {
            Attr::Ints(v) => Ok(v),
            other => Err(format!("expected a list of integers, got {other:?}")),
        }
    }
    fn example() -> Self {
        Vec::new()
    }
}

impl AttrValue for Vec<f64> {
    fn to_attr(&self) -> Attr {
        Attr::Floats(self.clone())
    }
    fn from_attr(a: Attr) -> Result<Self, String> {
        match a {
            Attr::Floats(v) => Ok(v),
            Attr::Ints(v) => Ok(v.into_iter().map(|x| x as f64).collect()),
            other => Err(format!("expected a list of floats, got {other:?}")),
        }
    }
    fn example() -> Self {
        Vec::new()
    }
}

impl AttrValue for String {
    fn to_attr(&self) -> Attr {
        Attr::Str(self.clone())
    }
    fn from_attr(a: Attr) -> Result<Self, String> {
        match a {
            Attr::Str(v) => Ok(v),
            other => Err(format!("expected a quoted string, got {other:?}")),
        }
    }
    fn example() -> Self {
        String::new()
    }
}

impl AttrValue for DType {
    fn to_attr(&self) -> Attr {
        Attr::Word(self.name().to_string())
    }
    fn from_attr(a: Attr) -> Result<Self, String> {
        match a {
            Attr::Word(w) => w.parse(),
            other => Err(format!("expected a dtype, got {other:?}")),
        }
    }
    fn example() -> Self {
        DType::F32
    }
}

impl AttrValue for Tensor {
    fn to_attr(&self) -> Attr {
        Attr::Tensor(self.clone())
    }
    fn from_attr(a: Attr) -> Result<Self, String> {
        match a {
            Attr::Tensor(t) => Ok(t),
            other => Err(format!("expected a tensor literal, got {other:?}")),
        }
    }
    fn example() -> Self {
        Tensor::scalar_f32(0.0)
    }
}

impl<T: AttrValue> AttrValue for Option<T> {
    fn to_attr(&self) -> Attr {
        match self {
            Some(v) => v.to_attr(),
            None => Attr::None,
        }
    }
    fn from_attr(a: Attr) -> Result<Self, String> {
        match a {
            Attr::None => Ok(None),
            other => T::from_attr(other).map(Some),
        }
    }
    fn example() -> Self {
        None
    }
}

/// Declares a fieldless enum usable as an attribute (printed as a bare word).
macro_rules! word_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident => $word:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $word)] $variant),+ }
        impl $name {
            /// The word used in the text form.
            pub fn word(self) -> &'static str {
                match self { $($name::$variant => $word),+ }
            }
        }
        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($word => Ok($name::$variant),)+
                    _ => Err(format!(concat!("unknown ", stringify!($name), " `{}`; expected one of: ", $($word, " "),+), s)),
                }
            }
        }
        impl $crate::attr::AttrValue for $name {
            fn to_attr(&self) -> $crate::attr::Attr {
                $crate::attr::Attr::Word(self.word().to_string())
            }
            fn from_attr(a: $crate::attr::Attr) -> Result<Self, String> {
                match a {
                    $crate::attr::Attr::Word(w) => w.parse(),
                    other => Err(format!("expected a word, got {other:?}")),
                }
            }
            fn example() -> Self {
                [$($name::$variant),+][0]
            }
        }
    };
}
pub(crate) use word_enum;

/// Attributes read from text, taken out one field at a time by `Op::from_parts`.
#[derive(Debug, Default)]
pub struct AttrMap(pub BTreeMap<String, Attr>);

impl AttrMap {
    /// Removes and converts the attribute `key`; a missing key reads as [`Attr::None`]
    /// (so only `Option` fields may be left out).
    pub fn take<T: AttrValue>(&mut self, key: &str) -> Result<T, String> {
        let a = self.0.remove(key).unwrap_or(Attr::None);
        let missing = a == Attr::None;
        T::from_attr(a).map_err(|e| {
            if missing {
                format!("missing attribute `{key}`")
            } else {
                format!("attribute `{key}`: {e}")
            }
        })
    }

    /// Fails if attributes are left that the op does not know.
    pub fn finish(self, op: &str) -> Result<(), String> {
        match self.0.keys().next() {
            None => Ok(()),
            Some(k) => Err(format!("op `{op}` has no attribute `{k}`")),
        }
    }
}
