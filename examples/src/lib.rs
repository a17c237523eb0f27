//! Examples live in `examples/examples/`.
//!
//! This library only compiles the workspace README's examples as doc tests, so they cannot rot.

/// The workspace README's examples.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct WorkspaceReadme;
