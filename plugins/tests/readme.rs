//! The README's embedding example cannot drift from the example that CI compiles: its block is
//! `plugins/examples/embed.rs`, line for line (the block itself is compiled as a doctest of
//! `plugins`, see `lib.rs`).

/// The first ```rust block after the README's "Embedding" heading.
fn readme_block(readme: &str) -> &str {
    let section = readme.find("## Embedding the sale").expect("the README's embedding section");
    let fence = "```rust,no_run\n";
    let start = readme[section..].find(fence).expect("a rust block") + section + fence.len();
    let end = readme[start..].find("```").expect("the block's end") + start;
    &readme[start..end]
}

#[test]
fn the_readmes_embedding_example_is_the_compiled_example() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let example = std::fs::read_to_string(root.join("plugins/examples/embed.rs")).unwrap();
    let block = readme_block(&readme);
    for (n, (shown, compiled)) in block.lines().zip(example.lines()).enumerate() {
        assert_eq!(shown, compiled, "README line {} of the block differs from embed.rs: update one", n + 1);
    }
    assert_eq!(block.lines().count(), example.lines().count(), "the README shows all of embed.rs");
}
