//! The weft guest SDK.
