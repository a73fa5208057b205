//! Scale figures (placeholder until the bench lands).

fn main() {}
