//! Recipes: TE defaults, TOML layout, and clear errors for invalid values from code or config.

use fp8c_core::{
    AmaxComputeAlgo, CoreError, CurrentScaling, DelayedScaling, Format, Fp8Format, Recipe,
};
use serde::{Deserialize, Serialize};

/// How a config file embeds a recipe: a `[recipe]` table.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Config {
    recipe: Recipe,
}

fn load(toml_text: &str) -> Result<Recipe, String> {
    toml::from_str::<Config>(toml_text)
        .map(|c| c.recipe)
        .map_err(|e| e.to_string())
}

#[test]
fn defaults_are_transformer_engines() {
    let d = DelayedScaling::default();
    assert_eq!(d.margin, 0.0);
    assert_eq!(d.fp8_format, Format::Hybrid);
    assert_eq!(d.amax_history_len, 1024);
    assert_eq!(d.amax_compute_algo, AmaxComputeAlgo::Max);
    assert!(d.reduce_amax);
    let c = CurrentScaling::default();
    assert_eq!(
        (c.fp8_format, c.amax_epsilon, c.power_2_scale),
        (Format::Hybrid, 0.0, false)
    );
    assert_eq!(Recipe::default(), Recipe::Delayed(d));
    assert_eq!(Format::Hybrid.forward(), Fp8Format::E4M3);
    assert_eq!(Format::Hybrid.backward(), Fp8Format::E5M2);
    assert_eq!(Format::E4M3.backward(), Fp8Format::E4M3);
}

#[test]
fn documented_toml_layout_loads() {
    let delayed = load(
        r#"
        [recipe]
        kind = "delayed"
        margin = 0
        fp8_format = "hybrid"
        amax_history_len = 16
        amax_compute_algo = "most_recent"
        reduce_amax = false
        "#,
    )
    .unwrap();
    assert_eq!(
        delayed,
        Recipe::Delayed(
            DelayedScaling::new(0.0, Format::Hybrid, 16, AmaxComputeAlgo::MostRecent, false)
                .unwrap()
        )
    );
    let current = load(
        r#"
        [recipe]
        kind = "current"
        fp8_format = "e4m3"
        amax_epsilon = 1e-6
        power_2_scale = true
        "#,
    )
    .unwrap();
    assert_eq!(
        current,
        Recipe::Current(CurrentScaling::new(Format::E4M3, 1e-6, true).unwrap())
    );
    // Missing fields take TE's defaults.
    assert_eq!(
        load("[recipe]\nkind = \"delayed\"\n").unwrap(),
        Recipe::default()
    );
}

#[test]
fn toml_round_trips() {
    for recipe in [
        Recipe::default(),
        Recipe::Delayed(DelayedScaling {
            margin: 2.0,
            amax_history_len: 7,
            amax_compute_algo: AmaxComputeAlgo::MostRecent,
            ..Default::default()
        }),
        Recipe::Delayed(DelayedScaling {
            power_2_scale: true,
            ..Default::default()
        }),
        Recipe::Current(CurrentScaling::new(Format::E4M3, 0.25, true).unwrap()),
    ] {
        let text = toml::to_string(&Config { recipe }).unwrap();
        assert!(text.contains("kind = "), "{text}");
        assert_eq!(load(&text).unwrap(), recipe, "{text}");
    }
}

#[test]
fn zero_history_length_is_a_clear_error_from_toml_and_code() {
    let err = load("[recipe]\nkind = \"delayed\"\namax_history_len = 0\n").unwrap_err();
    assert!(
        err.contains("amax_history_len must be between 1 and 65536, got 0"),
        "{err}"
    );
    let err = DelayedScaling::new(0.0, Format::Hybrid, 0, AmaxComputeAlgo::Max, true).unwrap_err();
    assert_eq!(err, CoreError::AmaxHistoryLen(0));
    assert_eq!(
        err.to_string(),
        "amax_history_len must be between 1 and 65536, got 0"
    );
    let literal = DelayedScaling {
        amax_history_len: 0,
        ..Default::default()
    };
    assert_eq!(
        Recipe::from(literal).validate(),
        Err(CoreError::AmaxHistoryLen(0))
    );
}

#[test]
fn non_finite_margin_is_a_clear_error_from_toml_and_code() {
    for (text, shown) in [("inf", "inf"), ("-inf", "-inf"), ("nan", "NaN")] {
        let err = load(&format!("[recipe]\nkind = \"delayed\"\nmargin = {text}\n")).unwrap_err();
        assert!(
            err.contains(&format!("margin must be finite, got {shown}")),
            "{err}"
        );
    }
    let err = DelayedScaling::new(f32::INFINITY, Format::Hybrid, 8, AmaxComputeAlgo::Max, true)
        .unwrap_err();
    assert_eq!(err.to_string(), "margin must be finite, got inf");
}

#[test]
fn negative_or_non_finite_epsilon_is_an_error() {
    let err = load("[recipe]\nkind = \"current\"\namax_epsilon = -1.0\n").unwrap_err();
    assert!(
        err.contains("amax_epsilon must be finite and >= 0, got -1"),
        "{err}"
    );
    assert!(CurrentScaling::new(Format::Hybrid, f32::NAN, false).is_err());
    assert!(CurrentScaling::new(Format::Hybrid, f32::INFINITY, false).is_err());
}

#[test]
fn pure_e5m2_is_rejected_like_transformer_engine() {
    let err = load("[recipe]\nkind = \"current\"\nfp8_format = \"e5m2\"\n").unwrap_err();
    assert!(err.contains("pure E5M2 training is not supported"), "{err}");
    assert_eq!("e5m2".parse::<Format>(), Err(CoreError::PureE5M2));
    assert_eq!("E4M3".parse::<Format>(), Ok(Format::E4M3));
    assert!(matches!(
        "fp16".parse::<Format>(),
        Err(CoreError::UnknownFormat(_))
    ));
}

#[test]
fn typos_and_unknown_kinds_are_errors() {
    let err = load("[recipe]\nkind = \"delayed\"\namax_histroy_len = 4\n").unwrap_err();
    assert!(err.contains("amax_histroy_len"), "{err}");
    let err = load("[recipe]\nkind = \"blockwise\"\n").unwrap_err();
    assert!(err.contains("blockwise"), "{err}");
    let err = load("[recipe]\nkind = \"delayed\"\namax_compute_algo = \"mean\"\n").unwrap_err();
    assert!(err.contains("mean"), "{err}");
}

#[test]
fn amax_compute_algo_parses_cli_spellings() {
    assert_eq!("max".parse(), Ok(AmaxComputeAlgo::Max));
    assert_eq!("most_recent".parse(), Ok(AmaxComputeAlgo::MostRecent));
    assert_eq!("most-recent".parse(), Ok(AmaxComputeAlgo::MostRecent));
    let err = "avg".parse::<AmaxComputeAlgo>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown amax_compute_algo \"avg\", expected \"max\" or \"most_recent\""
    );
    assert_eq!(AmaxComputeAlgo::MostRecent.to_string(), "most_recent");
}

#[test]
fn fp8_format_names_and_serde() {
    assert_eq!("e4m3".parse(), Ok(Fp8Format::E4M3));
    assert_eq!("FLOAT8E5M2".parse(), Ok(Fp8Format::E5M2));
    assert!("e3m4".parse::<Fp8Format>().is_err());
    #[derive(Serialize, Deserialize)]
    struct T {
        t: Fp8Format,
    }
    let text = toml::to_string(&T { t: Fp8Format::E5M2 }).unwrap();
    assert_eq!(text.trim(), "t = \"e5m2\"");
    assert_eq!(Fp8Format::E4M3.max(), 448.0);
    assert_eq!(Fp8Format::E5M2.max(), 57344.0);
    assert_eq!(Fp8Format::E4M3.min_subnormal(), 2f32.powi(-9));
    assert_eq!(Fp8Format::E5M2.min_normal(), 2f32.powi(-14));
}

/// Issue #46 case 4: `--margin 100`, `--margin -10` and `--amax-epsilon 1e30` (flag, TOML or
/// code) gave NaN outputs from finite inputs; they are refused, with the range and its reason.
#[test]
fn margin_100_minus_10_and_amax_epsilon_1e30_are_refused_from_toml_and_code() {
    for margin in [100.0f32, -10.0, -0.5, 15.0] {
        let err = DelayedScaling::new(margin, Format::Hybrid, 8, AmaxComputeAlgo::Max, true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("margin = {margin} is out of range"))
                && err.contains("between 0 and 14.81"),
            "{err}"
        );
        let err = load(&format!(
            "[recipe]\nkind = \"delayed\"\nmargin = {margin:?}\n"
        ))
        .unwrap_err();
        assert!(err.contains("is out of range"), "{err}");
        let literal = DelayedScaling {
            margin,
            ..Default::default()
        };
        assert!(Recipe::from(literal).validate().is_err());
    }
    for eps in [1e30f32, 449.0] {
        let err = CurrentScaling::new(Format::Hybrid, eps, false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("amax_epsilon") && err.contains("at most 448"),
            "{err}"
        );
        let err = load(&format!(
            "[recipe]\nkind = \"current\"\namax_epsilon = {eps:?}\n"
        ))
        .unwrap_err();
        assert!(err.contains("is out of range"), "{err}");
    }
    // The ends of the ranges are accepted.
    for margin in [0.0, 1.0, 14.0, Format::E4M3.max_margin()] {
        DelayedScaling::new(margin, Format::E4M3, 8, AmaxComputeAlgo::Max, true).unwrap();
    }
    for eps in [0.0, 1e-12, 448.0] {
        CurrentScaling::new(Format::Hybrid, eps, true).unwrap();
    }
}

/// The range checks' promise (recipe module docs): within the accepted ranges, for every amax
/// a format of the recipe represents as a normal number, scale, scale_inv and the product of
/// two scale_invs are finite normal f32 values and the scaled amax is a normal FP8 number.
#[test]
fn accepted_margins_and_epsilons_keep_every_scale_normal() {
    use fp8c_core::{compute_scale, current_scale};
    let normal = |x: f32| x.is_normal() && x > 0.0;
    for format in [Format::Hybrid, Format::E4M3] {
        for fmt in [format.forward(), format.backward()] {
            // amax from the format's smallest normal to its largest value, 64 steps per octave.
            let (lo, hi) = (fmt.min_normal().log2(), fmt.max().log2());
            let amaxes: Vec<f32> = (0..=((hi - lo) * 64.0) as i32)
                .map(|i| 2f32.powf(lo + i as f32 / 64.0).min(fmt.max()))
                .collect();
            let max_margin = format.max_margin();
            for margin in [0.0, 0.5, 7.0, max_margin] {
                for &amax in &amaxes {
                    let s = compute_scale(amax, fmt.max(), margin, 1.0);
                    let inv = 1.0 / s;
                    assert!(
                        normal(s) && normal(inv) && (inv * inv).is_finite(),
                        "{margin} {amax}"
                    );
                    assert!(amax * s >= fmt.min_normal() * 0.999 && amax * s <= fmt.max() * 1.001);
                }
            }
            for eps in [0.0, 1e-12, 1.0, format.max_amax_epsilon()] {
                for power_2 in [false, true] {
                    let recipe = CurrentScaling::new(format, eps, power_2).unwrap();
                    for &amax in &amaxes {
                        let (s, inv) = current_scale(amax, fmt, &recipe);
                        assert!(normal(s) && normal(inv) && (inv * inv).is_finite());
                        assert!(amax * s >= fmt.min_normal() * 0.999, "{eps} {amax}");
                    }
                }
            }
        }
    }
}
