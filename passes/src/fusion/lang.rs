//! The e-graph language of the fusion pass and its analysis (the tensor types of each class).
//!
//! Every IR op of the region is an e-node named after the op's text name. An op with
//! attributes takes them as its leading children: attribute leaves `{key=value,...}` in the
//! compact text of `fp8c_ir::fused` (a fused op whose attributes are those of the ops it
//! replaces keeps their leaves, in order: `(cast_transpose {perm=[1,0]} {to=f8e4m3,saturate=true}
//! %x %s)`). Values from outside the region are leaves `%name` (`%name#k` for output k of a
//! multi-output node). A multi-output op is a tuple class; `(proj k t)` is its output k.
//!
//! The analysis gives every class the output types `fp8c_ir::infer` gives its nodes (one
//! type: a value; several: a tuple), so a rule can never build an ill-typed term unnoticed,
//! and `merge` checks that equal classes agree.

use egg::{Analysis, DidMerge, EGraph, FromOp, Id, Language, Symbol, define_language};
use fp8c_ir::fused::{compact_attrs, parse_compact_attrs};
use fp8c_ir::infer::{InferInput, infer};
use fp8c_ir::{Attr, AttrMap, Op, TensorType};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

define_language! {
    /// The fusion language. Named variants are the ops the rules look at from Rust; `Op`
    /// holds every other op of the region by its IR name.
    pub enum Fx {
        "proj" = Proj([Id; 2]),
        "amax" = Amax(Id),
        "quantize" = Quantize([Id; 3]),
        "transpose" = Transpose([Id; 2]),
        "amax_history_update" = HistoryUpdate([Id; 2]),
        "compute_scale" = ComputeScale([Id; 3]),
        "scaled_matmul" = ScaledMatMul([Id; 5]),
        "quantize_amax" = QuantizeAmax([Id; 3]),
        "cast_transpose" = CastTranspose([Id; 4]),
        Slot(u32),
        Sym(Symbol),
        Op(Symbol, Vec<Id>),
    }
}

/// The e-graph type of the pass.
pub type FxGraph = EGraph<Fx, FusionAnalysis>;

/// What the analysis knows of a class.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// The output types: one for a value, several for a tuple (a multi-output op).
    Values(Vec<TensorType>),
    /// An attribute leaf or a slot number.
    Meta,
    /// A term whose types do not check (the extractor never picks it).
    Invalid(String),
}

/// The analysis: leaf types in, per-class types out.
#[derive(Debug, Default)]
pub struct FusionAnalysis {
    /// The type of each leaf `%name`.
    pub leaf_types: HashMap<Symbol, TensorType>,
    /// Leaves of amax histories whose update may join the batched scale update (their
    /// `recorded` output feeds only their `compute_scale`, whose results only update state).
    pub batchable: BTreeSet<Symbol>,
    /// The first disagreement `merge` saw (a bug in a rule); the pass fails with it.
    pub conflict: Option<String>,
}

impl Analysis<Fx> for FusionAnalysis {
    type Data = Data;

    fn make(egraph: &mut FxGraph, enode: &Fx, _id: Id) -> Data {
        make_data(egraph, enode)
    }

    fn merge(&mut self, a: &mut Data, b: Data) -> DidMerge {
        match (&*a, b) {
            (Data::Values(x), Data::Values(y)) => {
                if *x != y && self.conflict.is_none() {
                    self.conflict = Some(format!(
                        "a rule made two terms equal whose types differ: {} vs {}",
                        types_text(x),
                        types_text(&y)
                    ));
                }
                DidMerge(false, *x != y)
            }
            (Data::Invalid(_), b @ Data::Values(_)) => {
                *a = b;
                DidMerge(true, false)
            }
            (Data::Values(_), Data::Invalid(_)) => DidMerge(false, true),
            (Data::Meta, Data::Meta) | (Data::Invalid(_), Data::Invalid(_)) => {
                DidMerge(false, false)
            }
            (x, y) => {
                if self.conflict.is_none() {
                    self.conflict = Some(format!(
                        "a rule made an attribute equal to a value: {x:?} vs {y:?}"
                    ));
                }
                DidMerge(false, false)
            }
        }
    }
}

fn types_text(v: &[TensorType]) -> String {
    let items: Vec<String> = v.iter().map(|t| t.to_string()).collect();
    format!("({})", items.join(", "))
}

fn make_data(eg: &FxGraph, enode: &Fx) -> Data {
    match enode {
        Fx::Slot(_) => Data::Meta,
        Fx::Sym(s) if is_attr_leaf(*s) => Data::Meta,
        Fx::Sym(s) => match eg.analysis.leaf_types.get(s) {
            Some(t) => Data::Values(vec![t.clone()]),
            None => Data::Invalid(format!("leaf {s} has no declared type")),
        },
        Fx::Proj([k, t]) => {
            let slot = slot_of(eg, *k);
            match (&eg[*t].data, slot) {
                (Data::Values(v), Some(k)) if k < v.len() => Data::Values(vec![v[k].clone()]),
                _ => Data::Invalid("projection of something that is not a tuple".into()),
            }
        }
        _ => match node_op(eg, enode) {
            Err(e) => Data::Invalid(e),
            Ok((op, inputs)) => match input_types(eg, &inputs) {
                None => Data::Invalid("an input is not a typed value".into()),
                Some(types) => {
                    let ins: Vec<InferInput<'_>> = types.iter().map(InferInput::new).collect();
                    match infer(&op, &ins) {
                        Ok(t) => Data::Values(t),
                        Err(e) => Data::Invalid(format!("{}: {e}", op.name())),
                    }
                }
            },
        },
    }
}

/// The types of value classes (None if one is not a single typed value).
pub fn input_types(eg: &FxGraph, inputs: &[Id]) -> Option<Vec<TensorType>> {
    inputs.iter().map(|&i| value_type(eg, i).cloned()).collect()
}

/// The type of a class holding one value.
pub fn value_type(eg: &FxGraph, id: Id) -> Option<&TensorType> {
    match &eg[id].data {
        Data::Values(v) if v.len() == 1 => Some(&v[0]),
        _ => None,
    }
}

/// True for attribute leaf symbols (`{...}`).
pub fn is_attr_leaf(s: Symbol) -> bool {
    s.as_str().starts_with('{')
}

/// The symbol of the leaf for a value from outside the region.
pub fn value_leaf(name: &str) -> Symbol {
    Symbol::from(format!("%{name}"))
}

/// The slot number held by a slot class.
pub fn slot_of(eg: &FxGraph, id: Id) -> Option<usize> {
    eg[id].nodes.iter().find_map(|n| match n {
        Fx::Slot(k) => Some(*k as usize),
        _ => None,
    })
}

/// The attribute leaf symbol held by an attribute class.
pub fn attr_symbol(eg: &FxGraph, id: Id) -> Option<Symbol> {
    eg[id].nodes.iter().find_map(|n| match n {
        Fx::Sym(s) if is_attr_leaf(*s) => Some(*s),
        _ => None,
    })
}

/// The op name of an op node (None for leaves and projections).
pub fn op_name(enode: &Fx) -> Option<&str> {
    Some(match enode {
        Fx::Amax(_) => "amax",
        Fx::Quantize(_) => "quantize",
        Fx::Transpose(_) => "transpose",
        Fx::HistoryUpdate(_) => "amax_history_update",
        Fx::ComputeScale(_) => "compute_scale",
        Fx::ScaledMatMul(_) => "scaled_matmul",
        Fx::QuantizeAmax(_) => "quantize_amax",
        Fx::CastTranspose(_) => "cast_transpose",
        Fx::Op(s, _) => s.as_str(),
        Fx::Proj(_) | Fx::Slot(_) | Fx::Sym(_) => return None,
    })
}

/// The IR op of an op node and its value inputs (the children after the attribute leaves).
pub fn node_op(eg: &FxGraph, enode: &Fx) -> Result<(Op, Vec<Id>), String> {
    let name = op_name(enode).ok_or("not an op node")?;
    let children = enode.children();
    let n_attrs = children
        .iter()
        .take_while(|&&c| attr_symbol(eg, c).is_some())
        .count();
    let leaves: Vec<Symbol> = children[..n_attrs]
        .iter()
        .map(|&c| attr_symbol(eg, c).expect("counted as an attribute leaf"))
        .collect();
    let key = (Symbol::from(name), leaves);
    let op = match BUILT.with(|b| b.borrow().get(&key).cloned()) {
        Some(op) => op,
        None => {
            let mut attrs = AttrMap::default();
            for &s in &key.1 {
                for (k, v) in parsed_attrs(s)?.iter() {
                    if attrs.0.insert(k.clone(), v.clone()).is_some() {
                        return Err(format!("{name}: attribute `{k}` is given twice"));
                    }
                }
            }
            let op = Op::from_parts(name, attrs)?;
            BUILT.with(|b| b.borrow_mut().insert(key, op.clone()));
            op
        }
    };
    Ok((
        op,
        children[n_attrs..].iter().map(|&c| eg.find(c)).collect(),
    ))
}

thread_local! {
    /// Ops built from a name and attribute leaves: building is pure, and parsing a fused
    /// op's elementwise program each time the rules looked at its node was a quarter of a
    /// training graph's fusion time.
    static BUILT: RefCell<HashMap<(Symbol, Vec<Symbol>), Op>> = RefCell::default();
}

thread_local! {
    /// Parsed attribute leaves: parsing is pure, and the rules ask for the same few leaves
    /// over and over.
    static PARSED: RefCell<HashMap<Symbol, Rc<BTreeMap<String, Attr>>>> = RefCell::default();
}

/// The attributes of an attribute leaf symbol `{...}`.
fn parsed_attrs(s: Symbol) -> Result<Rc<BTreeMap<String, Attr>>, String> {
    if let Some(hit) = PARSED.with(|p| p.borrow().get(&s).cloned()) {
        return Ok(hit);
    }
    let text = s.as_str();
    let parsed = Rc::new(parse_compact_attrs(&text[1..text.len() - 1])?.0);
    PARSED.with(|p| p.borrow_mut().insert(s, parsed.clone()));
    Ok(parsed)
}

/// The symbol of the attribute leaf holding `attrs` (None for an empty list).
pub fn attr_leaf_symbol(attrs: &[(&str, Attr)]) -> Result<Option<Symbol>, String> {
    if attrs.is_empty() {
        return Ok(None);
    }
    Ok(Some(Symbol::from(format!("{{{}}}", compact_attrs(attrs)?))))
}

/// Adds the e-node of `op` over `inputs` (attributes as one leaf); returns its class.
pub fn add_op(eg: &mut FxGraph, op: &Op, inputs: &[Id]) -> Result<Id, String> {
    let mut children = Vec::with_capacity(inputs.len() + 1);
    if let Some(s) = attr_leaf_symbol(&op.attrs())? {
        children.push(eg.add(Fx::Sym(s)));
    }
    children.extend_from_slice(inputs);
    let node = Fx::from_op(op.name(), children).map_err(|e| e.to_string())?;
    Ok(eg.add(node))
}

/// Adds `(proj k t)`.
pub fn add_proj(eg: &mut FxGraph, k: usize, t: Id) -> Id {
    let slot = eg.add(Fx::Slot(k as u32));
    eg.add(Fx::Proj([slot, t]))
}

/// The class of `(proj k t)` if the e-graph has it.
pub fn lookup_proj(eg: &FxGraph, k: usize, t: Id) -> Option<Id> {
    let slot = eg.lookup(Fx::Slot(k as u32))?;
    eg.lookup(Fx::Proj([slot, t]))
}

/// The types a node would have, by `infer`, without adding it.
pub fn check_op(eg: &FxGraph, op: &Op, inputs: &[Id]) -> Option<Vec<TensorType>> {
    let types = input_types(eg, inputs)?;
    let ins: Vec<InferInput<'_>> = types.iter().map(InferInput::new).collect();
    infer(op, &ins).ok()
}
