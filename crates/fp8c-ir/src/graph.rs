//! The dataflow graph: nodes with typed multi-output results, and the graph interface.
//!
//! Invariants (checked by `verify`):
//! - every node input refers to an existing node and an existing output slot;
//! - the graph is acyclic;
//! - each node's `outputs` agree with `infer` applied to its inputs;
//! - node names are unique; interface names (inputs, params, state, outputs) are unique
//!   within their kind;
//! - every interface node (`input`, `param`, `state`) is listed in the interface, once.
//!
//! petgraph is an implementation detail: the public API speaks [`NodeId`] and [`Value`].
//! Node inputs are stored on the node (their order matters); the petgraph edges mirror them
//! so that users of a value can be found quickly. Only methods of this module change inputs,
//! which keeps the two in step.

use crate::error::{IrError, Result};
use crate::infer::{InferInput, infer};
use crate::{Op, Tensor, TensorType};
use petgraph::Direction;
use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::EdgeRef;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::fmt;

/// Identifies a node of a [`Graph`]. Stable across removals of other nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(u32);

impl NodeId {
    fn ix(self) -> NodeIndex {
        NodeIndex::new(self.0 as usize)
    }
    fn of(ix: NodeIndex) -> Self {
        NodeId(ix.index() as u32)
    }
    /// The raw index (for diagnostics and dense maps).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One result of one node: `(node, slot)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value {
    /// The producing node.
    pub node: NodeId,
    /// Which of its outputs.
    pub slot: u32,
}

impl Value {
    /// Output `slot` of `node`.
    pub fn new(node: NodeId, slot: u32) -> Self {
        Value { node, slot }
    }
}

/// A node: an op applied to input values, producing typed outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Unique name; nodes made by passes are named after their origin (`fc1.x.q`).
    pub name: String,
    /// The operation.
    pub op: Op,
    inputs: Vec<Value>,
    /// Output types, one per slot.
    pub outputs: Vec<TensorType>,
}

impl Node {
    /// The input values, in order.
    pub fn inputs(&self) -> &[Value] {
        &self.inputs
    }
}

#[derive(Clone, Copy, Debug)]
struct Edge {
    slot: u32,
    input: u32,
}

/// A named graph output.
#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    /// Output name.
    pub name: String,
    /// The value returned.
    pub value: Value,
}

/// An IR graph. See the module docs for its invariants.
#[derive(Clone)]
pub struct Graph {
    name: String,
    g: StableDiGraph<Node, Edge>,
    inputs: Vec<NodeId>,
    params: Vec<NodeId>,
    state: Vec<(NodeId, f64)>,
    state_updates: BTreeMap<String, Value>,
    outputs: Vec<Output>,
    weights: BTreeMap<String, Tensor>,
    names: HashSet<String>,
    /// Interface names taken, per kind (0 input, 1 param, 2 state): the duplicate check of
    /// `add_input`/`add_param`/`add_state` in O(1), so building a graph with many inputs is
    /// linear (a 50,000-input Sum).
    interface: HashSet<(u8, String)>,
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("def", &self.to_def())
            .finish()
    }
}

impl Graph {
    /// An empty graph.
    pub fn new(name: impl Into<String>) -> Self {
        Graph {
            name: name.into(),
            g: StableDiGraph::new(),
            inputs: Vec::new(),
            params: Vec::new(),
            state: Vec::new(),
            state_updates: BTreeMap::new(),
            outputs: Vec::new(),
            weights: BTreeMap::new(),
            names: HashSet::new(),
            interface: HashSet::new(),
        }
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Renames the graph.
    pub fn set_name(&mut self, name: impl Into<String>) {
        self.name = name.into();
    }

    // ---------------------------------------------------------------- building

    /// A node name not used yet: `base`, else `base.1`, `base.2`, ...
    pub fn fresh_name(&self, base: &str) -> String {
        if !self.names.contains(base) {
            return base.to_string();
        }
        (1..)
            .map(|i| format!("{base}.{i}"))
            .find(|n| !self.names.contains(n))
            .expect("an unused name exists")
    }

    fn insert(
        &mut self,
        name: String,
        op: Op,
        inputs: Vec<Value>,
        outputs: Vec<TensorType>,
    ) -> NodeId {
        self.names.insert(name.clone());
        let ix = self.g.add_node(Node {
            name,
            op,
            inputs: inputs.clone(),
            outputs,
        });
        for (i, v) in inputs.iter().enumerate() {
            self.g.add_edge(
                v.node.ix(),
                ix,
                Edge {
                    slot: v.slot,
                    input: i as u32,
                },
            );
        }
        NodeId::of(ix)
    }

    /// Adds a graph input.
    pub fn add_input(&mut self, name: &str, ty: TensorType) -> Result<Value> {
        if !self.interface.insert((0, name.to_string())) {
            return Err(IrError::Duplicate {
                kind: "input",
                name: name.into(),
            });
        }
        let node_name = self.fresh_name(name);
        let id = self.insert(node_name, Op::Input { name: name.into() }, vec![], vec![ty]);
        self.inputs.push(id);
        Ok(Value::new(id, 0))
    }

    /// Adds a parameter with optional data (checked against `ty`).
    pub fn add_param(&mut self, name: &str, ty: TensorType, data: Option<Tensor>) -> Result<Value> {
        if self.interface.contains(&(1, name.to_string())) {
            return Err(IrError::Duplicate {
                kind: "param",
                name: name.into(),
            });
        }
        if let Some(t) = &data
            && t.ty() != ty
        {
            return Err(IrError::Other(format!(
                "param \"{name}\": data has type {}, declared {ty}",
                t.ty()
            )));
        }
        self.interface.insert((1, name.to_string()));
        let node_name = self.fresh_name(name);
        let id = self.insert(node_name, Op::Param { name: name.into() }, vec![], vec![ty]);
        self.params.push(id);
        if let Some(t) = data {
            self.weights.insert(name.to_string(), t);
        }
        Ok(Value::new(id, 0))
    }

    /// Adds a state entry whose elements all start at `init`.
    pub fn add_state(&mut self, name: &str, ty: TensorType, init: f64) -> Result<Value> {
        if !self.interface.insert((2, name.to_string())) {
            return Err(IrError::Duplicate {
                kind: "state",
                name: name.into(),
            });
        }
        let node_name = self.fresh_name(name);
        let id = self.insert(node_name, Op::State { name: name.into() }, vec![], vec![ty]);
        self.state.push((id, init));
        Ok(Value::new(id, 0))
    }

    /// Adds a node, inferring its output types; the name is made unique if taken.
    /// Errors name the node and say which input is wrong.
    pub fn add_node(&mut self, name: &str, op: Op, inputs: &[Value]) -> Result<Vec<Value>> {
        if op.is_interface() {
            return Err(IrError::node(
                name,
                op.name(),
                "use add_input/add_param/add_state for interface ops",
            ));
        }
        let outputs = self.infer_node(name, &op, inputs)?;
        self.add_node_typed(name, op, inputs, outputs)
    }

    /// Adds a node with given output types (the parser and importer use this; `verify`
    /// checks the types later).
    pub fn add_node_typed(
        &mut self,
        name: &str,
        op: Op,
        inputs: &[Value],
        outputs: Vec<TensorType>,
    ) -> Result<Vec<Value>> {
        for (i, v) in inputs.iter().enumerate() {
            self.check_value(*v)
                .map_err(|m| IrError::node(name, op.name(), format!("input {i}: {m}")))?;
        }
        let n = outputs.len() as u32;
        let name = self.fresh_name(name);
        let id = self.insert(name, op, inputs.to_vec(), outputs);
        Ok((0..n).map(|s| Value::new(id, s)).collect())
    }

    /// Runs `infer` for `op` on `inputs` (whose types and constant values come from the graph).
    pub fn infer_node(&self, name: &str, op: &Op, inputs: &[Value]) -> Result<Vec<TensorType>> {
        let mut ins = Vec::with_capacity(inputs.len());
        for (i, v) in inputs.iter().enumerate() {
            self.check_value(*v)
                .map_err(|m| IrError::node(name, op.name(), format!("input {i}: {m}")))?;
            ins.push(InferInput {
                ty: self.value_type(*v),
                value: self.constant_value(*v),
            });
        }
        infer(op, &ins).map_err(|m| IrError::node(name, op.name(), m))
    }

    fn check_value(&self, v: Value) -> std::result::Result<(), String> {
        match self.g.node_weight(v.node.ix()) {
            None => Err(format!(
                "refers to a node (#{}) that does not exist",
                v.node.0
            )),
            Some(n) if v.slot as usize >= n.outputs.len() => Err(format!(
                "refers to output {} of node \"{}\", which has {} output(s)",
                v.slot,
                n.name,
                n.outputs.len()
            )),
            Some(_) => Ok(()),
        }
    }

    /// Adds (or replaces) a named graph output.
    pub fn set_output(&mut self, name: &str, value: Value) -> Result<()> {
        self.check_value(value)
            .map_err(|m| IrError::Other(format!("output \"{name}\": {m}")))?;
        match self.outputs.iter_mut().find(|o| o.name == name) {
            Some(o) => o.value = value,
            None => self.outputs.push(Output {
                name: name.into(),
                value,
            }),
        }
        Ok(())
    }

    /// Keeps only the outputs named in `keep` (in that order); errors on an unknown name.
    pub fn select_outputs(&mut self, keep: &[String]) -> Result<()> {
        let mut out = Vec::new();
        for k in keep {
            let o = self
                .outputs
                .iter()
                .find(|o| &o.name == k)
                .cloned()
                .ok_or_else(|| {
                    let names: Vec<&str> = self.outputs.iter().map(|o| o.name.as_str()).collect();
                    IrError::Other(format!(
                        "no output named \"{k}\" (outputs are: {})",
                        names.join(", ")
                    ))
                })?;
            out.push(o);
        }
        self.outputs = out;
        Ok(())
    }

    /// Sets the value a state entry (or a param: training updates the FP32 master weights)
    /// takes at the end of a step.
    pub fn set_state_update(&mut self, state: &str, value: Value) -> Result<()> {
        let known = self
            .state
            .iter()
            .map(|(id, _)| id)
            .chain(self.params.iter())
            .any(|&id| interface_name(&self.node(id).op) == state);
        if !known {
            return Err(IrError::NotFound {
                kind: "state or param",
                name: state.into(),
            });
        }
        self.check_value(value)
            .map_err(|m| IrError::Other(format!("state update \"{state}\": {m}")))?;
        self.state_updates.insert(state.to_string(), value);
        Ok(())
    }

    /// Takes a parameter's data out of the graph, leaving the parameter declared without
    /// data (as a graph whose weights come at prepare time has it): a pass that has used a
    /// weight for the last time lets its bytes go before the pass ends.
    pub fn take_weight(&mut self, name: &str) -> Option<Tensor> {
        self.weights.remove(name)
    }

    /// A copy of the graph without its parameters' data (declared, with no data).
    pub fn clone_without_weights(&self) -> Graph {
        Graph {
            weights: BTreeMap::new(),
            name: self.name.clone(),
            g: self.g.clone(),
            inputs: self.inputs.clone(),
            params: self.params.clone(),
            state: self.state.clone(),
            state_updates: self.state_updates.clone(),
            outputs: self.outputs.clone(),
            names: self.names.clone(),
            interface: self.interface.clone(),
        }
    }

    /// Sets the data of an existing parameter (checked against its type).
    pub fn set_weight(&mut self, name: &str, data: Tensor) -> Result<()> {
        let id = self
            .params
            .iter()
            .copied()
            .find(|&id| interface_name(&self.node(id).op) == name)
            .ok_or_else(|| IrError::NotFound {
                kind: "param",
                name: name.into(),
            })?;
        if self.node(id).outputs[0] != data.ty() {
            return Err(IrError::Other(format!(
                "param \"{name}\": data has type {}, declared {}",
                data.ty(),
                self.node(id).outputs[0]
            )));
        }
        self.weights.insert(name.to_string(), data);
        Ok(())
    }

    // ---------------------------------------------------------------- reading

    /// The node `id`. Panics if it was removed (ids are only handed out for live nodes).
    pub fn node(&self, id: NodeId) -> &Node {
        &self.g[id.ix()]
    }

    /// True if `id` names a live node.
    pub fn contains(&self, id: NodeId) -> bool {
        self.g.contains_node(id.ix())
    }

    /// Changes a node's op or output types in place (inputs change through
    /// [`Graph::set_input`] and [`Graph::replace_uses`] only).
    pub fn set_op(&mut self, id: NodeId, op: Op, outputs: Vec<TensorType>) {
        let n = &mut self.g[id.ix()];
        n.op = op;
        n.outputs = outputs;
    }

    /// Renames a node (made unique).
    pub fn rename_node(&mut self, id: NodeId, name: &str) {
        let old = self.g[id.ix()].name.clone();
        self.names.remove(&old);
        let new = self.fresh_name(name);
        self.names.insert(new.clone());
        self.g[id.ix()].name = new;
    }

    /// The type of a value.
    pub fn value_type(&self, v: Value) -> &TensorType {
        &self.g[v.node.ix()].outputs[v.slot as usize]
    }

    /// The constant data of a value, if it is produced by a `constant` node.
    pub fn constant_value(&self, v: Value) -> Option<&Tensor> {
        match &self.g[v.node.ix()].op {
            Op::Constant { value } if v.slot == 0 => Some(value),
            _ => None,
        }
    }

    /// Number of nodes (interface nodes included).
    pub fn node_count(&self) -> usize {
        self.g.node_count()
    }

    /// Every live node id, in insertion order.
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.g.node_indices().map(NodeId::of).collect()
    }

    /// Input nodes, in order.
    pub fn inputs(&self) -> &[NodeId] {
        &self.inputs
    }

    /// Param nodes, in order.
    pub fn params(&self) -> &[NodeId] {
        &self.params
    }

    /// State nodes with their initial splat values, in order.
    pub fn state(&self) -> &[(NodeId, f64)] {
        &self.state
    }

    /// State updates by state name.
    pub fn state_updates(&self) -> &BTreeMap<String, Value> {
        &self.state_updates
    }

    /// Graph outputs, in order.
    pub fn outputs(&self) -> &[Output] {
        &self.outputs
    }

    /// Parameter data by name (params may have no data, e.g. after parsing text without weights).
    pub fn weights(&self) -> &BTreeMap<String, Tensor> {
        &self.weights
    }

    /// The interface node called `name` of any kind.
    pub fn find_interface(&self, name: &str) -> Option<NodeId> {
        self.inputs
            .iter()
            .chain(self.params.iter())
            .chain(self.state.iter().map(|(id, _)| id))
            .copied()
            .find(|&id| interface_name(&self.node(id).op) == name)
    }

    /// The node called `name`, if any.
    pub fn find_node(&self, name: &str) -> Option<NodeId> {
        self.g
            .node_indices()
            .map(NodeId::of)
            .find(|&id| self.node(id).name == name)
    }

    /// Every (node, input index) that reads `v`, sorted.
    pub fn users(&self, v: Value) -> Vec<(NodeId, usize)> {
        let mut u: Vec<(NodeId, usize)> = self
            .g
            .edges_directed(v.node.ix(), Direction::Outgoing)
            .filter(|e| e.weight().slot == v.slot)
            .map(|e| (NodeId::of(e.target()), e.weight().input as usize))
            .collect();
        u.sort();
        u
    }

    /// True if `v` is a graph output or a state update.
    pub fn is_graph_result(&self, v: Value) -> bool {
        self.outputs.iter().any(|o| o.value == v) || self.state_updates.values().any(|&s| s == v)
    }

    /// Nodes in a deterministic topological order (ties broken by insertion order).
    /// Errors with the names of the nodes on a cycle.
    pub fn topo_order(&self) -> Result<Vec<NodeId>> {
        // In-degrees by node index (a vector, not a map: this runs after every pass, on
        // graphs of 10^6 nodes).
        const ABSENT: usize = usize::MAX;
        let mut indeg = vec![ABSENT; petgraph::visit::NodeIndexable::node_bound(&self.g)];
        let mut nodes = 0;
        for ix in self.g.node_indices() {
            indeg[ix.index()] = self.g.edges_directed(ix, Direction::Incoming).count();
            nodes += 1;
        }
        let mut ready: BinaryHeap<std::cmp::Reverse<NodeIndex>> = self
            .g
            .node_indices()
            .filter(|ix| indeg[ix.index()] == 0)
            .map(std::cmp::Reverse)
            .collect();
        let mut order = Vec::with_capacity(nodes);
        while let Some(std::cmp::Reverse(ix)) = ready.pop() {
            order.push(NodeId::of(ix));
            for e in self.g.edges_directed(ix, Direction::Outgoing) {
                let d = &mut indeg[e.target().index()];
                *d -= 1;
                if *d == 0 {
                    ready.push(std::cmp::Reverse(e.target()));
                }
            }
        }
        if order.len() != nodes {
            let mut stuck: Vec<String> = self
                .g
                .node_indices()
                .filter(|ix| indeg[ix.index()] != ABSENT && indeg[ix.index()] > 0)
                .map(|ix| self.g[ix].name.clone())
                .collect();
            stuck.sort();
            return Err(IrError::Cycle(stuck));
        }
        Ok(order)
    }

    // ---------------------------------------------------------------- rewriting

    /// Makes input `index` of node `id` read `v`.
    pub fn set_input(&mut self, id: NodeId, index: usize, v: Value) -> Result<()> {
        let op = self.node(id).op.name();
        if index >= self.node(id).inputs.len() {
            return Err(IrError::node(
                self.node(id).name.clone(),
                op,
                format!("has no input {index}"),
            ));
        }
        self.check_value(v).map_err(|m| {
            IrError::node(
                self.node(id).name.clone(),
                op,
                format!("input {index}: {m}"),
            )
        })?;
        let old_edge = self
            .g
            .edges_directed(id.ix(), Direction::Incoming)
            .find(|e| e.weight().input as usize == index)
            .map(|e| e.id());
        if let Some(e) = old_edge {
            self.g.remove_edge(e);
        }
        self.g[id.ix()].inputs[index] = v;
        self.g.add_edge(
            v.node.ix(),
            id.ix(),
            Edge {
                slot: v.slot,
                input: index as u32,
            },
        );
        Ok(())
    }

    /// Turns node `id` into a `constant` holding `value` (dropping its inputs). Its single
    /// output keeps its slot, so every reader now reads the constant.
    pub fn make_constant(&mut self, id: NodeId, value: Tensor) -> Result<()> {
        let n = self.node(id);
        if n.op.is_interface() || n.outputs.len() != 1 {
            return Err(IrError::node(
                n.name.clone(),
                n.op.name(),
                "only single-output, non-interface nodes can become constants",
            ));
        }
        let incoming: Vec<_> = self
            .g
            .edges_directed(id.ix(), Direction::Incoming)
            .map(|e| e.id())
            .collect();
        for e in incoming {
            self.g.remove_edge(e);
        }
        let ty = value.ty();
        let n = &mut self.g[id.ix()];
        n.inputs.clear();
        n.outputs = vec![ty];
        n.op = Op::Constant { value };
        Ok(())
    }

    /// Replaces every read of `old` (node inputs, outputs, state updates) by `new`.
    pub fn replace_uses(&mut self, old: Value, new: Value) -> Result<()> {
        for (id, index) in self.users(old) {
            self.set_input(id, index, new)?;
        }
        for o in &mut self.outputs {
            if o.value == old {
                o.value = new;
            }
        }
        for s in self.state_updates.values_mut() {
            if *s == old {
                *s = new;
            }
        }
        Ok(())
    }

    /// Removes a node nobody reads. Errors if it is still used.
    pub fn remove_node(&mut self, id: NodeId) -> Result<()> {
        let n = self.node(id);
        let used = self
            .g
            .edges_directed(id.ix(), Direction::Outgoing)
            .next()
            .is_some()
            || (0..n.outputs.len() as u32).any(|s| self.is_graph_result(Value::new(id, s)));
        if used {
            return Err(IrError::node(
                n.name.clone(),
                n.op.name(),
                "cannot remove a node whose results are used",
            ));
        }
        if matches!(n.op, Op::Input { .. }) {
            return Err(IrError::node(
                n.name.clone(),
                "input",
                "graph inputs cannot be removed",
            ));
        }
        let n = self.g.remove_node(id.ix()).expect("live node");
        self.names.remove(&n.name);
        match &n.op {
            Op::Param { name } => {
                self.interface.remove(&(1, name.clone()));
                self.params.retain(|&p| p != id);
                self.weights.remove(name);
                self.state_updates.remove(name);
            }
            Op::State { name } => {
                self.interface.remove(&(2, name.clone()));
                self.state.retain(|&(s, _)| s != id);
                self.state_updates.remove(name);
            }
            _ => {}
        }
        Ok(())
    }

    /// Removes the graph input `name`, which nothing may read any more.
    pub fn remove_input(&mut self, name: &str) -> Result<()> {
        let id = self
            .inputs
            .iter()
            .copied()
            .find(|&id| interface_name(&self.node(id).op) == name)
            .ok_or_else(|| IrError::NotFound {
                kind: "input",
                name: name.into(),
            })?;
        let v = Value::new(id, 0);
        if !self.users(v).is_empty() || self.is_graph_result(v) {
            return Err(IrError::node(
                self.node(id).name.clone(),
                "input",
                "the input is still read",
            ));
        }
        let n = self.g.remove_node(id.ix()).expect("live node");
        self.names.remove(&n.name);
        self.interface.remove(&(0, name.to_string()));
        self.inputs.retain(|&i| i != id);
        Ok(())
    }

    /// Drops the update of state entry `name` (it becomes read-only in this graph).
    pub fn remove_state_update(&mut self, name: &str) {
        self.state_updates.remove(name);
    }

    /// Drops every state update: the state entries become read-only in this graph.
    pub fn clear_state_updates(&mut self) {
        self.state_updates.clear();
    }

    /// Removes every node that no output or state update depends on (graph inputs stay).
    /// Returns how many nodes were removed.
    pub fn dce(&mut self) -> usize {
        let mut live: HashSet<NodeIndex> = HashSet::new();
        let mut stack: Vec<NodeIndex> = self
            .outputs
            .iter()
            .map(|o| o.value.node.ix())
            .chain(self.state_updates.values().map(|v| v.node.ix()))
            .chain(self.inputs.iter().map(|i| i.ix()))
            .collect();
        // A state that is updated must be kept as long as its update is kept, and the reverse.
        for id in self
            .state
            .iter()
            .map(|(id, _)| id)
            .chain(self.params.iter())
        {
            if self
                .state_updates
                .contains_key(interface_name(&self.node(*id).op))
            {
                stack.push(id.ix());
            }
        }
        while let Some(ix) = stack.pop() {
            if live.insert(ix) {
                stack.extend(self.g.neighbors_directed(ix, Direction::Incoming));
            }
        }
        let dead: Vec<NodeIndex> = self
            .g
            .node_indices()
            .filter(|ix| !live.contains(ix))
            .collect();
        let count = dead.len();
        // Remove in reverse topological order so each removal sees no users.
        let order = self.topo_order().unwrap_or_default();
        let dead_set: HashSet<NodeIndex> = dead.into_iter().collect();
        for id in order.into_iter().rev() {
            if dead_set.contains(&id.ix()) {
                let _ = self.remove_node(id);
            }
        }
        count
    }

    /// Re-runs type inference over the whole graph in topological order (after input types
    /// changed). Stops at the first node whose inference fails.
    pub fn reinfer(&mut self) -> Result<()> {
        for id in self.topo_order()? {
            let n = self.node(id);
            if n.op.is_interface() {
                continue;
            }
            let outs = self.infer_node(&n.name, &n.op, &n.inputs.clone())?;
            self.g[id.ix()].outputs = outs;
        }
        Ok(())
    }

    /// Changes the declared type of an interface node (e.g. `--input-shape`), without
    /// re-inferring the rest (call [`Graph::reinfer`]).
    pub fn set_interface_type(&mut self, id: NodeId, ty: TensorType) -> Result<()> {
        let n = &mut self.g[id.ix()];
        if !n.op.is_interface() {
            return Err(IrError::node(
                n.name.clone(),
                n.op.name(),
                "not an interface node",
            ));
        }
        n.outputs = vec![ty];
        Ok(())
    }

    // ---------------------------------------------------------------- canonical form

    /// The canonical, index-free description of the graph: nodes in topological order with
    /// inputs as positions in that order. Two graphs are equal when their defs are.
    pub fn to_def(&self) -> GraphDef {
        // Interface nodes first (inputs, params, state, in interface order), then the rest in
        // topological order: a valid topological order that does not depend on when a pass
        // added a state entry.
        let interface: Vec<NodeId> = self
            .inputs
            .iter()
            .chain(self.params.iter())
            .chain(self.state.iter().map(|(id, _)| id))
            .copied()
            .collect();
        let rest = match self.topo_order() {
            Ok(o) => o,
            Err(_) => self.node_ids(),
        };
        let mut seen: HashSet<NodeId> = interface.iter().copied().collect();
        let mut order = interface;
        order.extend(rest.into_iter().filter(|id| seen.insert(*id)));
        let pos: HashMap<NodeId, usize> =
            order.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        let vref = |v: &Value| ValueRef {
            node: pos[&v.node],
            slot: v.slot,
        };
        GraphDef {
            name: self.name.clone(),
            nodes: order
                .iter()
                .map(|&id| {
                    let n = self.node(id);
                    NodeDef {
                        name: n.name.clone(),
                        op: n.op.clone(),
                        inputs: n.inputs.iter().map(vref).collect(),
                        outputs: n.outputs.clone(),
                    }
                })
                .collect(),
            inputs: self.inputs.iter().map(|i| pos[i]).collect(),
            params: self.params.iter().map(|i| pos[i]).collect(),
            state: self.state.iter().map(|(i, init)| (pos[i], *init)).collect(),
            outputs: self
                .outputs
                .iter()
                .map(|o| (o.name.clone(), vref(&o.value)))
                .collect(),
            state_updates: self
                .state_updates
                .iter()
                .map(|(k, v)| (k.clone(), vref(v)))
                .collect(),
            weights: self.weights.clone(),
        }
    }

    /// Rebuilds a graph from its canonical description (checks references, not types).
    pub fn from_def(def: &GraphDef) -> Result<Graph> {
        let mut g = Graph::new(def.name.clone());
        let mut ids: Vec<NodeId> = Vec::with_capacity(def.nodes.len());
        for (i, n) in def.nodes.iter().enumerate() {
            let mut inputs = Vec::with_capacity(n.inputs.len());
            for r in &n.inputs {
                if r.node >= i {
                    return Err(IrError::node(
                        n.name.clone(),
                        n.op.name(),
                        format!(
                            "input refers to node #{} which does not come before it",
                            r.node
                        ),
                    ));
                }
                inputs.push(Value::new(ids[r.node], r.slot));
            }
            if g.names.contains(&n.name) {
                return Err(IrError::Duplicate {
                    kind: "node",
                    name: n.name.clone(),
                });
            }
            let id = g.insert(n.name.clone(), n.op.clone(), vec![], n.outputs.clone());
            for (k, v) in inputs.iter().enumerate() {
                g.check_value(*v).map_err(|m| {
                    IrError::node(n.name.clone(), n.op.name(), format!("input {k}: {m}"))
                })?;
            }
            g.g[id.ix()].inputs = inputs.clone();
            for (k, v) in inputs.iter().enumerate() {
                g.g.add_edge(
                    v.node.ix(),
                    id.ix(),
                    Edge {
                        slot: v.slot,
                        input: k as u32,
                    },
                );
            }
            ids.push(id);
        }
        let get = |i: usize| {
            ids.get(i)
                .copied()
                .ok_or_else(|| IrError::Other(format!("node index {i} out of range")))
        };
        for &i in &def.inputs {
            g.inputs.push(get(i)?);
        }
        for &i in &def.params {
            g.params.push(get(i)?);
        }
        for &(i, init) in &def.state {
            g.state.push((get(i)?, init));
        }
        for (name, r) in &def.outputs {
            let v = Value::new(get(r.node)?, r.slot);
            g.set_output(name, v)?;
        }
        for (name, r) in &def.state_updates {
            let v = Value::new(get(r.node)?, r.slot);
            g.set_state_update(name, v)?;
        }
        for (name, t) in &def.weights {
            g.set_weight(name, t.clone())?;
        }
        Ok(g)
    }
}

impl PartialEq for Graph {
    fn eq(&self, other: &Self) -> bool {
        self.to_def() == other.to_def()
    }
}

/// The interface name of an `input`/`param`/`state` op ("" for other ops).
pub fn interface_name(op: &Op) -> &str {
    match op {
        Op::Input { name } | Op::Param { name } | Op::State { name } => name,
        _ => "",
    }
}

/// A value reference by position in [`GraphDef::nodes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueRef {
    /// Position of the producing node.
    pub node: usize,
    /// Output slot.
    pub slot: u32,
}

/// One node of a [`GraphDef`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeDef {
    /// Node name.
    pub name: String,
    /// Operation, as its own object (`"op": {"op": "gemm", "alpha": 1.0, ...}`): flattening
    /// it into the node would clash with `input`/`param`/`state`'s own `name` field.
    pub op: Op,
    /// Inputs by position.
    pub inputs: Vec<ValueRef>,
    /// Output types.
    pub outputs: Vec<TensorType>,
}

/// The serialisable canonical form of a [`Graph`] (the JSON emitter writes this).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphDef {
    /// Graph name.
    pub name: String,
    /// Nodes in topological order.
    pub nodes: Vec<NodeDef>,
    /// Positions of input nodes.
    pub inputs: Vec<usize>,
    /// Positions of param nodes.
    pub params: Vec<usize>,
    /// Positions of state nodes with their initial splat values.
    pub state: Vec<(usize, f64)>,
    /// Named outputs.
    pub outputs: Vec<(String, ValueRef)>,
    /// State updates by state name.
    pub state_updates: BTreeMap<String, ValueRef>,
    /// Parameter data (skipped when empty).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub weights: BTreeMap<String, Tensor>,
}
