//! JobSpec validation (being written).
use super::JobSpec;
/// Defaults filled into the authoritative spec.
#[derive(Debug, Clone)]
pub struct Defaults;
/// One problem.
#[derive(Debug, Clone)]
pub struct FieldError;
/// All problems.
#[derive(Debug, Clone)]
pub struct SpecErrors;
/// A valid spec.
#[derive(Debug, Clone)]
pub struct Validated(pub JobSpec);
/// Validates.
pub fn validate() {}
