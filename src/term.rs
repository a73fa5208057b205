//! The terminal: whether to colour what the CLI prints.

/// Colour only on a terminal and never when `NO_COLOR` is set to anything non-empty
/// (no-color.org).
pub fn colour(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}
