//! Runs each sink's function chain over the change stream and hands the
//! resulting messages to the sink.
