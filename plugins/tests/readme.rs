//! The README's embedding snippet cannot drift from the example that CI compiles: its lines are
//! `plugins/examples/embed.rs`'s `request_filter`, in the same order.

/// The first ```rust block after the README's "Embedding" heading.
fn readme_snippet(readme: &str) -> Vec<&str> {
    let section = readme.find("## Embedding the sale").expect("the README's embedding section");
    let start = readme[section..].find("```rust\n").expect("a rust block") + section + "```rust\n".len();
    let end = readme[start..].find("```").expect("the block's end") + start;
    readme[start..end].lines().map(str::trim).filter(|l| !l.is_empty()).collect()
}

#[test]
fn the_readmes_embedding_snippet_is_the_compiled_examples_request_filter() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let example = std::fs::read_to_string(root.join("plugins/examples/embed.rs")).unwrap();
    let snippet = readme_snippet(&readme);
    assert!(snippet.len() >= 5, "the snippet is only {} lines", snippet.len());
    let mut lines = example.lines().map(str::trim);
    for wanted in &snippet {
        assert!(
            lines.any(|l| l == *wanted),
            "README line `{wanted}` is not in plugins/examples/embed.rs (in this order): update one of them"
        );
    }
}
