//! One module per page family. Handlers read through `Arc<dyn Store>` with the API's request
//! types and render HTML; every list is paged (docs/ui.md, "Bounds").

pub mod calls;
pub mod evaluations;
pub mod objects;
pub mod overview;
pub mod projects;
pub mod signin;
pub mod threads;
pub mod trace;

mod common;
