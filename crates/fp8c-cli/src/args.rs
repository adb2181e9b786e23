//! Value parsers shared by the subcommands' flags.

/// An f32 flag value: a number within the f32 range (`1e308` is refused instead of becoming
/// `inf`); NaN and ±inf given as words pass through, for the commands' own range checks to
/// name the flag.
pub fn f32_in_range(s: &str) -> Result<f32, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number"))?;
    if v.is_finite() && v.abs() > f64::from(f32::MAX) {
        return Err(format!("{s} is beyond the f32 range (±{:e})", f32::MAX));
    }
    Ok(v as f32)
}
