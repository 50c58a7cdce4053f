//! End-to-end tests: the real `weft` binary against real services.
