//! Where text logs are written: stderr, with every line break inside an event escaped, so
//! text that came from a caller or an upstream server (a model name, an error body) can
//! never forge a log line of its own. JSON logs are escaped by their encoding already.
//! Every line names the replica that wrote it, so the logs of a fleet read apart.

use std::fmt;
use std::io::{self, Write};

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

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

/// An event format that adds the replica id to every line: `replica=ID ` before a text
/// line, a `"replica"` field first in a JSON object.
pub struct Tagged<F> {
    inner: F,
    replica: String,
    json: bool,
}

impl<F> Tagged<F> {
    /// Tags the lines `inner` formats with `replica`; `json` when `inner` writes objects.
    pub fn new(inner: F, replica: &str, json: bool) -> Self {
        Self {
            inner,
            replica: replica.to_owned(),
            json,
        }
    }
}

impl<S, N, F> FormatEvent<S, N> for Tagged<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if !self.json {
            write!(writer, "replica={} ", self.replica)?;
            return self.inner.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        writer.write_str(&tag_json(&line, &self.replica))
    }
}

/// `line` (one JSON object) with `"replica":ID` as its first field.
fn tag_json(line: &str, replica: &str) -> String {
    let replica = serde_json::Value::from(replica);
    match line.strip_prefix('{') {
        Some(rest) if rest.trim_start().starts_with('}') => {
            format!("{{\"replica\":{replica}{rest}")
        }
        Some(rest) => format!("{{\"replica\":{replica},{rest}"),
        None => line.to_owned(),
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

    #[test]
    fn a_json_line_names_its_replica_first() {
        let tagged = tag_json("{\"level\":\"INFO\",\"fields\":{}}\n", "agents-\"0");
        let value: serde_json::Value = serde_json::from_str(tagged.trim_end()).unwrap();
        assert_eq!(value["replica"], "agents-\"0");
        assert_eq!(value["level"], "INFO");
        assert!(tagged.ends_with('\n'));
        assert_eq!(tag_json("{}", "r"), "{\"replica\":\"r\"}");
    }
}
