//! Where text logs are written: stderr, with every line break inside an event escaped, so
//! text that came from a caller or an upstream server (a model name, an error body) can
//! never forge a log line of its own. JSON logs are escaped by their encoding already.

use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;

/// Makes [`OneLine`] writers over stderr.
#[derive(Debug, Clone, Copy, Default)]
pub struct OneLineStderr;

impl<'a> MakeWriter<'a> for OneLineStderr {
    type Writer = OneLine<io::Stderr>;

    fn make_writer(&'a self) -> Self::Writer {
        OneLine(io::stderr())
    }
}

/// Writes each event (one `write` of the formatted line) with its inner `\n` and `\r`
/// escaped; the line's own final newline stays.
#[derive(Debug)]
pub struct OneLine<W>(pub W);

impl<W: Write> Write for OneLine<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let (body, end) = match buf.strip_suffix(b"\n") {
            Some(body) => (body, &b"\n"[..]),
            None => (buf, &b""[..]),
        };
        if !body.iter().any(|b| matches!(b, b'\n' | b'\r')) {
            self.0.write_all(buf)?;
            return Ok(buf.len());
        }
        let mut escaped = Vec::with_capacity(buf.len() + 16);
        for &byte in body {
            match byte {
                b'\n' => escaped.extend_from_slice(b"\\n"),
                b'\r' => escaped.extend_from_slice(b"\\r"),
                other => escaped.push(other),
            }
        }
        escaped.extend_from_slice(end);
        self.0.write_all(&escaped)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_breaks_inside_an_event_are_escaped() {
        let mut out = OneLine(Vec::new());
        out.write_all(b"INFO run model=a\nERROR forged\r\n")
            .unwrap();
        out.write_all(b"INFO plain\n").unwrap();
        assert_eq!(
            String::from_utf8(out.0).unwrap(),
            "INFO run model=a\\nERROR forged\\r\nINFO plain\n"
        );
    }
}
