//! The JSON form: round trips, weights only when asked, clean errors.

use super::builder::kitchen_sink;
use super::weights::with_weights;
use super::*;

#[test]
fn json_round_trips_and_omits_weights_unless_asked() {
    for g in [
        kitchen_sink_without_non_finite(),
        with_weights(),
        parse(MLP).unwrap(),
    ] {
        let json = to_json(&g);
        assert!(!json.contains("\"weights\""));
        let back = from_json(&json).unwrap_or_else(|e| panic!("{e}\n{json}"));
        let mut expected = parse(&print(&g)).unwrap();
        assert!(back == expected, "{json}");
        let full = to_json_with_weights(&g);
        assert_eq!(full.contains("\"weights\""), !g.weights().is_empty());
        let back = from_json(&full).unwrap();
        assert!(back == g);
        let mut file = Vec::new();
        write_weights(&g, &mut file).unwrap();
        read_weights(&mut expected, &mut file.as_slice()).unwrap();
        assert!(expected == g);
    }
}

/// JSON has no infinities or NaNs: the kitchen sink without its non-finite attributes.
fn kitchen_sink_without_non_finite() -> Graph {
    let text = print(&kitchen_sink()).replace("alpha=inf", "alpha=2.0");
    parse(&text).unwrap()
}

#[test]
fn json_errors_are_clean() {
    let json = to_json(&parse(MLP).unwrap());
    for bad in [
        "",
        "{}",
        "[1,2",
        &json[..json.len() / 2],
        &json.replace("\"node\":3", "\"node\":99"),
        &json.replace("\"slot\":1", "\"slot\":7"),
        &json.replace("\"data\":[0,0,0,63]", "\"data\":[0,0,63]"),
        &json.replace("\"inputs\":[0]", "\"inputs\":[1000]"),
    ] {
        assert!(from_json(bad).is_err(), "accepted {bad}");
    }
    let err = from_json(&json.replace("\"data\":[0,0,0,63]", "\"data\":[0,0,63]"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot hold 3 bytes"), "{err}");
}
