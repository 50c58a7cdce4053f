//! Which failures of an SQS sink a retry can fix, and what each means for
//! the user.
//!
//! Permanent (the message is dead-lettered at once): a message larger than
//! SQS takes, found before it is sent, and a message SQS refuses for its
//! content (`SenderFault` with a code such as `InvalidParameterValue` or
//! `InvalidMessageContents`). Everything else is retried with backoff,
//! including refused credentials, a denied permission and a queue that
//! does not exist: an operator can fix those, and delivery then continues
//! without replaying dead letters. Those errors say what to fix.

use crate::delivery::DeliveryOutcome;

/// The most bytes SQS takes in one message (body and attributes), and in
/// one `SendMessageBatch` request.
pub const MAX_MESSAGE_BYTES: usize = 262_144;

/// The codes with which SQS refuses a message for what it holds: sent
/// again, it is refused again.
const REFUSED_CONTENT: &[&str] = &[
    "InvalidParameterValue",
    "InvalidMessageContents",
    "InvalidAttributeName",
    "InvalidAttributeValue",
    "MessageTooLong",
    "BatchRequestTooLong",
];

/// The codes of credentials AWS does not accept.
const REFUSED_CREDENTIALS: &[&str] = &[
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "InvalidSecurity",
    "ExpiredToken",
    "InvalidAccessKeyId",
    "AuthFailure",
];

/// The codes of a queue that does not exist (the first as the query
/// protocol names it, the second as the JSON protocol does).
const NO_SUCH_QUEUE: &[&str] = &["AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"];

/// The codes of throttling.
const THROTTLED: &[&str] = &[
    "RequestThrottled",
    "ThrottlingException",
    "Throttling",
    "KmsThrottled",
    "OverLimit",
];

/// Whether `code` says SQS refuses a message for what it holds.
pub fn refuses_content(code: &str) -> bool {
    REFUSED_CONTENT.contains(&code)
}

/// The first line of an AWS error message, short enough for a log line
/// (a refused signature's message goes on with the whole canonical
/// request).
fn brief(message: Option<&str>) -> String {
    let line = message.unwrap_or("").lines().next().unwrap_or("").trim();
    match line.char_indices().nth(300) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_string(),
    }
}

/// The outcome of a message larger than SQS takes once encoded: `bytes`
/// of body and attributes.
pub fn too_large(bytes: usize) -> DeliveryOutcome {
    DeliveryOutcome::permanent(format!(
        "the message is {bytes} bytes as sent to SQS (body and attributes); SQS takes at most {MAX_MESSAGE_BYTES} (256 KiB) per message, so it was not sent: shrink it with a transform (e.g. drop large columns), then replay this dead letter"
    ))
}

/// The outcome of one entry of a `SendMessageBatch` that SQS did not take.
pub fn entry_failed(
    queue_url: &str,
    code: &str,
    sender_fault: bool,
    message: Option<&str>,
) -> DeliveryOutcome {
    let said = brief(message);
    if sender_fault && refuses_content(code) {
        return refused(queue_url, code, &said);
    }
    if THROTTLED.contains(&code) {
        return DeliveryOutcome::retry(format!(
            "SQS throttled the message to {queue_url} ({code}: {said}); retrying with backoff"
        ));
    }
    DeliveryOutcome::retry(format!(
        "SQS did not take the message to {queue_url} ({code}: {said}); retrying"
    ))
}

/// The outcome of a message SQS refused for its content.
pub fn refused(queue_url: &str, code: &str, said: &str) -> DeliveryOutcome {
    DeliveryOutcome::permanent(format!(
        "SQS refused the message to {queue_url} for its content ({code}: {said}); a retry sends the same message, so it was not retried: fix the transform (or the data), or the queue's MaximumMessageSize, then replay this dead letter"
    ))
}

/// Why a whole `SendMessageBatch` request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestFailure {
    /// SQS refused what the request holds (`code`, its message): each
    /// message must be tried alone to find the one at fault.
    Content {
        /// The error code.
        code: String,
        /// What SQS said.
        said: String,
    },
    /// Anything else: every message of the request is retried, with this
    /// error, which says what to fix.
    Retry(String),
}

/// What an error answer of SQS to a request means: its `code` and
/// `message`, and its HTTP `status`.
pub fn request_refused(
    queue_url: &str,
    code: Option<&str>,
    message: Option<&str>,
    status: u16,
) -> RequestFailure {
    let said = brief(message);
    let code = code.unwrap_or("");
    if refuses_content(code) {
        return RequestFailure::Content {
            code: code.to_string(),
            said,
        };
    }
    let retry = |text: String| RequestFailure::Retry(text);
    if NO_SUCH_QUEUE.contains(&code) {
        return retry(format!(
            "the SQS queue {queue_url} does not exist, or the sink's credentials belong to an account that cannot see it ({code}); create the queue or fix `queue_url`: changes are held until it exists"
        ));
    }
    if REFUSED_CREDENTIALS.contains(&code) {
        return retry(format!(
            "AWS refused the sink's credentials ({code}: {said}); check `access_key_id` and `secret_access_key` (or, with `use_task_role`, the role the AWS credential chain finds): changes are held until they work"
        ));
    }
    if code.starts_with("Kms") || code.starts_with("KMS.") {
        return retry(format!(
            "the KMS key that encrypts the SQS queue {queue_url} refused the sink ({code}: {said}); grant the sink's identity kms:GenerateDataKey and kms:Decrypt on the key, or check that the key is enabled"
        ));
    }
    if code.starts_with("AccessDenied") || status == 403 {
        return retry(format!(
            "the sink's identity may not send to the SQS queue {queue_url} ({code}: {said}); grant it sqs:SendMessage on the queue: changes are held until it may"
        ));
    }
    if THROTTLED.contains(&code) {
        return retry(format!(
            "SQS throttled the requests to {queue_url} ({code}); retrying with backoff"
        ));
    }
    if code == "InvalidAddress" {
        return retry(format!(
            "SQS does not know the queue address {queue_url} ({code}: {said}); check `queue_url`"
        ));
    }
    if code == "UnsupportedOperation" {
        return retry(format!(
            "SQS refused the request to {queue_url} for this queue ({code}: {said}); check that `queue_url` names the queue meant (a FIFO queue's name ends in `.fifo`)"
        ));
    }
    if status >= 500 {
        return retry(format!(
            "SQS failed the request to {queue_url} (HTTP {status}, {code}: {said}); retrying"
        ));
    }
    retry(format!(
        "SQS refused the request to {queue_url} (HTTP {status}, {code}: {said})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUEUE: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/orders";

    fn failed(outcome: DeliveryOutcome) -> (bool, String) {
        match outcome {
            DeliveryOutcome::Failed { error, retriable } => (retriable, error),
            DeliveryOutcome::Delivered => panic!("a failure is not a delivery"),
        }
    }

    #[test]
    fn an_entry_refused_for_its_content_is_permanent() {
        for code in ["InvalidParameterValue", "InvalidMessageContents"] {
            let (retriable, error) = failed(entry_failed(QUEUE, code, true, Some("bad char")));
            assert!(!retriable, "{code}");
            assert!(error.contains("replay this dead letter"), "{error}");
            assert!(error.contains(code), "{error}");
        }
    }

    #[test]
    fn other_entry_failures_are_retried() {
        // The same code without SenderFault is SQS's own fault.
        let (retriable, _) = failed(entry_failed(QUEUE, "InvalidParameterValue", false, None));
        assert!(retriable);
        let (retriable, error) = failed(entry_failed(QUEUE, "InternalError", false, None));
        assert!(retriable);
        assert!(error.contains("InternalError"), "{error}");
        let (retriable, error) = failed(entry_failed(QUEUE, "RequestThrottled", true, None));
        assert!(retriable);
        assert!(error.contains("throttled"), "{error}");
    }

    fn retried(code: &str, status: u16) -> String {
        match request_refused(QUEUE, Some(code), Some("said\nmore"), status) {
            RequestFailure::Retry(error) => error,
            other => panic!("{code}: expected a retry, got {other:?}"),
        }
    }

    #[test]
    fn whole_request_failures_are_retried_with_what_to_fix() {
        let error = retried("AWS.SimpleQueueService.NonExistentQueue", 400);
        assert!(error.contains("does not exist"), "{error}");
        assert!(error.contains("create the queue or fix `queue_url`"), "{error}");
        assert!(retried("QueueDoesNotExist", 400).contains("does not exist"));
        let error = retried("InvalidClientTokenId", 403);
        assert!(error.contains("check `access_key_id` and `secret_access_key`"), "{error}");
        assert!(!error.contains("more"), "only the first line: {error}");
        let error = retried("AccessDenied", 403);
        assert!(error.contains("grant it sqs:SendMessage"), "{error}");
        let error = retried("KmsAccessDenied", 400);
        assert!(error.contains("kms:GenerateDataKey"), "{error}");
        assert!(retried("RequestThrottled", 400).contains("throttled"));
        assert!(retried("InternalError", 500).contains("HTTP 500"));
    }

    #[test]
    fn a_request_refused_for_its_content_names_the_code() {
        assert_eq!(
            request_refused(QUEUE, Some("InvalidParameterValue"), Some("too long"), 400),
            RequestFailure::Content {
                code: "InvalidParameterValue".into(),
                said: "too long".into()
            }
        );
    }

    #[test]
    fn an_oversized_message_says_the_limit() {
        let (retriable, error) = failed(too_large(300_000));
        assert!(!retriable);
        assert!(error.contains("300000 bytes"), "{error}");
        assert!(error.contains("262144"), "{error}");
    }

    #[test]
    fn long_messages_are_cut() {
        let long = "x".repeat(1000);
        assert_eq!(brief(Some(&long)).chars().count(), 301);
    }
}
