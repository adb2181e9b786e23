//! Elementwise programs over e-classes: the fused ops' `expr` attribute, built from a set of
//! absorbed classes, and the way back from a fused node to the classes it computes inside.
//!
//! A program is always built the same way from the same set (a post-order walk from the
//! root, operands in order, inputs numbered by first use), so the same fusion reached by
//! absorbing producers in a different order is the same e-node, and the e-graph stays small.

use super::lang::{Fx, FxGraph, attr_leaf_symbol, node_op};
use egg::{FromOp, Id};
use fp8c_ir::fused::is_program_op;
use fp8c_ir::{EwArg, EwExpr, EwInst, Op};
use std::collections::{BTreeSet, HashMap};

/// Longest program a rule builds (instructions).
pub const MAX_PROGRAM_LEN: usize = 16;
/// Most inputs a fused elementwise kernel reads (besides the scale).
pub const MAX_PROGRAM_INPUTS: usize = 8;

/// A program and the classes its inputs `a0, a1, ...` read.
#[derive(Clone, Debug)]
pub struct Program {
    /// The program.
    pub expr: EwExpr,
    /// The class of each input.
    pub inputs: Vec<Id>,
}

/// The elementwise node of a class that a program can contain: its op and value inputs.
pub fn ew_node(eg: &FxGraph, class: Id) -> Option<(Op, Vec<Id>)> {
    eg[class].nodes.iter().find_map(|n| match n {
        Fx::Op(..) => node_op(eg, n).ok().filter(|(op, _)| is_program_op(op)),
        _ => None,
    })
}

/// The program computing `root` from the classes in `absorbed` (each by its elementwise
/// node); every other class it reaches is an input. `fixed` are the first inputs, in order.
/// None if a class in `absorbed` has no elementwise node or the program exceeds the limits.
pub fn build(eg: &FxGraph, root: Id, absorbed: &BTreeSet<Id>, fixed: &[Id]) -> Option<Program> {
    let mut b = Builder {
        eg,
        absorbed,
        insts: Vec::new(),
        temps: HashMap::new(),
        inputs: fixed.iter().map(|&c| eg.find(c)).collect(),
    };
    let top = b.visit(eg.find(root), 0)?;
    if b.insts.len() > MAX_PROGRAM_LEN || b.inputs.len() > MAX_PROGRAM_INPUTS {
        return None;
    }
    // A program's result is its last instruction, or a0 when it has none.
    match top {
        EwArg::Temp(t) if t as usize + 1 == b.insts.len() => {}
        EwArg::Input(0) if b.insts.is_empty() => {}
        _ => return None,
    }
    Some(Program {
        expr: EwExpr::new(b.insts).ok()?,
        inputs: b.inputs,
    })
}

struct Builder<'a> {
    eg: &'a FxGraph,
    absorbed: &'a BTreeSet<Id>,
    insts: Vec<EwInst>,
    temps: HashMap<Id, u32>,
    inputs: Vec<Id>,
}

impl Builder<'_> {
    fn visit(&mut self, c: Id, depth: usize) -> Option<EwArg> {
        if let Some(&t) = self.temps.get(&c) {
            return Some(EwArg::Temp(t));
        }
        if depth > MAX_PROGRAM_LEN || self.insts.len() > MAX_PROGRAM_LEN {
            return None;
        }
        if !self.absorbed.contains(&c) {
            let i = match self.inputs.iter().position(|&x| x == c) {
                Some(i) => i,
                None => {
                    self.inputs.push(c);
                    self.inputs.len() - 1
                }
            };
            return Some(EwArg::Input(i as u32));
        }
        let (op, ins) = ew_node(self.eg, c)?;
        let mut args = Vec::with_capacity(ins.len());
        for i in ins {
            args.push(self.visit(self.eg.find(i), depth + 1)?);
        }
        self.insts.push(EwInst { op, args });
        let t = (self.insts.len() - 1) as u32;
        self.temps.insert(c, t);
        Some(EwArg::Temp(t))
    }
}

/// The class of each instruction of `expr` over `inputs`, found in the e-graph (None if one
/// is missing, e.g. before the e-graph is rebuilt).
pub fn recover(eg: &FxGraph, expr: &EwExpr, inputs: &[Id]) -> Option<Vec<Id>> {
    let mut temps: Vec<Id> = Vec::with_capacity(expr.insts().len());
    for inst in expr.insts() {
        let mut children = Vec::with_capacity(inst.args.len() + 1);
        if let Some(s) = attr_leaf_symbol(&inst.op.attrs()).ok()? {
            children.push(eg.lookup(Fx::Sym(s))?);
        }
        for a in &inst.args {
            children.push(match a {
                EwArg::Input(i) => *inputs.get(*i as usize)?,
                EwArg::Temp(t) => temps[*t as usize],
            });
        }
        let node = Fx::from_op(inst.op.name(), children).ok()?;
        temps.push(eg.lookup(node)?);
    }
    Some(temps)
}
