//! Lowering: a static [`Graph`] becomes a [`Program`].
//!
//! Nodes are taken in the order `schedule.rs` chooses (the graph's deterministic topological
//! order, or for a training step a memory-aware one when its peak is lower). Interface nodes become
//! buffers fed from outside (inputs by the caller, params by `prepare`, state by the
//! executable), `constant` nodes become pre-filled buffers, and every other node becomes one
//! [`Step`] writing one buffer per output slot. Liveness then gives each arena buffer the
//! range of steps it must survive: from the step that writes it (step 0 for inputs) to its
//! last reader, or to the end for graph outputs and state updates. A result nobody reads
//! (the unused half of a `split`) lives only during its own step. `plan.rs` turns the ranges
//! into offsets. `after(x, dep)` becomes no step: its readers read `x`'s buffer, so `x` lives
//! until they have run.
//!
//! Lowering needs every type to be static: give input shapes before compiling, so that
//! canonicalize infers them everywhere.

use crate::program::{BufId, Buffer, BufferKind, Program, StateBinding, Step};
use crate::{RuntimeError, plan, schedule};
use fp8c_ir::{Graph, Op, Value, interface_name};
use std::collections::HashMap;

/// Lowers `g` to a program with a validated memory plan.
pub fn lower(g: &Graph) -> Result<Program, RuntimeError> {
    let order = schedule::order(g)?;
    let mut buffers: Vec<Buffer> = Vec::new();
    let mut of_value: HashMap<Value, BufId> = HashMap::new();
    let mut steps: Vec<Step> = Vec::new();
    let mut inputs = Vec::new();
    let mut params = Vec::new();
    let mut state = Vec::new();
    let state_init: HashMap<_, _> = g.state().iter().copied().collect();

    for id in order {
        let node = g.node(id);
        if let Op::After = node.op {
            let x = of_value.get(&node.inputs()[0]).copied().ok_or_else(|| {
                RuntimeError::node(&node.name, node.op.name(), "reads a value defined later")
            })?;
            of_value.insert(Value::new(id, 0), x);
            continue;
        }
        let mut outs = Vec::with_capacity(node.outputs.len());
        for (slot, ty) in node.outputs.iter().enumerate() {
            let dims = ty.known_dims().ok_or_else(|| {
                RuntimeError::node(
                    &node.name,
                    node.op.name(),
                    crate::dynamic_shape::why_not_static(g, id, slot),
                )
            })?;
            let bytes = ty
                .num_bytes()
                .filter(|_| fp8c_ir::checked_numel(&dims).is_some());
            let bytes = bytes.ok_or_else(|| {
                RuntimeError::node(
                    &node.name,
                    node.op.name(),
                    format!("output {ty} is too large"),
                )
            })?;
            let kind = match &node.op {
                Op::Input { name } => BufferKind::Input(name.clone()),
                Op::Param { name } => BufferKind::Param(name.clone()),
                Op::State { name } => BufferKind::State(name.clone()),
                Op::Constant { value } => BufferKind::Constant(value.clone()),
                _ => BufferKind::Temp,
            };
            let buf = BufId(buffers.len() as u32);
            let name = if slot == 0 {
                node.name.clone()
            } else {
                format!("{}:{slot}", node.name)
            };
            buffers.push(Buffer {
                id: buf,
                name,
                ty: ty.clone(),
                dims,
                bytes,
                kind,
                live: None,
                offset: None,
            });
            of_value.insert(Value::new(id, slot as u32), buf);
            outs.push(buf);
        }
        match &node.op {
            Op::Input { name } => inputs.push((name.clone(), outs[0])),
            Op::Param { name } => params.push((name.clone(), outs[0])),
            Op::State { name } => state.push(StateBinding {
                name: name.clone(),
                buf: outs[0],
                init: state_init.get(&id).copied().unwrap_or(0.0),
                update: None,
            }),
            Op::Constant { .. } => {}
            op => {
                let ins = node
                    .inputs()
                    .iter()
                    .map(|v| {
                        of_value.get(v).copied().ok_or_else(|| {
                            RuntimeError::node(&node.name, op.name(), "reads a value defined later")
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                steps.push(Step {
                    node: node.name.clone(),
                    op: op.clone(),
                    inputs: ins,
                    outputs: outs,
                });
            }
        }
    }
    // Inputs come back in graph order, not topological order.
    let input_order: Vec<&str> = g
        .inputs()
        .iter()
        .map(|&id| interface_name(&g.node(id).op))
        .collect();
    inputs.sort_by_key(|(n, _)| input_order.iter().position(|m| m == n));

    let lookup = |v: &Value, what: &str| {
        of_value
            .get(v)
            .copied()
            .ok_or_else(|| RuntimeError::Other(format!("{what} refers to a value of no node")))
    };
    let outputs = g
        .outputs()
        .iter()
        .map(|o| {
            Ok((
                o.name.clone(),
                lookup(&o.value, &format!("output \"{}\"", o.name))?,
            ))
        })
        .collect::<Result<Vec<_>, RuntimeError>>()?;
    for s in &mut state {
        if let Some(v) = g.state_updates().get(&s.name) {
            let u = lookup(v, &format!("state update \"{}\"", s.name))?;
            if buffers[u.index()].ty != buffers[s.buf.index()].ty {
                return Err(RuntimeError::State {
                    name: s.name.clone(),
                    message: format!(
                        "update has type {}, the state {}",
                        buffers[u.index()].ty,
                        buffers[s.buf.index()].ty
                    ),
                });
            }
            s.update = Some(u);
        }
    }

    // Liveness: [def, last] in step indices, for arena buffers only.
    let end = steps.len().saturating_sub(1);
    for b in &mut buffers {
        if let BufferKind::Input(_) = b.kind {
            b.live = Some((0, 0));
        }
    }
    for (i, s) in steps.iter().enumerate() {
        for &o in &s.outputs {
            buffers[o.index()].live = Some((i, i));
        }
    }
    for (i, s) in steps.iter().enumerate() {
        for &b in &s.inputs {
            if let Some((_, last)) = &mut buffers[b.index()].live {
                *last = (*last).max(i);
            }
        }
    }
    let kept = outputs
        .iter()
        .map(|(_, b)| *b)
        .chain(state.iter().filter_map(|s| s.update));
    for b in kept {
        if let Some((_, last)) = &mut buffers[b.index()].live {
            *last = end;
        }
    }
    let mut frees = vec![Vec::new(); steps.len()];
    let results: std::collections::HashSet<BufId> = outputs
        .iter()
        .map(|(_, b)| *b)
        .chain(state.iter().filter_map(|s| s.update))
        .collect();
    for b in &buffers {
        if let Some((_, last)) = b.live
            && !results.contains(&b.id)
            && last < steps.len()
        {
            frees[last].push(b.id);
        }
    }
    let plan = plan::assign_offsets(&mut buffers, steps.len());
    let p = Program {
        name: g.name().to_string(),
        steps,
        buffers,
        inputs,
        params,
        state,
        outputs,
        plan,
        frees,
    };
    p.validate()?;
    Ok(p)
}
