//! `fp8c_eval::support` against `eval_op`, over every op of the IR's table: the evaluator
//! computes every op but the graph interface (`input`, `param`, `state`), whose values the
//! caller feeds, and says so with a reason.

use fp8c_eval::{ErrorKind, eval_op, support};
use fp8c_ir::{Op, Support};

#[test]
fn every_op_but_the_graph_interface_is_supported() {
    let ops = Op::examples();
    assert_eq!(ops.len(), Op::NAMES.len());
    for op in ops {
        let name = op.name();
        match support(&op) {
            Support::Yes => {
                assert!(
                    !op.is_interface(),
                    "{name}: the interface is fed, not evaluated"
                );
                // With no inputs a supported op evaluates (constant) or refuses its inputs;
                // it never answers that it has no kernel.
                if let Err(e) = eval_op(&op, &[]) {
                    assert!(
                        !matches!(e.kind, ErrorKind::Unsupported | ErrorKind::Interface),
                        "{name}: {e}"
                    );
                }
            }
            Support::No(reason) => {
                assert!(op.is_interface(), "{name} is not supported: {reason}");
                assert_eq!(reason, "graph interface: fed by the caller");
                let e = eval_op(&op, &[]).expect_err(name);
                assert_eq!(e.kind, ErrorKind::Interface, "{name}: {e}");
            }
        }
    }
}
