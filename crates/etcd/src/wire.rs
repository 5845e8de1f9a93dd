//! The JSON shapes of etcd's v3 gateway (etcd `api/etcdserverpb/rpc.proto`, mapped to JSON by
//! grpc-gateway with the proto field names).
//!
//! What the mapping does, and so what this module handles: `bytes` fields (keys, values) are
//! base64; 64-bit integers are written as JSON strings (read here as strings or numbers); fields
//! at their default value are left out (so every response field has a default); a server
//! stream's messages (watch, lease keep-alive) are each wrapped as `{"result": …}` or
//! `{"error": …}`, one per line. Unknown fields are ignored, so a newer etcd's additions do not
//! break decoding.

use std::fmt::Display;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `bytes` fields: base64 strings.
pub(crate) mod b64 {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(v))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        STANDARD.decode(s.as_bytes()).map_err(|e| D::Error::custom(format!("base64: {e}")))
    }
}

/// Optional `bytes` fields (compare values).
mod b64_opt {
    use super::*;

    pub(super) fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => b64::serialize(v, s),
            None => s.serialize_none(),
        }
    }
}

/// 64-bit integer fields: written as strings, read from strings or numbers.
pub(crate) mod int {
    use super::*;

    pub(crate) fn serialize<T: Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    pub(crate) fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: FromStr + Deserialize<'de>,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum StrOrNum<T> {
            Str(String),
            Num(T),
        }
        match StrOrNum::<T>::deserialize(d)? {
            StrOrNum::Str(s) => s.parse().map_err(|e| D::Error::custom(format!("{s:?}: {e}"))),
            StrOrNum::Num(n) => Ok(n),
        }
    }
}

/// Optional 64-bit integer fields of requests.
mod int_opt {
    use super::*;

    pub(super) fn serialize<S: Serializer>(v: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.collect_str(v),
            None => s.serialize_none(),
        }
    }
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

// ---- requests ----

/// `RangeRequest`.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct RangeRequest {
    #[serde(with = "b64")]
    pub(crate) key: Vec<u8>,
    #[serde(with = "b64", skip_serializing_if = "Vec::is_empty")]
    pub(crate) range_end: Vec<u8>,
    #[serde(with = "int", skip_serializing_if = "is_zero")]
    pub(crate) limit: i64,
    #[serde(with = "int", skip_serializing_if = "is_zero")]
    pub(crate) revision: i64,
}

/// `PutRequest`.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PutRequest {
    #[serde(with = "b64")]
    pub(crate) key: Vec<u8>,
    #[serde(with = "b64")]
    pub(crate) value: Vec<u8>,
    #[serde(with = "int", skip_serializing_if = "is_zero")]
    pub(crate) lease: i64,
}

/// `DeleteRangeRequest`.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct DeleteRangeRequest {
    #[serde(with = "b64")]
    pub(crate) key: Vec<u8>,
    #[serde(with = "b64", skip_serializing_if = "Vec::is_empty")]
    pub(crate) range_end: Vec<u8>,
}

/// `Compare`: `target` names which of the union fields is compared.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Compare {
    #[serde(with = "b64")]
    pub(crate) key: Vec<u8>,
    pub(crate) target: &'static str,
    pub(crate) result: &'static str,
    #[serde(with = "int_opt", skip_serializing_if = "Option::is_none")]
    pub(crate) version: Option<i64>,
    #[serde(with = "int_opt", skip_serializing_if = "Option::is_none")]
    pub(crate) create_revision: Option<i64>,
    #[serde(with = "int_opt", skip_serializing_if = "Option::is_none")]
    pub(crate) mod_revision: Option<i64>,
    #[serde(with = "b64_opt", skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<Vec<u8>>,
    #[serde(with = "int_opt", skip_serializing_if = "Option::is_none")]
    pub(crate) lease: Option<i64>,
}

/// `RequestOp`: exactly one field is set.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct RequestOp {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) request_range: Option<RangeRequest>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) request_put: Option<PutRequest>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) request_delete_range: Option<DeleteRangeRequest>,
}

/// `TxnRequest`.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct TxnRequest {
    pub(crate) compare: Vec<Compare>,
    pub(crate) success: Vec<RequestOp>,
    pub(crate) failure: Vec<RequestOp>,
}

/// `LeaseGrantRequest`, `LeaseKeepAliveRequest`, `LeaseRevokeRequest`,
/// `LeaseTimeToLiveRequest` (the proto's field names are upper case).
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct LeaseRequest {
    #[serde(rename = "ID", with = "int")]
    pub(crate) id: i64,
    #[serde(rename = "TTL", with = "int", skip_serializing_if = "is_zero")]
    pub(crate) ttl: i64,
}

/// `WatchRequest` with its `create_request`.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct WatchRequest {
    pub(crate) create_request: WatchCreateRequest,
}

/// `WatchCreateRequest`.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct WatchCreateRequest {
    #[serde(with = "b64")]
    pub(crate) key: Vec<u8>,
    #[serde(with = "b64", skip_serializing_if = "Vec::is_empty")]
    pub(crate) range_end: Vec<u8>,
    #[serde(with = "int", skip_serializing_if = "is_zero")]
    pub(crate) start_revision: i64,
    /// Ask for progress notifications (sent at the server's configured interval) so an idle
    /// stream still advances its revision.
    pub(crate) progress_notify: bool,
}

/// `CompactionRequest`.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct CompactionRequest {
    #[serde(with = "int")]
    pub(crate) revision: i64,
}

/// An empty request body (`StatusRequest`).
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Empty {}

// ---- responses ----

/// `ResponseHeader`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Header {
    #[serde(with = "int")]
    pub(crate) member_id: u64,
    #[serde(with = "int")]
    pub(crate) revision: i64,
}

/// `mvccpb.KeyValue`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub(crate) struct KeyValue {
    #[serde(with = "b64")]
    pub(crate) key: Vec<u8>,
    #[serde(with = "int")]
    pub(crate) create_revision: i64,
    #[serde(with = "int")]
    pub(crate) mod_revision: i64,
    #[serde(with = "int")]
    pub(crate) version: i64,
    #[serde(with = "b64")]
    pub(crate) value: Vec<u8>,
    #[serde(with = "int")]
    pub(crate) lease: i64,
}

/// `RangeResponse`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct RangeResponse {
    pub(crate) header: Header,
    pub(crate) kvs: Vec<KeyValue>,
    pub(crate) more: bool,
}

/// `PutResponse` (and any response of which only the header is used).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct HeaderOnly {
    pub(crate) header: Header,
}

/// `DeleteRangeResponse`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct DeleteRangeResponse {
    pub(crate) header: Header,
    #[serde(with = "int")]
    pub(crate) deleted: i64,
}

/// `ResponseOp`: one field is set.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ResponseOp {
    pub(crate) response_range: Option<RangeResponse>,
    pub(crate) response_put: Option<HeaderOnly>,
    pub(crate) response_delete_range: Option<DeleteRangeResponse>,
}

/// `TxnResponse`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct TxnResponse {
    pub(crate) header: Header,
    pub(crate) succeeded: bool,
    pub(crate) responses: Vec<ResponseOp>,
}

/// `LeaseGrantResponse`, `LeaseKeepAliveResponse`, `LeaseTimeToLiveResponse`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct LeaseResponse {
    #[serde(rename = "ID", with = "int")]
    pub(crate) id: i64,
    #[serde(rename = "TTL", with = "int")]
    pub(crate) ttl: i64,
    pub(crate) error: String,
}

/// `StatusResponse` (its proto fields are camel case).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct StatusResponse {
    pub(crate) header: Header,
    pub(crate) version: String,
    #[serde(rename = "dbSize", with = "int")]
    pub(crate) db_size: i64,
    #[serde(with = "int")]
    pub(crate) leader: u64,
    #[serde(rename = "raftIndex", with = "int")]
    pub(crate) raft_index: u64,
    #[serde(rename = "raftTerm", with = "int")]
    pub(crate) raft_term: u64,
    pub(crate) errors: Vec<String>,
}

/// `WatchResponse`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct WatchResponse {
    pub(crate) header: Header,
    pub(crate) created: bool,
    pub(crate) canceled: bool,
    #[serde(with = "int")]
    pub(crate) compact_revision: i64,
    pub(crate) cancel_reason: String,
    pub(crate) events: Vec<Event>,
}

/// `mvccpb.Event`: `type` is left out for a put (the enum's default).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Event {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) kv: KeyValue,
}

/// The error body of a failed call (a gRPC status).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ErrorBody {
    pub(crate) error: String,
    pub(crate) message: String,
    pub(crate) code: i32,
    /// grpc-gateway's stream errors name the code so.
    pub(crate) grpc_code: i32,
}

impl ErrorBody {
    /// The error's message and gRPC code, whichever fields carried them.
    pub(crate) fn message_and_code(&self) -> (String, i32) {
        let message = if self.message.is_empty() { &self.error } else { &self.message };
        (message.clone(), if self.code != 0 { self.code } else { self.grpc_code })
    }
}

/// One message of a server stream.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct StreamMessage<T> {
    #[serde(default = "none")]
    pub(crate) result: Option<T>,
    #[serde(default)]
    pub(crate) error: Option<ErrorBody>,
}

fn none<T>() -> Option<T> {
    None
}

/// Decodes one JSON response body.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| {
        let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
        format!("{e} in {shown:?}")
    })
}

/// The key just after every key that starts with `prefix`: the `range_end` of a prefix range.
/// The empty prefix (and one of only `0xff` bytes) ranges to the end of the key space (`"\0"`).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    match prefix.iter().rposition(|&b| b < 0xff) {
        Some(i) => {
            let mut end = prefix[..=i].to_vec();
            end[i] += 1;
            end
        }
        None => vec![0],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json<T: Serialize>(v: &T) -> String {
        serde_json::to_string(v).unwrap()
    }

    #[test]
    fn requests_encode_as_the_gateway_reads_them() {
        let r =
            RangeRequest { key: b"foo".to_vec(), range_end: b"fop".to_vec(), ..Default::default() };
        assert_eq!(json(&r), r#"{"key":"Zm9v","range_end":"Zm9w"}"#);
        let r =
            RangeRequest { key: vec![0xff, 0], limit: 5, revision: 1 << 40, ..Default::default() };
        assert_eq!(json(&r), r#"{"key":"/wA=","limit":"5","revision":"1099511627776"}"#);
        let p = PutRequest { key: b"k".to_vec(), value: vec![], lease: 0 };
        assert_eq!(json(&p), r#"{"key":"aw==","value":""}"#);
        let p = PutRequest { key: b"k".to_vec(), value: vec![1, 2], lease: -7 };
        assert_eq!(json(&p), r#"{"key":"aw==","value":"AQI=","lease":"-7"}"#);
        let c = Compare {
            key: b"k".to_vec(),
            target: "CREATE",
            result: "EQUAL",
            create_revision: Some(0),
            ..Default::default()
        };
        assert_eq!(
            json(&c),
            r#"{"key":"aw==","target":"CREATE","result":"EQUAL","create_revision":"0"}"#
        );
        let c = Compare {
            key: b"k".to_vec(),
            target: "VALUE",
            result: "GREATER",
            value: Some(vec![0, 0, 0, 1]),
            ..Default::default()
        };
        assert_eq!(
            json(&c),
            r#"{"key":"aw==","target":"VALUE","result":"GREATER","value":"AAAAAQ=="}"#
        );
        let op = RequestOp {
            request_delete_range: Some(DeleteRangeRequest {
                key: b"a".to_vec(),
                range_end: vec![],
            }),
            ..Default::default()
        };
        let t = TxnRequest { compare: vec![], success: vec![op], failure: vec![] };
        assert_eq!(
            json(&t),
            r#"{"compare":[],"success":[{"request_delete_range":{"key":"YQ=="}}],"failure":[]}"#
        );
        assert_eq!(json(&LeaseRequest { id: 0, ttl: 5 }), r#"{"ID":"0","TTL":"5"}"#);
        assert_eq!(json(&LeaseRequest { id: 42, ttl: 0 }), r#"{"ID":"42"}"#);
        let w = WatchRequest {
            create_request: WatchCreateRequest {
                key: b"p/".to_vec(),
                range_end: prefix_end(b"p/"),
                start_revision: 9,
                progress_notify: true,
            },
        };
        assert_eq!(
            json(&w),
            r#"{"create_request":{"key":"cC8=","range_end":"cDA=","start_revision":"9","progress_notify":true}}"#
        );
        assert_eq!(json(&Empty {}), "{}");
    }

    /// Responses as etcd 3.4 writes them (copied from its answers).
    #[test]
    fn responses_decode() {
        let r: RangeResponse = decode(br#"{"header":{"cluster_id":"15118495548433857066","member_id":"13668033151171901709","revision":"2","raft_term":"2"},"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"2","version":"1","value":"YmFy"}],"count":"1"}"#).unwrap();
        assert_eq!(r.header.revision, 2);
        assert_eq!(r.header.member_id, 13_668_033_151_171_901_709);
        assert!(!r.more);
        assert_eq!(
            r.kvs,
            [KeyValue {
                key: b"foo".to_vec(),
                create_revision: 2,
                mod_revision: 2,
                version: 1,
                value: b"bar".to_vec(),
                lease: 0
            }]
        );
        // No kvs at all, and numbers given as numbers.
        let r: RangeResponse = decode(br#"{"header":{"revision":7}}"#).unwrap();
        assert!(r.kvs.is_empty());
        assert_eq!(r.header.revision, 7);
        let t: TxnResponse = decode(br#"{"header":{"revision":"5"},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"5"}}},{"response_delete_range":{"header":{},"deleted":"2"}},{"response_range":{"header":{}}}]}"#).unwrap();
        assert!(t.succeeded);
        assert_eq!(t.responses.len(), 3);
        assert!(t.responses[0].response_put.is_some());
        assert_eq!(t.responses[1].response_delete_range.as_ref().unwrap().deleted, 2);
        assert!(t.responses[2].response_range.as_ref().unwrap().kvs.is_empty());
        let t: TxnResponse = decode(br#"{"header":{"revision":"5"}}"#).unwrap();
        assert!(!t.succeeded, "succeeded is left out when false");
        let l: LeaseResponse =
            decode(br#"{"header":{},"ID":"4111120215044314120","TTL":"5"}"#).unwrap();
        assert_eq!((l.id, l.ttl), (4_111_120_215_044_314_120, 5));
        let k: StreamMessage<LeaseResponse> =
            decode(br#"{"result":{"header":{"revision":"2"},"ID":"123"}}"#).unwrap();
        assert_eq!(k.result.unwrap().ttl, 0, "a keep-alive of a lease that is gone has no TTL");
        let s: StatusResponse = decode(br#"{"header":{"member_id":"1"},"version":"3.4.23","dbSize":"20480","leader":"13668033151171901709","raftIndex":"7","raftTerm":"2","raftAppliedIndex":"7","dbSizeInUse":"16384"}"#).unwrap();
        assert_eq!(
            (s.version.as_str(), s.db_size, s.raft_index, s.raft_term),
            ("3.4.23", 20480, 7, 2)
        );
        assert_eq!(s.leader, 13_668_033_151_171_901_709);
        let e: ErrorBody = decode(br#"{"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5}"#).unwrap();
        assert_eq!(e.message_and_code(), ("etcdserver: requested lease not found".into(), 5));
        let e: StreamMessage<WatchResponse> = decode(br#"{"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader","http_status":"Service Unavailable"}}"#).unwrap();
        assert_eq!(e.error.unwrap().message_and_code(), ("etcdserver: no leader".into(), 14));
    }

    #[test]
    fn watch_responses_decode() {
        let w: StreamMessage<WatchResponse> =
            decode(br#"{"result":{"header":{"revision":"2"},"created":true}}"#).unwrap();
        let w = w.result.unwrap();
        assert!(w.created && w.events.is_empty());
        let w: StreamMessage<WatchResponse> = decode(br#"{"result":{"header":{"revision":"5"},"events":[{"kv":{"key":"Zm9vMQ==","create_revision":"5","mod_revision":"5","version":"1","value":"YQ=="}},{"type":"DELETE","kv":{"key":"Zm9v","mod_revision":"5"}}]}}"#).unwrap();
        let w = w.result.unwrap();
        assert_eq!(w.events.len(), 2);
        assert_eq!((w.events[0].kind.as_str(), w.events[0].kv.key.as_slice()), ("", &b"foo1"[..]));
        assert_eq!(w.events[1].kind, "DELETE");
        assert!(w.events[1].kv.value.is_empty());
        let w: StreamMessage<WatchResponse> = decode(
            br#"{"result":{"header":{"raft_term":"2"},"canceled":true,"compact_revision":"4"}}"#,
        )
        .unwrap();
        let w = w.result.unwrap();
        assert!(w.canceled);
        assert_eq!(w.compact_revision, 4);
    }

    #[test]
    fn bad_responses_are_errors_not_panics() {
        assert!(decode::<RangeResponse>(b"").is_err());
        assert!(
            decode::<RangeResponse>(br#"{"kvs":[{"key":"!!"}]}"#).unwrap_err().contains("base64")
        );
        assert!(decode::<RangeResponse>(br#"{"header":{"revision":"x"}}"#).is_err());
        let err = decode::<RangeResponse>(b"<html>").unwrap_err();
        assert!(err.contains("<html>"), "{err}");
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"abc"), b"abd");
        assert_eq!(prefix_end(b"a/"), b"a0");
        assert_eq!(prefix_end(&[1, 0xff]), [2]);
        assert_eq!(prefix_end(&[0xff, 0xff]), [0]);
        assert_eq!(prefix_end(b""), [0]);
    }
}
