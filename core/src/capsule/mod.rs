//! Capsules: deterministic, content-addressed zips of the user's code and the platform's files.
