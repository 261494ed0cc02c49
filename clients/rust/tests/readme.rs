//! The README shows the axum example as it is in examples/axum.rs.

#[test]
fn the_readme_shows_the_example_binary() {
    let readme = include_str!("../README.md");
    let example = include_str!("../examples/axum.rs");
    assert!(readme.contains(example), "README.md's axum example differs from examples/axum.rs");
}
