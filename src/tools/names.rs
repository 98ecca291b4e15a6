//! Tool names every model provider accepts (`^[a-zA-Z0-9_-]{1,64}$`): a document's or a
//! server's own name is kept when it is one, and otherwise made into one, unique within
//! its provider, so the original can still be mapped back.

use std::collections::HashSet;

/// The longest tool name model providers accept.
const MAX_LEN: usize = 64;

/// Whether `name` is a tool name every provider accepts.
pub fn is_valid(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `raw` made valid: other characters become `_`, runs of `_` one, at most 64 long.
pub fn sanitized(raw: &str) -> String {
    let mut name = String::with_capacity(raw.len());
    for c in raw.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '-' {
            c
        } else {
            '_'
        };
        if !(c == '_' && name.ends_with('_')) {
            name.push(c);
        }
    }
    let name: String = name.trim_matches('_').chars().take(MAX_LEN).collect();
    if name.is_empty() {
        "tool".to_owned()
    } else {
        name
    }
}

/// Names handed out within one provider.
#[derive(Debug, Default)]
pub struct UniqueNames {
    taken: HashSet<String>,
}

impl UniqueNames {
    /// A valid name for `raw`: `raw` itself when valid and free, else its sanitized form,
    /// with `_2`, `_3` … when that is taken.
    pub fn claim(&mut self, raw: &str) -> String {
        let base = if is_valid(raw) {
            raw.to_owned()
        } else {
            sanitized(raw)
        };
        let mut name = base.clone();
        let mut n = 2;
        while self.taken.contains(&name) {
            let suffix = format!("_{n}");
            let keep = MAX_LEN - suffix.len();
            name = format!("{}{suffix}", base.chars().take(keep).collect::<String>());
            n += 1;
        }
        self.taken.insert(name.clone());
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names_are_kept_and_others_made_valid_and_unique() {
        let mut names = UniqueNames::default();
        assert_eq!(
            names.claim("read_item_items__item_id__get"),
            "read_item_items__item_id__get",
            "a valid operationId is kept exactly"
        );
        assert_eq!(names.claim("files.read"), "files_read");
        assert_eq!(names.claim("files/read"), "files_read_2");
        assert_eq!(names.claim("get_/pets/{id}"), "get_pets_id");
        assert_eq!(names.claim("ünïcode"), "n_code");
        assert_eq!(names.claim(&"x".repeat(80)).len(), 64);
        assert_eq!(names.claim(&"x".repeat(80)).len(), 64);
        assert!(is_valid("a-b_C9"));
        assert!(!is_valid("a.b"));
        assert!(!is_valid(""));
    }
}
