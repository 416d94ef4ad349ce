//! The gloo backend (being written; compiled only with the `gloo` feature).
