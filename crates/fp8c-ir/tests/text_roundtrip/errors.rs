//! Parse errors name the problem and its line and column; a cyclic graph prints but does not
//! parse.

use super::*;

#[test]
fn errors_name_the_problem_and_its_position() {
    let cases: &[(&str, (usize, usize), &str)] = &[
        ("", (1, 1), "expected `graph`, found end of input"),
        (
            "graph @g() {\n  %0: f32[] relu %x\n}",
            (2, 13),
            "expected `=` after result type",
        ),
        (
            "graph @g(%x: f32[]) {\n  %0: f32[] = matmull %x\n}",
            (2, 15),
            "unknown op `matmull`",
        ),
        (
            "graph @g(%x: f32[]) {\n  %0: f32[] = relu %12\n}",
            (2, 20),
            "use of undefined value %12",
        ),
        (
            "graph @g(%x: f32[]) {\n  %0: f32[] = relu %y\n}",
            (2, 20),
            "use of undefined value %y",
        ),
        (
            "graph @g(%x: f32[]) {\n  %3: f32[] = relu %x\n  %3: f32[] = relu %x\n}",
            (3, 3),
            "value %3 defined twice",
        ),
        (
            "graph @g(%a: f32[2,2]) {\n  %0: f32[2,2] = gemm %a, %a alpha=1.0 beta=1.0 trans_a=1 trans_b=false  # fc1\n}",
            (2, 49),
            "node \"fc1\" (gemm): attribute `trans_a`: expected true or false",
        ),
        (
            "graph @g(%a: f32[]) {\n  %0: f32[] = softmax %a  # sm\n}",
            (2, 15),
            "node \"sm\" (softmax): missing attribute `axis`",
        ),
        (
            "graph @g(%a: f32[]) {\n  %0: f32[] = relu %a bogus=1\n}",
            (2, 23),
            "op `relu` has no attribute `bogus`",
        ),
        (
            "graph @g(%a: f32[]) {\n  %0: f32[] = softmax %a axis=1 axis=2\n}",
            (2, 33),
            "attribute `axis` given twice",
        ),
        (
            "graph @g(%a: f32[]) {\n  %0: (f32[], f32[]) = relu %a\n  %1: f32[] = relu %0#2\n}",
            (3, 20),
            "%0 has 2 result(s); there is no %0#2",
        ),
        ("graph @g(%a: f33[]) {\n}", (1, 14), "unknown dtype `f33`"),
        (
            "graph @g(%a: f32[]) {\n  return %a as \"y\"\n  return %a as \"y\"\n}",
            (3, 3),
            "output \"y\" returned twice (also at line 2)",
        ),
        (
            "graph @g(%a: f32[]) {\n  update %a = %a\n}",
            (2, 10),
            "update of %a, which is not declared in `params(...)` or `state(...)`",
        ),
        (
            "graph @g(%a: f32[]) {\n  %0: f32[] = relu %a  # n\n  %1: f32[] = relu %a  # n\n}",
            (3, 3),
            "node name \"n\" is used twice (also at line 2)",
        ),
        (
            "graph @g(%a: f32[]) {\n  %0: f32[] = relu %a  # a\n}",
            (2, 3),
            "node name \"a\" is used twice (also at line 1)",
        ),
        (
            "graph @g(%a: f32[]) {\n  %0: f32[] = relu %a  # a b\n}",
            (2, 27),
            "expected end of line after the node name",
        ),
        (
            "graph @g(%a: f32[], %a: f32[]) {\n}",
            (1, 21),
            "input %a declared twice",
        ),
        (
            "graph @g(%a: f32[]) {\n  %0: f32[] = relu %a\n",
            (3, 1),
            "missing `}`",
        ),
        (
            "graph @g(%a: f32[]) {\n}\nextra",
            (3, 1),
            "unexpected text after the closing `}`",
        ),
        (
            "graph @g() state(%s: f32[]) {\n  %0: f32[] = relu %s\n  state %s\n}",
            (3, 3),
            "`state %s` must come before the first use of %s (line 2)",
        ),
        (
            "graph @g() {\n  %0: f32[2] = constant value=dense<f32[2]>[1.0]\n}",
            (2, 31),
            "dense<f32[2]> needs 2 values, got 1",
        ),
        (
            "graph @g() {\n  %0: u8[1] = constant value=dense<u8[1]>[256]\n}",
            (2, 43),
            "256 is out of range for u8",
        ),
        (
            "graph @g() {\n  %0: u8[1] = constant value=dense<u8[1]>[0x100]\n}",
            (2, 43),
            "0x100 does not fit in u8",
        ),
        (
            "graph @g() {\n  %0: f32[1] = constant value=dense<f32[1]>hex\"0000\"\n}",
            (2, 31),
            "f32 tensor of shape [1] needs 4 bytes, got 2",
        ),
        (
            "graph @g() {\n  %0: f32[1] = constant value=dense<f32[1]>hex\"000\"\n}",
            (2, 47),
            "even number of hex digits",
        ),
        ("graph @\"g() {\n}", (1, 8), "unterminated string"),
        (
            "graph @g() {\n  %0: i64[] = constant value=dense<i64[]>[99999999999999999999]\n}",
            (2, 43),
            "out of range for i64",
        ),
        (
            "graph @g() {\n  %0: f32[] = shape %x start=99999999999999999999 end=none\n}",
            (2, 21),
            "use of undefined value %x",
        ),
    ];
    let mut wrong = Vec::new();
    for (text, (line, col), want) in cases {
        let (l, c, msg) = parse_err(text);
        if !msg.contains(want) || (l, c) != (*line, *col) {
            wrong.push(format!(
                "{text:?}: got {l}:{c}: {msg}; want {line}:{col}: {want}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_cyclic_graph_prints_and_does_not_parse() {
    let mut g = Graph::new("cycle");
    let x = g.add_input("x", f32t(&[])).unwrap();
    let a = g
        .add_node_typed("a", Op::Add, &[x, x], vec![f32t(&[])])
        .unwrap()[0];
    let b = g
        .add_node_typed("b", Op::Neg, &[a], vec![f32t(&[])])
        .unwrap()[0];
    g.set_input(a.node, 1, b).unwrap();
    let text = print(&g);
    let (_, _, msg) = parse_err(&text);
    assert!(msg.contains("use of undefined value %1"), "{msg}\n{text}");
}
