//! Router-level tests of the console.
