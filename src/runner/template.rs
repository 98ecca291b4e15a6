//! `{{name}}` templates, filled in one pass: a value put in is never read again as template
//! (so a value holding `{{tools}}` stays text), and the size of the result is known before
//! anything is built, which is how a run refuses an instruction that would fill to gigabytes.

/// Walks `template`, handing `piece` each literal part and, for each `{{inner}}` that `value`
/// knows, its value in place of the variable; unknown variables stay as they were written.
/// Linear in the template: the scan never goes back.
fn walk<'v>(
    template: &'v str,
    mut value: impl FnMut(&str) -> Option<&'v str>,
    mut piece: impl FnMut(&str),
) {
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        piece(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            piece(&rest[start..]);
            return;
        };
        match value(&after[..end]) {
            Some(filled) => piece(filled),
            None => piece(&rest[start..start + end + 4]),
        }
        rest = &after[end + 2..];
    }
    piece(rest);
}

/// `template` with its known variables filled.
pub fn fill<'v>(template: &'v str, value: impl FnMut(&str) -> Option<&'v str>) -> String {
    let mut out = String::with_capacity(template.len());
    walk(template, value, |piece| out.push_str(piece));
    out
}

/// The length in bytes of [`fill`]'s result, computed without building it.
pub fn filled_len<'v>(template: &'v str, value: impl FnMut(&str) -> Option<&'v str>) -> usize {
    let mut len = 0usize;
    walk(template, value, |piece| {
        len = len.saturating_add(piece.len())
    });
    len
}

/// How often each of `names` occurs in `template` as a variable (exactly `{{name}}`).
pub fn occurrences(template: &str, names: &[&str]) -> Vec<usize> {
    let mut counts = vec![0; names.len()];
    walk(
        template,
        |inner| {
            if let Some(index) = names.iter().position(|name| *name == inner) {
                counts[index] += 1;
            }
            None
        },
        |_| {},
    );
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(inner: &str) -> Option<&'static str> {
        match inner.trim() {
            "a" => Some("AAA"),
            "tools" => Some("[tools]"),
            _ => None,
        }
    }

    #[test]
    fn fills_known_variables_and_keeps_the_rest() {
        let template = "x {{a}} y {{ a }} {{b}} {{a";
        assert_eq!(fill(template, lookup), "x AAA y AAA {{b}} {{a");
        assert_eq!(filled_len(template, lookup), fill(template, lookup).len());
    }

    #[test]
    fn a_value_is_not_read_again_as_template() {
        let values = |inner: &str| match inner {
            "v" => Some("{{tools}}"),
            "tools" => Some("[a very long list]"),
            _ => None,
        };
        assert_eq!(fill("{{v}}{{v}}", values), "{{tools}}{{tools}}");
    }

    #[test]
    fn the_length_counts_every_occurrence_without_building() {
        let big = "v".repeat(1000);
        let template = "{{v}}".repeat(100_000);
        let len = filled_len(&template, |inner| (inner == "v").then_some(big.as_str()));
        assert_eq!(len, 100_000_000);
    }

    #[test]
    fn occurrences_count_exact_names() {
        let counts = occurrences(
            "{{query}} {{query}} {{ query }} {{agent_scratchpad}}",
            &["query", "agent_scratchpad", "tools"],
        );
        assert_eq!(counts, vec![2, 1, 0]);
    }
}
