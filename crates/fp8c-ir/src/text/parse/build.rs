//! From the parsed header and lines to a [`Graph`]: the node order (unplaced interface
//! nodes first), node names (explicit ones unique, unnamed ones `op`, `op.1`, ...) and the
//! [`GraphDef`] handed to [`Graph::from_def`].

use super::lexer::Parser;
use super::{Item, Kind, Raw, Ref, Target};
use crate::{Graph, GraphDef, IrError, NodeDef, Op, Result, ValueRef};
use std::collections::{BTreeMap, HashMap};

impl Raw {
    /// Orders the nodes (unplaced interface nodes first, in header order, then the body),
    /// names the unnamed ones and hands the def to [`Graph::from_def`].
    pub(super) fn into_graph(self, p: &Parser<'_>) -> Result<Graph> {
        let mut order: Vec<Item> = (0..self.ifaces.len())
            .filter(|&i| !self.ifaces[i].placed)
            .map(Item::Place)
            .collect();
        order.extend(self.items);
        let mut iface_pos = vec![0; self.ifaces.len()];
        let mut line_pos = vec![0; self.lines.len()];
        for (pos, item) in order.iter().enumerate() {
            match *item {
                Item::Place(i) => iface_pos[i] = pos,
                Item::Line(i) => line_pos[i] = pos,
            }
        }
        // Node names: explicit ones must be unique; unnamed nodes get `op`, `op.1`, ...
        let mut used: HashMap<String, usize> = HashMap::new();
        for iface in &self.ifaces {
            if let Some(prev) = used.insert(iface.node_name.clone(), iface.at) {
                return Err(dup_name(p, &iface.node_name, iface.at, prev));
            }
        }
        for line in &self.lines {
            if let Some(name) = &line.name
                && let Some(prev) = used.insert(name.clone(), line.at)
            {
                return Err(dup_name(p, name, line.at, prev));
            }
        }
        let vref = |r: &Ref| ValueRef {
            node: match r.target {
                Target::Iface(i) => iface_pos[i],
                Target::Line(i) => line_pos[i],
            },
            slot: r.slot,
        };
        let mut nodes: Vec<Option<NodeDef>> = (0..order.len()).map(|_| None).collect();
        for (i, iface) in self.ifaces.iter().enumerate() {
            let op = match iface.kind {
                Kind::Input => Op::Input {
                    name: iface.name.clone(),
                },
                Kind::Param => Op::Param {
                    name: iface.name.clone(),
                },
                Kind::State => Op::State {
                    name: iface.name.clone(),
                },
            };
            nodes[iface_pos[i]] = Some(NodeDef {
                name: iface.node_name.clone(),
                op,
                inputs: vec![],
                outputs: iface.types.clone(),
            });
        }
        for (i, line) in self.lines.into_iter().enumerate() {
            let name = match line.name {
                Some(n) => n,
                None => {
                    let base = line.op.name();
                    let fresh = std::iter::once(base.to_string())
                        .chain((1..).map(|k| format!("{base}.{k}")))
                        .find(|n| !used.contains_key(n))
                        .unwrap_or_default();
                    used.insert(fresh.clone(), line.at);
                    fresh
                }
            };
            nodes[line_pos[i]] = Some(NodeDef {
                name,
                op: line.op,
                inputs: line.inputs.iter().map(vref).collect(),
                outputs: line.types,
            });
        }
        let of_kind = |k: Kind| -> Vec<usize> {
            self.ifaces
                .iter()
                .enumerate()
                .filter(|(_, f)| f.kind == k)
                .map(|(i, _)| iface_pos[i])
                .collect()
        };
        let def = GraphDef {
            name: self.name,
            nodes: nodes.into_iter().flatten().collect(),
            inputs: of_kind(Kind::Input),
            params: of_kind(Kind::Param),
            state: self
                .ifaces
                .iter()
                .enumerate()
                .filter(|(_, f)| f.kind == Kind::State)
                .map(|(i, f)| (iface_pos[i], f.init))
                .collect(),
            outputs: self
                .outputs
                .iter()
                .map(|(n, r)| (n.clone(), vref(r)))
                .collect(),
            state_updates: self
                .updates
                .iter()
                .map(|(n, r)| (n.clone(), vref(r)))
                .collect(),
            weights: BTreeMap::new(),
        };
        Graph::from_def(&def).map_err(|e| p.err_at(self.header_at, e.to_string()))
    }
}

fn dup_name(p: &Parser<'_>, name: &str, at: usize, prev: usize) -> IrError {
    let line = p.line_of(prev);
    p.err_at(
        at,
        format!("node name {name:?} is used twice (also at line {line})"),
    )
}
