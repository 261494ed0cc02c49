//! The README shows the examples as they are in examples/.

#[test]
fn the_readme_shows_the_example_binaries() {
    let readme = include_str!("../README.md");
    let axum = include_str!("../examples/axum.rs");
    assert!(readme.contains(axum), "README.md's axum example differs from examples/axum.rs");
    let leases = include_str!("../examples/leases.rs");
    assert!(readme.contains(leases), "README.md's leases example differs from examples/leases.rs");
}
