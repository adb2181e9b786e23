//! Random graphs built through the public API round trip through text and JSON; garbage and
//! mutated text never make the parser panic.

use super::*;
use proptest::prelude::*;

/// splitmix64: a tiny deterministic generator driven by proptest's seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

const NAMES: &[&str] = &[
    "x",
    "w",
    "fc1.x.amax",
    "onnx::MatMul_12",
    "/encoder/layer.0/Add",
    "0abc",
    "",
    "a b",
    "q\"uote",
    "tab\there",
    "ünïcode",
    "#hash",
    "%pct",
    "@at",
    "new\nline",
    "back\\slash",
    "input",
    "state",
    "graph",
    "none",
    "x.1",
    "_",
    "..",
    "-",
    "//c",
    "a#1",
    "dense",
    "nan",
    "inf",
    "return",
];

fn name(rng: &mut Rng) -> String {
    if rng.chance(80) {
        rng.pick(NAMES).to_string()
    } else {
        (0..rng.below(6))
            .map(|_| char::from_u32(rng.below(0x3000) as u32).unwrap_or('?'))
            .collect()
    }
}

fn tensor_type(rng: &mut Rng) -> TensorType {
    let dtype = *rng.pick(&DType::ALL);
    let shape = (0..rng.below(4))
        .map(|_| match rng.below(5) {
            0 => Dim::Sym(name(rng)),
            1 => Dim::Unknown,
            2 => Dim::Known(rng.next()),
            _ => Dim::Known(rng.below(20) as u64),
        })
        .collect();
    TensorType::new(dtype, shape)
}

fn tensor(rng: &mut Rng) -> Tensor {
    let dtype = *rng.pick(&DType::ALL);
    let shape: Vec<u64> = match rng.below(4) {
        0 => vec![],
        1 => vec![rng.below(8) as u64],
        2 => vec![rng.below(5) as u64, rng.below(5) as u64],
        _ => vec![rng.below(100) as u64 + 1],
    };
    let n = shape.iter().product::<u64>() as usize * dtype.size();
    let bytes = (0..n).map(|_| rng.next() as u8).collect();
    Tensor::from_bytes(dtype, shape, bytes).unwrap()
}

/// Which floats the generator makes.
#[derive(Clone, Copy)]
enum Floats {
    /// Any non-NaN value (NaN never compares equal, so no graph holding one can).
    Any,
    /// What JSON keeps exactly: attributes finite even as f32, short decimals for state.
    JsonSafe,
}

fn float(rng: &mut Rng, floats: Floats) -> f64 {
    let v = match rng.below(6) {
        0 => *rng.pick(&[
            0.0,
            -0.0,
            1.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e-300,
            f64::MAX,
        ]),
        1 => (rng.below(2001) as f64 - 1000.0) / 8.0,
        _ => f64::from_bits(rng.next()),
    };
    match floats {
        Floats::Any if !v.is_nan() => v,
        Floats::JsonSafe if (v as f32).is_finite() => v,
        _ => 0.25,
    }
}

/// Words an enum or dtype attribute may take (a new enum needs its words here).
const WORDS: &[&str] = &[
    "none",
    "tanh",
    "notset",
    "same_upper",
    "same_lower",
    "valid",
    "constant",
    "reflect",
    "edge",
    "wrap",
    "history_max",
    "history_most_recent",
    "current",
    "up",
    "down",
    "nearest",
    "fp32",
    "pow2",
    "e8m0",
    "f64",
    "f32",
    "f16",
    "bf16",
    "f8e4m3",
    "f8e5m2",
    "i64",
    "i32",
    "i16",
    "i8",
    "u8",
    "bool",
];

/// For every op, the attribute kinds each of its keys accepts, found by trying samples
/// against `Op::from_parts` (so the generator follows the op table without a copy of it).
/// An op name and, per attribute, the sample values it accepts.
type Schema = (&'static str, Vec<(&'static str, Vec<Attr>)>);

fn op_schemas() -> Vec<Schema> {
    let mut samples = vec![
        Attr::Int(1),
        Attr::Float(0.5),
        Attr::Bool(true),
        Attr::Ints(vec![1]),
        Attr::Floats(vec![0.5]),
        Attr::Str("s".into()),
        // An elementwise program (the fused ops' `expr`).
        Attr::Str("relu[a0]".into()),
        Attr::Tensor(Tensor::scalar_f32(1.0)),
        Attr::None,
    ];
    samples.extend(WORDS.iter().map(|w| Attr::Word(w.to_string())));
    Op::NAMES
        .iter()
        .map(|&name| {
            let mut map: BTreeMap<String, Attr> = BTreeMap::new();
            let op = loop {
                match Op::from_parts(name, AttrMap(map.clone())) {
                    Ok(op) => break op,
                    Err(msg) => {
                        let key = msg
                            .split('`')
                            .nth(1)
                            .unwrap_or_else(|| panic!("{name}: {msg}"))
                            .to_string();
                        let ok = samples.iter().find(|s| {
                            let mut m = map.clone();
                            m.insert(key.clone(), (*s).clone());
                            match Op::from_parts(name, AttrMap(m)) {
                                Ok(_) => true,
                                Err(e) => !e.contains(&format!("`{key}`")),
                            }
                        });
                        let ok = ok.unwrap_or_else(|| {
                            panic!("no sample value fits attribute `{key}` of `{name}`: {msg}")
                        });
                        map.insert(key, ok.clone());
                    }
                }
            };
            let attrs: Vec<(&'static str, Attr)> = op.attrs();
            let schema = attrs
                .iter()
                .map(|(key, _)| {
                    let accepted = samples
                        .iter()
                        .filter(|s| {
                            let mut m: BTreeMap<String, Attr> = attrs
                                .iter()
                                .map(|(k, a)| (k.to_string(), a.clone()))
                                .collect();
                            m.insert(key.to_string(), (*s).clone());
                            Op::from_parts(name, AttrMap(m)).is_ok()
                        })
                        .cloned()
                        .collect();
                    (*key, accepted)
                })
                .collect();
            (name, schema)
        })
        .collect()
}

fn random_attr(rng: &mut Rng, kinds: &[Attr], floats: Floats) -> Attr {
    match rng.pick(kinds) {
        Attr::Int(_) => Attr::Int(if rng.chance(50) {
            rng.next() as i64
        } else {
            rng.below(7) as i64 - 3
        }),
        Attr::Float(_) => Attr::Float(float(rng, floats)),
        Attr::Bool(_) => Attr::Bool(rng.chance(50)),
        Attr::Ints(_) => Attr::Ints(
            (0..rng.below(5))
                .map(|_| rng.next() as i64 >> rng.below(64))
                .collect(),
        ),
        Attr::Floats(_) => Attr::Floats((0..rng.below(5)).map(|_| float(rng, floats)).collect()),
        Attr::Str(_) => Attr::Str(name(rng)),
        Attr::Tensor(_) => Attr::Tensor(tensor(rng)),
        other => other.clone(),
    }
}

/// A random graph built through the public API: interface entries added at random points
/// (between nodes, as passes do), renamed nodes, removed nodes, multi-output nodes.
fn random_graph(rng: &mut Rng, schemas: &[Schema], steps: usize, floats: Floats) -> Graph {
    let mut g = Graph::new(name(rng));
    let mut values: Vec<Value> = Vec::new();
    let mut states: Vec<String> = Vec::new();
    for _ in 0..steps {
        match rng.below(12) {
            0 => {
                if let Ok(v) = g.add_input(&name(rng), tensor_type(rng)) {
                    values.push(v);
                }
            }
            1 => {
                if let Ok(v) = g.add_param(&name(rng), tensor_type(rng), None) {
                    values.push(v);
                }
            }
            2 => {
                let init = match floats {
                    Floats::Any => float(rng, floats),
                    Floats::JsonSafe => (rng.below(2001) as f64 - 1000.0) / 16.0,
                };
                let n = name(rng);
                if let Ok(v) = g.add_state(&n, tensor_type(rng), init) {
                    values.push(v);
                    states.push(n);
                }
            }
            3 if !values.is_empty() => {
                let v = *rng.pick(&values);
                let _ = g.set_output(&name(rng), v);
            }
            4 if !values.is_empty() && !states.is_empty() => {
                let v = *rng.pick(&values);
                let s = rng.pick(&states).clone();
                let _ = g.set_state_update(&s, v);
            }
            5 => {
                let ids = g.node_ids();
                if !ids.is_empty() {
                    let id = *rng.pick(&ids);
                    if rng.chance(50) {
                        g.rename_node(id, &name(rng));
                    } else if g.remove_node(id).is_ok() {
                        values.retain(|v| v.node != id);
                        states.retain(|s| g.find_interface(s).is_some());
                    }
                }
            }
            _ => {
                let (op_name, schema) = rng.pick(schemas);
                let attrs: BTreeMap<String, Attr> = schema
                    .iter()
                    .map(|(k, kinds)| (k.to_string(), random_attr(rng, kinds, floats)))
                    .collect();
                let Ok(op) = Op::from_parts(op_name, AttrMap(attrs)) else {
                    continue;
                };
                let inputs: Vec<Value> = if values.is_empty() {
                    vec![]
                } else {
                    (0..rng.below(4)).map(|_| *rng.pick(&values)).collect()
                };
                let outputs = (0..[1, 1, 1, 2, 3, 0][rng.below(6)])
                    .map(|_| tensor_type(rng))
                    .collect();
                if let Ok(vs) = g.add_node_typed(&name(rng), op, &inputs, outputs) {
                    values.extend(vs);
                }
            }
        }
    }
    g
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_round_trip(seed in any::<u64>(), steps in 0usize..60) {
        let schemas = op_schemas();
        let g = random_graph(&mut Rng(seed), &schemas, steps, Floats::Any);
        assert_round_trip(&g);
    }

    #[test]
    fn random_graphs_round_trip_through_json(seed in any::<u64>(), steps in 0usize..40) {
        let schemas = op_schemas();
        let g = random_graph(&mut Rng(seed), &schemas, steps, Floats::JsonSafe);
        let json = to_json(&g);
        let back = from_json(&json).unwrap_or_else(|e| panic!("{e}\n{json}"));
        prop_assert!(back == g);
    }

    #[test]
    fn garbage_never_panics(text in "\\PC{0,200}") {
        let _ = parse(&text);
        let _ = from_json(&text);
        let mut g = Graph::new("g");
        let _ = read_weights(&mut g, &mut text.as_bytes());
    }

    #[test]
    fn mutated_text_never_panics(seed in any::<u64>(), edits in 1usize..6) {
        let schemas = op_schemas();
        let mut rng = Rng(seed);
        let base = if rng.chance(30) { MLP.to_string() } else { print(&random_graph(&mut rng, &schemas, 30, Floats::Any)) };
        let mut chars: Vec<char> = base.chars().collect();
        const PIECES: &[&str] = &["%", "#", "@", "\"", "\\", "[", "]", "(", ")", ",", "=", ":", "\n", " ", "}", "{", "-", "0x", "1e", "9", "%0", "#1", "none", "dense<f32[2]>", "hex\"", "//", "state %x.h", "update %x.h = %0", "return %0 as \"q\""];
        for _ in 0..edits {
            let at = rng.below(chars.len() + 1);
            match rng.below(4) {
                0 if at < chars.len() => { chars.remove(at); }
                1 => { for c in rng.pick(PIECES).chars().rev() { chars.insert(at, c); } }
                2 => chars.truncate(at),
                _ if at < chars.len() => chars[at] = char::from_u32(rng.below(0x80) as u32).unwrap_or(' '),
                _ => {}
            }
        }
        let text: String = chars.into_iter().collect();
        if let Ok(g) = parse(&text) {
            // Whatever parses is printable and stable.
            let again = parse(&print(&g)).unwrap_or_else(|e| panic!("{e}\n{}", print(&g)));
            prop_assert!(again == g);
        }
    }
}
