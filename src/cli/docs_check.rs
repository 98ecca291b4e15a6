//! The documentation names only flags and configuration keys that exist: a renamed or
//! removed one fails here, not in a reader's terminal.

use std::collections::BTreeSet;
use std::path::Path;

use clap::CommandFactory as _;

use super::args::Cli;
use crate::config::Config;

/// Flags of commands other than `agent-runner` that the pages use (cargo, the benchmark
/// through LangGraph, grpcurl, buf, npm, docker, perf …).
const FOREIGN_FLAGS: &[&str] = &[
    "release",
    "features",
    "bin",
    "test",
    "locked",
    "all-targets",
    "no-run",
    "lib",
    "check",
    "concurrency",
    "runs",
    "plaintext",
    "format",
    "vs",
    "save-dev",
    "rm",
    "network",
    "name",
    "env",
    "publish",
    "volume",
    "init",
    "frozen",
    "ignored",
    "nocapture",
    "test-threads",
    "list",
    "skip",
    "exact",
    "bins",
    "manifest-path",
    "call-graph",
    "children",
    "no-children",
];

/// The pages: the README and everything under `docs/`.
fn pages() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("a docs entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a readable page");
            (path.display().to_string(), text)
        })
        .collect()
}

/// Every long flag of `agent-runner` and its subcommands, at any depth.
fn cli_flags() -> BTreeSet<String> {
    fn walk(command: &clap::Command, flags: &mut BTreeSet<String>) {
        flags.extend(
            command
                .get_arguments()
                .filter_map(|arg| arg.get_long().map(str::to_owned)),
        );
        flags.extend(["help".to_owned(), "version".to_owned()]);
        for sub in command.get_subcommands() {
            walk(sub, flags);
        }
    }
    let mut flags = BTreeSet::new();
    walk(&Cli::command(), &mut flags);
    flags
}

/// The long flags the benchmark's and the scripted model's binaries and the performance
/// page's scripts declare, read from their sources (they are not part of this library).
fn binary_flags() -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut flags = BTreeSet::new();
    for file in ["src/bin/bench/main.rs", "src/bin/mock_llm.rs"] {
        let text = std::fs::read_to_string(root.join(file)).expect("a binary's source");
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            let line = line.trim();
            if !line.starts_with("#[arg(long") {
                continue;
            }
            if let Some(named) = line.split("long = \"").nth(1) {
                flags.extend(named.split('"').next().map(str::to_owned));
                continue;
            }
            let field = lines.find(|l| !l.trim().starts_with("#[")).unwrap_or("");
            let name = field.trim().trim_start_matches("pub ").split(':').next();
            flags.extend(name.map(|n| n.trim().replace('_', "-")));
        }
    }
    for file in ["bench/performance.py", "bench/goals.py"] {
        let script = std::fs::read_to_string(root.join(file)).expect("a script");
        for line in script.lines() {
            if let Some(rest) = line.trim().strip_prefix("parser.add_argument(\"--") {
                flags.extend(rest.split('"').next().map(str::to_owned));
            }
        }
    }
    flags
}

/// The `--flag`s a page names.
fn named_flags(text: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    let bytes = text.as_bytes();
    for (at, _) in text.match_indices("--") {
        let before = at.checked_sub(1).map(|i| bytes[i]);
        if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'-') {
            continue;
        }
        let name: String = text[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        if name.len() > 1 && name.starts_with(|c: char| c.is_ascii_lowercase()) {
            flags.insert(name.trim_end_matches('-').to_owned());
        }
    }
    flags
}

/// The configuration keys a page names as `` `section.key` `` or `` `[section] key` ``.
fn named_keys(text: &str) -> BTreeSet<(String, String)> {
    const SECTIONS: &[&str] = &[
        "server", "runner", "outbound", "auth", "tls", "limits", "store", "cluster", "a2a",
    ];
    let mut keys = toml_block_keys(text, SECTIONS);
    for quoted in text.split('`').skip(1).step_by(2) {
        let file = [".rs", ".md", ".toml", ".proto", ".py", ".js", ".sh"];
        if file.iter().any(|ext| quoted.ends_with(ext)) {
            continue;
        }
        let pair = match quoted.strip_prefix('[') {
            Some(rest) => rest.split_once("] "),
            None => quoted.split_once('.'),
        };
        let Some((section, key)) = pair else { continue };
        let key = key.split_whitespace().next().unwrap_or("");
        let plain = !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if SECTIONS.contains(&section) && plain {
            keys.insert((section.to_owned(), key.to_owned()));
        }
    }
    keys
}

/// The keys set, or shown commented out, in a page's TOML blocks, under their sections.
fn toml_block_keys(text: &str, sections: &[&str]) -> BTreeSet<(String, String)> {
    let mut keys = BTreeSet::new();
    let mut in_block = false;
    let mut section = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("```") {
            in_block = line == "```toml";
            section.clear();
            continue;
        }
        if !in_block {
            continue;
        }
        let line = line.trim_start_matches('#').trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
            section = name.to_owned();
            continue;
        }
        let Some((key, _)) = line.split_once(" = ") else {
            continue;
        };
        let plain = key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if plain && !key.is_empty() && sections.contains(&section.as_str()) {
            keys.insert((section.clone(), key.to_owned()));
        }
    }
    keys
}

/// Whether `[section] key` is a key the configuration reads: every section refuses unknown
/// keys, so a key that exists fails (if at all) on its value, never as unknown.
fn key_exists(section: &str, key: &str) -> bool {
    let text = format!("[{section}]\n{key} = 0\n");
    match Config::from_toml(&text) {
        Ok(_) => true,
        Err(err) => !err.to_string().contains("unknown field"),
    }
}

#[test]
fn every_flag_the_pages_name_exists() {
    let known: BTreeSet<String> = cli_flags()
        .into_iter()
        .chain(binary_flags())
        .chain(FOREIGN_FLAGS.iter().map(|f| (*f).to_owned()))
        .collect();
    let unknown: Vec<String> = pages()
        .iter()
        .flat_map(|(page, text)| {
            named_flags(text)
                .into_iter()
                .filter(|flag| !known.contains(flag))
                .map(move |flag| format!("{page}: --{flag}"))
        })
        .collect();
    assert!(unknown.is_empty(), "flags no command has: {unknown:#?}");
}

#[test]
fn every_configuration_key_the_pages_name_exists() {
    let named: Vec<(String, String, String)> = pages()
        .iter()
        .flat_map(|(page, text)| {
            named_keys(text)
                .into_iter()
                .map(move |(section, key)| (page.clone(), section, key))
        })
        .collect();
    let unknown: Vec<String> = named
        .iter()
        .filter(|(_, section, key)| !key_exists(section, key))
        .map(|(page, section, key)| format!("{page}: [{section}] {key}"))
        .collect();
    assert!(
        unknown.is_empty(),
        "keys the configuration does not read: {unknown:#?}"
    );
    assert!(
        named.len() > 20,
        "the pages name configuration keys: {}",
        named.len()
    );
}

#[test]
fn the_check_refuses_a_key_and_a_flag_that_do_not_exist() {
    assert!(!key_exists("server", "no_such_key"));
    assert!(key_exists("server", "max_request_bytes"));
    assert!(!cli_flags().contains("no-such-flag"));
    assert!(cli_flags().contains("replica-id"));
    assert!(binary_flags().contains("database-url"));
    assert!(binary_flags().contains("case"));
}
