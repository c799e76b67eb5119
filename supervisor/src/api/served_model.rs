//! Which model a response answered for: the API resolves the requested name into a
//! [`ServedModel`] (defined with the metrics, which read it from the response's extensions to
//! count requests by model without reading the body again).

pub use crate::metrics::ServedModel;

use super::backend::Backend;

/// The canonical id of the requested model; `ServedModel(None)` when the name is no model.
pub fn resolve<B: Backend>(backend: &B, name: &str) -> ServedModel {
    ServedModel(backend.resolve(name))
}
