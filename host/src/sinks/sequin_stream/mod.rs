//! The Sequin Stream sink: messages are stored durably and consumers pull
//! them over HTTP with receive, ack and nack.
