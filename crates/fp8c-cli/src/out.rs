//! Printing for the CLI: standard output that ends quietly when the reader goes away
//! (`fp8c inspect m.onnx | head`), and error messages made safe to print (control characters
//! escaped, runaway lines shortened).

use anyhow::Result;
use std::io::Write;

/// The exit code of a process whose standard output was closed (128 + SIGPIPE, as a shell
/// reports a program killed by it).
pub const BROKEN_PIPE_EXIT: u8 = 141;

/// Writes `text` to standard output; a closed pipe is an error [`is_broken_pipe`] recognises.
pub fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Like [`print`], with a newline.
pub fn println(text: &str) -> Result<()> {
    print(&format!("{text}\n"))
}

/// True if `e` (or what it wraps) is a write to a closed pipe.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<fp8c_session::Error>().is_some_and(|s| {
                matches!(s.root(), fp8c_session::Error::Io { kind, .. } if *kind == std::io::ErrorKind::BrokenPipe)
            })
    })
}

/// A message made safe for a terminal: control characters other than newline and tab
/// escaped (`\u{1b}`), and every line longer than 400 characters cut to its first 200 and
/// last 200 (a value echoed from a 50 MB input line must not flood the terminal; the end of
/// a message, where its cause is, stays).
pub fn sanitize(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len().min(1 << 16));
    let push = |out: &mut String, c: char| {
        if c.is_control() && c != '\t' {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    };
    for (i, line) in msg.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let n = line.chars().count();
        if n > 400 {
            line.chars().take(200).for_each(|c| push(&mut out, c));
            out.push_str(&format!(" … ({} characters cut) … ", n - 400));
            line.chars().skip(n - 200).for_each(|c| push(&mut out, c));
        } else {
            line.chars().for_each(|c| push(&mut out, c));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_long_lines_cut() {
        assert_eq!(sanitize("a\x1b[31mb\tc\nd"), "a\\u{1b}[31mb\tc\nd");
        let long = "x".repeat(5000);
        let s = sanitize(&long);
        assert!(s.starts_with(&"x".repeat(200)) && s.contains(" … (4600 characters cut) … "));
        assert_eq!(
            s.chars().count(),
            400 + " … (4600 characters cut) … ".chars().count()
        );
    }

    /// Issue #46 case 10: a protobuf error nested deeply was cut before its reason.
    #[test]
    fn a_long_line_keeps_its_end_where_the_cause_is() {
        let msg = format!("m.onnx: {}recursion limit reached", "A.b: ".repeat(500));
        assert!(sanitize(&msg).ends_with("A.b: recursion limit reached"));
    }
}
