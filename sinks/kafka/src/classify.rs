//! librdkafka errors → [`Outcome`]; start at [`classify`].
//!
//! Decided from the [`RDKafkaErrorCode`] alone, never from error text. librdkafka already retries
//! retriable broker errors inside `message.timeout.ms`, so a code reaching this table is what was
//! left when that budget ran out or the error was not retriable to librdkafka.
//!
//! | error code (librdkafka name) | outcome | reason code |
//! |---|---|---|
//! | `BrokerTransportFailure` (`_TRANSPORT`), `NetworkException`, `Resolve`, `SSL` | `Retry` | `transport` |
//! | `AllBrokersDown` (`_ALL_BROKERS_DOWN`) | `Retry` | `all_brokers_down` |
//! | `LeaderNotAvailable`, `NotLeaderForPartition`, `BrokerNotAvailable`, `ReplicaNotAvailable`, `CoordinatorNotAvailable`, `CoordinatorLoadInProgress`, `NotCoordinator`, `WaitingForCoordinator`, `FencedLeaderEpoch`, `UnknownLeaderEpoch`, `PreferredLeaderNotAvailable` | `Retry` | `leader_not_available` |
//! | `RequestTimedOut`, `OperationTimedOut` | `Retry` | `request_timed_out` |
//! | `MessageTimedOut` (`_MSG_TIMED_OUT`), `TimedOutQueue` | `Retry` | `message_timed_out` |
//! | `QueueFull` (`_QUEUE_FULL`, still full after waiting) | `Retry` | `queue_full` |
//! | `UnknownTopicOrPartition`, `UnknownTopic` (`_UNKNOWN_TOPIC`), `UnknownPartition` | `Retry` | `unknown_topic` (alert: auto-create may fix it, or the topic is missing) |
//! | `NotEnoughReplicas`, `NotEnoughReplicasAfterAppend`, `ISRInsufficient` | `Retry` | `not_enough_replicas` |
//! | `ThrottlingQuotaExceeded` | `Retry` | `throttled` |
//! | `KafkaStorageError` | `Retry` | `broker_storage` |
//! | `Authentication`, `SaslAuthenticationFailed`, `ClusterAuthorizationFailed` | `Retry` | `authentication` (the whole sink fails: pause it, do not dead-letter everything) |
//! | `PurgeQueue`, `PurgeInflight` (the producer is shutting down) | `Retry` | `purged` |
//! | `Fatal` (`_FATAL`: the idempotent producer is unusable; the sink builds a new one). The sink also gives this code to every `Retry` of a batch after which the producer reports a fatal error, whatever code the report carried | `Retry` | `producer_fatal` |
//! | `MessageSizeTooLarge` (`MSG_SIZE_TOO_LARGE`), `MessageBatchTooLarge` (`RECORD_LIST_TOO_LARGE`) | `Reject` | `oversize` ([`codes::OVERSIZE`]: herald's `onOversize` policy applies) |
//! | `TopicAuthorizationFailed` | `Reject` | `topic_authorization_failed` |
//! | `InvalidRecord` (`INVALID_RECORD`, e.g. a null key on a compacted topic) | `Reject` | `invalid_record` |
//! | `InvalidMessage` (`CORRUPT_MESSAGE`) | `Reject` | `corrupt_message` |
//! | `InvalidTopic` (`INVALID_TOPIC_EXCEPTION`) | `Reject` | `invalid_topic` |
//! | any other code, or an error without one | `Retry` | `kafka_error` |
//!
//! The default is `Retry` on purpose: a `Reject` sends the event to the dead-letter queue for
//! good, while a `Retry` the sink keeps failing stays visible (retry metric, paused sink) until an
//! operator looks. Authentication and cluster authorization fail every event alike, so they are
//! `Retry` too; topic authorization depends on the event's topic, so it is a `Reject`.
//!
//! Codes are metric labels, so they come from this fixed set; the topic and librdkafka's
//! description of the code (the broker's error for broker codes) go into the detail.

use std::borrow::Cow;

use herald_sink_core::sink::{Outcome, Reason, codes};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// Reason code: the connection to a broker failed or broke.
pub const TRANSPORT: &str = "transport";
/// Reason code: no broker of the cluster is reachable.
pub const ALL_BROKERS_DOWN: &str = "all_brokers_down";
/// Reason code: the partition (or a coordinator) has no reachable leader right now.
pub const LEADER_NOT_AVAILABLE: &str = "leader_not_available";
/// Reason code: a broker request timed out.
pub const REQUEST_TIMED_OUT: &str = "request_timed_out";
/// Reason code: the record was not acknowledged within `message.timeout.ms`.
pub const MESSAGE_TIMED_OUT: &str = "message_timed_out";
/// Reason code: librdkafka's local queue stayed full.
pub const QUEUE_FULL: &str = "queue_full";
/// Reason code: the topic (or partition) does not exist; worth an alert.
pub const UNKNOWN_TOPIC: &str = "unknown_topic";
/// Reason code: too few in-sync replicas for `acks=all`.
pub const NOT_ENOUGH_REPLICAS: &str = "not_enough_replicas";
/// Reason code: a broker quota throttled the request.
pub const THROTTLED: &str = "throttled";
/// Reason code: the broker could not write to its disk.
pub const BROKER_STORAGE: &str = "broker_storage";
/// Reason code: the cluster refused herald's credentials or cluster-level permissions.
pub const AUTHENTICATION: &str = "authentication";
/// Reason code: the record was purged from librdkafka's queues (shutdown).
pub const PURGED: &str = "purged";
/// Reason code: the producer hit a fatal (idempotence) error and is being replaced.
pub const PRODUCER_FATAL: &str = "producer_fatal";
/// Reason code: any other error; retried.
pub const KAFKA_ERROR: &str = "kafka_error";
/// Reason code: the producer went away before the delivery report came back.
pub const PRODUCER_GONE: &str = "producer_gone";
/// Reason code: the topic's ACL does not allow herald to write.
pub const TOPIC_AUTHORIZATION_FAILED: &str = "topic_authorization_failed";
/// Reason code: the broker refused the record (e.g. no key on a compacted topic).
pub const INVALID_RECORD: &str = "invalid_record";
/// Reason code: the broker found the record corrupt.
pub const CORRUPT_MESSAGE: &str = "corrupt_message";
/// Reason code: the rendered topic name is not a legal topic.
pub const INVALID_TOPIC: &str = "invalid_topic";

/// The outcome of a record that failed with `error` on its way to `topic` (see the module
/// documentation for the table). The detail names the topic and librdkafka's description of the
/// code.
#[must_use]
pub fn classify(error: &KafkaError, topic: &str) -> Outcome {
    let detail = format!("topic {topic}: {error}");
    match error.rdkafka_error_code() {
        Some(code) => classify_code(code, detail),
        None => Outcome::retry(Reason::new(KAFKA_ERROR, detail)),
    }
}

/// The outcome of error `code`, with `detail` for the reason.
#[must_use]
pub fn classify_code(code: RDKafkaErrorCode, detail: impl Into<Cow<'static, str>>) -> Outcome {
    use RDKafkaErrorCode as C;
    let (code, retry) = match code {
        C::BrokerTransportFailure | C::NetworkException | C::Resolve | C::SSL => (TRANSPORT, true),
        C::AllBrokersDown => (ALL_BROKERS_DOWN, true),
        C::LeaderNotAvailable
        | C::NotLeaderForPartition
        | C::BrokerNotAvailable
        | C::ReplicaNotAvailable
        | C::CoordinatorNotAvailable
        | C::CoordinatorLoadInProgress
        | C::NotCoordinator
        | C::WaitingForCoordinator
        | C::FencedLeaderEpoch
        | C::UnknownLeaderEpoch
        | C::PreferredLeaderNotAvailable => (LEADER_NOT_AVAILABLE, true),
        C::RequestTimedOut | C::OperationTimedOut => (REQUEST_TIMED_OUT, true),
        C::MessageTimedOut | C::TimedOutQueue => (MESSAGE_TIMED_OUT, true),
        C::QueueFull => (QUEUE_FULL, true),
        C::UnknownTopicOrPartition | C::UnknownTopic | C::UnknownPartition => (UNKNOWN_TOPIC, true),
        C::NotEnoughReplicas | C::NotEnoughReplicasAfterAppend | C::ISRInsufficient => {
            (NOT_ENOUGH_REPLICAS, true)
        }
        C::ThrottlingQuotaExceeded => (THROTTLED, true),
        C::KafkaStorageError => (BROKER_STORAGE, true),
        C::Authentication | C::SaslAuthenticationFailed | C::ClusterAuthorizationFailed => {
            (AUTHENTICATION, true)
        }
        C::PurgeQueue | C::PurgeInflight => (PURGED, true),
        C::Fatal => (PRODUCER_FATAL, true),
        C::MessageSizeTooLarge | C::MessageBatchTooLarge => (codes::OVERSIZE, false),
        C::TopicAuthorizationFailed => (TOPIC_AUTHORIZATION_FAILED, false),
        C::InvalidRecord => (INVALID_RECORD, false),
        C::InvalidMessage => (CORRUPT_MESSAGE, false),
        C::InvalidTopic => (INVALID_TOPIC, false),
        // Deliberate default (see the module documentation): unknown means retry, visibly.
        _ => (KAFKA_ERROR, true),
    };
    let reason = Reason::new(code, detail);
    if retry {
        Outcome::retry(reason)
    } else {
        Outcome::reject(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    enum Class {
        Retry(&'static str),
        Reject(&'static str),
    }

    /// Every row of the module table.
    #[test]
    fn code_table() {
        use Class::{Reject, Retry};
        use RDKafkaErrorCode as C;
        let table: &[(RDKafkaErrorCode, Class)] = &[
            (C::BrokerTransportFailure, Retry("transport")),
            (C::NetworkException, Retry("transport")),
            (C::Resolve, Retry("transport")),
            (C::SSL, Retry("transport")),
            (C::AllBrokersDown, Retry("all_brokers_down")),
            (C::LeaderNotAvailable, Retry("leader_not_available")),
            (C::NotLeaderForPartition, Retry("leader_not_available")),
            (C::BrokerNotAvailable, Retry("leader_not_available")),
            (C::ReplicaNotAvailable, Retry("leader_not_available")),
            (C::CoordinatorNotAvailable, Retry("leader_not_available")),
            (C::CoordinatorLoadInProgress, Retry("leader_not_available")),
            (C::NotCoordinator, Retry("leader_not_available")),
            (C::WaitingForCoordinator, Retry("leader_not_available")),
            (C::FencedLeaderEpoch, Retry("leader_not_available")),
            (C::UnknownLeaderEpoch, Retry("leader_not_available")),
            (
                C::PreferredLeaderNotAvailable,
                Retry("leader_not_available"),
            ),
            (C::RequestTimedOut, Retry("request_timed_out")),
            (C::OperationTimedOut, Retry("request_timed_out")),
            (C::MessageTimedOut, Retry("message_timed_out")),
            (C::TimedOutQueue, Retry("message_timed_out")),
            (C::QueueFull, Retry("queue_full")),
            (C::UnknownTopicOrPartition, Retry("unknown_topic")),
            (C::UnknownTopic, Retry("unknown_topic")),
            (C::UnknownPartition, Retry("unknown_topic")),
            (C::NotEnoughReplicas, Retry("not_enough_replicas")),
            (
                C::NotEnoughReplicasAfterAppend,
                Retry("not_enough_replicas"),
            ),
            (C::ISRInsufficient, Retry("not_enough_replicas")),
            (C::ThrottlingQuotaExceeded, Retry("throttled")),
            (C::KafkaStorageError, Retry("broker_storage")),
            (C::Authentication, Retry("authentication")),
            (C::SaslAuthenticationFailed, Retry("authentication")),
            (C::ClusterAuthorizationFailed, Retry("authentication")),
            (C::PurgeQueue, Retry("purged")),
            (C::PurgeInflight, Retry("purged")),
            (C::Fatal, Retry("producer_fatal")),
            (C::MessageSizeTooLarge, Reject("oversize")),
            (C::MessageBatchTooLarge, Reject("oversize")),
            (
                C::TopicAuthorizationFailed,
                Reject("topic_authorization_failed"),
            ),
            (C::InvalidRecord, Reject("invalid_record")),
            (C::InvalidMessage, Reject("corrupt_message")),
            (C::InvalidTopic, Reject("invalid_topic")),
            // The default arm.
            (C::Unknown, Retry("kafka_error")),
            (C::InvalidTimestamp, Retry("kafka_error")),
            (C::OutOfOrderSequenceNumber, Retry("kafka_error")),
            (C::Fail, Retry("kafka_error")),
        ];
        for (code, class) in table {
            let outcome = classify_code(*code, "d");
            match (class, &outcome) {
                (
                    Retry(expected),
                    Outcome::Retry {
                        after: None,
                        reason,
                    },
                )
                | (Reject(expected), Outcome::Reject { reason })
                    if reason.code == *expected && reason.detail == "d" => {}
                _ => panic!("{code:?}: {outcome:?}"),
            }
        }
    }

    #[test]
    fn oversize_is_the_drivers_oversize_code() {
        let outcome = classify_code(RDKafkaErrorCode::MessageSizeTooLarge, "");
        assert_eq!(outcome.reason().unwrap().code, codes::OVERSIZE);
    }

    #[test]
    fn details_name_the_topic_and_the_code() {
        let error = KafkaError::MessageProduction(RDKafkaErrorCode::TopicAuthorizationFailed);
        let outcome = classify(&error, "herald.widgets");
        assert!(matches!(outcome, Outcome::Reject { .. }));
        let detail = &outcome.reason().unwrap().detail;
        assert!(detail.starts_with("topic herald.widgets: "), "{detail}");
        assert!(detail.contains("TopicAuthorizationFailed"), "{detail}");
        assert!(
            detail.contains("Broker: Topic authorization failed"),
            "{detail}"
        );
    }

    #[test]
    fn errors_without_a_code_are_retried() {
        let outcome = classify(&KafkaError::Canceled, "t");
        assert!(matches!(outcome, Outcome::Retry { ref reason, .. } if reason.code == KAFKA_ERROR));
    }

    #[test]
    fn codes_are_snake_case_labels() {
        for code in [
            TRANSPORT,
            ALL_BROKERS_DOWN,
            LEADER_NOT_AVAILABLE,
            REQUEST_TIMED_OUT,
            MESSAGE_TIMED_OUT,
            QUEUE_FULL,
            UNKNOWN_TOPIC,
            NOT_ENOUGH_REPLICAS,
            THROTTLED,
            BROKER_STORAGE,
            AUTHENTICATION,
            PURGED,
            PRODUCER_FATAL,
            KAFKA_ERROR,
            PRODUCER_GONE,
            TOPIC_AUTHORIZATION_FAILED,
            INVALID_RECORD,
            CORRUPT_MESSAGE,
            INVALID_TOPIC,
        ] {
            assert!(
                code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{code}"
            );
        }
    }
}
