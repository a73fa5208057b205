//! The console's failure type: what the viewer checks and the pages raise. Its page is drawn in
//! `layout.rs`.

use crate::error::ApiError;

/// A failure shown as a console page.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// An API-level failure (store, not found, forbidden ...).
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The form's CSRF token or origin does not check out.
    #[error(
        "this form has expired or did not come from this console; reload the page and try again"
    )]
    Csrf,
    /// A request the console cannot use (an unknown status filter, an unreadable form): a 400
    /// page that shows the message.
    #[error("{0}")]
    BadRequest(String),
}

impl From<tuneplane_core::store::StoreError> for ConsoleError {
    fn from(e: tuneplane_core::store::StoreError) -> Self {
        ConsoleError::Api(e.into())
    }
}

impl From<tuneplane_core::submit::SubmitError> for ConsoleError {
    fn from(e: tuneplane_core::submit::SubmitError) -> Self {
        ConsoleError::Api(e.into())
    }
}
