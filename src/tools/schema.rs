//! JSON Schemas that validate tool arguments and final answers: checked in full where they
//! arrive (every pattern compiles, or the schema is refused), held to a count of patterns,
//! and compiled into validators that live in one cache of bounded size shared by every
//! provider and run, keyed by content, so identical schemas compile once.
//!
//! A compiled pattern costs from a few KiB to megabytes (a Unicode class repeated 128 times
//! is about 7 MB), and OpenAPI operations that share one schema each inline a copy of it: a
//! few KB of document could otherwise hold gigabytes for as long as its provider exists.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Default most patterns of one provider's schemas, or of one request's.
pub const DEFAULT_MAX_PATTERNS: usize = 2_000;
/// Default size of the validator cache.
pub const DEFAULT_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// The bounds every schema is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaLimits {
    /// Most `pattern`s and `patternProperties` keys one provider's (or request's) schemas hold.
    pub max_patterns: usize,
    /// Bytes of compiled validators kept at once; also the largest one schema may compile to.
    pub cache_bytes: usize,
}

impl Default for SchemaLimits {
    fn default() -> Self {
        Self {
            max_patterns: DEFAULT_MAX_PATTERNS,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

static LIMITS: RwLock<SchemaLimits> = RwLock::new(SchemaLimits {
    max_patterns: DEFAULT_MAX_PATTERNS,
    cache_bytes: DEFAULT_CACHE_BYTES,
});

static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

/// Sets the bounds for the process (from the configuration, at start). One cache serves
/// every provider and run, so its size is a property of the process.
pub fn configure(limits: SchemaLimits) {
    *LIMITS.write().unwrap_or_else(PoisonError::into_inner) = limits;
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(cache) = cache.as_mut() {
        cache.shrink_to(limits.cache_bytes);
    }
}

/// The bounds in force.
pub fn limits() -> SchemaLimits {
    *LIMITS.read().unwrap_or_else(PoisonError::into_inner)
}

/// Why a schema is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// It does not compile (a bad pattern among other things).
    #[error("is not a valid JSON Schema: {0}")]
    Invalid(String),
    /// With the schemas before it, more patterns than allowed.
    #[error(
        "holds {count} patterns with the schemas before it, more than \
         runner.max_schema_patterns ({limit})"
    )]
    TooManyPatterns {
        /// Patterns counted so far.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// Its compiled form would not fit the validator cache.
    #[error(
        "would take {mib} MiB compiled, more than runner.schema_cache_mb ({limit_mib})",
        mib = bytes.div_ceil(1024 * 1024),
        limit_mib = limit / (1024 * 1024)
    )]
    TooLarge {
        /// Estimated compiled size.
        bytes: usize,
        /// The cache's size.
        limit: usize,
    },
}

/// Patterns still allowed to the schemas of one provider or one request.
#[derive(Debug, Clone)]
pub struct PatternBudget {
    counted: usize,
    limit: usize,
}

impl PatternBudget {
    /// The configured allowance.
    pub fn new() -> Self {
        Self {
            counted: 0,
            limit: limits().max_patterns,
        }
    }

    fn take(&mut self, patterns: usize) -> Result<(), SchemaError> {
        self.counted = self.counted.saturating_add(patterns);
        if self.counted > self.limit {
            return Err(SchemaError::TooManyPatterns {
                count: self.counted,
                limit: self.limit,
            });
        }
        Ok(())
    }
}

impl Default for PatternBudget {
    fn default() -> Self {
        Self::new()
    }
}

/// A schema that passed every check, ready to validate against.
#[derive(Clone)]
pub struct Schema {
    value: Arc<Value>,
    key: [u8; 32],
    cost: usize,
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schema")
            .field("value", &self.value)
            .field("cost", &self.cost)
            .finish()
    }
}

impl Schema {
    /// Checks `value`: its patterns are counted against `budget` and measured before
    /// anything is compiled, then it is compiled once (so every pattern is checked) and the
    /// validator is kept in the cache while there is room.
    pub fn check(value: &Value, budget: &mut PatternBudget) -> Result<Self, SchemaError> {
        let mut patterns = Vec::new();
        collect_patterns(value, &mut patterns, 0);
        budget.take(patterns.len())?;
        let text = value.to_string();
        let key: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        // The same schema compiled before (operations sharing one, a run's client tools
        // sent again) was measured and checked then.
        if let Some(cost) = with_cache(|cache| cache.cost_of(&key)) {
            return Ok(Self {
                value: Arc::new(value.clone()),
                key,
                cost,
            });
        }
        let limit = limits().cache_bytes;
        let mut cost = BASE_COST.saturating_add(text.len().saturating_mul(COST_PER_SCHEMA_BYTE));
        let mut seen = HashSet::new();
        for pattern in patterns {
            if seen.insert(pattern) {
                cost = cost.saturating_add(pattern_cost(pattern));
                if cost > limit {
                    return Err(SchemaError::TooLarge { bytes: cost, limit });
                }
            }
        }
        let schema = Self {
            value: Arc::new(value.clone()),
            key,
            cost,
        };
        schema.validator()?;
        Ok(schema)
    }

    /// The schema as given.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// Its validator: from the cache, or compiled again (and kept if there is room).
    pub fn validator(&self) -> Result<Arc<jsonschema::Validator>, SchemaError> {
        if let Some(found) = with_cache(|cache| cache.get(&self.key)) {
            return Ok(found);
        }
        let compiled = Arc::new(
            jsonschema::validator_for(&self.value)
                .map_err(|err| SchemaError::Invalid(err.to_string()))?,
        );
        let limit = limits().cache_bytes;
        with_cache(|cache| cache.insert(self.key, Arc::clone(&compiled), self.cost, limit));
        Ok(compiled)
    }
}

/// What a validator costs beyond its patterns, measured with a counting allocator on
/// jsonschema 0.60: about 370 bytes empty and 18 per byte of schema text.
const BASE_COST: usize = 512;
const COST_PER_SCHEMA_BYTE: usize = 24;
/// What a compiled pattern holds beside its automaton (measured: 6–7 KiB).
const PATTERN_OVERHEAD: usize = 8 * 1024;

/// The memory one compiled pattern holds: its automaton as the regex engine reports it,
/// or, for patterns it cannot take alone (lookaround), a generous guess by length.
fn pattern_cost(pattern: &str) -> usize {
    let measured = jsonschema_regex::to_rust_regex(pattern)
        .ok()
        .and_then(|translated| regex_automata::meta::Regex::new(&translated).ok())
        .map(|regex| regex.memory_usage());
    PATTERN_OVERHEAD.saturating_add(
        measured.unwrap_or_else(|| 16 * 1024 + pattern.len().saturating_mul(2 * 1024)),
    )
}

/// Deeper than any schema a request can carry (requests nest at most 100 levels).
const MAX_DEPTH: usize = 256;

/// Every `pattern` (a string) and `patternProperties` key in `value`, in document order.
fn collect_patterns<'a>(value: &'a Value, out: &mut Vec<&'a str>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match value {
        Value::Object(map) => {
            for (key, item) in map {
                match (key.as_str(), item) {
                    ("pattern", Value::String(pattern)) => out.push(pattern),
                    ("patternProperties", Value::Object(properties)) => {
                        out.extend(properties.keys().map(String::as_str));
                        collect_patterns(item, out, depth + 1);
                    }
                    _ => collect_patterns(item, out, depth + 1),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                collect_patterns(item, out, depth + 1);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}

fn with_cache<T>(f: impl FnOnce(&mut Cache) -> T) -> T {
    let mut guard = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    f(guard.get_or_insert_with(Cache::default))
}

/// Validators by schema content, the least recently used out first once their estimated
/// sizes pass the limit.
#[derive(Default)]
struct Cache {
    entries: HashMap<[u8; 32], Entry>,
    used: usize,
    clock: u64,
}

struct Entry {
    validator: Arc<jsonschema::Validator>,
    cost: usize,
    last_used: u64,
}

impl Cache {
    fn get(&mut self, key: &[u8; 32]) -> Option<Arc<jsonschema::Validator>> {
        self.clock += 1;
        let entry = self.entries.get_mut(key)?;
        entry.last_used = self.clock;
        Some(Arc::clone(&entry.validator))
    }

    fn cost_of(&mut self, key: &[u8; 32]) -> Option<usize> {
        self.clock += 1;
        let entry = self.entries.get_mut(key)?;
        entry.last_used = self.clock;
        Some(entry.cost)
    }

    fn insert(
        &mut self,
        key: [u8; 32],
        validator: Arc<jsonschema::Validator>,
        cost: usize,
        limit: usize,
    ) {
        if cost > limit || self.entries.contains_key(&key) {
            return;
        }
        self.shrink_to(limit - cost);
        self.clock += 1;
        self.used += cost;
        self.entries.insert(
            key,
            Entry {
                validator,
                cost,
                last_used: self.clock,
            },
        );
    }

    /// Drops the least recently used validators until at most `bytes` are held. Linear in
    /// the entries per eviction; they are few, each being at least a few hundred bytes.
    fn shrink_to(&mut self, bytes: usize) {
        while self.used > bytes {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, entry)| entry.last_used)
                .map(|(key, _)| *key)
            else {
                break;
            };
            if let Some(entry) = self.entries.remove(&oldest) {
                self.used -= entry.cost;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patterns_are_counted_where_they_occur() {
        let schema = json!({
            "properties": {
                "pattern": {"type": "string", "pattern": "^a$"},
                "b": {"patternProperties": {"^x": {"pattern": "^y$"}, "^z": {}}},
                "c": {"items": [{"pattern": "^a$"}]}
            }
        });
        let mut found = Vec::new();
        collect_patterns(&schema, &mut found, 0);
        found.sort_unstable();
        assert_eq!(found, vec!["^a$", "^a$", "^x", "^y$", "^z"]);
    }

    #[test]
    fn a_budget_refuses_past_its_limit_across_schemas() {
        let mut budget = PatternBudget {
            counted: 0,
            limit: 3,
        };
        let two = json!({"properties": {"a": {"pattern": "^a$"}, "b": {"pattern": "^b$"}}});
        assert!(Schema::check(&two, &mut budget).is_ok());
        assert_eq!(
            Schema::check(&two, &mut budget).err(),
            Some(SchemaError::TooManyPatterns { count: 4, limit: 3 })
        );
    }

    #[test]
    fn a_bad_pattern_is_refused_and_a_heavy_one_is_measured() {
        let mut budget = PatternBudget::new();
        let bad = json!({"pattern": "(unclosed"});
        assert!(matches!(
            Schema::check(&bad, &mut budget),
            Err(SchemaError::Invalid(_))
        ));
        assert!(pattern_cost(r"^[\p{L}\p{N}_-]{1,128}$") > 4 * 1024 * 1024);
        assert!(pattern_cost("^[a-z]+$") < 16 * 1024);
    }

    #[test]
    fn the_cache_drops_the_least_recently_used_past_its_size() {
        let mut cache = Cache::default();
        let validator = || Arc::new(jsonschema::validator_for(&json!({"minimum": 1})).unwrap());
        cache.insert([0; 32], validator(), 100, 250);
        cache.insert([1; 32], validator(), 100, 250);
        assert!(cache.get(&[0; 32]).is_some(), "0 is now the most recent");
        cache.insert([2; 32], validator(), 100, 250);
        assert_eq!(cache.used, 200);
        assert!(cache.get(&[0; 32]).is_some());
        assert!(
            cache.get(&[1; 32]).is_none(),
            "1 was the least recently used"
        );
        assert!(cache.get(&[2; 32]).is_some());
        cache.insert([3; 32], validator(), 300, 250);
        assert!(
            cache.get(&[3; 32]).is_none(),
            "larger than the whole cache: not kept"
        );
    }
}
