//! The sequin.yml-style configuration: model, `${VAR:-default}` interpolation
//! and validation with precise errors.
